#!/usr/bin/python3
"""Failover figures of fence_nvfence inside a real Corosync/Pacemaker
cluster (issue 15; docs/PERFORMANCE.md, docs/PACEMAKER.md).

The cluster of test_pacemaker_cluster.py (three systemd hosts, knet on the
cluster network, stonith resource fence_nvfence, writer resource
systemd:nvwriter). Each round freezes the node that runs the writer (QMP
stop) and times, on the host's monotonic clock:
  - freeze -> the frozen node's key gone from the device (a survivor polls
    `nvfence report` every 0.1 s in the guest),
  - freeze -> the survivor's writer has its first acknowledged write
    (Pacemaker asked where the writer runs every ~0.3 s, then its log
    polled every 0.1 s in the guest),
then resumes the node (its next write must be refused), checks the media
and lets it rejoin. Printed beside corosync's token and consensus as the
running cluster reports them (corosync-cmapctl runtime.config.totem.*).

Usage: vm-test/tool measure_pacemaker [ROUNDS] [--host-check both|dynamic|static]
ROUNDS defaults to 5, the host check to static (the lab's setting); with
`both` the same cluster is measured with dynamic-list and then with
static-list (pcmk_host_list, as docs/PACEMAKER.md's pcs example), ROUNDS
each, side by side.
"""
import os
import statistics
import sys
import time


import nvlab
from nvlab.steps import reset
from nvlab.clusters.pacemaker import NO_ETCD, STEPS, Cluster, fence_steps, freeze_writer


def measure(cl, rounds: int, label: str = "") -> dict:
    """The rounds on a configured cluster; prints the table, returns the figures."""
    cl.wait_writer(timeout_s=600)
    token = cl.cmap("runtime.config.totem.token")
    consensus = cl.cmap("runtime.config.totem.consensus")
    loads = []
    keys, writes, steps = [], [], []
    for i in range(rounds):
        loads.append(os.getloadavg()[0])
        w, got, _ = freeze_writer(cl)
        keys.append(got["key"])
        writes.append(got["write"])
        print(f"round {i + 1}: froze {w}: key removed {got['key']:.2f} s, first write on {got['writer']} "
              f"{got['write']:.2f} s (load {loads[-1]:.1f})", flush=True)
        survivors = [h for h in cl.live() if h.name != w]
        st, lines = fence_steps(survivors, w, got["freeze_wall"], got["freeze_wall"] + got["write"])
        st["key removed"] = got["key"]
        st["first write"] = got["write"]
        steps.append(st)
        print(f"round {i + 1}: the survivors' journals (s after the freeze): "
              + ", ".join(f"{k} {v:.2f}" for k, v in st.items()), flush=True)
        for line in lines:
            print(f"    {line}", flush=True)
        print(f"round {i + 1}: {w} after resuming: {cl.stopped_itself(w, timeout_s=60)}", flush=True)
        cl.set_writer("Stopped")
        res = cl.check_media()
        print(f"round {i + 1}: media check clean: {res['passes']} passes, {res['fenced_passes']} fenced, "
              f"last {res['last_writer']}", flush=True)
        cl.rejoin(w)
        cl.set_writer("Started")
        cl.wait_writer()
    detect = (token + consensus) / 1000
    print(f"\n{label}corosync: token {token} ms, consensus {consensus} ms (detection {detect:.1f} s); "
          f"load average (1 min) at each round's start {', '.join(f'{x:.1f}' for x in loads)}; {rounds} rounds")
    print("| what | rounds (s) | median |")
    print("|---|---|---|")
    print(f"| freeze -> frozen node's key removed | {', '.join(f'{k:.2f}' for k in keys)} | "
          f"**{statistics.median(keys):.2f} s** |")
    print(f"| freeze -> survivor's first acknowledged write | {', '.join(f'{k:.2f}' for k in writes)} | "
          f"**{statistics.median(writes):.2f} s** |")
    print(f"| key removed minus token + consensus | | {statistics.median(keys) - detect:+.2f} s |", flush=True)
    # The split, from a survivor's journal: corosync's detection,
    # Pacemaker's decision, the fence agent's run, the writer's start.
    names = [n for n, _ in STEPS] + ["key removed", "first write"]
    print("\n| step (s after the freeze) | rounds | median |")
    print("|---|---|---|")
    for n in names:
        vals = [st[n] for st in steps if n in st]
        if vals:
            print(f"| {n} | {', '.join(f'{v:.2f}' for v in vals)} | **{statistics.median(vals):.2f}** |")
    pairs = (("fencing requested", "agent done", "the fence: request to the agent's success"),
             ("membership without it", "fencing requested", "Pacemaker: new membership to the request"),
             ("membership without it", "transition calculated", "Pacemaker: new membership to its scheduler's transition"),
             ("fencing requested", "key removed", "request to the key gone from the device"))
    for a, b, what in pairs:
        d = [st[b] - st[a] for st in steps if a in st and b in st]
        if d:
            print(f"| {what} | {', '.join(f'{v:.2f}' for v in d)} | **{statistics.median(d):.2f}** |")
    print(flush=True)
    return {"token_ms": token, "consensus_ms": consensus, "keys": keys, "writes": writes, "loads": loads,
            "steps": steps}


def main() -> int:
    args = sys.argv[1:]
    check = "static"
    if "--host-check" in args:
        i = args.index("--host-check")
        check = args[i + 1]
        del args[i:i + 2]
    if check not in ("both", "dynamic", "static"):
        print(f"measure_pacemaker: --host-check must be both, dynamic or static, not {check!r}", file=sys.stderr)
        return 2
    rounds = int(args[0]) if args else 5
    t0 = time.monotonic()
    with nvlab.Lab(hosts=3, topology="fabric", flavour="systemd", packages=list(nvlab.CLUSTER_PACKAGES),
                   cluster_net=True, memory_mb=1024, boot_timeout_s=900,
                   extra_cmdline=NO_ETCD) as lab:
        reset(lab)
        cl = Cluster(lab)
        cl.install()
        cl.start_watchers()
        cl.start_stack()
        cl.configure()
        for mode in (("dynamic", "static") if check == "both" else (check,)):
            cl.set_host_check(mode == "static")
            measure(cl, rounds, label=f"pcmk_host_check={mode}-list: ")
        print(f"total {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
