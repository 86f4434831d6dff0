"""`nvfence --help` and every command's --help ($NVFENCE) agree with
nvfence(8) and README.md's CLI reference, and with what the binary does.

- The commands --help lists are the commands of nvfence(8) COMMANDS and of
  README.md's command tables.
- Every option of a command's --help is in nvfence(8), in the command's
  entry or under OPTIONS; and in README.md, in the command's row or the
  "CLI reference" text around the tables (-h/--help, which every command
  has, need only be in the man page).
- The exit codes --help lists are nvfence(8)'s EXIT STATUS and README.md's
  "Exit codes", with the same meaning; the binary exits 2 (usage) on an
  unknown option and a missing device, 2 on no such device, 4 on a file
  that is not NVMe, 1 when no agent answers.
- Every range an option's help states (its validator's [LO..HI] and the
  "(LO-HI)" of its text) is the one the binary enforces (LO and HI pass
  the parser, LO-1 and HI+1 exit 2 naming the option) and the one the man
  page states for it; every option read from the environment (Env:X) is
  validated there too.
- Every default --help states is the man page's; --timeout-ms's default
  for status is what status waits (an agent socket that never answers).
- With --json, failures print the object nvfence(8) names, {"error",
  "exit_code", "cause"}, an agent command's too.
Not checked here (they need a device or an agent): --wait-s's 120 s wait,
--state-dir's (NVFENCE_STATE_DIR) effect. tests/cli_exit_codes.sh checks
the exit codes of specific bad values. Run by CTest (doc_nvfence_help,
label unit)."""
import json
import os
import re
import socket
import subprocess
import tempfile

import pytest

import doc_commands as dc

ROOT = dc.ROOT
MAN = os.path.join(ROOT, "man", "nvfence.8")
README = os.path.join(ROOT, "README.md")
# Meaning of each exit code: a word every description of it must contain.
EXIT_WORDS = {0: "ok", 1: "(other|else)", 2: "usage", 3: "conflict", 4: "unsupported", 5: "permission", 6: "race"}
# Required arguments (besides the device) a command needs to be parsed.
REQUIRED = {"register": ["--node", "2"], "write": ["--lba", "8"], "read": ["--lba", "8"], "clear": ["--force"]}


def run(*args, env=None, timeout=30):
    e = {k: v for k, v in os.environ.items() if not k.startswith("NVFENCE_")}
    e.update(env or {})
    return subprocess.run([os.environ["NVFENCE"], *args], capture_output=True, text=True, timeout=timeout, env=e)


def help_text(sub=None) -> str:
    r = run(*([sub] if sub else []), "--help")
    assert r.returncode == 0, r
    return r.stdout


class Option:
    def __init__(self, names, type_, text):
        self.names, self.type, self.text = names, type_, text
        self.name = [n for n in names if n.startswith("--")][0]
        m = re.search(r"in \[(\d+)(?:\.\.| - )(\d+)\]", type_)
        self.range = (int(m.group(1)), int(m.group(2))) if m else None
        m = re.search(r"\(Env:(\w+)\)", type_)
        self.env = m.group(1) if m else None
        self.takes_value = bool(re.match(r"(TEXT|UINT|INT)", type_))


def options(sub=None) -> list:
    text = help_text(sub).split("Options:", 1)[1]
    text = re.split(r"\n\n", text, 1)[0]
    out, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^  (-\S+?)(?:\s(.*?))?(?:\s{2,}(.*))?$", line)
        if m and not line.startswith("    "):
            names = m.group(1).split(",")
            cur = [names, m.group(2) or "", m.group(3) or ""]
            out.append(cur)
        elif cur:
            cur[2] += " " + line.strip()
    return [Option(n, t.strip(), " ".join(d.split())) for n, t, d in out]


def subcommands() -> dict:
    """name -> its positional: device, devnode or volume."""
    text = help_text().split("Subcommands:")[1]
    out = {}
    for n in re.findall(r"^  ([a-z][a-z-]*)\s{2,}", text, re.M):
        m = re.search(r"^Usage: \S+ " + re.escape(n) + r" \[OPTIONS\] \[?([a-z]+)", help_text(n), re.M)
        out[n] = m.group(1)
    return out


SUBS = subcommands() if os.environ.get("NVFENCE") else {}


# ---------------------------------------------------------------- the man page

def man() -> dict:
    """section -> [(tag, body)] of its .TP entries (tag None: text outside
    an entry), rendered as text."""
    out, section, tag, body, fonts = {}, None, None, [], ["R"]
    state = None

    def flush():
        if section is not None and (tag or body):
            out.setdefault(section, []).append((tag, " ".join(" ".join(body).split())))

    for line in dc.read(MAN).splitlines():
        if line.startswith(".SH"):
            flush()
            section, tag, body, state = line[3:].strip().strip('"'), None, [], None
            continue
        if line.startswith(".TP"):
            flush()
            tag, body, state = None, [], "tag"
            continue
        if line.startswith((".PP", ".br")):
            flush()
            tag, body, state = None, [], None
            continue
        if line.startswith((".nf", ".fi", ".TH", '.\\"')):
            continue
        text = dc.render(dc.roff_segments(line, fonts)).replace("<", "").replace(">", "")
        if state == "tag":
            tag, state = text, None
        else:
            body.append(text)
    flush()
    return out


def man_entry(sub: str) -> str:
    for tag, body in man()["COMMANDS"]:
        if tag and tag.split()[0] == sub:
            return tag + " " + body
    return ""


def man_option_texts(sub: str, opt: str) -> list:
    """The man page's texts about an option of a command: the command's
    entry and the OPTIONS entries and paragraphs naming the option."""
    out = []
    entry = man_entry(sub)
    if re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", entry):
        out.append(entry)
    for section in ("OPTIONS", "COMMANDS", "SYNOPSIS"):
        for tag, body in man().get(section, []):
            if section != "OPTIONS" and tag:
                continue
            whole = (tag or "") + " " + body
            if section == "COMMANDS" and sub not in whole:
                continue
            if re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", tag or whole):
                out.append(whole)
    return out


# ---------------------------------------------------------------- README

def readme_cli() -> tuple:
    text = dc.read(README)
    m = re.search(r"^## CLI reference\n(.*?)(?=^### |^## )", text, re.S | re.M)
    assert m, "README.md has no '## CLI reference'"
    rows, prose = {}, []
    for line in m.group(1).splitlines():
        r = re.match(r"^\| `nvfence ([a-z-]+)([^`]*)` \|(.*)\|$", line)
        if r:
            assert r.group(1) not in rows, f"README.md: two rows for {r.group(1)}"
            rows[r.group(1)] = (r.group(1) + r.group(2) + " " + r.group(3)).replace("\\|", "|")
        elif not line.startswith("|"):
            prose.append(line)
    return rows, " ".join(" ".join(prose).split())


# ---------------------------------------------------------------- tests

def test_the_commands_are_the_man_pages_and_the_readmes():
    want = set(SUBS)
    assert len(want) >= 16, want
    in_man = {tag.split()[0] for tag, _ in man()["COMMANDS"] if tag}
    rows, _ = readme_cli()
    assert in_man == want, f"nvfence(8) COMMANDS: missing {sorted(want - in_man)}, extra {sorted(in_man - want)}"
    assert set(rows) == want, f"README.md tables: missing {sorted(want - set(rows))}, extra {sorted(set(rows) - want)}"


@pytest.mark.parametrize("sub", sorted(SUBS))
def test_every_option_is_documented(sub):
    rows, prose = readme_cli()
    for o in options(sub):
        for name in o.names:
            if not name.startswith("--"):
                continue
            assert man_option_texts(sub, name), f"nvfence(8) does not document `nvfence {sub} {name}`"
            if name == "--help":
                continue
            mentioned = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", rows.get(sub, "") + " " + prose)
            assert mentioned, f"README.md's CLI reference does not document `nvfence {sub} {name}`"


def test_the_top_level_options_are_documented():
    for o in options():
        for name in o.names:
            if name.startswith("--"):
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", " ".join(
                    (t or "") + " " + b for s in ("SYNOPSIS", "OPTIONS") for t, b in man().get(s, []))), name


def help_exit_codes() -> dict:
    text = help_text().split("Exit codes:")[1]
    return {int(c): d for c, d in re.findall(r"^\s+(\d)\s+(.*)$", text, re.M)}


def test_the_exit_codes_are_the_man_pages_and_the_readmes():
    codes = help_exit_codes()
    in_man = {int(t): b for t, b in man()["EXIT STATUS"] if t and t.isdigit()}
    m = re.search(r"^### Exit codes\n(.*?)(?=^#)", dc.read(README), re.S | re.M)
    in_readme = {int(c): d for c, d in re.findall(r"^\| (\d) \| (.*) \|$", m.group(1), re.M)}
    assert set(codes) == set(EXIT_WORDS), codes
    for name, other in (("nvfence(8) EXIT STATUS", in_man), ("README.md Exit codes", in_readme)):
        assert set(other) == set(codes), f"{name}: codes {sorted(other)}, --help: {sorted(codes)}"
        for c, word in EXIT_WORDS.items():
            for where, text in (("--help", codes[c]), (name, other[c])):
                assert re.search(word, text, re.I), f"{where}: exit {c} is {text!r}, not about {word!r}"


def base_args(sub, device="/dev/null", socket_path=None):
    kind = SUBS[sub]
    if kind == "volume":
        return [sub, "--socket", socket_path or "/nonexistent/nvfence-test.sock"]
    return [sub, device] + REQUIRED.get(sub, [])


def parsed(sub, r) -> bool:
    """The command line got past the parser: to the device or the socket."""
    kind = SUBS[sub]
    if kind == "volume":
        return r.returncode == 1 and "no nvfenced listening" in r.stderr
    if kind == "devnode":
        return r.returncode == 0
    return r.returncode == 4 and "not an NVMe namespace" in r.stderr


@pytest.mark.parametrize("sub", sorted(SUBS))
def test_exit_codes_of_bad_input(sub):
    r = run(*base_args(sub))
    assert parsed(sub, r), (sub, r)
    r = run(*base_args(sub), "--no-such-option")
    assert r.returncode == 2 and "--no-such-option" in r.stderr, r
    if SUBS[sub] != "volume":
        r = run(sub, *REQUIRED.get(sub, []))
        assert r.returncode == 2 and f"{SUBS[sub]} is required" in r.stderr, r
    if SUBS[sub] == "device":
        r = run(*base_args(sub, device="/nonexistent/nvme9n9"))
        assert r.returncode == 2 and "/nonexistent/nvme9n9" in r.stderr, r
        with tempfile.NamedTemporaryFile() as f:
            r = run(*base_args(sub, device=f.name))
            assert r.returncode == 4, r


def test_usage_errors_without_a_command_exit_2():
    for args in ([], ["frobnicate"], ["--no-such-option"]):
        r = run(*args)
        assert r.returncode == 2, (args, r)


@pytest.mark.parametrize("sub", sorted(SUBS))
def test_ranges_are_enforced_and_documented(sub):
    for o in options(sub):
        if not o.range:
            continue
        lo, hi = o.range
        stated = re.search(r"\((\d+)-(\d+)\b", o.text)
        if stated:
            assert (int(stated.group(1)), int(stated.group(2))) == (lo, hi), (
                f"nvfence {sub} --help: {o.name} says {stated.group(0)}) but takes {lo}..{hi}")
        for text in man_option_texts(sub, o.name):
            for m in re.finditer(rf"{re.escape(o.name)}\b[^.;]*?\((\d+)-(\d+)\b", text):
                assert (int(m.group(1)), int(m.group(2))) == (lo, hi), (
                    f"nvfence(8) says {o.name} is {m.group(1)}-{m.group(2)}, nvfence {sub} takes {lo}..{hi}")
        args = base_args(sub)
        if o.name in args:
            i = args.index(o.name)
            args = args[:i] + args[i + 2:]
        for value, ok in ((lo, True), (hi, True), (lo - 1, False), (hi + 1, False)):
            if value < 0:
                continue
            r = run(*args, o.name, str(value))
            if ok:
                assert parsed(sub, r), f"nvfence {sub} {o.name} {value} (in {lo}..{hi}): {r.returncode} {r.stderr}"
            else:
                assert r.returncode == 2 and o.name in r.stderr, (
                    f"nvfence {sub} {o.name} {value} (outside {lo}..{hi}): {r.returncode} {r.stderr}")
            if o.env:
                r = run(*args, env={o.env: str(value)})
                assert parsed(sub, r) == ok, f"{o.env}={value} nvfence {sub}: {r.returncode} {r.stderr}"
                if not ok:
                    assert r.returncode == 2, r


def help_defaults(o: Option) -> list:
    out = [m.group(1).strip() for m in re.finditer(r"\bdefault:? ([^;,)]+)", o.text)]
    out += [m.group(1) for m in re.finditer(r"(\w+) \(default\)", o.text)]
    return out


@pytest.mark.parametrize("sub", sorted(SUBS))
def test_defaults_in_help_are_the_man_pages(sub):
    for o in options(sub):
        for value in help_defaults(o):
            texts = man_option_texts(sub, o.name)
            assert any("default" in t and value in t for t in texts), (
                f"nvfence {sub} --help: {o.name} default {value!r}; nvfence(8) does not say so: {texts}")


class SilentAgent:
    """A control socket that accepts connections and never answers."""

    def __enter__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "silent.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.path)
        self.sock.listen(8)
        return self

    def __exit__(self, *exc):
        self.sock.close()
        self.dir.cleanup()


def test_the_agent_timeout_and_its_default_for_status():
    with SilentAgent() as agent:
        r = run("takeover", "--socket", agent.path, "--timeout-ms", "300")
        assert r.returncode == 1 and "within 300 ms" in r.stderr, r
        o = next(o for o in options("status") if o.name == "--timeout-ms")
        default = int(re.search(r"default (\d+) for status", o.text).group(1))
        r = run("status", "--socket", agent.path, timeout=default / 1000 + 20)
        assert r.returncode == 1 and f"within {default} ms" in r.stderr, r


def json_failure_keys() -> set:
    entry = " ".join(b for t, b in man()["OPTIONS"] if t and "--json" in t)
    m = re.search(r"Failures print \{([^}]*)\}", entry)
    assert m, f"nvfence(8) --json does not say what a failure prints: {entry}"
    return set(m.group(1).replace('"', "").split(", "))


def json_failure(*args) -> dict:
    r = run(*args)
    assert r.returncode != 0, r
    obj = json.loads(r.stdout)
    assert obj["exit_code"] == r.returncode, (args, obj, r.returncode)
    return obj


def test_json_failures_of_device_commands_and_usage_are_the_documented_object():
    keys = json_failure_keys()
    for args in (["report", "/dev/null", "--json"],        # device unsupported
                 ["report", "/nonexistent/nvme9n9", "--json"],
                 ["write", "/dev/null", "--json"],         # usage: --lba is required
                 ["status", "vol-1", "--socket", "/x", "--json"]):  # usage
        obj = json_failure(*args)
        assert keys <= set(obj), f"nvfence {' '.join(args)}: {sorted(obj)}, nvfence(8): {sorted(keys)}"


def test_json_failures_of_agent_commands_are_the_documented_object():
    keys = json_failure_keys()
    obj = json_failure("status", "--socket", "/nonexistent/nvfence-test.sock", "--json")
    assert keys <= set(obj), f"nvfence status: {sorted(obj)}, nvfence(8): {sorted(keys)}"
