"""Time to useful after a failover, for the example engine
(examples/engine, nvfence-logengine), and its recovery read rate against
fio's sequential read on the same namespace. Not a test (no CTest entry):
figures for docs/PERFORMANCE.md.

    NVFENCE_BUILD_DIR=build vm-test/tool bench_engine \\
        [--mib 16 256] [--rounds 5] [--volume-mib 320]

For each log size: the log is formatted and filled once (records of one
block). Then ROUNDS failovers, alternating the hosts: the primary P serves
a client load (`serve --takeover`), P is frozen (QMP stop), the other host
runs `serve --takeover --appends 1`, which prints the takeover
(preempt-and-abort), the recovery scan (its read size and depth) and the
first acknowledged append; P is resumed (its appends are refused, it
exits). Right after each failover fio reads the same span sequentially on
the same host with the scan's read size and depth (direct, libaio), so scan
and fio run side by side in every round. Prints every round and the
medians. --volume-mib enlarges the lab's namespace (default 320 MiB, so a
256 MiB log fits behind the superblock)."""
import argparse
import re
import statistics
import time

import nvlab

BASE = 2048


def serve_cmd(node, extra=""):
    return (f'nvfence-logengine serve "$NVFENCE_DEV" --base-lba {BASE} --node {node} --takeover {extra} '
            f'--state-dir /tmp/es')


def failover(p, q, pn, qn):
    """P serves, is frozen, Q takes over and recovers; returns Q's figures."""
    for h in (p, q):
        h.run("rm -f /tmp/acks")
    bg = p.spawn(serve_cmd(pn, "--ack-log /tmp/acks"))
    assert p.wait_for("[ $(wc -l < /tmp/acks 2>/dev/null || echo 0) -ge 100 ]", timeout_s=900).rc == 0, bg.output()
    p.pause()
    t0 = time.monotonic()
    try:
        s = q.run(serve_cmd(qn, "--appends 1 --ack-log /tmp/acks"), timeout_s=1800)
        total_s = time.monotonic() - t0
    finally:
        p.resume()
    assert s.rc == 0, s
    bg.wait(timeout_s=300)
    m = re.search(r"recovered (\d+) records, takeover_ms ([\d.]+) recovery_ms ([\d.]+) "
                  r"recovery_mib_s ([\d.]+) scan_io_kib (\d+) scan_inflight (\d+)", s.out)
    assert m, s.out
    first = float(re.search(r"first_append_ms ([\d.]+)", s.out).group(1))
    return {"records": int(m.group(1)), "takeover_ms": float(m.group(2)), "recovery_ms": float(m.group(3)),
            "scan_mib_s": float(m.group(4)), "io_kib": int(m.group(5)), "inflight": int(m.group(6)),
            "first_ms": first, "total_s": total_s}


def fio_read(h, bs, span_bytes, io_kib, depth):
    f = h.run(f'fio --name=seq --filename="$NVFENCE_DEV" --rw=read --bs={io_kib}k --iodepth={depth} '
              f'--ioengine=libaio --direct=1 --offset={(BASE + 1) * bs} --size={span_bytes} '
              f'--output-format=terse --terse-version=3', timeout_s=1800)
    assert f.rc == 0, f
    return float(f.out.strip().splitlines()[-1].split(";")[6]) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, nargs="+", default=[16, 256])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--volume-mib", type=int, default=320)
    a = ap.parse_args()
    with nvlab.Lab(hosts=2, topology="fabric", ebs=True, volume_mib=a.volume_mib) as lab:
        ha, hb = lab.hosts
        bs = int(re.search(r"LBA size:\s+(\d+)", ha.run('nvfence info "$NVFENCE_DEV"').out).group(1))
        summary = []
        for mib in a.mib:
            records = mib * 1024 * 1024 // bs
            for h in (ha, hb):
                h.run("rm -rf /tmp/es /tmp/acks")
            r = ha.run(f'nvfence-logengine format "$NVFENCE_DEV" --base-lba {BASE} --node 1 --state-dir /tmp/es')
            assert r.rc == 0, r
            r = ha.run(f'nvfence-logengine fill "$NVFENCE_DEV" --base-lba {BASE} --node 1 --records {records} '
                       f'--state-dir /tmp/es', timeout_s=3600)
            assert r.rc == 0, r
            print(f"\n{mib} MiB: {r.out.strip()}", flush=True)
            rows = []
            for k in range(a.rounds):
                (p, pn), (q, qn) = ((ha, 1), (hb, 2)) if k % 2 == 0 else ((hb, 2), (ha, 1))
                f = failover(p, q, pn, qn)
                f["fio_mib_s"] = fio_read(q, bs, (f["records"] + 1) * bs, f["io_kib"], f["inflight"])
                f["ratio"] = f["scan_mib_s"] / f["fio_mib_s"]
                rows.append(f)
                print(f"  round {k + 1} ({'ab'[pn - 1]} -> {'ab'[qn - 1]}): records {f['records']} "
                      f"takeover {f['takeover_ms']:.0f} ms, scan {f['recovery_ms']:.0f} ms at "
                      f"{f['scan_mib_s']:.1f} MiB/s ({f['io_kib']} KiB x {f['inflight']}), first append "
                      f"{f['first_ms']:.0f} ms, freeze -> first ack {f['total_s']:.1f} s; fio "
                      f"{f['fio_mib_s']:.1f} MiB/s; scan/fio {f['ratio']:.2f}", flush=True)
            med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
            summary.append((mib, len(rows), med, min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)))
        print(f"\nmedians of {a.rounds} rounds (namespace {a.volume_mib} MiB, block {bs} B)")
        print("| log | records | takeover ms | recovery scan ms | scan MiB/s | first append ms "
              "| freeze -> first ack s | fio seq read MiB/s | scan / fio (min-max) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for mib, n, m, lo, hi in summary:
            print(f"| {mib} MiB | {m['records']:.0f} | {m['takeover_ms']:.0f} | {m['recovery_ms']:.0f} "
                  f"| {m['scan_mib_s']:.1f} | {m['first_ms']:.0f} | {m['total_s']:.1f} | {m['fio_mib_s']:.1f} "
                  f"| {m['ratio']:.2f} ({lo:.2f}-{hi:.2f}) |")


if __name__ == "__main__":
    main()
