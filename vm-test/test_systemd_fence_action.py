"""Defect 7 of issue 13 under real systemd: the self-fence action and the
writer-unit stops run with the watchdog kept alive, and an action that was
pending when nvfenced died runs again after the restart.

Two systemd-flavour hosts (the base image: no extra packages). On a,
nvfenced@VOL runs with WatchdogSec=10s (a drop-in), a writer unit whose
stop takes 15 s (ExecStop=sleep 15) and a fence command that runs until the
test lets it finish (a file appears; bounded at 25 s).

1. b takes over: a's agent stops the writer (15 s, longer than WatchdogSec)
   and runs the fence action; systemd does not kill nvfenced for a missed
   watchdog (same MainPID, no restart, no "Watchdog timeout" in the
   journal), and the action ran to its end.
2. a rejoins and takes the reservation back, b takes over again, and while
   the fence action runs (state file: action=pending) nvfenced gets kill -9:
   systemd restarts it and the restarted agent runs the pending action
   again (journal line, a new run of the command, state file action=done).
"""
import re
import time

import pytest

import nvlab
from nvtest import unit_show

VOL = "vol-0123456789abcdef0"
UNIT = f"nvfenced@{VOL}.service"
WRITER = "slowwriter.service"
WATCHDOG_S = 10
STOP_S = 15
WAIT_S = 90
FENCE_LOG = "/var/lib/fence.log"
STATE = "/var/lib/nvfence/*.agent"

GO = "/run/fence-go"
# The action runs until GO exists (bounded: 25 s, under fence_timeout_ms),
# so the test decides when it is pending and when it may finish.
SLOW_FENCE = f"""#!/bin/sh
echo "start $$ $NVFENCE_REASON" >> {FENCE_LOG}
i=0
while [ ! -e {GO} ] && [ $i -lt 250 ]; do sleep 0.1; i=$((i+1)); done
echo "done $$" >> {FENCE_LOG}
"""

WRITER_UNIT = f"""[Unit]
Description=a writer of the shared volume whose stop is slow
[Service]
ExecStart=/bin/sleep infinity
ExecStop=/bin/sleep {STOP_S}
TimeoutStopSec=60
"""


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=2, flavour="systemd", boot_timeout_s=480) as lab:
        yield lab


def show(host, *props):
    return unit_show(host, UNIT, *props)


def conf_path(host):
    r = host.run(f"systemctl cat {UNIT}", timeout_s=30, check=True)
    m = re.search(r"^ConditionPathExists=(\S+)$", r.out, re.M)
    assert m, r.out
    return m.group(1).replace("%i", VOL).replace("%I", VOL)


def wait_state(host, state, timeout_s=WAIT_S):
    r = host.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"{state}\"'", timeout_s=timeout_s)
    assert r.rc == 0, (state, host.run(f"nvfence status {VOL}").out, host.journal(UNIT, lines=40))


def ctl(host, op):
    r = host.run(f"nvfence {op} {VOL} --json", timeout_s=90)
    assert r.rc == 0, (op, r.out, r.err, host.journal(UNIT, lines=40))


def fence_log(host):
    return host.run(f"cat {FENCE_LOG} 2>/dev/null").out.splitlines()


def test_systemd_slow_fence_keeps_watchdog_and_pending_action_reruns(lab):
    a, b = lab.hosts
    a.put(SLOW_FENCE.encode(), "/usr/local/sbin/slow-fence", mode=0o755)
    a.put(WRITER_UNIT.encode(), f"/etc/systemd/system/{WRITER}")
    a.put(f"[Service]\nWatchdogSec={WATCHDOG_S}s\n".encode(), f"/etc/systemd/system/{UNIT}.d/10-watchdog.conf")
    a.put(("node_id = 1\nrole = acquire\ninterval_ms = 500\ndevice_timeout_ms = 2000\n"
           f"writer_units = {WRITER}\nfence_action = command\nfence_command = /usr/local/sbin/slow-fence\n"
           "fence_timeout_ms = 30000\n").encode(), conf_path(a))
    b.put(b"node_id = 2\nrole = standby\ninterval_ms = 500\n", conf_path(b))
    a.run(f"touch {GO} && systemctl daemon-reload && systemctl start {WRITER}", timeout_s=60, check=True)
    a.run(f"systemctl start {UNIT}", timeout_s=WAIT_S, check=True)
    wait_state(a, "HOLDER")
    b.run(f"systemctl start {UNIT}", timeout_s=WAIT_S, check=True)
    wait_state(b, "STANDBY")
    st0 = show(a, "MainPID", "NRestarts", "WatchdogUSec")
    assert st0["WatchdogUSec"] == f"{WATCHDOG_S}s", st0
    pid0, n0 = int(st0["MainPID"]), int(st0["NRestarts"])

    # 1. A writer stop longer than WatchdogSec, then the fence action.
    t0 = time.monotonic()
    ctl(b, "takeover")
    r = a.wait_for(f"grep -q '^done' {FENCE_LOG}", timeout_s=WAIT_S, interval_s=0.5)
    took = time.monotonic() - t0
    log = a.journal(UNIT)
    assert r.rc == 0, log[-3000:]
    runs = fence_log(a)
    print(f"\nMEASURED takeover -> fence action done: {took:.1f}s (writer stop {STOP_S}s, "
          f"WatchdogSec {WATCHDOG_S}s)")
    assert took > STOP_S, "the slow stop did not outlast the watchdog: the test proves nothing"
    assert a.run(f"systemctl is-active {WRITER}").out.strip() == "inactive"
    st1 = show(a, "MainPID", "NRestarts")
    assert int(st1["MainPID"]) == pid0 and int(st1["NRestarts"]) == n0, (st1, log[-3000:])
    assert not re.search(r"[Ww]atchdog timeout", log), log[-3000:]
    assert [x.split()[0] for x in runs] == ["start", "done"], runs
    assert len(runs[0].split()) > 2, f"the action got no NVFENCE_REASON: {runs}"
    assert "action=done" in a.run(f"cat {STATE}").out
    wait_state(a, "FENCED")

    # 2. kill -9 while the fence action is pending (it waits for GO).
    a.run(f"rm -f {GO}", check=True)
    ctl(a, "rejoin")
    ctl(a, "takeover")
    wait_state(b, "FENCED")
    ctl(b, "rejoin")
    ctl(b, "takeover")
    r = a.wait_for(f"[ $(grep -c '^start' {FENCE_LOG}) -ge 2 ]", timeout_s=WAIT_S, interval_s=0.2)
    assert r.rc == 0, a.journal(UNIT)[-3000:]
    pending = a.run(f"cat {STATE}").out
    assert "action=pending" in pending, pending
    pid1 = int(show(a, "MainPID")["MainPID"])
    a.run(f"kill -9 {pid1}", check=True)
    # The restarted agent runs the pending action during its start (before
    # READY=1), so the unit is "activating" until the action ends.
    r = a.wait_for(f"[ \"$(systemctl show -p NRestarts --value {UNIT})\" -gt {n0} ]", timeout_s=WAIT_S,
                   interval_s=0.5)
    assert r.rc == 0, a.journal(UNIT)[-3000:]
    r = a.wait_for(f"[ $(grep -c '^start' {FENCE_LOG}) -ge 3 ]", timeout_s=WAIT_S, interval_s=0.5)
    log = a.journal(UNIT)
    assert r.rc == 0, (fence_log(a), log[-3000:])
    assert "the fence action was pending when the agent stopped: running it again" in log, log[-3000:]
    assert "action=pending" in a.run(f"cat {STATE}").out, "the re-run is not persisted as pending"
    a.run(f"touch {GO}", check=True)
    r = a.wait_for(f"tail -n1 {FENCE_LOG} | grep -q '^done' && systemctl is-active --quiet {UNIT}",
                   timeout_s=WAIT_S, interval_s=0.5)
    log = a.journal(UNIT)
    assert r.rc == 0, (fence_log(a), log[-3000:])
    assert int(show(a, "MainPID")["MainPID"]) not in (0, pid1)
    assert "action=done" in a.run(f"cat {STATE}").out
    wait_state(a, "FENCED")
    print("fence log:\n  " + "\n  ".join(fence_log(a)))
    print("journal (excerpt):\n  " + "\n  ".join(
        x for x in log.splitlines()
        if re.search(r"writer|fence action|pending|[Ww]atchdog|Main process|Scheduled restart|FENCED", x)))
