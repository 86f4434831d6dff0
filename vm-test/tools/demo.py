"""A narrated failover on a 2-host fabric lab: the failure nvfence exists
for, and the device refusing the paused old holder's very next write.

    vm-test/demo            (installs, builds, runs this)
"""
import json
import sys
import time

import nvlab

LEASE_S = 3.0          # the lease A's pause outlives
B_BLOCKS = 4           # B overwrites LBAs 0..3 after taking over


def say(text=""):
    print(text, flush=True)


def step(n, text):
    say(f"\n[{n}/7] {text}")


def show(res, indent="      "):
    for line in (res.out + res.err).rstrip().splitlines():
        say(indent + line)


def nvf_json(host, cmd):
    r = host.run(f'nvfence {cmd} --json')
    line = [x for x in r.out.splitlines() if x.startswith("{")]
    return r, (json.loads(line[-1]) if line else None)


def main():
    say("nvfence demo: a leader that pauses past its lease wakes up still believing it leads.")
    say("Only the device can stop its next write. Here it does.")
    t0 = time.monotonic()
    step(1, "Booting the lab: a target VM exports a QEMU NVMe namespace through the Linux kernel")
    say("      NVMe target (nvmet, reservations on, EBS identity); hosts A and B are VMs of their own,")
    say("      connected over NVMe/TCP, like two instances sharing an io2 Multi-Attach volume.")
    with nvlab.Lab(hosts=2, topology="fabric", ebs=True) as lab:
        a, b = lab.hosts
        say(f"      up in {time.monotonic() - t0:.1f}s; A sees {a.dev}, B sees {b.dev}")
        show(a.run('nvfence info "$NVFENCE_DEV" | grep -E "model|EBS volume|reservations|types"'))
        ka, ea = a_holds_b_stands_by(a, b)
        writer = a_writes(a)
        step(4, f"A freezes (QMP stop on A's VM): a GC pause, a VM freeze. The lease ({LEASE_S:.0f}s) runs out.")
        a.pause()
        paused_at = time.monotonic()
        say("      A's writer is frozen mid-loop. When it wakes, it will still believe it leads.")
        time.sleep(LEASE_S)  # the lease expiring is the point of the scenario
        kb_hex, eb = b_takes_over(b)
        acked, refused_lba, fenced = a_resumes(a, writer, paused_at)
        n = max(acked + [refused_lba]) + 1
        bad = read_back(b, n, acked, kb_hex, eb, ea)
        say("")
        if fenced and not bad:
            say(f"VERDICT: PASS - the device refused the paused old holder's write at LBA {refused_lba} "
                f"(Reservation Conflict) and all {n} blocks hold what they should.")
            return 0
        say(f"VERDICT: FAIL - fenced={fenced}, wrong blocks: {bad}")
        return 1


def a_holds_b_stands_by(a, b):
    """Step 2: A's key and epoch."""
    step(2, "A registers and takes the exclusive (Write Exclusive) reservation; B registers as standby")
    a.run('nvfence register "$NVFENCE_DEV" --node 1', check=True)
    r, acq = nvf_json(a, 'acquire "$NVFENCE_DEV"')
    assert r.rc == 0, r.describe()
    ka, ea = acq["key_text"], acq["epoch"]
    b.run('nvfence register "$NVFENCE_DEV" --node 2', check=True)
    say(f"      A holds with key {ka} (epoch {ea})")
    show(b.run('nvfence report "$NVFENCE_DEV"'))
    return ka, ea


def a_writes(a):
    """Step 3: A's writer loop, running (at least 8 acknowledged writes)."""
    step(3, "A writes: a loop writes one stamped block per step (LBA 0, 1, 2, ...) and logs each ack")
    loop = ('i=0; while [ $i -lt 200 ]; do '
            'if nvfence write "$NVFENCE_DEV" --lba $i >/tmp/w.$i 2>&1; then echo "ack $i" >> /tmp/acks; '
            'else rc=$?; echo "refused $i rc=$rc" >> /tmp/acks; cat /tmp/w.$i >> /tmp/acks; exit 0; fi; '
            'i=$((i+1)); done')
    a.run("rm -f /tmp/acks")
    writer = a.spawn(loop)
    a.wait_for("[ $(grep -c '^ack' /tmp/acks 2>/dev/null || echo 0) -ge 8 ]", timeout_s=120).check()
    say(f"      A has {a.run('grep -c ^ack /tmp/acks').out.strip()} acknowledged writes so far")
    return writer


def b_takes_over(b):
    """Step 5: B preempts (verified) and writes; B's key and epoch."""
    step(5, "The cluster manager fails over to B: nvfence preempt (preempt-and-abort, verified)")
    t = time.monotonic()
    r = b.run('nvfence preempt "$NVFENCE_DEV" --node 2')
    took = time.monotonic() - t
    show(r)
    assert r.rc == 0, r.describe()
    _, st = nvf_json(b, 'report "$NVFENCE_DEV"')
    kb_hex = st["holder"]
    eb = next(x["epoch"] for x in st["registrants"] if x["key"] == kb_hex)
    say(f"      (preempt command took {took:.2f}s wall time, VM start-up included)")
    r = b.run(f'nvfence write "$NVFENCE_DEV" --lba 0 --blocks {B_BLOCKS}')
    show(r)
    assert r.rc == 0, r.describe()
    return kb_hex, eb


def a_resumes(a, writer, paused_at):
    """Step 6: A wakes; its acknowledged LBAs, the LBA refused, and whether
    the refusal was the fence (exit 3)."""
    step(6, f"A resumes after {time.monotonic() - paused_at:.1f}s frozen. Its loop carries on with its very next write.")
    a.resume()
    writer.wait(timeout_s=120)
    log = a.run("cat /tmp/acks").out
    acked = sorted(int(x.split()[1]) for x in log.splitlines() if x.startswith("ack "))
    refused = [x for x in log.splitlines() if x.startswith("refused")]
    say(f"      A's log: {len(acked)} writes acknowledged, then:")
    for line in log.splitlines()[len(acked):]:
        say("      A> " + line)
    assert refused, "A's writer was never refused"
    return acked, int(refused[0].split()[1]), "rc=3" in refused[0]


def read_back(b, n, acked, kb_hex, eb, ea):
    """Step 7: every block 0..n-1 read on B and judged; the wrong LBAs."""
    step(7, "Reading the whole written range back on B: does every block hold what it should?")
    _, rd = nvf_json(b, f'read "$NVFENCE_DEV" --lba 0 --blocks {n}')
    bad = []
    rows = []
    for blk in rd["blocks"]:
        lba = blk["lba"]
        if lba < B_BLOCKS:
            want = f"B (epoch {eb})"
            ok = blk["stamp"] and blk["key"] == kb_hex
        elif lba in acked:
            want = f"A (epoch {ea}, acknowledged before the takeover)"
            ok = blk["stamp"] and blk["epoch"] == ea and blk["node"] == 1
        else:
            want = "nothing of A's (its write was refused)"
            ok = not (blk["stamp"] and blk["node"] == 1)
        got = (f"{blk['host']} epoch {blk['epoch']}" if blk["stamp"]
               else ("zeros" if blk.get("zero") else "no stamp"))
        rows.append((lba, want, got, ok))
        if not ok:
            bad.append(lba)
    show_rows = rows if len(rows) <= 16 else rows[:6] + [None] + rows[-6:]
    for row in show_rows:
        if row is None:
            say("      ...")
            continue
        lba, want, got, ok = row
        say(f"      LBA {lba:3d}: expect {want:48s} found {got:24s} {'ok' if ok else 'WRONG'}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
