"""Where a lab write's time goes inside the guest (a command, not a test).

    NVFENCE_BUILD_DIR=/work/main/build-bench vm-test/tool trace_lab_io \
        [--rounds 2] [--bs 65536] [--qd 32] [--runtime 3] [--ramp 1] [--mode block] [--smp 1] \
        [--wq-max-active 0,1] [--nv-spin-us 0,N] [-- more nvfence-bench args]

Boots a one-host loop lab serving the namespace from guest RAM, as
bench_lab.py does, and runs nvfence-bench (nvfence against fio's defaults,
`--fio-variants default`) once per round and setting, with the guest's
tracefs recording, for every write:

- `nvme_setup_cmd` (the host driver hands the write to nvme-loop) and
  `nvme_complete_rq` (its completion), paired by (qid, cmdid): the time the
  write spends inside nvme-loop and nvmet ("in target"), attributed to the
  process that submitted it (nvfence-bench or fio);
- `workqueue_execute_start` / `_end` of `nvme_loop_execute_work` (nvmet's
  work item for one command): how many kernel workers ran them and how many
  were in progress at once (started and not ended: running, preempted or
  asleep).

Percentiles are computed in the guest (the lab's output is capped) and
printed beside the bench's own end-to-end figures for the same run
(nvfence: queue to reap; fio: `lat`).

Settings, each a comma-separated list run in turn within one boot:

- `--wq-max-active`: nvmet-wq's max_active (0 = leave the kernel's value);
  the workqueue must be WQ_SYSFS (/sys/bus/workqueue/devices/nvmet-wq).
- `--nv-spin-us`: nvfence-bench `--nv-spin-us` (CPU work per write in the
  caller, as a storage engine does between a completion and its next
  write): whether the tail follows the submitter's throughput.

Figures taken under TCG: ratios between contenders in one boot, not
absolute values, mean something. Build with -DCMAKE_BUILD_TYPE=Release.
"""
import argparse
import re
import sys

import nvlab

TRACE = "/sys/kernel/tracing"
WQ = "/sys/bus/workqueue/devices/nvmet-wq"

# Pairs the events of one trace (stdin) and prints, per submitting command,
# "intarget COMM n p50 p99 p99.9 mean kworkers maxinprogress" (microseconds;
# work items count for the command whose write was set up last). Task names may hold '-' (not spaces): the pid is what
# follows the last '-' of the first field.
AWK = r"""
function pct(arr, n, p,   i) { i = int(n * p); if (i >= n) i = n - 1; return arr[i] }
{
  if (!match($0, / [0-9]+\.[0-9]+: /)) next
  ts = substr($0, RSTART + 1, RLENGTH - 3) + 0
  task = $1; comm = task; sub(/-[0-9]+$/, "", comm)
  if (index($0, "nvme_setup_cmd:")) {
    if (!match($0, /qid=[0-9]+, cmdid=[0-9]+/)) next
    k = substr($0, RSTART, RLENGTH); st[k] = ts; who[k] = comm; cur = comm
  } else if (index($0, "nvme_complete_rq:")) {
    if (!match($0, /qid=[0-9]+, cmdid=[0-9]+/)) next
    k = substr($0, RSTART, RLENGTH)
    if (k in st) { print who[k], (ts - st[k]) * 1e6 > "/tmp/trace-pairs"; delete st[k] }
  } else if (index($0, "nvme_loop_execute_work")) {
    if (index($0, "workqueue_execute_start")) {
      if (!(task in busy)) { busy[task] = 1; nbusy++ }
      if (nbusy > maxbusy[cur]) maxbusy[cur] = nbusy
      if (!((cur, task) in workers)) { workers[cur, task] = 1; nworkers[cur]++ }
    } else if (task in busy) { delete busy[task]; nbusy-- }
  }
}
END {
  close("/tmp/trace-pairs")
  while ((getline line < "/tmp/trace-pairs") > 0) {
    split(line, f, " "); c = f[1]; v = f[2] + 0
    n[c]++; sum[c] += v; print v > ("/tmp/trace-v-" c)
  }
  for (c in n) {
    close("/tmp/trace-v-" c)
    cmd = "sort -n /tmp/trace-v-" c; i = 0
    while ((cmd | getline v) > 0) a[i++] = v + 0
    close(cmd)
    printf "intarget %s %d %.0f %.0f %.0f %.0f %d %d\n", c, n[c], pct(a, i, 0.5), pct(a, i, 0.99), \
      pct(a, i, 0.999), sum[c] / n[c], nworkers[c], maxbusy[c]
    delete a
  }
}
"""

ROW = re.compile(r"^(\d+)\s+(nvfence\S*|fio\S*)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+\(lat ([\d.]+) ([\d.]+) ([\d.]+)\))?")


def trace_setup(h):
    h.run(f"mountpoint -q {TRACE} || mount -t tracefs nodev {TRACE}", timeout_s=30, check=True)
    h.run(f"cd {TRACE} && echo 0 > tracing_on && echo > trace && echo 131072 > buffer_size_kb && "
          "echo 'opcode == 1' > events/nvme/nvme_setup_cmd/filter && "
          "echo 1 > events/nvme/nvme_setup_cmd/enable && echo 1 > events/nvme/nvme_complete_rq/enable && "
          "echo 1 > events/workqueue/workqueue_execute_start/enable && "
          "echo 1 > events/workqueue/workqueue_execute_end/enable", timeout_s=60, check=True)


def one_run(h, bench_cmd, timeout_s):
    """Trace one nvfence-bench run; return (bench output, analysis lines)."""
    h.run(f"echo > {TRACE}/trace && echo 1 > {TRACE}/tracing_on", timeout_s=30, check=True)
    r = h.run(bench_cmd, timeout_s=timeout_s)
    h.run(f"echo 0 > {TRACE}/tracing_on", timeout_s=30, check=True)
    if r.rc != 0:
        raise SystemExit(f"nvfence-bench failed (rc {r.rc}): {r.err.strip()[-400:]}")
    a = h.run(f"awk -f /tmp/trace.awk {TRACE}/trace && grep -h overrun {TRACE}/per_cpu/*/stats",
              timeout_s=600)
    if a.rc != 0:
        raise SystemExit(f"trace analysis failed: {a.err.strip()[-400:]}")
    overruns = sum(int(l.split()[-1]) for l in a.out.splitlines() if l.startswith("overrun"))
    if overruns:
        raise SystemExit(f"the trace buffer overran ({overruns} events lost): shorten --runtime")
    return r.out, [l for l in a.out.splitlines() if not l.startswith("overrun")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bs", type=int, default=65536)
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--runtime", type=int, default=3)
    ap.add_argument("--ramp", type=int, default=1)
    ap.add_argument("--mode", default="block", choices=["block", "passthrough"])
    ap.add_argument("--smp", type=int, default=1)
    ap.add_argument("--memory-mb", type=int, default=1536)
    ap.add_argument("--wq-max-active", default="0")
    ap.add_argument("--nv-spin-us", default="0")
    ap.add_argument("extra", nargs="*", help="more nvfence-bench arguments (after --)")
    a = ap.parse_args()
    settings = [(int(w), int(s)) for w in a.wq_max_active.split(",") for s in a.nv_spin_us.split(",")]
    with nvlab.Lab(hosts=1, topology="loop", memory_mb=a.memory_mb, extra_cmdline="nvlab.backing=ram:256",
                   smp=a.smp) as lab:
        h = lab.hosts[0]
        info = h.run(f"uname -r; nproc; ls {WQ} 2>&1 | tr '\\n' ' '; cat {WQ}/max_active 2>/dev/null", timeout_s=60)
        print(f"# lab: loop, RAM backing, guest {' | '.join(info.out.split(chr(10))).strip(' |')}", flush=True)
        h.put(AWK.encode(), "/tmp/trace.awk")
        trace_setup(h)
        default_active = h.run(f"cat {WQ}/max_active", timeout_s=30).out.strip()
        print("setting          round contender  writes  in-target p50    p99  p99.9   mean | "
              "e2e p50    p99  p99.9 (us) | IOPS   | kworkers max-in-progress", flush=True)
        for wq, spin in settings:
            if wq:
                h.run(f"echo {wq} > {WQ}/max_active", timeout_s=30, check=True)
            elif default_active:
                h.run(f"echo {default_active} > {WQ}/max_active", timeout_s=30, check=True)
            name = f"wq{wq or 'def'},spin{spin}"
            for rnd in range(1, a.rounds + 1):
                cmd = (f'nvfence-bench "$NVFENCE_DEV" --destroy-device-data --mode {a.mode} --size 128M '
                       f'--bs {a.bs} --qd {a.qd} --runtime {a.runtime} --ramp {a.ramp} --repeat 1 '
                       f'--fio-variants default --nv-spin-us {spin} ' + " ".join(a.extra))
                out, lines = one_run(h, cmd, timeout_s=600)
                e2e = {}
                for l in out.splitlines():
                    m = ROW.match(l)
                    if m:
                        tool = "fio" if m.group(2).startswith("fio") else "nvfence-bench"
                        # fio: its lat (queue to completion), as nvfence measures
                        p = m.group(5, 6, 7) if tool != "fio" else m.group(9, 10, 11)
                        e2e[tool] = (m.group(4),) + p
                for l in lines:
                    f = l.split()
                    if f[0] != "intarget" or f[1] not in e2e:
                        continue
                    iops, p50, p99, p999 = e2e[f[1]]
                    print(f"{name:16s} {rnd:5d} {f[1][:10]:10s} {f[2]:>7s} {f[3]:>13s} {f[4]:>6s} {f[5]:>6s} {f[6]:>6s} | "
                          f"{float(p50):7.0f} {float(p99):6.0f} {float(p999):6.0f}      | {iops:6s} | {f[7]} {f[8]}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
