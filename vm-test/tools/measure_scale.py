"""Prints what failover costs as registrants and namespaces grow (issue 29;
not a test: figures, medians and maxima).

    vm-test/tool measure_scale [--runs 10] [--out /tmp/nvfence-scale] [--smp 1|2]
        [--axes registrants,namespaces,agents,load]

One 16-host loop lab (one VM: nvmet over nvme-loop, one fabrics connection
per host identity a..p) for everything. Every time is taken inside the
guest around one command (the kernel's monotonic clock in nanoseconds from
/proc/timer_list: busybox date has no %N), so it includes process start,
device open and Identify.

Registrants axis, k = 2, 4, 8, 16 hosts registered (node ids 1..k):
  report      `nvfence report --json` (and its size in bytes)
  preempt     `nvfence preempt` of the holder by node 2 (verified
              preempt-and-abort); node 1 re-registers and re-acquires between runs
  fence-off   `fence_nvfence` off of node k from node 1 (all k unfenced with
              'on' first); node k is unfenced again between runs
  victim-node `nvfence preempt --victim-node k` from the holder (node 1);
              node k re-registers between runs
Namespaces axis, m = 1, 4, 16, 32 namespaces (nsid 1 and m-1 added), nodes 1..3:
  fence-off   `fence_nvfence` off of node 3 from node 1 over all m; node 3 is
              unfenced again between runs

Agents axis, on host a: 32 nvfenced, one per namespace (nsid 1..32), role
standby at the default interval (1000 ms) with the AEN wakeup on (the
default):
  startup     spawning all 32 until every one reports STANDBY
  rss         each agent's VmRSS after 5 s and after 30 s (max over agents)
  cpu         each agent's user+system CPU over 30 s standing by, % of a core
              (max over agents; under TCG, so an upper bound)
  cpu-est     the same figure divided by the TCG factor: the CPU the same
              nvfence-sim work takes in the guest over what it takes on
              this machine (best of 3 each), an estimate for a real core
  detection   host b preempts node 1 on one namespace (--victim-node); time
              from the start of that command to that agent's fence action
              (a command writing the guest clock), one namespace per run;
              also from the command's exit (its own process start, Identify
              and verifying Reports excluded)

Load axis, nodes 1 (host a, holder) and 2 (host b), idle and with node 1's
nvfence-load (FencedWriter) keeping QD 32 and QD 128 of 4 KiB and 128 KiB
writes in flight; once 200 are acknowledged, b runs `nvfence preempt`:
  preempt     the command's own elapsed_us (Report, register,
              preempt-and-abort, verifying Report), median and p99
  drain       nvfence-load's settled_ms: from the writer's first fenced
              completion until every write it had queued completed
  refused     the writes that completed fenced (the abort's work)
Every run must end with the writer latched, settled, and refused at least
once, before it reached the namespace's end.

Each cost's ratio is its median over the median at the axis's smallest
point (targets: 16 registrants within 1.25x of 2, 32 namespaces within 2x
of 1). Figures go to OUT/scale-registrants.dat and OUT/scale-namespaces.dat
and, when gnuplot is installed, OUT/scale-registrants.png and
OUT/scale-namespaces.png. The machine's /proc/loadavg is printed at start
and end: figures from a busy machine are not figures.
"""
import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import nvlab
from nvlab.steps import add_namespaces, fence_agent_cmd, node_of, nvf, remove_namespaces, reset

REGISTRANTS = (2, 4, 8, 16)
NAMESPACES = (1, 4, 16, 32)
REG_COSTS = ("report", "preempt", "fence-off", "victim-node")
NS_COSTS = ("fence-off",)

# Nanoseconds of CLOCK_MONOTONIC in the guest (first line of /proc/timer_list:
# "now at N nsecs"); /proc/uptime (10 ms) if the kernel has no timer_list.
NS = ("ns() { t=$(head -c 200 /proc/timer_list 2>/dev/null | sed -n 's/^now at \\([0-9]*\\) nsecs$/\\1/p'); "
      "[ -n \"$t\" ] && echo $t || awk '{printf \"%d\\n\", $1 * 1000000000}' /proc/uptime; }; ")


def loadavg():
    return Path("/proc/loadavg").read_text().strip()


def timed(host, cmd, timeout_s=120):
    """Runs cmd in host's guest between two clock reads; returns
    (rc, ms, bytes of stdout). Output goes to a file, counted after."""
    r = host.run(NS + f"t0=$(ns); {{ {cmd}\n}} >/tmp/m.out 2>/tmp/m.err; rc=$?; t1=$(ns); "
                 "echo $rc $(( (t1 - t0) / 1000 )) $(wc -c < /tmp/m.out)", timeout_s=timeout_s)
    f = r.out.split()
    assert r.rc == 0 and len(f) == 3, r
    rc, us, size = map(int, f)
    if rc != 0:
        err = host.run("cat /tmp/m.out /tmp/m.err", timeout_s=30).out
        raise AssertionError(f"{host.name}: {cmd}: exit {rc}\n{err}")
    return rc, us / 1000.0, size


def ok(r, what):
    assert r.rc == 0, (what, r)
    return r


def fa_cmd(host, action_lines, devices, node_ids):
    return fence_agent_cmd(action_lines, devices, node_ids, f"/tmp/state-{host.name}")


def fa(host, *lines, devices="$NVFENCE_DEV", node_ids):
    r = host.run(fa_cmd(host, lines, devices, node_ids), timeout_s=180)
    assert r.rc == 0, (host.name, lines, r)
    return r


def registrants_axis(lab, runs):
    res = {}   # (k, cost) -> [ms]
    size = {}  # k -> [bytes]
    for k in REGISTRANTS:
        hs = lab.hosts[:k]
        first, second, last = hs[0], hs[1], hs[-1]
        # CLI registrations: node i+1 on host i, node 1 holds.
        reset(lab)
        for h in hs:
            ok(nvf(h, "register", "--node", str(node_of(h))), "register")
        ok(nvf(first, "acquire"), "acquire")
        xs, sz = [], []
        for _ in range(runs):
            _, ms, n = timed(second, 'nvfence report "$NVFENCE_DEV" --json')
            xs.append(ms)
            sz.append(n)
        res[(k, "report")] = xs
        size[k] = sz
        xs = []
        for _ in range(runs):
            xs.append(timed(second, 'nvfence preempt "$NVFENCE_DEV" --json')[1])
            ok(nvf(first, "register", "--node", "1"), "re-register")
            ok(nvf(second, "release"), "release")
            ok(nvf(first, "acquire"), "re-acquire")
        res[(k, "preempt")] = xs
        xs = []
        for _ in range(runs):
            xs.append(timed(first, f'nvfence preempt "$NVFENCE_DEV" --victim-node {node_of(last)} --json')[1])
            ok(nvf(last, "register", "--node", str(node_of(last))), "re-register victim")
        res[(k, "victim-node")] = xs
        # fence_nvfence: every node unfenced ('on', Registrants Only).
        reset(lab)
        ids = ";".join(f"{h.name}:{node_of(h)}" for h in hs)
        for h in hs:
            fa(h, "action=on", f"nodename={h.name}", node_ids=ids)
        xs = []
        for _ in range(runs):
            xs.append(timed(first, fa_cmd(first, ["action=off", f"plug={last.name}"], "$NVFENCE_DEV", ids))[1])
            fa(last, "action=on", f"nodename={last.name}", node_ids=ids)
        res[(k, "fence-off")] = xs
        print(f"  registrants {k}: done", file=sys.stderr, flush=True)
    return res, size


def namespaces_axis(lab, runs):
    res = {}
    hs = lab.hosts[:3]
    first, last = hs[0], hs[-1]
    ids = ";".join(f"{h.name}:{node_of(h)}" for h in hs)
    devs = {h.name: ["$NVFENCE_DEV"] for h in lab.hosts}
    added = []
    reset(lab)
    try:
        for m in NAMESPACES:
            new = list(range(len(added) + 2, m + 1))
            if new:
                got = add_namespaces(lab, new, size_mib=4)
                added += new
                for h in lab.hosts:
                    devs[h.name] += [got[h.name][n] for n in new]
            for h in hs:
                fa(h, "action=on", f"nodename={h.name}", devices=",".join(devs[h.name]), node_ids=ids)
            xs = []
            for _ in range(runs):
                xs.append(timed(first, fa_cmd(first, ["action=off", f"plug={last.name}"],
                                              ",".join(devs[first.name]), ids), timeout_s=300)[1])
                fa(last, "action=on", f"nodename={last.name}", devices=",".join(devs[last.name]), node_ids=ids)
            res[(m, "fence-off")] = xs
            print(f"  namespaces {m}: done", file=sys.stderr, flush=True)
    finally:
        if added:
            remove_namespaces(lab, added)
    return res


AGENTS = 32
# The guest clock for a fence action: the same ns() as above, as a script.
NS_SCRIPT = "#!/bin/sh\n" + NS + "ns\n"


def agents_axis(lab, runs):
    """32 nvfenced on host a (one per namespace): startup, RSS, CPU, detection."""
    a, b = lab.hosts[0], lab.hosts[1]
    reset(lab)
    extra = list(range(2, AGENTS + 1))
    got = add_namespaces(lab, extra, size_mib=4)
    devs = {h.name: ["$NVFENCE_DEV"] + [got[h.name][n] for n in extra] for h in (a, b)}
    a.put(NS_SCRIPT.encode(), "/tmp/ns.sh", mode=0o755)
    res = {}
    try:
        a.run("pkill -9 -x nvfenced; rm -rf /tmp/ag /run/nvfence; mkdir -p /tmp/ag; true", timeout_s=30)
        spawn = "\n".join(
            f"setsid nvfenced --device {d} --node-id 1 --name v{i} --state-dir /tmp/ag/v{i} --role standby "
            f"--fence-action command --fence-command '/tmp/ns.sh > /tmp/ag/fenced.v{i}' "
            f">/tmp/ag/log.v{i} 2>&1 </dev/null &"
            for i, d in enumerate(devs[a.name], 1))
        all_up = " && ".join(f"nvfence status v{i} --json 2>/dev/null | grep -q '\"state\":\"STANDBY\"'"
                             for i in range(1, AGENTS + 1))
        r = a.run(NS + f"t0=$(ns); {spawn}\nend=$(( $(cut -d. -f1 /proc/uptime) + 300 )); "
                  f"until {all_up}; do [ $(cut -d. -f1 /proc/uptime) -ge $end ] && exit 9; usleep 20000; done; "
                  "echo $(( ($(ns) - t0) / 1000 ))", timeout_s=330)
        assert r.rc == 0, ("32 agents did not all reach STANDBY", r, a.run("tail -3 /tmp/ag/log.v*").out)
        res["startup_ms"] = int(r.out.split()[-1]) / 1000.0
        res.update(agent_usage(a))
        res["tcg_factor"] = tcg_factor(a)
        res["detection_ms"] = detection(a, b, devs, runs)
    finally:
        a.run("pkill -9 -x nvfenced; true", timeout_s=30)
        remove_namespaces(lab, extra)
    return res


def agent_usage(a):
    """Per-agent VmRSS (KiB) and CPU over 30 s standing by."""
    sample = ("for p in $(pgrep -x nvfenced); do set -- $(cut -d' ' -f14,15 /proc/$p/stat); "
              "echo $p $(( $1 + $2 )) $(awk '/^VmRSS/ {print $2}' /proc/$p/status); done")
    a.run("sleep 5", timeout_s=30)
    r0 = a.run(sample, timeout_s=60)
    a.run("sleep 30", timeout_s=60)
    r1 = a.run(sample, timeout_s=60)
    hz = int(a.run("getconf CLK_TCK 2>/dev/null || echo 100", timeout_s=30).out.strip() or 100)
    before = {f[0]: (int(f[1]), int(f[2])) for f in (ln.split() for ln in r0.out.splitlines()) if len(f) == 3}
    after = {f[0]: (int(f[1]), int(f[2])) for f in (ln.split() for ln in r1.out.splitlines()) if len(f) == 3}
    pids = sorted(set(before) & set(after))
    assert len(pids) == AGENTS, (r0.out, r1.out)
    cpu = [(after[p][0] - before[p][0]) / hz / 30.0 * 100.0 for p in pids]
    rss = [max(before[p][1], after[p][1]) / 1024.0 for p in pids]
    return {"rss_mib_max": max(rss), "rss_mib_median": statistics.median(rss),
            "cpu_pct_max": max(cpu), "cpu_pct_median": statistics.median(cpu), "cpu_hz": hz}


SIM_WORK = "nvfence-sim --schedules 1000 --first-seed 1 --jobs 1 --cluster etcd"


def tcg_factor(a):
    """How many times more CPU the same deterministic work takes in the
    guest than on this machine: nvfence-sim over the same 1000 schedules,
    user+system CPU of the best of 3 on each side. Dividing the guest's CPU
    figure by it estimates the figure on this machine's own CPU (an
    estimate: TCG slows kernel paths, device emulation included, by other
    factors than user code)."""
    guest, host = [], []
    hz = int(a.run("getconf CLK_TCK 2>/dev/null || echo 100", timeout_s=30).out.strip() or 100)
    for _ in range(3):
        # The shell's children's CPU (fields 16 and 17 of /proc/$$/stat) around the run.
        r = a.run("st() { sed 's/.*) //' /proc/$$/stat | awk '{print $14 + $15}'; }; b=$(st); "
                  f"{SIM_WORK} >/dev/null; e=$(st); echo $((e - b))", timeout_s=600)
        assert r.rc == 0, ("nvfence-sim in the guest", r)
        guest.append(int(r.out.split()[-1]) / hz)
        t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(nvlab.util.build_dir() / "bin" / SIM_WORK.split()[0])] + SIM_WORK.split()[1:],
                       check=True, stdout=subprocess.DEVNULL)
        t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        host.append(t1.ru_utime + t1.ru_stime - t0.ru_utime - t0.ru_stime)
    return min(guest) / min(host)


def detection(a, b, devs, runs):
    """ms from b's --victim-node preempt of node 1 to that agent's fence action."""
    xs = []
    for i in range(2, min(runs, AGENTS - 1) + 2):
        d = devs[b.name][i - 1]
        ok(nvf(b, "register", "--node", "2", dev=d), "register b")
        r = b.run(NS + f"t0=$(ns); nvfence preempt {d} --victim-node 1 >/dev/null 2>&1; echo $t0 $(ns)",
                  timeout_s=60)
        t0, t_done = map(int, r.out.split()[-2:])
        w = a.wait_for(f"test -s /tmp/ag/fenced.v{i}", timeout_s=30, interval_s=0.05)
        assert w.rc == 0, ("agent v%d never ran its fence action" % i, a.run(f"tail -5 /tmp/ag/log.v{i}").out)
        t1 = int(a.run(f"cat /tmp/ag/fenced.v{i}", timeout_s=30).out.split()[-1])
        xs.append(((t1 - t0) / 1e6, (t1 - t_done) / 1e6))
    return xs


def agent_lines(ag):
    det = [x[0] for x in ag["detection_ms"]]
    after = [x[1] for x in ag["detection_ms"]]
    return [f"agents      {AGENTS:>3d}  startup      {ag['startup_ms']:9.1f} ms (all {AGENTS} STANDBY)",
            f"agents      {AGENTS:>3d}  rss          {ag['rss_mib_median']:9.2f} MiB median, "
            f"{ag['rss_mib_max']:.2f} max per agent",
            f"agents      {AGENTS:>3d}  cpu          {ag['cpu_pct_median']:9.3f} % of a core median, "
            f"{ag['cpu_pct_max']:.3f} max per agent (30 s standing by, {ag['cpu_hz']} Hz ticks, TCG)",
            f"agents      {AGENTS:>3d}  cpu-est      {ag['cpu_pct_median'] / ag['tcg_factor']:9.4f} % of this machine's core "
            f"(TCG costs {ag['tcg_factor']:.1f}x this machine's CPU for the same nvfence-sim work)",
            f"agents      {AGENTS:>3d}  detection    {statistics.median(det):9.1f} ms median, {max(det):.1f} max "
            f"({len(det)} runs, preempt start to fence action)",
            f"agents      {AGENTS:>3d}  after-cli    {statistics.median(after):9.1f} ms median, {max(after):.1f} max "
            f"(from the preempt command's exit; negative: the agent acted before the CLI had exited)"]


LOAD_POINTS = ((0, 0), (4096, 32), (4096, 128), (131072, 32), (131072, 128))  # (bytes per write, QD); 0: idle


def pct(xs, q):
    """The q-th percentile (0-100) of xs, linear between closest ranks."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def load_axis(lab, runs):
    """Verified preempt-and-abort of a holder writing at QD 32 / 128, 4 KiB / 128 KiB.

    Host a (node 1) holds and runs nvfence-load (FencedWriter) from LBA 8192
    to the namespace's end; once 200 writes are acknowledged, host b (node 2)
    runs `nvfence preempt` (Report, register, preempt-and-abort, verifying
    Report). Per run: the preempt's own elapsed_us, the guest time around the
    command, and the writer's drain (first fenced completion to every I/O it
    had queued completed, nvfence-load's settled_ms). Each run must end with
    the writer latched and settled and at least one write refused."""
    a, b = lab.hosts[0], lab.hosts[1]
    geo = a.run("d=$(basename $(readlink -f $NVFENCE_DEV)); cat /sys/block/$d/queue/logical_block_size /sys/block/$d/size",
                timeout_s=30)
    lba_bytes, sectors = map(int, geo.out.split())
    res = {}
    for bs, qd in LOAD_POINTS:
        xs = {"preempt": [], "command": [], "drain": [], "in_flight": []}
        for _ in range(runs):
            reset(lab)
            ok(nvf(a, "register", "--node", "1"), "register a")
            key = ok(nvf(a, "acquire"), "acquire").json["key"]
            bg = None
            if bs:
                bpi = bs // lba_bytes
                count = (sectors * 512 // lba_bytes - 8192) // bpi
                bg = a.spawn(f'nvfence-load "$NVFENCE_DEV" --start 8192 --count {count} --qd {qd} '
                             f'--blocks-per-io {bpi} --key {key} --max-errors 1000000', log_path="/tmp/load.log")
                a.wait_for("[ $(grep -c '^C .* ok' /tmp/load.log) -ge 200 ]", timeout_s=120).check()
            r = b.run(NS + 't0=$(ns); nvfence preempt "$NVFENCE_DEV" --node 2 --json > /tmp/p.json; '
                      'rc=$?; t1=$(ns); echo $rc $(( (t1 - t0) / 1000 )); cat /tmp/p.json', timeout_s=120)
            rc, us = map(int, r.out.split("\n", 1)[0].split())
            assert rc == 0, ("preempt", r)
            xs["preempt"].append(json.loads(r.out.split("\n", 1)[1])["elapsed_us"] / 1000.0)
            xs["command"].append(us / 1000.0)
            if bg:
                assert bg.wait(timeout_s=180), "nvfence-load did not stop after the preempt"
                s = json.loads([x for x in bg.output().splitlines() if x.startswith("S ")][-1][2:])
                assert s["fenced"] >= 1 and s["latched"] and s["settled"], ("writer not fenced", s)
                assert s["ok"] < count, ("the writer finished before the preempt", s)
                xs["drain"].append(s["settled_ms"])
                xs["in_flight"].append(s["fenced"] + s["error"])
        res[(bs, qd)] = xs
        print(f"  load {bs} B QD {qd}: done", file=sys.stderr, flush=True)
    return res


def load_lines(res, runs):
    lines = []
    base = statistics.median(res[(0, 0)]["preempt"])
    for (bs, qd), xs in res.items():
        what = "idle" if not bs else f"{bs // 1024:d}K qd {qd:d}"
        p = xs["preempt"]
        row = (f"load  {what:>12s}  preempt {statistics.median(p):8.1f} ms median, p99 {pct(p, 99):8.1f}, "
               f"{statistics.median(p) / base:5.2f}x idle; command {statistics.median(xs['command']):8.1f} ms")
        if xs["drain"]:
            row += (f"; writer drain {statistics.median(xs['drain']):7.1f} ms median, p99 {pct(xs['drain'], 99):7.1f}; "
                    f"refused {statistics.median(xs['in_flight']):.0f} median")
        lines.append(row)
    lines.append(f"load: {runs} runs per point; p99 of {runs} runs is interpolated between the two largest")
    return lines


def table(axis, points, costs, res, extra=None):
    lines = []
    for c in costs:
        base = statistics.median(res[(points[0], c)])
        for p in points:
            xs = res[(p, c)]
            med = statistics.median(xs)
            row = f"{axis:12s} {p:>3d}  {c:12s} {med:9.1f} {max(xs):9.1f} {med / base:6.2f}x"
            if extra and c == "report":
                row += f"  {int(statistics.median(extra[p])):>6d} B"
            lines.append(row)
    return lines


def write_dat(path, axis, points, costs, res, extra=None):
    cols = ["#" + axis] + [f"{c}_{s}" for c in costs for s in ("median_ms", "max_ms")]
    if extra:
        cols.append("report_bytes")
    with open(path, "w") as f:
        f.write(" ".join(cols) + "\n")
        for p in points:
            row = [str(p)]
            for c in costs:
                xs = res[(p, c)]
                row += [f"{statistics.median(xs):.3f}", f"{max(xs):.3f}"]
            if extra:
                row.append(str(int(statistics.median(extra[p]))))
            f.write(" ".join(row) + "\n")


def plot(dat, png, axis, points, costs):
    series = ", ".join(f"'{dat}' using 1:{2 + 2 * i} with linespoints title '{c} (median)'"
                       for i, c in enumerate(costs))
    script = (f"set terminal png size 900,600\nset output '{png}'\nset logscale x 2\n"
              f"set xrange [{points[0] * 0.8}:{points[-1] * 1.25}]\nset xtics ({', '.join(str(p) for p in points)})\nset xlabel '{axis}'\n"
              f"set ylabel 'ms (median)'\nset yrange [0:*]\nset key top left\nset grid\n"
              f"set title 'nvfence failover cost vs {axis}'\nplot {series}\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def write_load_dat(path, res):
    with open(path, "w") as f:
        f.write("#load preempt_median_ms preempt_p99_ms drain_median_ms drain_p99_ms\n")
        for (bs, qd), xs in res.items():
            d = xs["drain"] or [0.0]
            f.write(f"{'idle' if not bs else f'{bs // 1024}K-qd{qd}'} {statistics.median(xs['preempt']):.3f} "
                    f"{pct(xs['preempt'], 99):.3f} {statistics.median(d):.3f} {pct(d, 99):.3f}\n")


def plot_load(dat, png):
    script = (f"set terminal png size 900,600\nset output '{png}'\nset style data histograms\n"
              "set style histogram clustered gap 1\nset style fill solid 0.6 border -1\nset boxwidth 0.9\n"
              "set ylabel 'ms'\nset yrange [0:*]\nset key top left\nset grid ytics\n"
              "set title 'nvfence preempt-and-abort vs the write load of the holder'\n"
              f"plot '{dat}' using 2:xtic(1) title 'preempt (median)', '' using 3 title 'preempt (p99)', "
              "'' using 4 title 'writer drain (median)', '' using 5 title 'writer drain (p99)'\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs per point and cost (default 10)")
    ap.add_argument("--out", default="/tmp/nvfence-scale", help="directory for the .dat files and plots")
    ap.add_argument("--smp", type=int, default=1,
                    help="vCPUs of the lab VM (default 1, as the tests; 2 lets nvmet and the fencer run side by side)")
    ap.add_argument("--axes", default="registrants,namespaces,agents,load",
                    help="comma-separated subset of registrants, namespaces, agents, load (default: all)")
    a = ap.parse_args()
    axes = set(a.axes.split(","))
    if not axes or axes - {"registrants", "namespaces", "agents", "load"}:
        ap.error("--axes: a comma-separated subset of registrants, namespaces, agents, load")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = loadavg()
    # 16 controllers x 32 namespaces of block devices: more guest memory.
    with nvlab.Lab(hosts=16, topology="loop", memory_mb=1024, smp=a.smp) as lab:
        for h in lab.hosts:
            h.env["NVFENCE_STATE_DIR"] = f"/tmp/state-{h.name}"
        reg, size = registrants_axis(lab, a.runs) if "registrants" in axes else ({}, {})
        ns = namespaces_axis(lab, a.runs) if "namespaces" in axes else {}
        ag = agents_axis(lab, a.runs) if "agents" in axes else {}
        ld = load_axis(lab, a.runs) if "load" in axes else {}
    load1 = loadavg()
    lines = [f"loadavg at start: {load0}",
             f"nvfence scale, loop lab (16 identities on nvme-loop, QEMU TCG, {a.smp} vCPU), {a.runs} runs per point, "
             "guest-timed ms (monotonic)",
             f"{'axis':12s} {'n':>3s}  {'cost':12s} {'median':>9s} {'max':>9s} {'ratio':>7s}  report size",
             *(table("registrants", REGISTRANTS, REG_COSTS, reg, size) if reg else []),
             *(table("namespaces", NAMESPACES, NS_COSTS, ns) if ns else []),
             *(agent_lines(ag) if ag else []),
             *(load_lines(ld, a.runs) if ld else []),
             "targets: registrants 16 within 1.25x of 2; namespaces 32 within 2x of 1; idle agent < 8 MiB RSS "
             "and < 0.1% of a core; detection < 100 ms with 32 agents",
             f"loadavg at end: {load1}"]
    print("\n".join(lines))
    (out / "scale.txt").write_text("\n".join(lines) + "\n")
    plots = []
    if reg:
        write_dat(out / "scale-registrants.dat", "registrants", REGISTRANTS, REG_COSTS, reg, size)
        plots.append(("registrants", REGISTRANTS, REG_COSTS))
    if ns:
        write_dat(out / "scale-namespaces.dat", "namespaces", NAMESPACES, NS_COSTS, ns)
        plots.append(("namespaces", NAMESPACES, NS_COSTS))
    if ld:
        write_load_dat(out / "scale-load.dat", ld)
    if not plots and not ld:
        print(f"figures in {out}/scale.txt")
    elif shutil.which("gnuplot"):
        for axis, points, costs in plots:
            plot(out / f"scale-{axis}.dat", out / f"scale-{axis}.png", axis, points, costs)
        if ld:
            plot_load(out / "scale-load.dat", out / "scale-load.png")
        print(f"figures and plots in {out}")
    else:
        print(f"figures in {out} (no gnuplot: apt-get install gnuplot-nox for the plots)")

if __name__ == "__main__":
    main()
