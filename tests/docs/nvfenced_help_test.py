"""`nvfenced --help` ($NVFENCED) states what the code does.

lease_loss = fence stops the writers, runs the fence action and resigns;
the reservation stays held until the next leader preempts this host's key
(src/elector/agent_elector.cpp, ElectorBridge::step_down; proven on the in-memory
target by AgentElectorTest.KeepaliveFailingPastTtlMinusMarginStepsDown).
The help must not say it releases the reservation, and nvfenced.conf(5)
must not either. Every configuration key has its option with a description.
Run by CTest (doc_nvfenced_help, label unit)."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RELEASES = re.compile(r"\breleas", re.I)
KEEPS = re.compile(r"reservation stays held", re.I)


def help_text() -> str:
    r = subprocess.run([os.environ["NVFENCED"], "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"nvfenced --help: rc {r.returncode}: {r.stderr}"
    return r.stdout


def option_help(text: str, key: str) -> str:
    """The description of --KEY-WITH-DASHES, up to the next option."""
    dashed = key.replace("_", "-")
    m = re.search(rf"^\s*--{re.escape(dashed)}\b(.*?)(?=^\s*-|\Z)", text, re.S | re.M)
    assert m, f"nvfenced --help has no option --{dashed}"
    return " ".join(m.group(1).split())


def test_help_says_lease_loss_fence_keeps_the_reservation():
    h = option_help(help_text(), "lease_loss")
    assert not RELEASES.search(h), f"--lease-loss help says the reservation is released; the code keeps it: {h}"
    assert KEEPS.search(h), f"--lease-loss help does not say the reservation stays held: {h}"
    assert "fence" in h and "hold" in h, h


def test_man_page_says_lease_loss_fence_keeps_the_reservation():
    with open(os.path.join(ROOT, "man", "nvfenced.conf.5"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\.TP\n\.B lease_loss\n(.*?)(?=^\.(TP|SH|PP))", text, re.S | re.M)
    assert m, "nvfenced.conf(5) does not describe lease_loss"
    body = " ".join(m.group(1).split())
    assert not RELEASES.search(body), f"nvfenced.conf(5) says lease_loss releases the reservation: {body}"
    assert KEEPS.search(body), f"nvfenced.conf(5) does not say the reservation stays held: {body}"


def test_every_key_has_an_option_with_a_description():
    keys = subprocess.run([os.environ["NVFENCE_CONFIG_KEYS"]], capture_output=True, text=True,
                          check=True).stdout.split()
    text = help_text()
    for k in keys:
        h = option_help(text, k)
        assert len(re.sub(r"\b(TEXT|TEXT \.\.\.|--\S+)\b", "", h).strip()) > 10, f"--{k}: no description: {h!r}"


def test_every_option_that_is_not_a_key_is_in_the_man_page():
    """--config, --check-config, --version, -h/--help...: nvfenced(8)
    OPTIONS names each (the keys' options are nvfenced.conf(5)'s)."""
    keys = set(subprocess.run([os.environ["NVFENCE_CONFIG_KEYS"]], capture_output=True, text=True,
                              check=True).stdout.split())
    names = set()
    for line in help_text().splitlines():
        m = re.match(r"^\s+(-[^\s]+)", line)
        if m:
            names |= set(m.group(1).split(","))
    own = {n for n in names if n.lstrip("-").replace("-", "_") not in keys}
    assert {"--config", "--check-config", "--version", "--help"} <= own, own
    with open(os.path.join(ROOT, "man", "nvfenced.8"), encoding="utf-8") as f:
        man = f.read().replace("\\-", "-")
    options = re.search(r"^\.SH OPTIONS\n(.*?)^\.SH ", man, re.S | re.M).group(1)
    for n in sorted(own):
        assert re.search(rf"^\.B[IR]? .*?(?<![\w-]){re.escape(n)}(?![\w-])", options, re.M), (
            f"nvfenced --help has {n}; nvfenced(8) OPTIONS does not describe it")
