"""Issue 18: which explanation of "ok after fenced" holds, built on purpose
instead of waited for in the campaign, and the no-reservation window.

 - a slow backing disk (QEMU I/O throttling on the target's drive) under a
   QD 32 writer that is preempted: writes nvmet admitted before the
   preempt complete ok after the writer's first fenced completion, the
   preempt-and-abort returns only once they have landed (it waits for
   them), and the new holder's writes go on top of them;
 - a path cut while writes are in flight: they land on the target, their
   completions are lost, the host retries them after the reconnect, the
   copies meet the preempt and complete fenced: fenced, yet on the media,
   and ordered before the new holder;
 - an old holder's writer (the campaign's writer loop, which follows its
   agent) across a namespace disable/enable (every key gone): nothing of
   it lands once the keys are gone.
See docs/RELIABILITY.md, "The writer's ordering contract"."""
import json
import re
import time

import pytest

import nvlab
from nvlab.campaign.core import VOL, VOLUME_ID, WRITER_LOOP
from nvlab.steps import OK, exit_code, nvf, report, reset, stamps, start_load

IOPS = 8            # writes per second the target's backing disk accepts while throttled
START = 4096        # start_load's first LBA
QD = 32


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=2, topology="fabric", ebs=True) as lab:
        yield lab


def throttle(lab, iops_wr):
    """QEMU's own I/O throttling on the target's backing drive (d0): every
    write nvmet sends to it waits its turn; 0 lifts it. Neither the hosts'
    nor the target's block layer may merge the writer's sequential 512-byte
    writes into one request (one NVMe command, one I/O for QEMU), so merging
    is off on every path while throttled."""
    nomerges = 2 if iops_wr else 0
    lab.target.run(f"echo {nomerges} > /sys/block/$(basename $(cat {lab.target.ns_path}/device_path))/queue/nomerges",
                   check=True)
    for h in lab.hosts:
        h.run(f'echo {nomerges} > /sys/block/$(basename "$NVFENCE_DEV")/queue/nomerges', check=True)
    lab.target.qmp("block_set_io_throttle", device="d0", bps=0, bps_rd=0, bps_wr=0,
                   iops=0, iops_rd=0, iops_wr=iops_wr)


def hold(host, node):
    r = nvf(host, "register", "--node", str(node))
    assert r.rc == OK, r
    r = nvf(host, "acquire", "--type", "exclusive")
    assert r.rc == OK, r
    return r.json["key"]


def parse(out):
    """nvfence-load's output: completions in reap order (lba, seq, status),
    the F line (every seq below it was handed to the kernel before the
    latch) and the summary."""
    comps, f_next, summary = [], None, None
    for line in out.splitlines():
        p = line.split(" ", 4)
        if p[0] == "C":
            comps.append((int(p[1]), int(p[2]), p[3]))
        elif p[0] == "F" and f_next is None:
            f_next = int(p[1])
        elif p[0] == "S":
            summary = json.loads(line[2:])
    assert summary is not None, out[-2000:]
    return comps, f_next, summary


def late_oks(comps):
    """The seqs that completed ok after the writer's first fenced completion."""
    first = next(i for i, c in enumerate(comps) if c[2] == "fenced")
    return [c[1] for c in comps[first:] if c[2] == "ok"]


def timed_preempt(host, node):
    """nvfence preempt on host; returns (rc, seconds inside the guest)."""
    r = host.run(f"t0=$(cut -d' ' -f1 /proc/uptime); nvfence preempt \"$NVFENCE_DEV\" --node {node} --json "
                 f">/tmp/preempt.out 2>&1; rc=$?; t1=$(cut -d' ' -f1 /proc/uptime); echo \"T $rc $t0 $t1\"",
                 timeout_s=180)
    m = re.search(r"^T (\d+) ([\d.]+) ([\d.]+)$", r.out, re.M)
    assert m, (r.out, r.err)
    return int(m.group(1)), float(m.group(3)) - float(m.group(2))


def write_over(host, lo, hi):
    """The new holder stamps LBAs lo..hi-1 (256 blocks per command)."""
    for lba in range(lo, hi, 256):
        w = nvf(host, "write", "--lba", str(lba), "--blocks", str(min(256, hi - lba)), timeout_s=120)
        assert w.rc == OK and w.json["result"] == "accepted", w


def test_slow_disk_late_ok_landed_before_the_new_holder(lab):
    """Explanation 1: the device admits, then preempts, then completes the
    admitted writes: ok after fenced, ordered before the new holder."""
    reset(lab)
    a, b = lab.hosts
    key = hold(a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    throttle(lab, IOPS)
    try:
        bg = start_load(a, key, 181, "/tmp/slow.log", ramp_acks=8, extra="--timeout-ms 120000")
        rc, preempt_s = timed_preempt(b, 2)
        assert rc == OK, b.run("cat /tmp/preempt.out").out
        assert bg.wait(timeout_s=120), "the fenced writer hung"
        comps, f_next, s = parse(bg.output())
        hi = START + max(c[1] for c in comps) + 1
        # The new holder writes right after its preempt returned, over
        # everything A ever submitted (still throttled: one I/O per 256 blocks).
        write_over(b, START, hi)
    finally:
        throttle(lab, 0)
    assert exit_code(bg) == 3 and s["latched"] and s["settled"] and s["in_flight"] == 0 and s["error"] == 0, s
    late = late_oks(comps)
    print(f"\nslow disk ({IOPS} write IOPS): preempt took {preempt_s:.2f} s in the guest; "
          f"{len(late)} ok after the first fenced (seqs {late[:3]}..{late[-3:]}), F {f_next}, {s}")
    # The symptom of issue 18, reproduced.
    assert len(late) >= 4, (late, s)
    # Only writes handed to the kernel before the latch, at most QD - 1.
    assert f_next is not None and all(q < f_next for q in late) and len(late) <= QD - 1, (late, f_next)
    # The late oks were admitted before the preempt and completed after
    # A's first conflict, one per 1/IOPS at best: the preempt-and-abort
    # returned only after they had all completed (it waits for the
    # victim's admitted commands). Without that wait it returns at once.
    assert preempt_s >= (len(late) - 2) / IOPS, (preempt_s, len(late))
    # Ordered before the new holder: B's writes are on top everywhere,
    # the late-acknowledged blocks included.
    got = stamps(b, START, hi - START)
    for q in late:
        blk = got[START + q]
        assert blk["stamp"] and blk["node"] == 2, (q, blk)
    assert all(got[lba]["stamp"] and got[lba]["node"] == 2 for lba in range(START, hi)), "an A write on top of B"


def test_cut_retry_lands_before_the_preempt_and_completes_fenced(lab):
    """The path is cut while writes are in flight: they land on the target,
    the host retries them after the reconnect, the copies meet the preempt:
    fenced completions of writes that are on the media, none landed after
    the preempt."""
    reset(lab)
    a, b = lab.hosts
    key = hold(a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    a.run("dmesg -c >/dev/null")
    throttle(lab, IOPS)
    try:
        bg = start_load(a, key, 182, "/tmp/cut.log", ramp_acks=8, extra="--timeout-ms 300000")
        a.cut("storage")
        try:
            # A's admitted writes land on the target while its link is down;
            # the preempt-and-abort waits for them.
            rc, preempt_s = timed_preempt(b, 2)
            assert rc == OK, b.run("cat /tmp/preempt.out").out
            before = stamps(b, START, 512)
            mine = sorted(lba for lba, blk in before.items() if blk["stamp"] and blk["writer_id"] == 182)
            assert mine, "none of A's writes on the media"
            # The new holder writes on top of the first half of A's blocks.
            top = mine[: len(mine) // 2]
            if top:
                write_over(b, top[0], top[-1] + 1)
            # The host notices the dead path (keep-alive) and cancels its
            # in-flight writes for a retry after the reconnect.
            r = a.wait_for("dmesg | grep -Eq 'error recovery|Reconnecting|reconnect'", timeout_s=90, interval_s=0.5)
            assert r.rc == 0, a.run("dmesg | tail -30").out
        finally:
            a.heal()
        assert bg.wait(timeout_s=180), "the writer hung after the heal"
    finally:
        throttle(lab, 0)
    comps, f_next, s = parse(bg.output())
    dm = a.run("dmesg | grep -i nvme | tail -20").out
    assert exit_code(bg) == 3 and s["latched"] and s["in_flight"] == 0, (s, dm)
    status = {seq: st for _, seq, st in comps}
    after = stamps(b, START, 512)
    landed_fenced = [lba for lba in mine if status.get(before[lba]["seq"]) == "fenced"
                     and before[lba]["seq"] == lba - START]
    print(f"\ncut: preempt took {preempt_s:.2f} s; {len(mine)} A blocks on the media before the heal, "
          f"{len(landed_fenced)} of them completed FENCED (retried after the reconnect); {s}\n{dm}")
    assert "reconnect" in dm.lower(), dm
    # Reproduced: writes that are on the media completed fenced.
    assert landed_fenced, ([(lba, status.get(lba - START)) for lba in mine], dm)
    # Nothing of A landed after the preempt: every A block now was already
    # there before the heal, and B's blocks are still B's.
    for lba, blk in after.items():
        if blk["stamp"] and blk["writer_id"] == 182:
            assert before[lba]["stamp"] and before[lba]["writer_id"] == 182 and before[lba]["seq"] == blk["seq"], \
                (lba, before[lba], blk)
    for lba in range(top[0], top[-1] + 1) if top else ():
        assert after[lba]["stamp"] and after[lba]["node"] == 2, (lba, after[lba])
    # No ok for a write queued after the latch.
    assert all(st != "ok" or seq < f_next for seq, st in status.items()), f_next


def test_old_holders_writer_across_a_namespace_cycle_lands_nothing(lab):
    """Explanation 2's window: the target loses every key. The old holder's
    writer loop (it writes whenever its agent says HOLDER, on the agent's
    device) must land nothing after the keys are gone: the namespace is
    zeroed on the target while disabled, and stays zero."""
    reset(lab)
    a, b = lab.hosts
    for h in (a, b):
        h.run("pkill -9 nvfenced; pkill -9 nvfence-load; rm -rf /var/lib/nvfence /run/nvfence /tmp/w /tmp/fenced; "
              "mkdir -p /tmp/w; true")
    a.run("cat > /tmp/wl.sh <<'EOF'\n" + WRITER_LOOP + "\nEOF", timeout_s=30)
    for h, node, role in ((a, 1, "acquire"), (b, 2, "standby")):
        h.spawn(f"nvfenced --device {VOLUME_ID} --node-id {node} --role {role} --interval-ms 200 --name {VOL} "
                f"--fence-action command --fence-command 'echo \"$NVFENCE_REASON\" >> /tmp/fenced'",
                log_path="/tmp/agent.log")
        h.wait_for(f"nvfence status {VOL} --json | grep -Eq '\"state\":\"{role == 'acquire' and 'HOLDER' or 'STANDBY'}\"'",
                   timeout_s=60).check()
    region = 1024
    loop = a.spawn(f"sh /tmp/wl.sh 1830000 {START} {region} 8", log_path="/tmp/wl.out")
    try:
        a.wait_for("grep -q '^C .* ok' /tmp/w/*.log", timeout_s=60).check()
        lab.target.ns_disable()
        try:
            # Disabled: nvmet drained every admitted write first. Zero the
            # region on the target's backing disk: any stamp found later
            # landed after the keys were gone.
            t = lab.target.run(f"dd if=/dev/zero of=$(cat {lab.target.ns_path}/device_path) bs=512 "
                               f"seek={START} count={region} oflag=direct conv=notrunc 2>&1", timeout_s=60)
            assert t.rc == 0, t.out
        finally:
            lab.target.ns_enable()
        for h in (a, b):
            h.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"FENCED\"'", timeout_s=120).check()
        st = json.loads(a.run(f"nvfence status {VOL} --json").out.strip().splitlines()[-1])
        # Either reason is the agent's "unknown is not owned": it saw the
        # keys gone after the namespace came back (target restart), or the
        # namespace stayed away longer than view_timeout_ms.
        assert re.search("target restart|lost the view", st["fence_reason"]), st
        # The loop keeps asking for 3 s more: nothing lands.
        time.sleep(3)
        assert report(b)["holder"] is None
        got = stamps(b, START, region)
        landed = [(lba, blk["writer_id"], blk["seq"]) for lba, blk in got.items() if blk["stamp"]]
        index = a.run("cat /tmp/w/index").out
        assert not landed, (landed[:10], index)
    finally:
        loop.signal("KILL")
        a.run("pkill -9 -f 'w[l].sh'; pkill -9 nvfence-load; pkill -9 nvfenced; true")
        b.run("pkill -9 nvfenced; true")
    print(f"\nns cycle: writer passes {index.count('start ')}, agent A: {st['fence_reason']}")
