"""docs/PACEMAKER.md "Bringing a fenced node back" is what the lab runs:
every command of REJOIN_STEPS (vm-test/nvlab/clusters/pacemaker.py), with its
placeholders written as the doc writes them, stands in that section, in the
same order. Run by CTest (doc_rejoin_procedure, label unit)."""
import os
import re
import sys

from nvlab.clusters.pacemaker import REJOIN_STEPS   # PYTHONPATH=vm-test (tests/docs/CMakeLists.txt)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLACEHOLDERS = {"{node}": "NODE", "{nodeid}": "NODEID", "{ids}": "IDS", "{names}": "NAMES", "{dev}": "DEV",
                "{vol}": "VOL"}


def section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, f"docs/PACEMAKER.md has no section '## {title}'"
    return m.group(1)


def as_documented(cmd: str) -> str:
    if cmd.startswith("wait: "):
        cmd = cmd[len("wait: "):]
    for k, v in PLACEHOLDERS.items():
        cmd = cmd.replace(k, v)
    assert "{" not in cmd.replace("{ ", ""), f"unknown placeholder in {cmd!r}"
    return cmd


def test_every_step_is_documented_in_order():
    with open(os.path.join(ROOT, "docs", "PACEMAKER.md")) as f:
        doc = section(f.read(), "Bringing a fenced node back")
    spans = re.findall(r"`([^`]+)`", doc)
    pos = -1
    for where, cmd, _timeout, what in REJOIN_STEPS:
        want = as_documented(cmd)
        assert want in spans, f"step '{what}' ({where}): `{want}` is not in the doc's procedure"
        i = spans.index(want)
        assert i > pos, f"step '{what}' comes earlier in the doc than in the lab"
        pos = i


def test_the_check_fails_on_a_changed_command(monkeypatch):
    # The check is not vacuous: a lab command the doc does not have fails it.
    changed = tuple(REJOIN_STEPS[:1]) + (("node", "systemctl start corosync.service --no-block", 1, "x"),)
    monkeypatch.setattr(sys.modules[__name__], "REJOIN_STEPS", changed)
    try:
        test_every_step_is_documented_in_order()
    except AssertionError as e:
        assert "--no-block" in str(e)
    else:
        raise AssertionError("a command missing from the doc was not caught")
