"""Issue 27 under real systemd: nvfenced as the check-only watcher of
docs/PACEMAKER.md's recipe (role = watch), with fence_nvfence doing what
Pacemaker's fencer does (on, off), without Pacemaker.

Two systemd-flavour hosts on one fabric target; node ids a:1, b:2. On a,
nvfenced@VOL runs with role = watch and a fence command that appends a line
to a file; b has no agent.

1. a's watcher starts and registers nothing: WAITING, no key of node 1 on
   the device, its status says check-only.
2. fence_nvfence -o on on a (the unfencing) registers node 1 on the device
   directly (the watcher is check-only: not through its socket); the
   watcher turns WATCHING. b is unfenced the same way.
3. fence_nvfence -o off plug=a on b (b preempts node 1's key): a's watcher
   runs its fence action once and is FENCED; the action is not run again.
4. The control requests that would change the device are refused.
5. fence_nvfence -o on on a again: WATCHING, with the new key.
6. systemctl stop: node 1's key stays on the device, the state file keeps it.
"""
import json
import re

import pytest

import nvlab
from nvlab.steps import agent_conf_path, report, reset

VOL = "vol-0123456789abcdef0"
UNIT = f"nvfenced@{VOL}.service"
WAIT_S = 90
FENCE_LOG = "/var/lib/watch-fence.log"
STATE = "/var/lib/nvfence/*.agent"
MAP = "a:1;b:2"
CONF = ("node_id = 1\nrole = watch\ninterval_ms = 500\ndevice_timeout_ms = 2000\nfence_action = command\n"
        f"fence_command = echo \"fenced: $NVFENCE_REASON\" >> {FENCE_LOG}\n")


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=2, flavour="systemd", boot_timeout_s=480) as lab:
        yield lab


def conf_path(host):
    return agent_conf_path(host, VOL)


def status(host):
    r = host.run(f"nvfence status {VOL} --json", timeout_s=30)
    assert r.rc == 0, (r.out, r.err, host.journal(UNIT, lines=40))
    return json.loads(r.out)


def wait_state(host, state, timeout_s=WAIT_S):
    r = host.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"{state}\"'", timeout_s=timeout_s)
    assert r.rc == 0, (state, host.run(f"nvfence status {VOL}").out, host.journal(UNIT, lines=40))


def fa(host, *lines):
    """fence_nvfence on host, options on stdin as Pacemaker's fencer gives them."""
    text = "\n".join(["devices=$NVFENCE_DEV", f"node_ids={MAP}", "verbose=1"] + list(lines))
    return host.run(f"fence_nvfence <<EOF\n{text}\nEOF", timeout_s=90)


def node_keys(host, node):
    return [r["key"] for r in report(host)["registrants"] if not r["foreign"] and r["node"] == node]


def fence_runs(host):
    return [x for x in host.run(f"cat {FENCE_LOG} 2>/dev/null").out.splitlines() if x.startswith("fenced:")]


def test_systemd_check_only_watcher(lab):
    a, b = lab.hosts
    reset(lab)
    a.run(f"rm -rf /var/lib/nvfence /run/nvfence {FENCE_LOG}", timeout_s=30)
    a.put(CONF.encode(), conf_path(a))
    a.run(f"systemctl daemon-reload && systemctl start {UNIT}", timeout_s=WAIT_S, check=True)

    # 1. Started: waits for the node's key, registers nothing.
    wait_state(a, "WAITING")
    st = status(a)
    assert st["check_only"] is True, st
    assert node_keys(a, 1) == [], "the watcher registered node 1 when it started"
    text = a.run(f"nvfence status {VOL}", timeout_s=30).out
    assert "check-only watcher" in text, text

    # 2. Unfencing: fence_nvfence registers node 1 directly, the watcher watches.
    r = fa(a, "action=on", "nodename=a")
    assert r.rc == 0, r
    assert "is a check-only watcher (WAITING): acting on the device directly" in r.err, r.err
    ka = node_keys(a, 1)
    assert len(ka) == 1, report(a)
    wait_state(a, "WATCHING")
    assert status(a)["key"] == ka[0]
    assert fa(b, "action=on", "nodename=b").rc == 0

    # 3. b fences node 1: the watcher runs its fence action once.
    r = fa(b, "action=off", "plug=a")
    assert r.rc == 0 and "Success: Powered OFF" in r.out, r
    assert node_keys(b, 1) == []
    wait_state(a, "FENCED")
    r = a.wait_for(f"grep -q '^fenced:' {FENCE_LOG}", timeout_s=WAIT_S, interval_s=0.5)
    assert r.rc == 0, a.journal(UNIT)[-3000:]
    runs = fence_runs(a)
    assert len(runs) == 1 and "this node's key" in runs[0] and "is gone" in runs[0], runs
    assert "role=fenced" in a.run(f"cat {STATE}").out
    a.run("sleep 3")
    assert len(fence_runs(a)) == 1, "the fence action ran again"
    assert node_keys(a, 1) == [], "the watcher registered node 1 again by itself"

    # 4. Requests that would change the device are refused.
    for op in ("takeover", "handoff", "rejoin"):
        r = a.run(f"nvfence {op} {VOL}", timeout_s=60)
        assert r.rc != 0 and "check-only watcher (role = watch)" in (r.out + r.err), (op, r)
    assert node_keys(a, 1) == []

    # 5. Unfenced again: WATCHING with the new key, nothing run.
    assert fa(a, "action=on", "nodename=a").rc == 0
    ka2 = node_keys(a, 1)
    assert len(ka2) == 1 and ka2 != ka, report(a)
    wait_state(a, "WATCHING")
    assert status(a)["key"] == ka2[0]
    assert len(fence_runs(a)) == 1

    # 6. A clean stop leaves node 1's key on the device and in the state file.
    a.run(f"systemctl stop {UNIT}", timeout_s=WAIT_S, check=True)
    assert node_keys(a, 1) == ka2, "a clean stop changed the device"
    state = a.run(f"cat {STATE}").out
    assert "role=standby" in state, state
    log = a.journal(UNIT)
    assert "registered with fresh key" not in log and "unregistered" not in log, log[-3000:]
    print("\njournal (excerpt):\n  " + "\n  ".join(
        x for x in log.splitlines() if re.search(r"WAITING|WATCHING|FENCED|STOPPING|check-only|fence action", x)))
