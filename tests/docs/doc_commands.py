"""Command lines of the docs, found and made runnable without a device.

Used by cli_examples_test.py and nvfence_help_test.py (tests/docs/).

Where command lines are found (`find_commands`):
- Markdown: every line of a fenced (```) or indented (4 spaces) code block
  ("block": pasted as is, so it must parse completely), and every inline
  code span, table cells included ("span": may name a command without all
  its required arguments, see `complete`). A line or span is a command line
  when one of its shell segments (split at top level on |, &&, ||, ;)
  starts with nvfence, nvfenced or fence_nvfence (after `$ `, `sudo` and
  VAR=value words). The program's name alone is a name, not a command line.
- man pages: lines between .nf and .fi ("block"); the SYNOPSIS (one line
  per .br, "synopsis") and the tags of COMMANDS (prefixed with `nvfence`,
  "span"); bold text starting with a program name ("span").

Notation (`variants`): `[x]` is optional, `{x}` required, `a | b` inside
brackets are alternatives, `a|b` (no spaces) alternatives of one word.
Each synopsis is expanded into: everything optional left out, every
optional part in (first alternatives), and each alternative alone.

Placeholders (`PLACEHOLDERS`): an argument in capitals (DEV, KEY, N...), a
man page's italic word (<command>, <DEV>), a `<name>` of Markdown, or a
shell variable ($DEV, "$DEV") is a placeholder: it is replaced by the value
the table gives for it after that option (or anywhere). A placeholder the
table does not know fails the test: none is skipped. `...` after an option
that takes a value is a value elided (OPTION_SAMPLES gives one); elsewhere
it means "and so on" and is dropped. A /dev/ path is replaced by /dev/null:
the CLI refuses it as not an NVMe namespace (exit 4) only after parsing the
whole command line, and no device is ever touched.
"""
import os
import re
import shlex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = ("nvfence", "nvfenced", "fence_nvfence")
SAMPLE_VOLUME = "vol-0123456789abcdef0"

# Placeholder -> value; (option, placeholder) -> value where the option
# decides. "@SOCKET", "@DIR", "@CONFIG" are filled in by the runner (a
# socket path where nothing listens, a temporary directory, a minimal
# configuration file).
PLACEHOLDERS = {
    "DEV": "/dev/null", "DEVICE": "/dev/null", "DEVNODE": "/dev/null",
    "VOL": SAMPLE_VOLUME, "VOLUME": SAMPLE_VOLUME, "VOLUME-ID": SAMPLE_VOLUME, "NAME": SAMPLE_VOLUME,
    "KEY": "nf:0:1:7", "N": "2", "E": "5", "L": "8", "S": "60", "MS": "1000", "T": "exclusive",
    "PATH": "@SOCKET", "DIR": "@DIR", "FILE": "@CONFIG",
    "NODE": "2", "NODEID": "2",
}
OPTION_PLACEHOLDERS = {
    ("--tag", "T"): "0", ("--type", "T"): "exclusive", ("--initial-bytes", "N"): "4096",
    ("--config", "FILE"): "@CONFIG", ("--state-dir", "DIR"): "@DIR", ("--socket", "PATH"): "@SOCKET",
}
# A value for an option whose value the docs elide (`--opt ...`) or that a
# span names without its value (`nvfence preempt --victim-node`).
OPTION_SAMPLES = {
    "--victim": "nf:0:1:7", "--victim-node": "1", "--node": "2", "--lba": "8", "--blocks": "2", "--epoch": "5",
    "--type": "exclusive", "--tag": "0", "--max": "4", "--wait-s": "60", "--initial-bytes": "4096",
    "--timeout-ms": "1000", "--socket": "@SOCKET", "--state-dir": "@DIR",
    "--etcd-endpoints": "http://127.0.0.1:2379", "--interval-ms": "1000", "--interval_ms": "1000", "--elector": "etcd", "--config": "@CONFIG",
}
# man page italics that are not values: "[options]" stands for a command's
# own options (checked per command by nvfence_help_test.py); "command" for
# every command that takes a device; "key value" for any configuration key
# as an option (nvfenced(8): --key value, as --interval-ms 1000).
MAN_METAVARS = {"options": None, "command": "@DEVICE_COMMANDS", "key": "interval-ms", "value": "1000"}


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------- Markdown

def markdown_commands(path: str) -> list:
    """[(kind, text, where)] of the command lines of a Markdown file."""
    out, prose = [], []
    lines = read(path).splitlines()
    fence, prev_blank, in_indented = False, True, False
    for i, line in enumerate(lines, 1):
        where = f"{os.path.relpath(path, ROOT)}:{i}"
        if line.lstrip().startswith("```"):
            fence = not fence
            prose.append("")
            continue
        if fence:
            out.append(("block", line, where))
            prose.append("")
            continue
        indented = line.startswith("    ") and (prev_blank or in_indented) and line.strip()
        if indented and not re.match(r"^\s*([-*]|\d+\.|\|)\s", line):
            in_indented = True
            out.append(("block", line.strip(), where))
            prose.append("")
        else:
            in_indented = False
            prose.append((line, where))
        prev_blank = not line.strip()
    # Inline spans: paragraph by paragraph (a span may break across lines).
    para, start = [], None
    for item in prose + [""]:
        if not item or not item[0].strip():
            if para:
                text = " ".join(para)
                for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
                    out.append(("span", " ".join(m.group(1).replace("\\|", "|").split()), start))
            para, start = [], None
            continue
        line, where = item
        if line.startswith("|"):  # a table row is a paragraph of its own
            for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", line):
                out.append(("span", " ".join(m.group(1).replace("\\|", "|").split()), where))
            continue
        para.append(line)
        start = start or where
    return [c for c in out if is_command(c[1])]


# ---------------------------------------------------------------- man pages

def roff_segments(line: str, fonts: list) -> list:
    """[(font, text)] of one roff line; italic text is the placeholder
    font. fonts: the alternating fonts of a macro, or [current] for text."""
    def escapes(s):
        return (s.replace("\\-", "-").replace("\\(em", "-").replace("\\&", "").replace("\\e", "\\")
                .replace('\\(dq', '"'))
    if line.startswith("."):
        m = re.match(r"^\.(B|I|BI|BR|IB|IR|RB|RI)(?:\s+(.*))?$", line)
        if not m:
            return []
        macro, rest = m.group(1), m.group(2) or ""
        args = [a[1:-1] if a.startswith('"') else a for a in re.findall(r'"[^"]*"|\S+', rest)]
        if macro in ("B", "I"):
            args = [" ".join(args)]
            cycle = [macro]
        else:
            cycle = list(macro)
        segs = []
        for n, a in enumerate(args):
            font = cycle[n % len(cycle)]
            for part in re.split(r"(\\f[BIRP])", a):
                if re.fullmatch(r"\\f[BIRP]", part):
                    font = "R" if part[2] == "P" else part[2]
                elif part:
                    segs.append((font, escapes(part)))
        return segs + [("R", " ")]
    segs, font = [], fonts[0]
    for part in re.split(r"(\\f[BIRP])", line):
        if re.fullmatch(r"\\f[BIRP]", part):
            font = "R" if part[2] == "P" else part[2]
        elif part:
            segs.append((font, escapes(part)))
    fonts[0] = font
    return segs + [(font, " ")]


def render(segs: list) -> str:
    """Text with italic words written <word>."""
    out = []
    for font, text in segs:
        if font == "I" and text.strip():
            out.append(re.sub(r"([^\s\[\]{}|,]+)", r"<\1>", text))
        else:
            out.append(text)
    return " ".join("".join(out).split())


def man_commands(path: str) -> list:
    rel = os.path.relpath(path, ROOT)
    prog = os.path.basename(path).split(".")[0]
    lines = read(path).splitlines()
    out, section, nf, fonts = [], None, False, ["R"]
    synopsis, all_segs = [], []
    tag_next = False
    for i, line in enumerate(lines, 1):
        where = f"{rel}:{i}"
        if line.startswith(".SH"):
            section = line[3:].strip().strip('"')
            if synopsis:
                out.append(("synopsis", render(synopsis), where))
                synopsis = []
            continue
        if line.startswith(".nf"):
            nf = True
            continue
        if line.startswith(".fi"):
            nf = False
            continue
        if nf:
            out.append(("block", render(roff_segments(line, ["R"])), where))
            continue
        if line.startswith(".TP"):
            tag_next = True
            continue
        segs = roff_segments(line, fonts)
        if section == "SYNOPSIS":
            if line.startswith((".br", ".PP")):
                if synopsis:
                    out.append(("synopsis", render(synopsis), where))
                synopsis = []
            else:
                synopsis += segs
            continue
        if tag_next:
            tag_next = False
            if section == "COMMANDS" and prog == "nvfence":
                out.append(("span", "nvfence " + render(segs), where))
                continue
        all_segs += [(f, t, where) for f, t in segs]
    # Bold runs (across lines) starting with a program name.
    run, run_where = [], None
    for font, text, where in all_segs + [("R", "", None)]:
        if font == "B":
            run.append(text)
            run_where = run_where or where
            continue
        if run:
            out.append(("span", " ".join("".join(run).split()), run_where))
        run, run_where = [], None
    return [c for c in out if is_command(c[1])]


# ---------------------------------------------------------------- shell

def segments(text: str) -> list:
    """Top-level shell segments of a line (split at |, ||, &&, ; outside
    brackets and quotes; `a | b` inside [ ] or { } is notation)."""
    out, cur, depth, quote, i = [], "", 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
            cur += ch
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch in "[{":
            depth += 1
            cur += ch
        elif ch in "]}":
            depth = max(0, depth - 1)
            cur += ch
        elif ch == "#" and (not cur or cur[-1].isspace()) and depth == 0:
            break  # a comment
        elif depth == 0 and (text.startswith("&&", i) or text.startswith("||", i)):
            out.append(cur)
            cur = ""
            i += 1
        elif depth == 0 and ch in "|;" and (i + 1 < len(text) and text[i + 1] == " " or ch == ";") \
                and (i > 0 and text[i - 1] == " "):
            out.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    out.append(cur)
    return [s.strip() for s in out if s.strip()]


def program_words(segment: str):
    """The words of a segment from its program on, or None."""
    try:
        words = shlex.split(segment.replace("<", "\x01").replace(">", "\x02"))
    except ValueError:
        words = segment.split()
    words = [w.replace("\x01", "<").replace("\x02", ">") for w in words]
    while words and (words[0] in ("$", "#", "sudo") or re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])):
        words = words[1:]
    if len(words) >= 2 and words[0] in PROGRAMS:
        return words
    return None


def is_command(text: str) -> bool:
    return any(program_words(s) for s in segments(text))


def commands_of(text: str) -> list:
    return [w for w in (program_words(s) for s in segments(text)) if w]


# ---------------------------------------------------------------- notation

def _tokens(words: list) -> list:
    out = []
    for w in words:
        for part in re.split(r"([\[\]{}])", w):
            if not part:
                continue
            if part in "[]{}" or part == "|":
                out.append(part)
            elif part.endswith("...") and part != "...":
                out += [part[:-3], "..."]
            elif "|" in part and part != "|":
                out.append(("word-alts", [p for p in part.split("|") if p]))
            else:
                out.append(part)
    return out


def _parse_seq(toks: list, i: int, closers: str):
    """Parse alternatives until a closer: returns ([seq, ...], i)."""
    alts, seq = [], []
    while i < len(toks):
        t = toks[i]
        if t in ("]", "}") and t in closers:
            alts.append(seq)
            return alts, i + 1
        if t == "|":
            alts.append(seq)
            seq = []
            i += 1
        elif t in ("[", "{"):
            sub, i = _parse_seq(toks, i + 1, "]" if t == "[" else "}")
            seq.append(("opt" if t == "[" else "req", sub))
        elif isinstance(t, tuple):
            seq.append(("req", [[w] for w in t[1]]))
            i += 1
        else:
            seq.append(t)
            i += 1
    assert not closers, f"unbalanced brackets in {toks}"
    alts.append(seq)
    return alts, i


def _seq_variants(seq: list) -> list:
    def minimal(item):
        if isinstance(item, str):
            return [item]
        kind, alts = item
        return [] if kind == "opt" else _seq_minimal(alts[0])

    def maximal(item):
        if isinstance(item, str):
            return [item]
        return _seq_maximal(item[1][0])

    def every(item):
        if isinstance(item, str):
            return [[item]]
        kind, alts = item
        vs = [[]] if kind == "opt" else []
        for a in alts:
            vs += _seq_variants(a)
        return vs

    out = [_seq_minimal(seq), _seq_maximal(seq)]
    for n, item in enumerate(seq):
        if isinstance(item, str):
            continue
        for v in every(item):
            out.append(sum((minimal(x) for x in seq[:n]), []) + v + sum((minimal(x) for x in seq[n + 1:]), []))
    uniq = []
    for v in out:
        if v not in uniq:
            uniq.append(v)
    return uniq


def _seq_minimal(seq):
    out = []
    for x in seq:
        if isinstance(x, str):
            out.append(x)
        elif x[0] == "req":
            out += _seq_minimal(x[1][0])
    return out


def _seq_maximal(seq):
    out = []
    for x in seq:
        out += [x] if isinstance(x, str) else _seq_maximal(x[1][0])
    return out


def variants(words: list) -> list:
    """The command lines a synopsis stands for (see the module's doc)."""
    toks = _tokens(words)
    if not any(t in ("[", "{", "|") or isinstance(t, tuple) for t in toks):
        return [list(words)]
    alts, _ = _parse_seq(toks, 0, "")
    out = []
    for a in alts:
        out += _seq_variants(a)
    return out


def placeholder_name(word: str):
    """The placeholder a word is, or None for a literal word."""
    m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", word)
    if m:
        return m.group(1)
    m = re.fullmatch(r"<([^<>]+)>", word)
    if m:
        return m.group(1)
    if re.fullmatch(r"[A-Z][A-Z0-9_-]*", word) and not word.startswith("-"):
        return word
    return None


def substitute(words: list, where: str) -> list:
    """Placeholders replaced by sample values (see PLACEHOLDERS). Raises
    AssertionError naming an unknown placeholder."""
    out = []
    for n, w in enumerate(words):
        prev = out[-1] if out else ""
        if n == 0:
            out.append(w)
            continue
        if w == "...":
            if prev in OPTION_SAMPLES:
                out.append(OPTION_SAMPLES[prev])  # the option's value, elided
            continue  # elsewhere: "and so on"
        if w.startswith("--<") or w.startswith("<") and w.endswith(">") and w[1:-1] in MAN_METAVARS:
            name = w[3:-1] if w.startswith("--<") else w[1:-1]
            assert name in MAN_METAVARS, f"{where}: unknown man page metavariable {w!r} in {' '.join(words)}"
            v = MAN_METAVARS[name]
            if v is not None:
                out.append(("--" + v) if w.startswith("--") else v)
            continue
        if w.startswith("/dev/"):
            out.append("/dev/null")
            continue
        name = placeholder_name(w)
        if name is None:
            out.append(w)
            continue
        key = name.upper()
        if (prev, key) in OPTION_PLACEHOLDERS:
            out.append(OPTION_PLACEHOLDERS[(prev, key)])
        else:
            assert key in PLACEHOLDERS, (
                f"{where}: unknown placeholder {w!r} in `{' '.join(words)}`: add it to PLACEHOLDERS with a value")
            out.append(PLACEHOLDERS[key])
    return out


def find_commands(paths: list) -> list:
    """[(kind, words, where, text)] for every command line of the files."""
    out = []
    for p in paths:
        found = man_commands(p) if re.search(r"\.\d$", p) else markdown_commands(p)
        for kind, text, where in found:
            for words in commands_of(text):
                out.append((kind, words, where, text))
    return out
