"""The hardware watchdog behind the fence action (nvfenced's
`hardware_watchdog`), on QEMU's Intel 6300ESB watchdog with the guest
kernel's i6300esb driver: an expired watchdog resets the guest, and QEMU
(run with -no-reboot) then exits with code 0.

Two systemd-flavour hosts on one fabric target, each with the watchdog
device (Lab(watchdog=True)); nvfenced@VOL on both with
hardware_watchdog = /dev/watchdog0 and a 10 s timeout (interval 500 ms,
device timeout 2 s: the least accepted is 6 s).

1. Armed: /dev/watchdog0 is the i6300ESB timer, the journal says armed.
2. Healthy hosts are never reset: both run for three timeouts; b takes
   over, a is FENCED (its fence action ran) and runs three more timeouts;
   a clean stop of b's agent disarms the watchdog (three more timeouts,
   b still runs), and b's agent starts again.
3. a's nvfenced is stopped (SIGSTOP), then b takes over (a's key is
   removed while a cannot act): a's VM is reset within the documented
   bound (the timeout after the last feed; measured from the SIGSTOP),
   not before the timeout; b keeps running and holds.
"""
import time

import pytest

import nvlab
from nvlab.steps import agent_conf_path, report, reset

VOL = "vol-0123456789abcdef0"
UNIT = f"nvfenced@{VOL}.service"
WAIT_S = 90
TIMEOUT_S = 10
FENCE_LOG = "/var/lib/watchdog-fence.log"


def conf(node, role):
    return (f"node_id = {node}\nrole = {role}\ninterval_ms = 500\ndevice_timeout_ms = 2000\n"
            f"fence_action = command\nfence_command = echo \"fenced: $NVFENCE_REASON\" >> {FENCE_LOG}\n"
            f"hardware_watchdog = /dev/watchdog0\nhardware_watchdog_timeout_s = {TIMEOUT_S}\n").encode()


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=2, flavour="systemd", boot_timeout_s=480, watchdog=True) as lab:
        yield lab


def wait_state(host, state, timeout_s=WAIT_S):
    r = host.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"{state}\"'", timeout_s=timeout_s)
    assert r.rc == 0, (state, host.run(f"nvfence status {VOL}").out, host.journal(UNIT, lines=40))


def ctl(host, op):
    r = host.run(f"nvfence {op} {VOL} --json", timeout_s=90)
    assert r.rc == 0, (op, r.out, r.err, host.journal(UNIT, lines=40))


def boot_id(host):
    return host.run("cat /proc/sys/kernel/random/boot_id", timeout_s=30, check=True).out.strip()


def still_up(hosts, seconds):
    """Both VMs run (same boot) for @p seconds."""
    ids = {h.name: boot_id(h) for h in hosts}
    time.sleep(seconds)
    for h in hosts:
        assert h.vm.alive(), f"{h.name}'s VM is gone (reset by the watchdog?)\n{h.vm.diagnostics()}"
        assert boot_id(h) == ids[h.name], f"{h.name} rebooted"


def test_systemd_hardware_watchdog_resets_a_stopped_fenced_host(lab):
    a, b = lab.hosts
    reset(lab)
    for h, node, role in ((a, 1, "acquire"), (b, 2, "standby")):
        h.run("modprobe i6300esb 2>/dev/null; udevadm settle", timeout_s=60)
        r = h.run("cat /sys/class/watchdog/watchdog0/identity", timeout_s=30)
        assert r.rc == 0 and "i6300ESB" in r.out, (h.name, r.out, r.err)
        h.put(conf(node, role), agent_conf_path(h, VOL))
        h.run(f"rm -rf /var/lib/nvfence {FENCE_LOG}; systemctl daemon-reload && systemctl start {UNIT}",
              timeout_s=WAIT_S, check=True)
    wait_state(a, "HOLDER")
    wait_state(b, "STANDBY")
    for h in (a, b):
        log = h.journal(UNIT)
        assert f"hardware watchdog /dev/watchdog0 armed: the host is reset {TIMEOUT_S} s" in log, log[-2000:]

    # 2. Healthy hosts: never reset, running, fenced (action done), or stopped cleanly.
    still_up((a, b), 3 * TIMEOUT_S)
    ctl(b, "takeover")
    wait_state(a, "FENCED")
    assert a.wait_for(f"grep -q '^fenced:' {FENCE_LOG}", timeout_s=WAIT_S).rc == 0
    still_up((a, b), 3 * TIMEOUT_S)
    ctl(a, "rejoin")
    wait_state(a, "STANDBY")
    b.run(f"systemctl stop {UNIT}", timeout_s=WAIT_S, check=True)
    assert "hardware watchdog /dev/watchdog0 disarmed" in b.journal(UNIT)
    still_up((a, b), 3 * TIMEOUT_S)
    b.run(f"systemctl start {UNIT}", timeout_s=WAIT_S, check=True)
    wait_state(b, "STANDBY")
    ctl(a, "takeover")
    wait_state(a, "HOLDER")
    wait_state(b, "FENCED")  # the takeover removed every other key
    ctl(b, "rejoin")
    wait_state(b, "STANDBY")

    # 3. a's nvfenced stops; b removes a's key: a is reset within the bound.
    pid = a.run(f"systemctl show -p MainPID --value {UNIT}", timeout_s=30, check=True).out.strip()
    assert pid.isdigit() and pid != "0", pid
    a.run(f"kill -STOP {pid}", timeout_s=30, check=True)
    t0 = time.monotonic()
    ctl(b, "takeover")
    took_key = time.monotonic() - t0
    keys = [r["node"] for r in report(b)["registrants"] if not r["foreign"]]
    assert 1 not in keys, report(b)
    try:
        a.vm.proc.wait(timeout=3 * TIMEOUT_S)
    except Exception:  # noqa: BLE001 - reported below
        pytest.fail(f"a's VM still runs {3 * TIMEOUT_S}s after nvfenced was stopped\n{a.vm.diagnostics()}")
    took = time.monotonic() - t0
    events = [e for e in a.vm.qmp.drain_events() if e.get("event") == "WATCHDOG"]
    a.vm.killed = True  # gone: the lab's teardown leaves it alone
    print(f"\nMEASURED SIGSTOP -> a's VM reset by the watchdog: {took:.1f}s "
          f"(key removed after {took_key:.1f}s; timeout {TIMEOUT_S}s)")
    assert a.vm.proc.returncode == 0, f"QEMU exit code {a.vm.proc.returncode}: not a guest reset"
    assert events and events[0].get("data", {}).get("action") == "reset", a.vm.qmp.events
    assert took >= TIMEOUT_S - 1, f"reset after {took:.1f}s: before the {TIMEOUT_S}s timeout"
    assert took <= TIMEOUT_S + 5, f"reset after {took:.1f}s: the bound is {TIMEOUT_S}s after the last feed"
    assert b.vm.alive()
    wait_state(b, "HOLDER")
    still_up((b,), TIMEOUT_S + 5)
