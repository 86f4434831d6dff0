"""Every nvfence, nvfenced and fence_nvfence command line of README.md,
docs/*.md, man/nvfence.8 and man/nvfenced.8 is one the programs accept.

Command lines are found and their placeholders replaced as doc_commands.py
says (code block lines, inline code spans, table cells, man page synopses,
command tags and bold text; DEV -> /dev/null, VOLUME -> a volume whose
socket does not exist, ...). Then, with no device and no agent touched:
- nvfence ($NVFENCE): the command line is run. It must get past the parser
  to the device (exit 4, "not an NVMe namespace", on /dev/null; udev-probe
  exits 0) or, for status/takeover/handoff/rejoin, to the socket (exit 1,
  "no nvfenced listening": an agent command without VOLUME or --socket is
  given --socket of a path where nothing listens, so it never reaches an
  agent of this host; `status --all` is given --config-dir of a directory
  configuring one volume whose socket does not exist, and an empty
  --run-dir). A span (inline text, not a pasted block) may leave
  out what the command requires (`nvfence register --ptpl`), and so may a
  man page SYNOPSIS, whose [options] stand for each command's own: the
  parser's own "X is required" / "X: 1 required ... missing" (or the
  command's "refusing ... without --force") adds a sample value or that
  flag, and the completed line must then pass.
- nvfenced ($NVFENCED): run with --check-config (a --config FILE is a
  temporary minimal configuration; a line naming no configuration and no
  device gets --device): exit 0.
- fence_nvfence ($FENCE_NVFENCE): every option is one of its metadata's
  getopt spellings, every -o/--action value one of its actions, and there is
  no stray positional word (fence_nvfence ignores those with a warning);
  metadata and manpage are run (exit 0).
Run by CTest (doc_cli_examples, label unit)."""
import glob
import os
import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET

import pytest

import doc_commands as dc

ROOT = dc.ROOT
FILES = ([os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) +
         [os.path.join(ROOT, "man", "nvfence.8"), os.path.join(ROOT, "man", "nvfenced.8")])
RUN_DIR = "/run/nvfence"
# Spans that are flags of a program named by the text around them, not a
# command line of their own: (file, span) -> program.
FLAG_SPANS = {
    ("docs/ETCD.md", "--elector etcd --etcd-endpoints ..."): "nvfenced",
    ("docs/AGENT.md", "--interval-ms"): "nvfenced",
    ("docs/AGENT.md", "--interval_ms"): "nvfenced",
}


def nvfence_help(sub=None) -> str:
    args = [os.environ["NVFENCE"]] + ([sub] if sub else []) + ["--help"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    return r.stdout


def subcommands() -> dict:
    """name -> 'device' | 'devnode' | 'volume' (its positional)."""
    text = nvfence_help()
    names = re.findall(r"^  ([a-z][a-z-]*)\s{2,}", text.split("Subcommands:")[1], re.M)
    out = {}
    for n in names:
        m = re.search(r"^Usage: \S+ " + re.escape(n) + r" \[OPTIONS\] \[?([a-z]+)", nvfence_help(n), re.M)
        assert m, f"nvfence {n} --help: no positional in its usage"
        out[n] = m.group(1)
    return out


SUBS = None


def subs() -> dict:
    global SUBS
    if SUBS is None:
        SUBS = subcommands()
    return SUBS


class Env:
    def __init__(self, tmp):
        self.tmp = tmp
        self.socket = os.path.join(tmp, "nothing-listens.sock")
        self.dir = os.path.join(tmp, "state")
        os.makedirs(self.dir, exist_ok=True)
        self.config = os.path.join(tmp, "nvfenced.conf")
        with open(self.config, "w") as f:
            f.write("device = /dev/nvme0n1\n")
        # status --all: one configured volume, no agent socket.
        self.config_dir = os.path.join(tmp, "etc-nvfence")
        self.run_dir = os.path.join(tmp, "run-nvfence")
        os.makedirs(self.config_dir, exist_ok=True)
        os.makedirs(self.run_dir, exist_ok=True)
        with open(os.path.join(self.config_dir, "nothing-listens.conf"), "w") as f:
            f.write("node_id = 1\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NVFENCE_")}
        self.env["NVFENCE_STATE_DIR"] = self.dir

    def fill(self, words):
        return [{"@SOCKET": self.socket, "@DIR": self.dir, "@CONFIG": self.config}.get(w, w) for w in words]


@pytest.fixture(scope="module")
def env():
    with tempfile.TemporaryDirectory() as tmp:
        yield Env(tmp)


def all_commands():
    return dc.find_commands(FILES)


def run(args, env, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env.env)


COMPLETIONS = [
    (re.compile(r"^nvfence: (device|devnode) is required$", re.M), lambda m: ["/dev/null"]),
    (re.compile(r"^nvfence: (--[a-z-]+) is required$", re.M), lambda m: [m.group(1), dc.OPTION_SAMPLES[m.group(1)]]),
    (re.compile(r"^nvfence: (--[a-z-]+): 1 required .* missing$", re.M), lambda m: [dc.OPTION_SAMPLES[m.group(1)]]),
    # A flag the command refuses to run without (clear: --force).
    (re.compile(r"^nvfence: [a-z]+: refusing .* without (--[a-z-]+)", re.M), lambda m: [m.group(1)]),
]


def check_nvfence(kind, words, where, env):
    """None when the command line is accepted, else why not."""
    words = dc.substitute(words, where)
    sub = next((w for w in words[1:] if not w.startswith("-")), None)
    lines = [words]
    if sub == "@DEVICE_COMMANDS":
        lines = [[s if w == sub else w for w in words] for s, pos in subs().items() if pos == "device"]
    problems = []
    for line in lines:
        p = check_nvfence_line(kind, line, where, env)
        if p:
            problems.append(p)
    return "; ".join(problems) or None


def all_dirs(words, env):
    """status --all: this host's directories replaced by the test's."""
    out, i = [], 0
    while i < len(words):
        if words[i] in ("--config-dir", "--run-dir"):
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out + ["--config-dir", env.config_dir, "--run-dir", env.run_dir]


def check_nvfence_line(kind, words, where, env):
    words = env.fill(words)
    sub = next((w for w in words[1:] if not w.startswith("-")), None)
    if sub is None:
        r = run([os.environ["NVFENCE"]] + words[1:], env)
        return None if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()}"
    if sub not in subs():
        return f"no command {sub!r} (nvfence --help lists {sorted(subs())})"
    agent = subs()[sub] == "volume"
    if agent:
        after = words[words.index(sub) + 1:]
        volume = None
        takes_value = {"--socket", "--timeout-ms", "--victim", "--config-dir", "--run-dir"}
        i = 0
        while i < len(after):
            if after[i] in takes_value:
                i += 2
                continue
            if not after[i].startswith("-"):
                volume = after[i]
            i += 1
        if "--all" in words:
            words = all_dirs(words, env)
        elif volume:
            sock = os.path.join(RUN_DIR, volume + ".sock")
            assert not os.path.exists(sock), f"{where}: {sock} exists: an agent runs here; not sending it {words}"
        elif "--socket" not in words:
            words = words + ["--socket", env.socket]
    for _ in range(4):
        r = run([os.environ["NVFENCE"]] + words[1:], env)
        if r.returncode != 2 or kind == "block":
            break
        for rx, more in COMPLETIONS:
            m = rx.search(r.stderr)
            if m:
                words = words + more(m)
                break
        else:
            break
    shown = " ".join(words)
    if subs()[sub] == "devnode":
        ok = r.returncode == 0
    elif agent:
        ok = r.returncode == 1 and "no nvfenced listening" in r.stderr
    else:
        ok = r.returncode == 4 and "not an NVMe namespace" in r.stderr
    return None if ok else f"`{shown}`: exit {r.returncode}: {r.stderr.strip()}"


def check_nvfenced(kind, words, where, env):
    words = dc.substitute(words, where)
    if "--config" in words:
        i = words.index("--config")
        if i + 1 < len(words):
            words[i + 1] = "@CONFIG"  # the docs' /etc/nvfence/<volume>.conf exists on a configured host only
    words = env.fill(words)
    if not {"-h", "--help", "--version"} & set(words):
        if "--check-config" not in words:
            words.append("--check-config")
        if not {"--config", "--device", "--name"} & set(words):
            words += ["--device", "/dev/nvme0n1"]
    r = run([os.environ["NVFENCED"]] + words[1:], env)
    return None if r.returncode == 0 else f"`{' '.join(words)}`: exit {r.returncode}: {r.stderr.strip()}"


def fence_metadata():
    xml = subprocess.run([os.environ["FENCE_NVFENCE"], "-o", "metadata"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    root = ET.fromstring(xml)
    opts = {}  # spelling -> takes a value
    for g in root.iter("getopt"):
        mixed = g.get("mixed")
        for part in mixed.split(", "):
            opts[part.split("=")[0]] = "=" in mixed
    actions = {a.get("name") for a in root.iter("action")}
    # Actions for administrators (setup-watcher, check-config) are not in the
    # metadata (Pacemaker never runs them): --help names them after "for
    # administrators:", each followed by its explanation in parentheses.
    help_text = subprocess.run([os.environ["FENCE_NVFENCE"], "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    m = re.search(r"-o, --action=.*?\n(?=   -[a-z], )", help_text, re.S)
    if m and "for administrators:" in m.group(0):
        admin = m.group(0).split("for administrators:", 1)[1]
        actions |= set(re.findall(r"([a-z][a-z-]+) \(", " ".join(admin.split())))
    return opts, actions


def check_fence_nvfence(kind, words, where, env):
    opts, actions = fence_metadata()
    words = [w for w in words if w != "..."]  # "and so on": the other parameters
    i, action = 1, None
    while i < len(words):
        w = words[i]
        name, _, inline = w.partition("=")
        if name not in opts:
            return f"`{' '.join(words)}`: {w!r} is not an option of fence_nvfence" + (
                f" (an action is given as -o {w})" if w in actions else "")
        value = None
        if opts[name]:
            if inline:
                value = inline
            else:
                i += 1
                if i >= len(words):
                    return f"`{' '.join(words)}`: {name} needs a value"
                value = words[i]
        if name in ("-o", "--action"):
            action = value
            if value not in actions:
                return f"`{' '.join(words)}`: {value!r} is not an action of fence_nvfence ({sorted(actions)})"
        i += 1
    if action in ("metadata", "manpage"):
        r = run([os.environ["FENCE_NVFENCE"]] + words[1:], env)
        if r.returncode != 0:
            return f"`{' '.join(words)}`: exit {r.returncode}: {r.stderr.strip()}"
    return None


CHECKS = {"nvfence": check_nvfence, "nvfenced": check_nvfenced, "fence_nvfence": check_fence_nvfence}


def check(kind, words, where, env):
    problems = []
    for v in dc.variants(words):
        try:
            p = CHECKS[v[0]](kind, v, where, env)
        except AssertionError as e:
            p = str(e)
        if p:
            problems.append(f"{where}: {p}")
    return problems


def test_the_docs_have_command_lines_of_each_kind():
    found = all_commands()
    by = {}
    for kind, words, where, _ in found:
        by.setdefault((where.split(":")[0], words[0]), 0)
        by[(where.split(":")[0], words[0])] += 1
    for f, prog in (("README.md", "nvfence"), ("docs/AGENT.md", "nvfence"), ("docs/AGENT.md", "nvfenced"),
                    ("docs/ETCD.md", "nvfence"), ("man/nvfence.8", "nvfence"), ("man/nvfenced.8", "nvfenced"),
                    ("man/nvfenced.8", "nvfence"), ("docs/PACEMAKER.md", "fence_nvfence")):
        assert by.get((f, prog)), f"no {prog} command line found in {f}: the extraction is broken"
    assert len(found) > 100, len(found)


@pytest.mark.parametrize("program", dc.PROGRAMS)
def test_every_command_line_is_accepted(program, env):
    problems = []
    n = 0
    for kind, words, where, _ in all_commands():
        if words[0] != program:
            continue
        n += 1
        problems += check(kind, words, where, env)
    assert n, f"no {program} command line found"
    assert not problems, "\n".join(problems)


def test_flag_spans_are_the_programs_options(env):
    for (rel, span), program in FLAG_SPANS.items():
        text = " ".join(dc.read(os.path.join(ROOT, rel)).split())
        assert f"`{span}`" in text, f"{rel} no longer has `{span}`: update FLAG_SPANS"
        words = span.split()
        if len(words) == 1:  # the option named, without its value
            words.append(dc.OPTION_SAMPLES[words[0]])
        problems = check("span", [program] + words, rel, env)
        assert not problems, problems


def test_the_checks_catch_a_wrong_command_line(env):
    """The checks are not vacuous: each refuses a line the programs refuse."""
    bad = [
        ("block", ["nvfence", "preempt", "DEV", "--victim-nodes", "2"]),   # no such option
        ("block", ["nvfence", "frobnicate", "DEV"]),                       # no such command
        ("block", ["nvfence", "write", "DEV", "--blocks", "N"]),           # --lba missing
        ("span", ["nvfence", "status", "VOLUME", "--socket", "PATH"]),     # exclusive
        ("block", ["nvfence", "clear", "DEV"]),                            # refused without --force
        ("block", ["nvfenced", "--config", "FILE", "--interval-ms", "0"]),
        ("span", ["fence_nvfence", "off"]),
        ("span", ["fence_nvfence", "-o", "reboot"]),
    ]
    for kind, words in bad:
        assert check(kind, words, "test", env), f"{words} was accepted"
    with pytest.raises(AssertionError, match="unknown placeholder"):
        dc.substitute(["nvfence", "report", "DEVX"], "test")
