"""The nvfenced configurations shown in README.md, docs/AGENT.md and
docs/ETCD.md pass `$NVFENCED --check-config`.

A configuration block is a fenced ```ini block, or any code block (fenced
or indented) whose every line is `key = value` (or a comment) with a key
the parsers know ($NVFENCE_CONFIG_KEYS). A block is often a fragment; it is
completed, and only so:
- no `device`: `device = /dev/nvme0n1` (--check-config touches no device);
- elector keys (etcd_*, lease_*, election_name) without `elector`:
  `elector = etcd`; `elector = etcd` without `etcd_endpoints`: one endpoint,
  https when the block names TLS files (TLS files with http:// endpoints are
  refused), else http;
- the TLS files it names (/etc/nvfence/... on a host) are replaced by a
  readable file, its password file by a file of mode 0600 (nvfenced refuses
  unreadable TLS files and password files others can read).
Also: docs/AGENT.md's example of the error an invalid value gives is the
error nvfenced prints, and what docs/ETCD.md says --check-config refuses
(other elector keys with elector = none, role = acquire with etcd, mixed
http/https endpoints, TLS files with http) it refuses, naming the key. Run by CTest (doc_config_examples, label unit)."""
import os
import re
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "docs/AGENT.md", "docs/ETCD.md"]
# How many configuration blocks each file shows (so a block that stops
# being recognised, e.g. by a typo in a key, fails instead of vanishing).
EXPECTED = {"README.md": 0, "docs/AGENT.md": 0, "docs/ETCD.md": 3}
LINE = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*=\s*(.*?)\s*$")
TLS_KEYS = ("etcd_ca_file", "etcd_cert_file", "etcd_key_file")
ELECTOR_KEYS = re.compile(r"^(etcd_|lease_|election_name$)")


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def parser_keys() -> set:
    out = subprocess.run([os.environ["NVFENCE_CONFIG_KEYS"]], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def code_blocks(text: str) -> list:
    """[(lang, [lines], line number)] of the fenced and indented blocks."""
    out, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            out.append((m.group(1), lines[i + 1:j], i + 1))
            i = j + 1
            continue
        if lines[i].startswith("    ") and lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            out.append(("", [l[4:] for l in lines[i:j]], i + 1))
            i = j
            continue
        i += 1
    return out


def strip_comment(line: str) -> str:
    # A '#' after a space starts a comment (as udev/nvfenced.conf.example
    # and docs/PACEMAKER.md write them), except inside quotes.
    out, quote = "", None
    for n, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (n == 0 or line[n - 1].isspace()):
            break
        out += ch
    return out.rstrip()


def config_blocks(rel: str, keys: set) -> list:
    out = []
    for lang, lines, at in code_blocks(read(os.path.join(ROOT, rel))):
        body = [strip_comment(l) for l in lines]
        body = [l for l in body if l.strip()]
        if not body:
            continue
        settings = [LINE.match(l) for l in body]
        is_config = all(settings) and all(m.group(1) in keys for m in settings)
        if lang == "ini":
            assert all(settings), f"{rel}:{at}: an ini block with a line that is not key = value: {body}"
            out.append((at, [(m.group(1), m.group(2)) for m in settings]))
        elif is_config:
            out.append((at, [(m.group(1), m.group(2)) for m in settings]))
    return out


def complete(settings: list, tls_file: str, password_file: str) -> list:
    names = {k for k, _ in settings}
    out = []
    for k, v in settings:
        if k in TLS_KEYS:
            v = tls_file
        elif k == "etcd_password_file":
            v = password_file
        out.append((k, v))
    if "device" not in names:
        out.insert(0, ("device", "/dev/nvme0n1"))
    if "elector" not in names and any(ELECTOR_KEYS.match(k) for k in names):
        out.append(("elector", "etcd"))
        names.add("elector")
    if dict(out).get("elector") == "etcd" and "etcd_endpoints" not in names:
        # TLS files and a user (its password) need https:// endpoints.
        scheme = "https" if names & (set(TLS_KEYS) | {"etcd_user"}) else "http"
        out.append(("etcd_endpoints", f"{scheme}://127.0.0.1:2379"))
    return out


def check_config(settings: list, *flags: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        pw = os.path.join(tmp, "password")
        with open(pw, "w") as f:
            f.write("s3cret\n")
        os.chmod(pw, 0o600)
        conf = os.path.join(tmp, "nvfenced.conf")
        with open(conf, "w") as f:
            f.write("".join(f"{k} = {v}\n" for k, v in complete(settings, os.path.abspath(__file__), pw)))
        return subprocess.run([os.environ["NVFENCED"], "--config", conf, "--check-config", *flags],
                              capture_output=True, text=True, timeout=30)


def test_every_configuration_block_passes_check_config():
    keys = parser_keys()
    problems, found = [], {}
    for rel in DOCS:
        blocks = config_blocks(rel, keys)
        found[rel] = len(blocks)
        for at, settings in blocks:
            r = check_config(settings)
            if r.returncode != 0:
                problems.append(f"{rel}:{at}: rc {r.returncode}: {r.stderr.strip()}")
    assert not problems, "\n".join(problems)
    assert found == EXPECTED, f"configuration blocks found per file: {found}, expected {EXPECTED}"


def test_a_block_with_an_unknown_or_invalid_key_is_not_passed():
    """Not vacuous: a typo in a key hides the block from the count above
    (EXPECTED), a bad value fails --check-config."""
    keys = parser_keys()
    assert check_config([("lease_ttl_s", "1")]).returncode == 2
    assert check_config([("etcd_user", "nvfence"), ("etcd_password_file", "/x"), ("lease_ttl_s", "5")]).returncode == 0
    assert check_config([("etcd_user", "nvfence"), ("etcd_password_file", "/x"),
                         ("etcd_endpoints", "http://127.0.0.1:2379")]).returncode == 2
    text = "    elector = etcd\n    lease_tll_s = 5\n"
    assert not [b for lang, b, _ in code_blocks(text) if all(LINE.match(l) and LINE.match(l).group(1) in keys
                                                             for l in b if l.strip())]


def test_agent_md_error_example_is_what_nvfenced_prints():
    text = " ".join(read(os.path.join(ROOT, "docs", "AGENT.md")).split())
    m = re.search(r"`(nvfenced: invalid configuration: ([a-z_]+) = \"([^\"]*)\": [^`]*) \(in (/etc/nvfence/[^)`]+)\)`",
                  text)
    assert m, "docs/AGENT.md no longer shows an invalid-configuration error"
    line, key, value, path = m.groups()
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, os.path.basename(path))
        with open(conf, "w") as f:
            f.write(f"device = /dev/nvme0n1\n{key} = {value}\n")
        r = subprocess.run([os.environ["NVFENCED"], "--config", conf, "--check-config"], capture_output=True,
                           text=True, timeout=30)
    assert r.returncode == 2, r
    assert r.stderr.strip() == f"{line} (in {conf})", f"docs/AGENT.md: `{line} (in {path})`, nvfenced: {r.stderr}"


# docs/ETCD.md's statements of what --check-config refuses: (the sentence,
# settings it refuses, what the error names, the same minus what is refused).
NONE = "With `elector = none` any other of these keys is refused"
ACQUIRE = "With `elector = etcd`, the agent's `role = acquire` is refused"
MIXING = "Mixing `http://` and `https://` endpoints, or TLS files with `http://` endpoints, is refused"
HTTP = ("etcd_endpoints", "http://127.0.0.1:2379")
ETCD_REFUSALS = [
    (NONE, [("elector", "none"), ("lease_ttl_s", "5")], "lease_ttl_s", [("elector", "none")]),
    (NONE, [("elector", "none"), HTTP], "etcd_endpoints", [("elector", "none")]),
    (ACQUIRE, [("elector", "etcd"), HTTP, ("role", "acquire")], "role", [("elector", "etcd"), HTTP]),
    (MIXING, [("elector", "etcd"), ("etcd_endpoints", "http://127.0.0.1:2379,https://127.0.0.2:2379")],
     "etcd_endpoints", [("elector", "etcd"), ("etcd_endpoints", "https://127.0.0.1:2379,https://127.0.0.2:2379")]),
    (MIXING, [("elector", "etcd"), HTTP, ("etcd_ca_file", "x")], "etcd_ca_file", [("elector", "etcd"), HTTP]),
]


@pytest.mark.parametrize("sentence,refused,named,accepted", ETCD_REFUSALS)
def test_etcd_md_refusals_are_nvfenceds(sentence, refused, named, accepted):
    text = " ".join(read(os.path.join(ROOT, "docs", "ETCD.md")).split())
    assert sentence in text, f"docs/ETCD.md no longer says: {sentence}"
    r = check_config(refused)
    assert r.returncode == 2 and named in r.stderr, (sentence, refused, r.returncode, r.stderr)
    r = check_config(accepted)
    assert r.returncode == 0, (accepted, r.stderr)
