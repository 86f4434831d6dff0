"""Agent safety in the lab (issue 13), with the real nvfenced and CLI:
 - defect 5: a host with role=acquire that was preempted never takes the
   reservation by itself again: not after a rejoin, not when the holder
   hands off, not after kill -9 and a restart;
 - defect 8: a non-root member of socket_group reads the status, but
   takeover, handoff and rejoin are refused with exit code 5."""
import json

import pytest

from nvlab.steps import OK, PERMISSION, report, reset
from test_agent import VOL, kill9, start_agent, status, stays, takeover, wait_state


@pytest.fixture
def clean(lab):
    for h in lab.hosts:
        h.run("pkill -9 nvfenced; pkill -9 nvfence-load; rm -rf /var/lib/nvfence /run/nvfence /tmp/fenced*; true")
    reset(lab)
    return lab


def test_preempted_acquire_host_never_reacquires_by_itself(clean):
    a, b = clean.hosts
    start_agent(a, 1, "acquire")          # the first start of a fresh state: it acquires
    start_agent(b, 2)
    rc, out = takeover(b)
    assert rc == OK and out["state"] == "HOLDER", out
    wait_state(a, "FENCED")
    r = a.run(f"nvfence rejoin {VOL} --json", timeout_s=60)
    assert r.rc == OK, (r.out, r.err)
    assert status(a)["state"] == "STANDBY"
    # The holder hands off: nobody holds, and A must not take it.
    r = b.run(f"nvfence handoff {VOL} --json", timeout_s=60)
    assert r.rc == OK, (r.out, r.err)
    assert report(a)["holder"] is None
    stays(a, "STANDBY")
    # kill -9 and a restart with the same role=acquire.
    kill9(a)
    start_agent(a, 1, "acquire", expect="STANDBY|HOLDER|FENCED")
    stays(a, "STANDBY")
    assert report(a)["holder"] is None, "the restarted agent took the reservation by itself"
    log = a.run(f"cat /tmp/agent.{a.name}.log").out
    assert "first start of a fresh state only" in log, log[-2000:]


def test_group_member_reads_status_but_cannot_move_the_reservation(clean):
    a, b = clean.hosts
    a.run("grep -q '^nvop:' /etc/passwd || echo 'nvop:x:1000:1000::/tmp:/bin/sh' >> /etc/passwd; "
          "grep -q '^nvfence:' /etc/group || echo 'nvfence:x:1000:nvop' >> /etc/group").check()
    start_agent(a, 1, "acquire", extra="--socket-group nvfence --socket-mode 0660")
    start_agent(b, 2)

    def as_member(cmd):
        return a.run(f"su nvop -s /bin/sh -c '{cmd}'", timeout_s=60)

    assert as_member("id -u").out.strip() == "1000"
    r = as_member(f"nvfence status {VOL} --json")
    assert r.rc == OK, (r.out, r.err)
    assert json.loads(r.out.strip().splitlines()[-1])["state"] == "HOLDER"
    for op in ("takeover", "handoff", "rejoin"):
        r = as_member(f"nvfence {op} {VOL}")
        assert r.rc == PERMISSION, (op, r.rc, r.out, r.err)
        assert "needs root" in r.err, (op, r.err)
    # Nothing moved: A still holds; root may still hand off.
    assert status(a)["state"] == "HOLDER"
    r = a.run(f"nvfence handoff {VOL} --json", timeout_s=60)
    assert r.rc == OK, (r.out, r.err)
    assert status(a)["state"] == "STANDBY"
