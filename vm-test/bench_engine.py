"""Time to useful after a failover, for the example engine
(examples/engine, nvfence-logengine), and its recovery read rate against
fio's sequential read on the same namespace. Not a test (no CTest entry):
figures for docs/PERFORMANCE.md.

    NVFENCE_BUILD_DIR=build /usr/bin/python3 vm-test/bench_engine.py [--mib 16 200]

For each log size: A formats and fills the log (records of one block), then
serves a client load; A is frozen; B runs `serve --takeover`, which prints
the takeover (preempt-and-abort), the recovery scan and the first
acknowledged append. fio then reads the same span sequentially on B with
the scan's I/O size and depth (direct, libaio)."""
import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nvlab  # noqa: E402

BASE = 2048


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, nargs="+", default=[16, 200])
    a = ap.parse_args()
    with nvlab.Lab(hosts=2, topology="fabric", ebs=True) as lab:
        ha, hb = lab.hosts
        bs = int(re.search(r"LBA size:\s+(\d+)", ha.run('nvfence info "$NVFENCE_DEV"').out).group(1))
        rows = []
        for mib in a.mib:
            records = mib * 1024 * 1024 // bs
            for h in (ha, hb):
                h.run("rm -rf /tmp/es /tmp/a.acks /tmp/b.acks")
            r = ha.run(f'nvfence-logengine format "$NVFENCE_DEV" --base-lba {BASE} --node 1 --state-dir /tmp/es')
            assert r.rc == 0, r
            r = ha.run(f'nvfence-logengine fill "$NVFENCE_DEV" --base-lba {BASE} --node 1 --records {records} '
                       f'--state-dir /tmp/es', timeout_s=1800)
            assert r.rc == 0, r
            bg = ha.spawn(f'nvfence-logengine serve "$NVFENCE_DEV" --base-lba {BASE} --node 1 '
                          f'--ack-log /tmp/a.acks --state-dir /tmp/es')
            assert ha.wait_for("[ $(wc -l < /tmp/a.acks) -ge 100 ]", timeout_s=600).rc == 0, bg.output()
            ha.pause()
            t0 = time.monotonic()
            try:
                s = hb.run(f'nvfence-logengine serve "$NVFENCE_DEV" --base-lba {BASE} --node 2 --takeover '
                           f'--appends 1 --ack-log /tmp/b.acks --state-dir /tmp/es', timeout_s=1800)
                total_s = time.monotonic() - t0
            finally:
                ha.resume()
            assert s.rc == 0, s
            bg.wait(timeout_s=120)
            m = re.search(r"recovered (\d+) records, takeover_ms ([\d.]+) recovery_ms ([\d.]+) "
                          r"recovery_mib_s ([\d.]+)", s.out)
            first = float(re.search(r"first_append_ms ([\d.]+)", s.out).group(1))
            rec, tk, rc_ms, rate = int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))
            # fio on the same span, the scan's I/O size (128 KiB) and depth (4).
            span = (rec + 1) * bs
            f = hb.run(f'fio --name=seq --filename="$NVFENCE_DEV" --rw=read --bs=128k --iodepth=4 '
                       f'--ioengine=libaio --direct=1 --offset={(BASE + 1) * bs} --size={span} '
                       f'--output-format=terse --terse-version=3', timeout_s=1800)
            assert f.rc == 0, f
            fio_kib_s = float(f.out.strip().splitlines()[-1].split(";")[6])
            fio_mib_s = fio_kib_s / 1024
            rows.append((mib, rec, tk, rc_ms, rate, first, total_s, fio_mib_s))
        print("\n| log | records | takeover ms | recovery scan ms | scan MiB/s | first append ms "
              "| freeze -> first ack s | fio seq read MiB/s | scan / fio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for mib, rec, tk, rc_ms, rate, first, total_s, fio in rows:
            print(f"| {mib} MiB | {rec} | {tk:.0f} | {rc_ms:.0f} | {rate:.1f} | {first:.0f} | {total_s:.1f} "
                  f"| {fio:.1f} | {rate / fio:.2f} |")


if __name__ == "__main__":
    main()
