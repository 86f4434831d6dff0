"""Runs nvfence-bench in the lab against the shared namespace (a command, not a test).

    NVFENCE_BUILD_DIR=/work/main/build-bench vm-test/tool bench_lab \
        [--topology loop|fabric] [--modes block,passthrough] [--passes 2] \
        [--repeat 3] [--runtime 3] [--ramp 1] [--qd 1,32] [--size 128M] [--backing ram|disk] [--smp 1|2] \
        [--nvmet-wq-max-active N] \
        [-- more nvfence-bench args]

Boots a one-host lab, then runs, inside the guest,

    nvfence-bench "$NVFENCE_DEV" --destroy-device-data --mode <mode> ...

once per mode and pass, alternating the modes (block, passthrough,
passthrough, block, ...) so that drift does not favour one of them. Each run
prints the tool's own table (nvfence against fio's io_uring engine in block
mode and its io_uring_cmd engine in passthrough mode, same parameters). At
the end the per-run rows of all passes are pooled into one table of medians
per mode, with nvfence/fio and passthrough/block ratios, and each run's own
ratio rows are listed: their "pool" columns are percentiles of every sample
of that run's rounds, the figure to quote for a tail (p99.9 needs many
samples: use one pass of many rounds, e.g. --passes 1 --repeat 21).

The lab runs under TCG (no KVM): absolute figures mean nothing, ratios do;
the submitting CPU is the bottleneck, so they measure per-I/O software cost.
nvmet runs each command of the loop controller as a work item of its
unbound workqueue nvmet-wq, up to max_active (1024 on the lab's kernel) at
once: with a queue depth of 32 on one vCPU, 32 kernel workers time-share
the CPU, and the order they finish in (the tail) is the scheduler's.
`--nvmet-wq-max-active 1` serves the commands one at a time in arrival
order, as a device's queue does (trace_lab_io.py shows both).

Which binaries the guest gets: <NVFENCE_BUILD_DIR or build>/bin (build it
with -DCMAKE_BUILD_TYPE=Release for figures).
"""
import argparse
import re
import statistics
import sys
import time

import nvlab

ROW = re.compile(r"^(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+\(lat ([\d.]+) ([\d.]+) ([\d.]+)\))?")
FIELDS = ("iops", "p50", "p99", "p999", "cpu")
# nvfence-bench's "Ratios nvfence/fio" rows: qd, pair, IOPS, IOPS/pair, p99 med,
# p99.9 med, p99 pool, p99.9 pool, cpu/io (pool: percentiles of every sample
# of the run's rounds).
RATIO = re.compile(r"^(\d+)\s+(\S+ / \S+)" + r"\s+([\d.]+|nan|inf)" * 7 + r"\s*$")
RATIO_FIELDS = ("iops", "iops_pair", "p99_med", "p999_med", "p99_pool", "p999_pool", "cpu")


def parse_rows(out):
    """Per-run rows of nvfence-bench's output: {(qd, tool): [dict, ...]}."""
    rows = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        qd, tool = int(m.group(1)), m.group(2)
        r = dict(zip(FIELDS, map(float, m.group(4, 5, 6, 7, 8))))
        if m.group(9):
            r["lat_p99"] = float(m.group(10))
            r["lat_p999"] = float(m.group(11))
        rows.setdefault((qd, tool), []).append(r)
    return rows


def parse_ratios(out):
    """The tool's own ratio rows of one run: {(qd, pair): dict}."""
    got = {}
    for line in out.splitlines():
        m = RATIO.match(line)
        if m:
            got[(int(m.group(1)), m.group(2))] = dict(zip(RATIO_FIELDS, map(float, m.group(*range(3, 10)))))
    return got


def med(rows, key):
    xs = [r[key] for r in rows if key in r]
    return statistics.median(xs) if xs else float("nan")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="loop", choices=["loop", "fabric"])
    ap.add_argument("--modes", default="block,passthrough")
    ap.add_argument("--passes", type=int, default=2, help="runs of nvfence-bench per mode, alternating modes")
    ap.add_argument("--repeat", type=int, default=3, help="nvfence-bench --repeat (rounds per pass)")
    ap.add_argument("--runtime", type=int, default=3)
    ap.add_argument("--ramp", type=int, default=1)
    ap.add_argument("--qd", default="1,32")
    ap.add_argument("--size", default="128M", help="region written (the lab's namespace is 256 MiB)")
    ap.add_argument("--memory-mb", type=int, default=1024)
    ap.add_argument("--smp", type=int, default=1,
                    help="vCPUs of the guest (default 1; 2 lets nvmet's work run beside the submitter)")
    ap.add_argument("--backing", default="ram", choices=["ram", "disk"],
                    help="what nvmet serves: a 256 MiB file in guest RAM (default) or the QEMU-emulated NVMe disk, "
                         "which under TCG can hold writes until the guest's 30 s timeout (docs/PERFORMANCE.md)")
    ap.add_argument("--nvmet-wq-max-active", type=int, default=0,
                    help="set nvmet-wq's max_active in the guest (0: leave the kernel's; 1: commands served one at a "
                         "time, in order)")
    ap.add_argument("extra", nargs="*", help="more nvfence-bench arguments (after --)")
    a = ap.parse_args()
    if a.nvmet_wq_max_active < 0:
        ap.error("--nvmet-wq-max-active must be 0 (the kernel's value) or more")
    return a


def main():
    a = parse_args()
    modes = [m for m in a.modes.split(",") if m]
    order = []
    for p in range(a.passes):
        order += modes if p % 2 == 0 else modes[::-1]
    pooled, failures, tool_ratios = {}, [], []
    backing = "nvlab.backing=ram:256" if a.backing == "ram" else ""
    with nvlab.Lab(hosts=1, topology=a.topology, memory_mb=a.memory_mb, extra_cmdline=backing, smp=a.smp) as lab:
        h = lab.hosts[0]
        describe_guest(a, lab, h)
        for i, mode in enumerate(order):
            run_pass(a, h, i, mode, modes, pooled, failures, tool_ratios)
    print_pooled(a, pooled, modes)
    print(f"\n# Each run's own ratios over its {a.repeat} round(s): pool = percentiles of every sample of the "
          "run's rounds (the steadier tail figure), med = of the medians of per-round percentiles")
    for mode, pss, (qd, pair), v in tool_ratios:
        print(f"{mode:12s} pass {pss} qd {qd:<3d} {pair:22s} IOPS/pair {v['iops_pair']:6.3f}   "
              f"p99 pool {v['p99_pool']:6.3f}   p99.9 pool {v['p999_pool']:6.3f}   "
              f"p99 med {v['p99_med']:6.3f}   p99.9 med {v['p999_med']:6.3f}   cpu/io {v['cpu']:6.3f}")
    for f in failures:
        print(f"# FAILED run: {f}")
    if "block" in modes and "passthrough" in modes:
        print_modes(pooled)
    return 1 if failures else 0


def describe_guest(a, lab, h):
    print(f"# lab: topology {a.topology}, backing {a.backing}, 1 host, guest kernel {lab.kernel.release}, booted in {lab.boot_s:.1f} s; "
          f"namespace {h.dev} / {h.ng}", flush=True)
    info = h.run("uname -r; nproc; command -v nvfence-bench; command -v fio; "
                 "cat /sys/block/$(basename $NVFENCE_DEV)/queue/scheduler 2>/dev/null", timeout_s=60)
    print("# guest: " + " | ".join(info.out.split("\n")).strip(" |"), flush=True)
    wq = "/sys/bus/workqueue/devices/nvmet-wq/max_active"
    if a.nvmet_wq_max_active:
        h.run(f"echo {a.nvmet_wq_max_active} > {wq}", timeout_s=30, check=True)
    print(f"# nvmet-wq max_active: {h.run(f'cat {wq}', timeout_s=30, check=True).out.strip()}", flush=True)


def run_pass(a, h, i, mode, modes, pooled, failures, tool_ratios):
    """One nvfence-bench run in the guest: its rows pooled, its ratios kept."""
    n_tools = 1 + 2  # nvfence + fio default + fio same, unless extra args change it
    per_run = a.runtime + a.ramp + 6  # + open/fio start-up under TCG
    timeout = a.repeat * len(a.qd.split(",")) * n_tools * per_run * 2 + 300
    cmd = (f'nvfence-bench "$NVFENCE_DEV" --destroy-device-data --mode {mode} --size {a.size} '
           f'--runtime {a.runtime} --ramp {a.ramp} --repeat {a.repeat} --qd {a.qd} ' + " ".join(a.extra))
    print(f"\n## pass {i // len(modes) + 1}, mode {mode}: {cmd}", flush=True)
    t0 = time.monotonic()
    r = h.run(cmd, timeout_s=timeout)
    sys.stdout.write(r.out)
    if r.err:
        sys.stdout.write("# stderr:\n" + r.err)
    print(f"# rc {r.rc}, {time.monotonic() - t0:.0f} s", flush=True)
    if r.rc != 0:
        # Keep the rows it printed and go on with the other passes;
        # say what the guest kernel saw.
        failures.append(f"pass {i // len(modes) + 1} mode {mode}: rc {r.rc}: {r.err.strip()[-300:]}")
        d = h.run("dmesg | tail -20", timeout_s=60)
        print("# guest dmesg tail:\n" + d.out, flush=True)
    tool_ratios += [(mode, i // len(modes) + 1, k, v) for k, v in sorted(parse_ratios(r.out).items())]
    for key, rows in parse_rows(r.out).items():
        pooled.setdefault((mode,) + key, []).extend(rows)


def print_pooled(a, pooled, modes):
    print(f"\n# Pooled over {a.passes} pass(es) x {a.repeat} round(s) per mode: medians "
          f"(latency in microseconds; nvfence p99 = queue to reap, fio p99 = clat, fio lat = queue to completion)")
    print(f"{'mode':12s} {'qd':>3s} {'tool':10s} {'n':>3s} {'IOPS':>9s} {'p50':>9s} {'p99':>9s} {'p99.9':>9s} "
          f"{'lat p99':>9s} {'lat p99.9':>9s} {'cpu/io':>8s}")
    for (mode, qd, tool), rows in sorted(pooled.items()):
        print(f"{mode:12s} {qd:3d} {tool:10s} {len(rows):3d} {med(rows, 'iops'):9.0f} {med(rows, 'p50'):9.1f} "
              f"{med(rows, 'p99'):9.1f} {med(rows, 'p999'):9.1f} {med(rows, 'lat_p99'):9.1f} {med(rows, 'lat_p999'):9.1f} "
              f"{med(rows, 'cpu'):8.2f}")
    print("\n# Ratios of the pooled medians: nvfence/fio (IOPS >= 1, p99 and p99.9 <= 1 are the targets; "
          "latency against fio's lat, which counts from the queueing as nvfence does)")
    nv_tools = sorted({t for (_, _, t) in pooled if not t.startswith("fio")})
    fio_tools = sorted({t for (_, _, t) in pooled if t.startswith("fio")})
    for mode in modes:
        for qd in sorted({q for (m, q, _) in pooled if m == mode}):
            for nt in nv_tools:
                for ft in fio_tools:
                    a_, b_ = pooled.get((mode, qd, nt)), pooled.get((mode, qd, ft))
                    if not a_ or not b_:
                        continue
                    print(f"{mode:12s} qd {qd:<3d} {nt} / {ft:9s} IOPS {med(a_, 'iops') / med(b_, 'iops'):6.3f}   "
                          f"p99/lat-p99 {med(a_, 'p99') / med(b_, 'lat_p99'):6.3f}   "
                          f"p99.9/lat-p99.9 {med(a_, 'p999') / med(b_, 'lat_p999'):6.3f}   "
                          f"cpu/io {med(a_, 'cpu') / med(b_, 'cpu'):6.3f}")


def print_modes(pooled):
    nv_tools = sorted({t for (_, _, t) in pooled if not t.startswith("fio")})
    fio_tools = sorted({t for (_, _, t) in pooled if t.startswith("fio")})
    print("\n# Ratios passthrough/block of the pooled medians (IOPS: higher is better)")
    for qd in sorted({q for (_, q, _) in pooled}):
        for t in nv_tools + fio_tools:
            b_, p_ = pooled.get(("block", qd, t)), pooled.get(("passthrough", qd, t))
            if b_ and p_:
                print(f"qd {qd:<3d} {t:10s} IOPS {med(p_, 'iops') / med(b_, 'iops'):6.3f}   "
                      f"p99 {med(p_, 'p99') / med(b_, 'p99'):6.3f}   p99.9 {med(p_, 'p999') / med(b_, 'p999'):6.3f}   cpu/io {med(p_, 'cpu') / med(b_, 'cpu'):6.3f}")


if __name__ == "__main__":
    sys.exit(main())
