"""docs/POSTGRES.md's recipe is what the PostgreSQL lab applies: every
command of nvlab.clusters.postgres.RECIPE_NODE, RECIPE_STORAGE, RECIPE_CIB and
RECIPE_REJOIN (vm-test/nvlab/clusters/postgres.py) stands in the document verbatim, in
the same order. Run by CTest (doc_postgres_recipe, label unit)."""
import os

from nvlab.clusters import postgres as postgres_lab   # PYTHONPATH=vm-test (tests/docs/CMakeLists.txt)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(doc: str, cmds) -> None:
    pos = -1
    for cmd in cmds:
        # A line of a shell block, whole.
        i = doc.find("\n" + cmd + "\n")
        assert i >= 0, f"not in docs/POSTGRES.md as a line of its own: {cmd}"
        assert i > pos, f"docs/POSTGRES.md has it earlier than the lab runs it: {cmd}"
        pos = i


def recipe():
    return (postgres_lab.RECIPE_NODE + postgres_lab.RECIPE_STORAGE + postgres_lab.RECIPE_CIB
            + postgres_lab.RECIPE_REJOIN)


def doc_text() -> str:
    with open(os.path.join(ROOT, "docs", "POSTGRES.md")) as f:
        return f.read()


def test_every_command_is_documented_in_order():
    check(doc_text(), recipe())


def test_the_check_fails_on_a_changed_or_reordered_command():
    doc = doc_text()
    cmds = list(recipe())
    changed = cmds[:-1] + [cmds[-1] + " --force"]
    for bad in (changed, [cmds[1], cmds[0]] + cmds[2:]):
        try:
            check(doc, bad)
        except AssertionError:
            continue
        raise AssertionError(f"a recipe the doc does not have passed the check: {bad[:2]}")
