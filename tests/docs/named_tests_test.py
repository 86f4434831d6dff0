"""Every lab test the docs name exists: in README.md, vm-test/README.md and
docs/*.md, each `test_...` name in backquotes is a test file or a function
of the lab (vm-test/) or of tests/ (a name ending in `_` is a prefix: some
function starts with it), each `vm_...` is a lab CTest test (a
vm-test/tests/<area>/test_NAME.py), and each `vm-test/...` path exists. A
claim that points at a test that was renamed or removed fails here.
Run by CTest (doc_named_tests, label unit)."""
import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "vm-test/README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT))]


def known(root: str):
    """(test file names, function and class names, lab CTest names)."""
    files, defs = set(), set()
    for pattern in ("vm-test/**/*.py", "tests/**/*.py"):
        for f in glob.glob(pattern, root_dir=root, recursive=True):
            files.add(os.path.basename(f))
            with open(os.path.join(root, f)) as fh:
                tree = ast.parse(fh.read(), filename=f)
            defs.update(n.name for n in ast.walk(tree)
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    ctest = {"vm_" + os.path.basename(f)[len("test_"):-len(".py")]
             for f in glob.glob("vm-test/tests/*/test_*.py", root_dir=root)}
    return files, defs, ctest


def missing_in(text: str, root: str, files, defs, ctest) -> list:
    out = []
    for tok in re.findall(r"`([^`\n]+)`", text):
        for name, py in re.findall(r"\b(test_[a-z0-9_]+)(\.py)?\b", tok):
            if py:
                ok = name + ".py" in files
            elif name.endswith("_"):
                ok = any(d.startswith(name) for d in defs)
            else:
                ok = name in defs or name + ".py" in files
            if not ok:
                out.append(name + py)
        out += [t for t in re.findall(r"\b(vm_[a-z0-9_]+)\b", tok) if t not in ctest]
        for path in re.findall(r"(vm-test/[A-Za-z0-9_./-]+)", tok):
            path = path.split("::")[0].rstrip(".")
            if not os.path.exists(os.path.join(root, path)):
                out.append(path)
    return out


def test_every_named_lab_test_exists():
    files, defs, ctest = known(ROOT)
    assert len(ctest) >= 30 and "test_short_campaign" in defs
    bad = {}
    for doc in DOCS:
        with open(os.path.join(ROOT, doc)) as f:
            miss = missing_in(f.read(), ROOT, files, defs, ctest)
        if miss:
            bad[doc] = sorted(set(miss))
    assert not bad, f"docs name tests that do not exist: {bad}"


def test_the_check_fails_on_a_removed_test():
    files, defs, ctest = known(ROOT)
    text = ("proven by `vm-test/tests/device/test_race.py` (`test_no_such_scenario`), "
            "CTest `vm_no_such_lab`, `test_checker_` and `vm_race` and `vm-test/tests/nowhere/test_x.py`")
    assert missing_in(text, ROOT, files, defs, ctest) == [
        "test_no_such_scenario", "vm_no_such_lab", "test_x.py", "vm-test/tests/nowhere/test_x.py"]


def pytest_paths_missing(text: str, root: str) -> list:
    """Each `pytest ... FILE.py` command in text, with the directory its own
    `cd DIR &&` moves to (else the repository's root): the FILE.py paths
    that do not exist there. A doc command that would say "file or
    directory not found" fails here, even when a file of that name exists
    elsewhere."""
    out = []
    for line in text.splitlines():
        cmd = line.split("#", 1)[0]
        if not re.search(r"\bpytest\b", cmd):
            continue
        m = re.match(r"\s*(?:\$\s*)?cd\s+(\S+)\s*&&", cmd)
        cwd = os.path.join(root, m.group(1)) if m else root
        for path in re.findall(r"(?<![\w/.-])([\w./-]+\.py)\b", re.split(r"\bpytest\b", cmd, 1)[1]):
            if not os.path.exists(os.path.join(cwd, path.split("::")[0])):
                out.append(f"{line.strip()} ({path})")
    return out


def test_every_pytest_command_names_a_file_that_exists():
    bad = {}
    for doc in DOCS:
        if doc == "docs/LOG.md":   # dated runs: their commands were right on their date
            continue
        with open(os.path.join(ROOT, doc)) as f:
            miss = pytest_paths_missing(f.read(), ROOT)
        if miss:
            bad[doc] = miss
    assert not bad, f"docs give pytest commands on files that are not where the command looks: {bad}"


def test_the_pytest_path_check_fails_on_a_file_in_another_folder():
    text = ("    cd vm-test && /usr/bin/python3 -m pytest -q test_race.py\n"
            "    /usr/bin/python3 -m pytest -q vm-test/tests/device/test_race.py   # fine.py\n"
            "    cd vm-test && /usr/bin/python3 -m pytest -q tests/device/test_race.py::test_x\n")
    assert pytest_paths_missing(text, ROOT) == [
        "cd vm-test && /usr/bin/python3 -m pytest -q test_race.py (test_race.py)"]
