"""docs/PACEMAKER.md's examples are what fence_nvfence and nvfenced accept.

- Every `pcs stonith create ... fence_nvfence` and `crm configure primitive
  ... stonith:fence_nvfence` example: the agent's parameters it sets (all
  but Pacemaker's own pcmk_* and what follows meta/op) are given to
  $FENCE_NVFENCE on stdin, as Pacemaker's fencer does, with action=list
  (which needs no device): no parameter may be unknown or invalid, and the
  nodes listed are the example's node_ids.
- The "Parameters" table names exactly the metadata's parameters (but
  action, help and version, which every agent has) and the ones Pacemaker
  sends (nodename, nodeid).
- Every ```ini block (an nvfenced configuration) passes `$NVFENCED
  --check-config` (a device given when the block has none).
Run by CTest (doc_pacemaker_examples, label unit)."""
import os
import re
import shlex
import subprocess
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "PACEMAKER.md")
# Parameters every fence agent has, which the table need not repeat.
GENERIC = {"action", "help", "version"}
# Sent by Pacemaker with an action, not configured (not in the metadata).
SENT_BY_PACEMAKER = {"nodename", "nodeid"}


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def blocks(lang: str) -> list:
    return re.findall(rf"^```{lang}\n(.*?)^```", read(DOC), re.S | re.M)


def resource_params(block: str) -> list:
    """[(params, source)] for each fence_nvfence resource a sh block creates."""
    out = []
    for cmd in block.replace("\\\n", " ").splitlines():
        if "fence_nvfence" not in cmd or not cmd.lstrip().startswith(("pcs stonith create", "crm configure primitive")):
            continue
        words = shlex.split(cmd, comments=True)
        if "fence_nvfence" not in words and "stonith:fence_nvfence" not in words:
            continue
        params = {}
        for w in words:
            if w in ("meta", "op"):
                break
            if "=" in w and not w.startswith("-"):
                k, v = w.split("=", 1)
                if not k.startswith("pcmk_"):
                    params[k] = v
        out.append((params, cmd.strip()))
    return out


def metadata_params() -> set:
    xml = subprocess.run([os.environ["FENCE_NVFENCE"], "-o", "metadata"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return {p.get("name") for p in ET.fromstring(xml).iter("parameter")}


def test_every_resource_example_is_accepted_by_the_agent():
    examples = [r for b in blocks("sh") for r in resource_params(b)]
    assert len(examples) >= 3, f"expected the pcs, crm and pcmk_host_map examples, found {examples}"
    for params, cmd in examples:
        assert "node_ids" in params, cmd
        stdin = "action=list\n" + "".join(f"{k}={v}\n" for k, v in params.items())
        r = subprocess.run([os.environ["FENCE_NVFENCE"]], input=stdin, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (cmd, r.stdout, r.stderr)
        assert "Parse error" not in r.stderr and "Failed" not in r.stderr, (cmd, r.stderr)
        names = [line.split(",")[0] for line in r.stdout.split()]
        want = [item.split(":")[0] for item in params["node_ids"].split(";")]
        assert names == want, (cmd, r.stdout)


def test_the_parameters_table_is_the_metadata():
    m = re.search(r"^### Parameters\n(.*?)(?=^#+ )", read(DOC), re.S | re.M)
    assert m, "docs/PACEMAKER.md has no section '### Parameters'"
    table = set()
    for row in re.findall(r"^\| ([^|]+) \|", m.group(1), re.M):
        table |= set(re.findall(r"`([a-z][a-z0-9_]*)`", row))
    meta = metadata_params()
    assert table - meta - SENT_BY_PACEMAKER == set(), f"the table names parameters the agent lacks"
    assert meta - GENERIC - table == set(), "the table omits parameters of the metadata"
    assert SENT_BY_PACEMAKER <= table


def test_every_nvfenced_configuration_passes_check_config():
    confs = blocks("ini")
    assert confs, "docs/PACEMAKER.md has no nvfenced configuration example"
    for text in confs:
        if not re.search(r"^device\s*=", text, re.M):
            text = "device = /dev/nvme0n1\n" + text
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(text)
        try:
            r = subprocess.run([os.environ["NVFENCED"], "--config", f.name, "--check-config"],
                               capture_output=True, text=True, timeout=30)
        finally:
            os.unlink(f.name)
        assert r.returncode == 0, (text, r.stdout, r.stderr)
