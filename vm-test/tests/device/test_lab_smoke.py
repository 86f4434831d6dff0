"""Smoke tests of the QEMU lab itself, with nvme-cli only (no nvfence binaries).

They prove that the lab gives real NVMe reservation semantics (fabric, loop),
a real "no reservation support" namespace (plain), and that pause/resume and
cut/heal act on one host. A missing lab (no kernel, no QEMU) is an error,
never a skip.

    /usr/bin/python3 -m pytest -v vm-test/tests/device/test_lab_smoke.py
"""

import json

import pytest

import nvlab
from nvlab import lab as lab_module

REPORT = "nvme resv-report $NVFENCE_DEV --eds -o json"
WRITE = "dd if=/dev/zero of=$NVFENCE_DEV bs=4096 count=1 oflag=direct"
EBADE = "Invalid exchange"  # strerror(EBADE): how a reservation conflict reaches dd


def report(host):
    r = host.run(REPORT, check=True)
    return json.loads(r.out)


def hostid_hex(host):
    return host.hostid.replace("-", "").lower()


def assert_conflict(result):
    assert result.rc != 0, f"write should have been refused: {result}"
    assert EBADE in result.err, f"expected a reservation conflict (EBADE), got: {result.err!r}"


def test_fabric_reservations_pause_cut(fabric_lab):
    lab = fabric_lab
    a, b = lab.host("a"), lab.host("b")
    assert [h.name for h in lab.hosts] == ["a", "b"]
    assert a.dev and b.dev
    assert a.hostid != b.hostid

    # The namespace each host sees carries the EBS identity given by nvmet.
    ident = json.loads(a.run("nvme id-ctrl $NVFENCE_DEV -o json", check=True).out)
    assert ident["mn"].strip() == nvlab.EBS_MODEL
    assert ident["sn"].strip() == nvlab.DISK_SERIAL

    a.run("nvme resv-register $NVFENCE_DEV --nrkey=0x1 --rrega=0", check=True)
    b.run("nvme resv-register $NVFENCE_DEV --nrkey=0x2 --rrega=0", check=True)
    a.run("nvme resv-acquire $NVFENCE_DEV --crkey=0x1 --rtype=1 --racqa=0", check=True)

    rep = report(b)
    assert rep["rtype"] == 1
    regs = rep["regctlext"]
    assert len(regs) == 2 and rep["regctl"] == 2
    holders = [r for r in regs if r["rcsts"] & 1]
    assert [h["rkey"] for h in holders] == [1]
    by_key = {r["rkey"]: r["hostid"].lower() for r in regs}
    assert by_key == {1: hostid_hex(a), 2: hostid_hex(b)}
    assert by_key[1] != by_key[2]

    # Write Exclusive held by a: b (registered, not holder) is refused, a writes.
    assert_conflict(b.run(WRITE))
    a.run(WRITE, check=True)

    # b takes over with preempt-and-abort: now a is fenced by the device.
    b.run("nvme resv-acquire $NVFENCE_DEV --crkey=0x2 --prkey=0x1 --rtype=1 --racqa=2", check=True)
    rep = report(b)
    assert [(r["rkey"], r["rcsts"] & 1) for r in rep["regctlext"]] == [(2, 1)]
    assert_conflict(a.run(WRITE))
    b.run(WRITE, check=True)

    # Pause a: its VM stops (QMP says so) while b keeps working.
    a.pause()
    try:
        assert a.qmp("query-status")["status"] == "paused"
        assert a.paused
        assert report(b)["regctl"] == 1
        b.run(WRITE, check=True)
    finally:
        a.resume()
    assert a.qmp("query-status")["status"] == "running"
    r = a.wait_for(REPORT, timeout_s=60)
    assert r.rc == 0, f"a cannot reach the target after resume: {r}"
    assert_conflict(a.run(WRITE))  # still fenced: resuming grants nothing

    # Cut a's link: no carrier, no traffic, its commands to the target fail.
    a.cut()
    try:
        r = a.wait_for("! cat /sys/class/net/eth0/carrier | grep -qx 1", timeout_s=10)
        assert r.rc == 0, "guest still sees a carrier after cut"
        assert a.run("ping -c 1 -W 1 169.254.1.1", timeout_s=20).rc != 0
        r = a.run(REPORT, timeout_s=30)
        assert r.rc != 0, f"report succeeded over a cut link: {r}"
        # The other host is unaffected.
        assert report(b)["regctl"] == 1
    finally:
        a.heal()
    r = a.wait_for(REPORT, timeout_s=90)
    assert r.rc == 0, f"a cannot reach the target after heal: {r}"
    assert json.loads(r.out)["regctlext"][0]["rkey"] == 2


def test_fabric_kill_and_target_namespace(lab_factory):
    lab = lab_factory(hosts=2, topology="fabric", ebs=False)
    a, b = lab.hosts
    ident = json.loads(a.run("nvme id-ctrl $NVFENCE_DEV -o json", check=True).out)
    assert ident["mn"].strip() != nvlab.EBS_MODEL  # ebs=False: nvmet's default identity
    a.run("nvme resv-register $NVFENCE_DEV --nrkey=0xa --rrega=0", check=True)
    a.kill()
    assert not a.alive
    with pytest.raises(nvlab.LabError):
        a.run("true")
    # The registration of a dead host stays on the device.
    rep = report(b)
    assert [r["rkey"] for r in rep["regctlext"]] == [0xA]
    # Target helpers: with the namespace disabled, I/O from b fails; after
    # ns_enable() returns, b's $NVFENCE_DEV works again (twice, to catch
    # races). nvmet drops a namespace's reservation state when it is
    # disabled: the re-enabled namespace has no registrants.
    for key in (0xB, 0xC):
        b.run(f"nvme resv-register $NVFENCE_DEV --nrkey={key:#x} --rrega=0", check=True)
        assert key in [r["rkey"] for r in report(b)["regctlext"]]
        assert lab.target.ns_enabled()
        lab.target.ns_disable()
        try:
            assert not lab.target.ns_enabled()
            assert b.run(REPORT, timeout_s=30).rc != 0
        finally:
            lab.target.ns_enable()
        rep = report(b)
        assert rep["regctl"] == 0 and rep["regctlext"] == []
        b.run(WRITE, check=True)


def test_plain_has_no_reservations(plain_lab):
    (a,) = plain_lab.hosts
    assert a.dev == "/dev/nvme0n1"
    r = a.run(REPORT)
    assert r.rc != 0
    assert "Invalid Command Opcode" in r.err and "0x4001" in r.err, r.err
    r = a.run("nvme resv-register $NVFENCE_DEV --nrkey=0x1 --rrega=0")
    assert r.rc != 0 and "0x4001" in r.err
    # The namespace itself works for I/O.
    a.run(WRITE, check=True)
    rescap = a.run("nvme id-ns $NVFENCE_DEV -o json", check=True).out
    assert json.loads(rescap)["rescap"] == 0
    with pytest.raises(nvlab.NotSupported):
        plain_lab.target  # noqa: B018
    with pytest.raises(nvlab.NotSupported):
        a.cut()


def test_loop_two_identities(loop_lab):
    a, b = loop_lab.hosts
    assert a.dev != b.dev and a.hostid != b.hostid
    a.run("nvme resv-register $NVFENCE_DEV --nrkey=0x11 --rrega=0", check=True)
    b.run("nvme resv-register $NVFENCE_DEV --nrkey=0x22 --rrega=0", check=True)
    rep = report(a)
    assert rep["regctl"] == 2
    by_key = {r["rkey"]: r["hostid"].lower() for r in rep["regctlext"]}
    assert by_key == {0x11: hostid_hex(a), 0x22: hostid_hex(b)}
    # Reservations are enforced between the identities of the one VM too.
    b.run("nvme resv-acquire $NVFENCE_DEV --crkey=0x22 --rtype=1 --racqa=0", check=True)
    assert_conflict(a.run(WRITE))
    b.run(WRITE, check=True)
    for op in (a.pause, a.resume, a.kill, a.cut, a.heal):
        with pytest.raises(nvlab.NotSupported):
            op()
    # The agent's plumbing: exit codes, stderr, timeouts, env, background jobs.
    r = a.run("echo out; echo err >&2; exit 3")
    assert (r.rc, r.out, r.err) == (3, "out\n", "err\n")
    r = a.run("sleep 30", timeout_s=1)
    assert r.timed_out and r.rc == 124
    with pytest.raises(nvlab.CommandFailed):
        a.run("false", check=True)
    assert a.run("echo $FOO", env={"FOO": "bar"}).out == "bar\n"
    # Requests run concurrently: this one only ends once the next one ran.
    import threading
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", b.run(
        "i=0; while [ ! -e /tmp/flag ]; do i=$((i+1)); [ $i -gt 600 ] && exit 7; usleep 50000; done",
        timeout_s=60)))
    t.start()
    a.run("touch /tmp/flag", check=True)
    t.join(90)
    assert box["r"].rc == 0, box["r"]
    # Output is bounded (4 MiB per stream) and truncation is flagged.
    r = a.run("head -c 5000000 /dev/zero | tr '\\0' x; echo tail >&2", timeout_s=120)
    assert r.rc == 0 and r.out_truncated and len(r.out) == 4 << 20 and r.out[-1] == "x"
    assert r.err == "tail\n" and not r.err_truncated
    bg = a.spawn("echo started; sleep 1000")
    assert bg.alive()
    bg.signal("KILL")
    assert bg.wait(timeout_s=10)
    assert "started" in bg.output()


def test_trace_prints_slow_guest_commands_only(capsys, monkeypatch):
    # NVLAB_TRACE (vm-test/README.md): commands at or above the threshold
    # are printed with their seconds and host; quicker ones are not.
    monkeypatch.setattr(lab_module, "_TRACE_S", 3.0)
    lab_module._trace("a", 2.9, "true")
    lab_module._trace("b", 25.7, "dd  if=$DEV\n | sha256sum")
    err = capsys.readouterr().err
    assert err == "nvlab-trace    25.7 s b: dd if=$DEV | sha256sum\n", err
    monkeypatch.setattr(lab_module, "_TRACE_S", 0.0)
    lab_module._trace("c", 99.0, "sleep 99")
    assert capsys.readouterr().err == ""
