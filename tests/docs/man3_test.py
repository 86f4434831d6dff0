"""The API reference, man/man3: a page for every C function libnvfence
exports (and every function of nvfence/sqlite.h and of the testing kit's C
face, nvfence/testing.h) and for every public C++ class; no page for a function or class that does not exist; every page's
SYNOPSIS compiles against the installed-to-be headers (a C prototype that
disagrees with the header is a conflicting redeclaration; a C++ member
line that disagrees selects no member); every page renders without a groff
warning.

Environment: NVFENCE_LIB (the built libnvfence.so or .a), CC, CXX.
The source tree is found from this file.
"""
import os
import pathlib
import re
import subprocess
import tempfile

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2]
MAN3 = SRC / "man" / "man3"
INCLUDE = SRC / "include"


def pages():
    return sorted(MAN3.glob("*.3"))


def so_target(page):
    """The page a `.so man3/x.3` link page points at, else None."""
    lines = [l for l in page.read_text().splitlines() if l.strip()]
    if len(lines) == 1 and lines[0].startswith(".so "):
        return lines[0].split(None, 1)[1]
    return None


def real_pages():
    return [p for p in pages() if so_target(p) is None]


def exported_c_functions():
    lib = os.environ.get("NVFENCE_LIB")
    if not lib:
        pytest.skip("NVFENCE_LIB not set")
    args = ["nm", "--defined-only"] + ([] if lib.endswith(".a") else ["-D"]) + [lib]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] == "T" and f[2].startswith("nvf_"):
            names.add(f[2].split("@")[0])
    assert len(names) > 40, f"too few nvf_ symbols in {lib}: {sorted(names)}"
    return names


def header_functions(header, prefix):
    text = re.sub(r"/\*.*?\*/", "", (INCLUDE / "nvfence" / header).read_text(), flags=re.S)
    return set(re.findall(r"\b(" + prefix + r"\w+)\s*\(", text))


def other_library_functions():
    """nvfence/sqlite.h's (libnvfence_sqlite.a) and the testing kit's C face,
    nvfence/testing.h (libnvfence_testing.a): not in libnvfence.so."""
    found = header_functions("sqlite.h", "nvf_sqlite_") | header_functions("testing.h", "nvf_sim_")
    assert any(n.startswith("nvf_sim_") for n in found), "no nvf_sim_ function found in nvfence/testing.h"
    return found


def public_classes():
    """namespace-qualified names of the classes of include/nvfence/*.hpp."""
    found = set()
    for h in sorted((INCLUDE / "nvfence").glob("*.hpp")):
        text = h.read_text()
        ns = "nvfence::testkit" if "namespace nvfence::testkit" in text else "nvfence"
        for m in re.finditer(r"^class (?:NVFENCE_API |\[\[nodiscard\]\] )?(\w+)(?: final)?\s*(?::[^{;]*)?\{",
                             text, re.M):
            found.add(f"{ns}::{m.group(1)}")
    return found


# ---------------------------------------------------------------- roff


def roff_args(s):
    """The arguments of a roff request line (quotes group, "" is a quote)."""
    out, cur, q, i, started = [], "", False, 0, False
    while i < len(s):
        c = s[i]
        if q:
            if c == '"':
                if i + 1 < len(s) and s[i + 1] == '"':
                    cur += '"'
                    i += 1
                else:
                    q = False
            else:
                cur += c
        elif c == '"':
            q, started = True, True
        elif c in " \t":
            if started:
                out.append(cur)
            cur, started = "", False
        else:
            cur += c
            started = True
        i += 1
    if started:
        out.append(cur)
    return out


def unescape(s):
    s = s.replace(r"\(aq", "'").replace(r"\(dq", '"').replace(r"\-", "-").replace(r"\&", "")
    s = re.sub(r"\\f[BIRP]", "", s)
    return s.replace(r"\e", "\\")


def section(page, name):
    lines, on = [], False
    for line in page.read_text().splitlines():
        if line.startswith(".SH"):
            on = roff_args(line[3:]) == [name]
            continue
        if on:
            lines.append(line)
    return lines


def synopsis_code(page):
    """The code of the SYNOPSIS: its .nf .. .fi block (a "Link with" line
    after it is prose)."""
    code, on = [], False
    for line in section(page, "SYNOPSIS"):
        if line.startswith((".nf", ".fi")):
            on = line.startswith(".nf")
            continue
        if not on:
            continue
        if line.startswith(('.B ', '.BI ', '.I ', '.BR ', '.IR ', '.RI ')):
            req, rest = line.split(None, 1)
            # .B and .I join their arguments with spaces; .BI and the
            # other alternating macros without.
            sep = " " if req in (".B", ".I") else ""
            code.append(unescape(sep.join(roff_args(rest))))
        elif line.startswith((".", "'")):
            code.append("")
        else:
            code.append(unescape(line))
    return "\n".join(code)


def names_of(page):
    """The names a page's NAME line documents."""
    text = " ".join(section(page, "NAME"))
    head = unescape(text).split(" - ")[0]
    return [n.strip() for n in head.split(",") if n.strip()]


# ---------------------------------------------------------------- (a) coverage


def page_for(name):
    p = MAN3 / f"{name}.3"
    if not p.exists():
        return None
    t = so_target(p)
    if t is None:
        return p
    target = SRC / "man" / t
    assert t.startswith("man3/") and target.exists() and so_target(target) is None, \
        f"{p.name}: .so {t} does not resolve to a page"
    assert name in names_of(target), f"{p.name}: links to {t}, whose NAME does not list {name}"
    return target


def test_every_exported_function_has_a_page():
    missing = sorted(n for n in exported_c_functions() | other_library_functions() if page_for(n) is None)
    assert not missing, f"no man page (man/man3/NAME.3) for: {missing}"


def test_every_public_class_has_a_page():
    missing = sorted(c for c in public_classes() if page_for(c) is None)
    assert not missing, f"no man page (man/man3/CLASS.3) for: {missing}"


def test_no_stale_pages():
    known = exported_c_functions() | other_library_functions() | public_classes() | {"libnvfence"}
    stale = sorted(p.stem for p in pages() if p.stem not in known)
    assert not stale, f"pages for names that do not exist: {stale}"
    for p in real_pages():
        unknown = [n for n in names_of(p) if n not in known]
        assert not unknown, f"{p.name}: NAME lists unknown {unknown}"
        for n in names_of(p):
            assert (MAN3 / f"{n}.3").exists(), f"{p.name} documents {n}, but there is no {n}.3 (page or .so link)"


def test_links_resolve():
    for p in pages():
        t = so_target(p)
        if t is not None:
            page_for(p.stem)


def test_overview_lists_every_function():
    text = unescape((MAN3 / "libnvfence.3").read_text())
    missing = sorted(n for n in exported_c_functions() | other_library_functions() | public_classes()
                     if not re.search(re.escape(n) + r"\b", text))
    assert not missing, f"libnvfence(3) does not list: {missing}"


# ---------------------------------------------------------------- (b) synopses

C_PAGES = [p for p in real_pages() if p.stem.startswith("nvf_")]
CXX_PAGES = [p for p in real_pages() if "::" in p.stem]


def compile_source(lang, code, name):
    cc = os.environ.get("CC", "cc") if lang == "c" else os.environ.get("CXX", "c++")
    std = "-std=c11" if lang == "c" else "-std=c++20"
    with tempfile.TemporaryDirectory() as d:
        src = pathlib.Path(d) / ("synopsis." + lang.replace("c++", "cpp"))
        src.write_text(code)
        r = subprocess.run([cc, std, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", str(INCLUDE), str(src)],
                           capture_output=True, text=True)
    assert r.returncode == 0, f"{name}: SYNOPSIS does not compile:\n{code}\n{r.stderr}"


@pytest.mark.parametrize("page", C_PAGES, ids=lambda p: p.name)
def test_c_synopsis_compiles(page):
    code = synopsis_code(page)
    assert "#include <nvfence/" in code, f"{page.name}: SYNOPSIS has no #include"
    for n in names_of(page):
        assert re.search(r"\b" + n + r"\(", code), f"{page.name}: SYNOPSIS has no prototype of {n}"
    # The prototypes are redeclarations: any disagreement with the header
    # is "conflicting types" (the file is compiled as written, as C11).
    compile_source("c", code, page.name)


MEMBER = re.compile(
    r"^(?P<pre>(?:(?:static|virtual|explicit|inline|constexpr)\s+)*)"
    r"(?P<ret>.*?)\s*\b(?P<name>operator\s*(?:->|=|\*|bool)|~?\w+)\s*"
    r"\((?P<args>.*)\)\s*(?P<quals>(?:const)?\s*(?:&&|&)?\s*(?:noexcept)?)\s*"
    r"(?:override|final)?\s*(?P<tail>=\s*(?:0|default|delete))?\s*;$")
DATA = re.compile(r"^(?P<type>.+?)\s+(?P<name>\w+)\s*(?:=[^;]*|\{[^;]*\})?;$")


def strip_defaults(args):
    out, depth, cur, skip = [], 0, "", False
    for c in args + ",":
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur.split(" = ")[0].strip() if " = " in cur else cur.strip())
            cur = ""
            continue
        cur += c
    return ", ".join(a for a in out if a)


def cxx_checks(code, page):
    """C++ for the SYNOPSIS of a class page: its #include lines, then a
    check of every line against the headers: a member function must select
    a member of exactly that type (static_cast of its address), a
    constructor must be one the class has (is_constructible), a data member
    must have that type, a function outside a class must exist with that
    type. A class outline opens with `class NAME {` (after `template <class
    T>` for a template, checked with T = int) and closes with `};`."""
    ns = page.stem.rsplit("::", 1)[0]
    includes, checks = [], []
    owner, short, template, template_next = None, None, False, False
    lines = []
    for raw in code.splitlines():  # a declaration continued on the next line
        if lines and lines[-1].rstrip().endswith(","):
            lines[-1] = lines[-1].rstrip() + " " + raw.strip()
        else:
            lines.append(raw)
    for raw in lines:
        line = raw.split("//")[0].strip()
        if not line or line in ("public:", "{", "}") or line.startswith("namespace "):
            continue
        if line.startswith("#include"):
            includes.append(line)
            continue
        if line.startswith("template <class T>"):
            template_next = True
            continue
        c = re.match(r"(?:class|struct) (\w+)\b[^;]*\{$", line)
        if c:
            short, template, template_next = c.group(1), template_next, False
            owner = f"{ns}::{short}<T>" if template else f"{ns}::{short}"
            continue
        if line == "};":
            owner, short = None, None
            continue
        # A data member with an initialiser is not a function, whatever
        # its initialiser calls.
        m = None if re.match(r"^[^(]*\s=\s", line) else MEMBER.match(line)
        if m and owner:
            name, args, quals = m["name"], strip_defaults(m["args"]), " ".join(m["quals"].split())
            if (m["tail"] and "delete" in m["tail"]) or name == f"~{short}":
                continue
            if name == short:  # a constructor: constructible from these arguments
                checks.append(f"static_assert(nvf_ctor<{owner}, void({args})>::value);")
            elif name.startswith("operator ") and not m["ret"]:  # a conversion
                checks.append(f"(void)static_cast<{name[9:]} ({owner}::*)() {quals}>(&{owner}::{name});")
            elif "static" in m["pre"]:
                checks.append(f"(void)static_cast<{m['ret']} (*)({args})>(&{owner}::{name});")
            else:
                checks.append(f"(void)static_cast<{m['ret']} ({owner}::*)({args}) {quals}>(&{owner}::{name});")
            continue
        if m:
            checks.append(f"(void)static_cast<{m['ret']} (*)({strip_defaults(m['args'])})>(&{ns}::{m['name']});")
            continue
        d = DATA.match(line)
        if d and owner:
            checks.append(f"static_assert(std::is_same_v<decltype({owner}::{d['name']}), {d['type']}>);")
            continue
        raise AssertionError(f"{page.name}: SYNOPSIS line not understood: {raw!r}")
    assert includes, f"{page.name}: SYNOPSIS has no #include"
    assert checks, f"{page.name}: SYNOPSIS declares no member"
    body = "\n    ".join(checks)
    head = "template <class T>\n" if template else ""
    inst = "template void nvf_check<int>();\n" if template else "\n"
    return ("\n".join(includes) + "\n#include <type_traits>\n"
            "template <class C, class F> struct nvf_ctor;\n"
            "template <class C, class... A> struct nvf_ctor<C, void(A...)> "
            ": std::is_constructible<C, A...> {};\n"
            "using namespace nvfence;\n"
            f"using namespace {ns};\n"
            f"{head}void nvf_check() {{\n    {body}\n}}\n{inst}")


@pytest.mark.parametrize("page", CXX_PAGES, ids=lambda p: p.name)
def test_cxx_synopsis_compiles(page):
    compile_source("c++", cxx_checks(synopsis_code(page), page), page.name)


def test_synopsis_checks_catch_a_wrong_prototype():
    """The check itself: a changed parameter type fails to compile."""
    page = MAN3 / "nvf_ns_open.3"
    code = synopsis_code(page).replace("uint32_t timeout_ms", "uint64_t timeout_ms")
    with pytest.raises(AssertionError):
        compile_source("c", code, "altered nvf_ns_open.3")
    page = MAN3 / "nvfence::Fence.3"
    code = synopsis_code(page).replace("Result<Outcome> acquire();", "Result<Outcome> acquire(int n);")
    with pytest.raises(AssertionError):
        compile_source("c++", cxx_checks(code, page), "altered nvfence::Fence.3")


# ---------------------------------------------------------------- (c) rendering


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_renders_without_warnings(page):
    if so_target(page) is not None:
        return  # rendered as the page it names
    r = subprocess.run(["groff", "-man", "-ww", "-z", str(page)], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, f"{page.name}: groff: {r.stderr}"
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    r = subprocess.run(["man", "--warnings=w", "-l", str(page)], capture_output=True, text=True, env=env)
    assert not r.stderr, f"{page.name}: man --warnings: {r.stderr}"
    text = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, env=env).stdout
    for sec in ("NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
        assert re.search(rf"^{sec}", text, re.M), f"{page.name}: no {sec} section"
    if page.stem.startswith("nvf_"):
        assert re.search(r"^RETURN VALUE", text, re.M), f"{page.name}: no RETURN VALUE section"
