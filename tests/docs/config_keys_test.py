"""The configuration keys nvfenced accepts are the keys its docs describe.

The parsers' own tables (agent_setting_keys(), elector_setting_keys()),
printed by the nvfence_config_keys helper ($NVFENCE_CONFIG_KEYS), must equal
the keys of nvfenced.conf(5), of the example configuration
(udev/nvfenced.conf.example, installed as
/usr/share/doc/nvfence/examples/nvfenced.conf.example) and of the key
tables of docs/AGENT.md and docs/ETCD.md. The example and the man page's
EXAMPLE must pass `nvfenced --check-config` ($NVFENCED), and every numeric
range "LO..HI" the man page states for a key must be the parser's.
Run by CTest (doc_config_keys, label unit)."""
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAN = os.path.join(ROOT, "man", "nvfenced.conf.5")
EXAMPLE = os.path.join(ROOT, "udev", "nvfenced.conf.example")
KEY = re.compile(r"^[a-z][a-z0-9_]*$")
# Keys the example shows commented out, as an alternative its active lines
# exclude (the parser refuses fence_unit beside fence_action = command), and
# the active keys that alternative replaces.
ALTERNATIVE = {"fence_action", "fence_unit"}
ALTERNATIVE_REPLACES = {"fence_command"}
# What --check-config needs besides the key under test.
AGENT_BASE = {"device": "/dev/nvme0n1"}
ELECTOR_BASE = {"device": "/dev/nvme0n1", "elector": "etcd", "etcd_endpoints": "http://127.0.0.1:2379"}


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def parser_keys() -> list:
    out = subprocess.run([os.environ["NVFENCE_CONFIG_KEYS"]], capture_output=True, text=True, check=True).stdout
    keys = out.split()
    assert keys and all(KEY.match(k) for k in keys), f"unexpected key list: {keys}"
    assert len(keys) == len(set(keys)), "a key is in both parsers' tables"
    return keys


TLS_FILE = re.compile(r"^(\s*etcd_(?:ca|cert|key)_file\s*=\s*)\S+", re.M)
PASSWORD_FILE = re.compile(r"^(\s*etcd_password_file\s*=\s*)\S+", re.M)


def password_file(mode: int = 0o600) -> str:
    """A password file of mode mode (nvfenced refuses one others can read)."""
    fd, path = tempfile.mkstemp(suffix=".pw")
    with os.fdopen(fd, "w") as f:
        f.write("s3cret\n")
    os.chmod(path, mode)
    return path


def check_config(path: str, *flags: str, tls_file=os.path.abspath(__file__), pw_mode: int = 0o600) -> subprocess.CompletedProcess:
    """nvfenced --check-config on the file at path, with every TLS file it
    names (the docs' /etc/nvfence/...) replaced by tls_file: by default a
    readable file, as nvfenced refuses TLS files it cannot read; and the
    password file by one of mode pw_mode."""
    pw = password_file(pw_mode)
    text = TLS_FILE.sub(lambda m: m.group(1) + tls_file, read(path))
    text = PASSWORD_FILE.sub(lambda m: m.group(1) + pw, text)
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([os.environ["NVFENCED"], "--config", f.name, "--check-config", *flags],
                              capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(f.name)
        os.unlink(pw)


def check_settings(kv: dict) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("".join(f"{k} = {v}\n" for k, v in kv.items()))
    try:
        return check_config(f.name)
    finally:
        os.unlink(f.name)


def man_sections(text: str) -> dict:
    """Section title -> its lines."""
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith(".SH "):
            cur = line[4:].strip().strip('"')
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def man_entries() -> dict:
    """Key -> its paragraph text, for every .TP entry of the KEYS sections."""
    entries = {}
    for title, lines in man_sections(read(MAN)).items():
        if not title.endswith("KEYS"):
            continue
        for i, line in enumerate(lines):
            if line != ".TP" or i + 1 >= len(lines):
                continue
            tag = lines[i + 1]
            assert tag.startswith((".B ", ".BR ")), f"nvfenced.conf(5) {title}: .TP without a key: {tag!r}"
            names = [w for w in re.sub(r'"[^"]*"', " ", tag.split(None, 1)[1]).split() if KEY.match(w)]
            body = []
            for more in lines[i + 2:]:
                if more.startswith((".TP", ".SH", ".PP")):
                    break
                body.append(more)
            for n in names:
                assert n not in entries, f"nvfenced.conf(5) describes {n} twice"
                entries[n] = " ".join(body)
    return entries


def example_lines():
    """(key, value, commented) for every 'key = value' line of the example."""
    for line in read(EXAMPLE).splitlines():
        m = re.match(r"^(#?)([a-z][a-z0-9_]*) = (.*)$", line)
        if m:
            yield m.group(2), m.group(3), m.group(1) == "#"


def doc_table_keys(path: str, heading: str) -> set:
    text = read(path)
    m = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ )", text, re.S | re.M)
    assert m, f"{path} has no section '{heading}'"
    return set(re.findall(r"^\| `?([a-z][a-z0-9_]*)`? +\|", m.group(1), re.M)) - {"key"}  # the header row


def test_the_man_page_describes_every_key_the_parser_accepts():
    want, have = set(parser_keys()), set(man_entries())
    assert not want - have, f"nvfenced.conf(5) does not describe: {sorted(want - have)}"
    assert not have - want, f"nvfenced.conf(5) describes keys the parser refuses: {sorted(have - want)}"


def test_the_example_sets_every_key_the_parser_accepts():
    want = set(parser_keys())
    lines = list(example_lines())
    active = [k for k, _, c in lines if not c]
    commented = {k for k, _, c in lines if c}
    assert len(active) == len(set(active)), "the example sets a key twice"
    assert not want - set(active) - commented, f"the example does not set: {sorted(want - set(active) - commented)}"
    assert not (set(active) | commented) - want, f"the example sets unknown keys: {sorted((set(active) | commented) - want)}"
    assert commented == ALTERNATIVE, f"commented-out keys {sorted(commented)}: only {sorted(ALTERNATIVE)} may be"


def test_the_example_passes_check_config():
    r = check_config(EXAMPLE)
    assert r.returncode == 0, f"nvfenced --check-config {EXAMPLE}: rc {r.returncode}: {r.stderr}"


def test_a_tls_file_nvfenced_cannot_read_is_refused_with_its_key():
    missing = "/nonexistent/nvfence-test/etcd-ca.pem"
    r = check_config(EXAMPLE, tls_file=missing)
    assert r.returncode == 2, r
    assert f"etcd_ca_file = {missing}: No such file or directory" in r.stderr, r.stderr


def test_a_password_file_others_can_read_is_refused_with_its_key():
    r = check_config(EXAMPLE, pw_mode=0o644)
    assert r.returncode == 2, r
    assert re.search(r"etcd_password_file = \S+\.pw: accessible by others", r.stderr), r.stderr


def test_the_examples_commented_alternative_passes_check_config():
    kv = {k: v for k, v, c in example_lines() if not c and k not in ALTERNATIVE_REPLACES}
    kv.update({k: v for k, v, c in example_lines() if c})
    r = check_settings(kv)
    assert r.returncode == 0, f"the example with its alternative ({sorted(ALTERNATIVE)}): {r.stderr}"


def test_the_man_page_example_passes_check_config():
    lines = man_sections(read(MAN))["EXAMPLE"]
    block = lines[lines.index(".nf") + 1:lines.index(".fi")]
    text = "\n".join(line.strip().replace("\\-", "-") for line in block) + "\n"
    assert "=" in text, "nvfenced.conf(5) EXAMPLE has no setting"
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(text)
    try:
        # The unit passes its instance as --name; the device defaults to it.
        r = check_config(f.name, "--name", "vol-0123456789abcdef0")
    finally:
        os.unlink(f.name)
    assert r.returncode == 0, f"nvfenced.conf(5) EXAMPLE: rc {r.returncode}: {r.stderr}"


def test_agent_md_and_etcd_md_tables_list_every_key():
    agent = doc_table_keys(os.path.join(ROOT, "docs", "AGENT.md"), "Configuration")
    etcd = doc_table_keys(os.path.join(ROOT, "docs", "ETCD.md"), "Setup")
    want, have = set(parser_keys()), agent | etcd
    assert not want - have, f"docs/AGENT.md and docs/ETCD.md do not list: {sorted(want - have)}"
    assert not have - want, f"docs/AGENT.md and docs/ETCD.md list keys the parser refuses: {sorted(have - want)}"


def test_the_numeric_ranges_in_the_man_page_are_the_parsers():
    entries = man_entries()
    checked = 0
    for key, text in sorted(entries.items()):
        m = re.search(r"\b(\d+)\.\.(\d+)\b", text)
        if not m:
            continue
        lo, hi = int(m.group(1)), int(m.group(2))
        base = ELECTOR_BASE if key.startswith(("etcd_", "lease_", "election")) else AGENT_BASE
        for value, ok in ((lo, True), (hi, True), (lo - 1, False), (hi + 1, False)):
            r = check_settings({**base, key: value})
            assert (r.returncode == 0) == ok, (
                f"nvfenced.conf(5) says {key} is {lo}..{hi}, but {key} = {value} gives rc {r.returncode}: {r.stderr}")
            if not ok:
                assert r.returncode == 2 and key in r.stderr, f"{key} = {value}: {r.stderr}"
        checked += 1
    assert checked >= 7, f"only {checked} ranges found in nvfenced.conf(5)"


def test_an_unknown_key_is_refused_with_exit_code_2():
    r = check_settings({**AGENT_BASE, "no_such_key": "1"})
    assert r.returncode == 2 and "no_such_key" in r.stderr, r.stderr


def test_values_with_spaces_and_commas_are_taken_whole():
    """A value is the rest of the line: a command with arguments and a list
    of endpoints reach the parsers whole (quoted or not)."""
    base = {**ELECTOR_BASE, "fence_action": "command", "writer_units": "a.service, b.service"}
    for command, endpoints in (('logger -t nvfence "fenced: $NVFENCE_REASON"', "http://10.0.0.1:2379,http://10.0.0.2:2379"),
                               ('"logger -t nvfence fenced"', '"http://10.0.0.1:2379, http://10.0.0.2:2379"')):
        r = check_settings({**base, "fence_command": command, "etcd_endpoints": endpoints})
        assert r.returncode == 0, f"fence_command = {command}, etcd_endpoints = {endpoints}: {r.stderr}"
    # The parser, not the file reader, judges the whole list.
    r = check_settings({**base, "fence_command": "true", "etcd_endpoints": "http://10.0.0.1:2379,ftp://b:21"})
    assert r.returncode == 2 and "etcd_endpoints" in r.stderr and "ftp://b:21" in r.stderr, r.stderr
