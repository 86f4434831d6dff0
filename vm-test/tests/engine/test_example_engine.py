"""The examples of examples/ in the lab, on one shared two-host fabric lab.

1. The C API (nvfence/nvfence.h) on a real reservation: examples/c's
nvfence-c-example, a C11 program linked only against libnvfence, opens the
shared namespace, takes the reservation, writes through the fenced writer;
host B takes over naming A's key (compare-and-swap); A's next writes
complete as fenced and latch its writer; the blocks hold B's data; a
second takeover naming the gone key changes nothing for B and is a lost
race for A; B evicts node A again registered (nvf_fence_evict_node), a
second eviction changes nothing, and its own node is refused.

2. The example storage engine (examples/engine, nvfence-logengine) through a
failover: primary A holds the reservation through libnvfence and appends a
client load with FencedWriter; A is frozen; B takes over (preempt-and-abort),
recovers the log by scanning it and serves; A is resumed and its very next
appends are refused by the device, so it stops cleanly (exit 3). The checker
reads the log back from the media:
  - every append either primary acknowledged is present, with its epoch and
    payload, at its sequence number;
  - nothing A appended after the takeover is present: every record of A's
    epoch lies before B's first record, and A acknowledged none there;
  - no torn or interleaved record: sequence numbers are contiguous from 0,
    epochs never go down, every record passes its CRC (the scan stops at the
    first that does not; records A acked are all before that point).
Time to useful (freeze -> B's first acknowledged append) is printed, split
into trigger, takeover, recovery scan and first append.
"""
import re
import time

from nvlab.steps import CONFLICT, LOST_RACE, OK, report, reset



def cx(host, *args, timeout_s=60):
    return host.run("nvfence-c-example " + " ".join(args), timeout_s=timeout_s)


def taken(res, op="takeover"):
    m = re.search(rf"^{op}: changed (\d) key (\S+) holder (\S+) removed (\d+)", res.out, re.M)
    assert m, res.out
    return int(m.group(1)), m.group(2), m.group(3), int(m.group(4))


def block_text(host, lba, bs):
    host.run("sync; echo 3 > /proc/sys/vm/drop_caches")
    r = host.run(f'dd if="$NVFENCE_DEV" bs={bs} skip={lba} count=1 2>/dev/null | head -c 80 | tr -d "\\000"')
    assert r.rc == 0, r
    return r.out


def test_capi_failover(lab):
    reset(lab)
    a, b = lab.hosts
    v = cx(a, "version")
    assert v.rc == OK and v.out.startswith("libnvfence "), v

    info = cx(a, 'info "$NVFENCE_DEV"')
    assert info.rc == OK, info
    assert "reservations 1" in info.out and "holder none" in info.out, info.out
    bs = int(re.search(r"^lba_bytes (\d+)", info.out, re.M).group(1))

    r = cx(a, 'takeover "$NVFENCE_DEV" 1')
    assert r.rc == OK, r
    changed, ka, holder, _ = taken(r)
    assert changed == 1 and holder == ka and ka.startswith("nf:0:1:"), r.out
    ea = int(ka.rsplit(":", 1)[1])

    w = cx(a, 'write "$NVFENCE_DEV" 64 4')
    assert w.rc == OK, w
    assert w.out.count(f"epoch {ea}: ok") == 4 and "writer latched 0" in w.out, w.out

    # B takes over naming A's key: a compare-and-swap on the device.
    r = cx(b, f'takeover "$NVFENCE_DEV" 2 {ka}')
    assert r.rc == OK, r
    changed, kb, holder, removed = taken(r)
    eb = int(kb.rsplit(":", 1)[1])
    assert changed == 1 and holder == kb and removed == 1 and eb > ea, r.out
    st = report(a)
    assert st["holder"] is not None and [x["key"] for x in st["registrants"]] == [st["holder"]], st

    w = cx(b, 'write "$NVFENCE_DEV" 72 4')
    assert w.rc == OK and w.out.count(f"epoch {eb}: ok") == 4, w

    # The device refuses A, whatever A believes; its writer latches.
    w = cx(a, 'write "$NVFENCE_DEV" 72 4')
    assert w.rc == CONFLICT, w
    assert "ok" not in re.findall(r": (\w+)", w.out), w.out
    assert w.out.count(": fenced") == 4 and "writer latched 1" in w.out, w.out
    assert f"epoch {eb} lba 72" in block_text(b, 72, bs)
    assert f"epoch {ea} lba 64" in block_text(b, 64, bs)

    # The same compare-and-swap again: nothing for B to do, a lost race for A.
    r = cx(b, f'takeover "$NVFENCE_DEV" 2 {ka}')
    assert r.rc == OK and taken(r)[0] == 0, r
    r = cx(a, f'takeover "$NVFENCE_DEV" 1 {ka}')
    assert r.rc == LOST_RACE, r
    assert "holder" in r.out and kb in r.out, r.out

    # The one eviction routine (Fence::evict_node, fence_nvfence's 'off')
    # through the C API: A registers again as a standby; B evicts node 1,
    # verified, and keeps holding with its key; a second eviction finds
    # nothing to do; its own node is refused with nothing sent.
    r = a.run('nvfence register "$NVFENCE_DEV" --node 1')
    assert r.rc == OK, r
    assert len(report(a)["registrants"]) == 2
    r = cx(b, 'evict-node "$NVFENCE_DEV" 2 1')
    assert r.rc == OK, r
    changed, key, holder, removed = taken(r, "evict-node")
    assert changed == 1 and removed == 1 and key == kb and holder == kb, r.out
    st = report(a)
    assert len(st["registrants"]) == 1 and st["registrants"][0]["key"] == st["holder"], st
    r = cx(b, 'evict-node "$NVFENCE_DEV" 2 1')
    assert r.rc == OK and taken(r, "evict-node")[0] == 0, r
    gen = report(a)["generation"]
    r = cx(b, 'evict-node "$NVFENCE_DEV" 2 2')
    assert r.rc == 2 and "own key" in r.err, r
    assert report(a)["generation"] == gen

    # Release and leave through the C API.
    r = cx(b, 'release "$NVFENCE_DEV" 2')
    assert r.rc == OK and "holder none" in r.out, r
    r = cx(b, 'leave "$NVFENCE_DEV" 2')
    assert r.rc == OK and "key none" in r.out, r
    assert report(a)["registrants"] == []


def test_capi_refuses_non_nvme(lab):
    r = cx(lab.hosts[0], "info /dev/null")
    assert r.rc == 4 and "not an NVMe namespace" in r.err, r


ENGINE = "nvfence-logengine"
BASE = 2048          # first block of the log (its superblock)


def acks(host, path):
    out = {}
    for line in host.run(f"cat {path} 2>/dev/null", timeout_s=30).out.splitlines():
        p = line.split()
        if len(p) == 4 and p[0] == "A":
            out[int(p[1])] = (int(p[2]), p[3])
    return out


def test_engine_failover(lab):
    reset(lab)
    a, b = lab.hosts
    for h in (a, b):
        h.run("rm -rf /tmp/engine-state /tmp/a.acks /tmp/b.acks")

    f = a.run(f'{ENGINE} format "$NVFENCE_DEV" --base-lba {BASE} --node 1 --state-dir /tmp/engine-state')
    assert f.rc == 0, f
    ea = int(re.search(r"epoch (\d+)", f.out).group(1))

    # A serves an unbounded client load; wait until it has acknowledged some.
    bg = a.spawn(f'{ENGINE} serve "$NVFENCE_DEV" --base-lba {BASE} --node 1 --depth 8 '
                 f'--ack-log /tmp/a.acks --state-dir /tmp/engine-state')
    r = a.wait_for("[ $(wc -l < /tmp/a.acks) -ge 300 ]", timeout_s=120)
    assert r.rc == 0, (r, bg.output())

    # Freeze A mid-stream (writes in flight), then fail over to B.
    a.pause()
    t_freeze = time.monotonic()
    try:
        t_trigger = time.monotonic() - t_freeze
        s = b.run(f'{ENGINE} serve "$NVFENCE_DEV" --base-lba {BASE} --node 2 --takeover --appends 200 '
                  f'--depth 8 --ack-log /tmp/b.acks --state-dir /tmp/engine-state', timeout_s=180)
        t_b_done = time.monotonic() - t_freeze
    finally:
        a.resume()
    assert s.rc == 0, s
    m = re.search(r"serving: epoch (\d+) node 2, recovered (\d+) records, takeover_ms ([\d.]+) "
                  r"recovery_ms ([\d.]+) recovery_mib_s ([\d.]+)", s.out)
    assert m, s.out
    eb, recovered = int(m.group(1)), int(m.group(2))
    takeover_ms, recovery_ms = float(m.group(3)), float(m.group(4))
    first_ms = float(re.search(r"first_append_ms ([\d.]+)", s.out).group(1))
    assert eb > ea
    assert "200 appends acknowledged" in s.out, s.out

    # A, resumed, is refused by the device and stops cleanly by itself.
    assert bg.wait(timeout_s=120), bg.output()
    out_a = bg.output()
    assert "stopped: fenced" in out_a, out_a
    # Refused by the device (a fenced completion), or its in-flight writes
    # aborted by B's preempt-and-abort and the device reporting B as holder.
    assert re.search(r"^fenced: append \d+ epoch %d" % ea, out_a, re.M) or \
        re.search(r"^preempted: .* \(holder nf:0:2:%d\)" % eb, out_a, re.M), out_a

    acked_a, acked_b = acks(a, "/tmp/a.acks"), acks(b, "/tmp/b.acks")
    assert len(acked_a) >= 300 and len(acked_b) == 200

    c = b.run(f'{ENGINE} check "$NVFENCE_DEV" --base-lba {BASE}', timeout_s=120)
    assert c.rc == 0, c
    log = {}
    order = []
    for line in c.out.splitlines():
        p = line.split()
        if p and p[0] == "R":
            log[int(p[1])] = (int(p[2]), p[3])
            order.append((int(p[1]), int(p[2])))
    # Contiguous, epochs never go down, only the two primaries' epochs.
    assert [q for q, _ in order] == list(range(len(order)))
    assert all(order[i][1] <= order[i + 1][1] for i in range(len(order) - 1))
    assert {e for _, e in order} <= {ea, eb}
    # B continued exactly where recovery ended; A's records all lie before.
    assert any(e == eb for _, e in order), (len(order), recovered, c.out[-600:], c.err, s.out[-400:])
    first_b = min(q for q, e in order if e == eb)
    assert first_b == recovered
    assert all(e == ea for q, e in order if q < first_b)
    assert len(order) == recovered + 200
    # Every acknowledged append survived, where and as it was acknowledged.
    for q, v in list(acked_a.items()) + list(acked_b.items()):
        assert log.get(q) == v, (q, v, log.get(q))
    # A acknowledged nothing the takeover cut off: all its acks are before B's.
    assert max(acked_a) < first_b
    lost_unacked = recovered - len(acked_a)
    print(f"\nengine failover: A acked {len(acked_a)}, recovered {recovered} "
          f"({lost_unacked} landed without an ack), B appended 200 under epoch {eb}")
    print(f"time to useful (freeze -> B's first acked append): trigger {t_trigger * 1000:.0f} ms, "
          f"takeover {takeover_ms:.0f} ms, recovery scan {recovery_ms:.0f} ms, first append {first_ms:.0f} ms; "
          f"B's whole run {t_b_done:.1f} s")
    print("old primary after resume: " + " | ".join(out_a.strip().splitlines()[-3:]))
