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
