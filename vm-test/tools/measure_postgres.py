#!/usr/bin/python3
"""Failover figures of PostgreSQL on the shared namespace under Pacemaker
with fence_nvfence (issue 28; docs/PERFORMANCE.md, docs/POSTGRES.md).

The cluster of test_postgres_failover.py (nvlab.clusters.postgres: three systemd
hosts, docs/POSTGRES.md's recipe, the client on c). The client runs
throughout; each round takes the node that runs PostgreSQL out by the
round's scenario and times, from the fault (host wall clock; guests'
clocks are set from it), each step from the survivors' journals and the
client's log:

  token lost -> membership without it -> fencing requested -> fence_nvfence
  done -> file system mounted -> PostgreSQL started -> first commit
  acknowledged by the new primary.

Then the old primary is resumed (freeze) or its link healed (cut), its
nvfenced must run its fence action and its Pacemaker stop itself, it
rejoins as a standby by the documented procedure, and the rows are
checked on the new primary (every acknowledged row present, none twice,
pg_amcheck): a round whose check fails ends the measurement with an error.

Scenarios: `freeze` (QMP stop of the primary's VM) and `cut` (its cluster
link cut, storage up). A kill cannot be repeated on one cluster boot (the
VM is gone), so it is not measured here; test_postgres_failover.py runs it.

Usage: vm-test/tool measure_postgres [ROUNDS] [--scenarios freeze,cut]
ROUNDS (default 5) per scenario. NVFENCE_PCMK_TOKEN_MS sets corosync's
token (nvlab/clusters/pacemaker.py: lab default 10000 ms; corosync's default for
three nodes is 3650 ms); the table names the token the running cluster
reports. Exit status 0 when every round passed its checks, 1 when one
failed, 2 on bad arguments.
"""
import os
import statistics
import sys
import time


import nvlab
from nvlab.steps import reset
from nvlab.clusters.pacemaker import NO_ETCD, STEPS
from nvlab.clusters.postgres import (CLIENT_NODE, PACKAGES, PG_LOG_STEPS, PG_STEPS, Client, PgCluster, check_rows,
                          failover_steps)

SCENARIOS = ("freeze", "cut")
ORDER = ([n for n, _ in STEPS] + [n for n, _ in PG_STEPS] + [n for n, _ in PG_LOG_STEPS]
         + ["first commit"])


def fault(cl, h, scenario: str) -> None:
    if scenario == "freeze":
        h.pause()
    else:
        h.cut("cluster")


def undo(cl, h, scenario: str, wall0: float) -> dict:
    """The old primary back: resumed or healed; its watcher fenced it and
    its Pacemaker stopped itself (the lines, for the log)."""
    if scenario == "freeze":
        h.resume()
        cl.sync_clock(h)
        watcher = cl.wait_watcher_fenced(h.name, wall0)
    else:
        watcher = cl.wait_watcher_fenced(h.name, wall0)
        h.heal("cluster")
    return {"watcher": watcher, "pacemaker": cl.wait_stopped_itself(h.name)}


def one_round(cl, client, scenario: str) -> dict:
    old = cl.wait_pg()
    h = cl.by_name[old]
    survivors = [x for x in cl.live() if x is not h]
    via = cl.by_name[CLIENT_NODE]
    cl.sync_clock(via)
    client.start()
    client.wait_acks(5, node=old, after_wall=time.time(), timeout_s=300)
    load = os.getloadavg()[0]
    wall0 = time.time()
    fault(cl, h, scenario)
    try:
        new = cl.wait_pg(timeout_s=900, exclude=(old,), via=via)
        first = client.wait_acks(1, node=new, after_wall=wall0, timeout_s=300)
        done = time.time()
        steps, lines = failover_steps(cl, survivors, old, new, wall0, first, done)
        back = undo(cl, h, scenario, wall0)
    except BaseException:
        if scenario == "freeze":
            h.resume()
        else:
            h.heal("cluster")
        raise
    client.stop()
    rows = check_rows(cl, client, new)
    cl.pg_rejoin(old)
    return {"scenario": scenario, "old": old, "new": new, "load": load, "steps": steps, "lines": lines,
            "rows": rows, **back}


def table(results: list, token_ms: int, consensus_ms: int) -> None:
    for scenario in sorted({r["scenario"] for r in results}):
        rs = [r for r in results if r["scenario"] == scenario]
        print(f"\n{scenario}: corosync token {token_ms} ms, consensus {consensus_ms} ms; {len(rs)} rounds; "
              f"load average (1 min) at each fault {', '.join(format(r['load'], '.1f') for r in rs)}")
        print("| step (s after the fault) | rounds | median |")
        print("|---|---|---|")
        for n in ORDER:
            vals = [r["steps"][n] for r in rs if n in r["steps"]]
            if vals:
                print(f"| {n} | {', '.join(f'{v:.2f}' for v in vals)} | **{statistics.median(vals):.2f}** |")
        for a, b, what in (("fencing requested", "agent done", "nvfence's part: fence requested -> done"),
                           ("membership without it", "fencing requested", "Pacemaker: membership -> request"),
                           ("agent done", "first commit", "fence done -> first commit"),
                           ("file system mounted", "PostgreSQL: ready", "mounted -> PostgreSQL ready"),
                           ("PostgreSQL: ready", "first commit", "PostgreSQL ready -> the client's first commit")):
            d = [r["steps"][b] - r["steps"][a] for r in rs if a in r["steps"] and b in r["steps"]]
            if d:
                print(f"| {what} | {', '.join(f'{v:.2f}' for v in d)} | **{statistics.median(d):.2f}** |")
        acked = [r["rows"]["acked"] for r in rs]
        print(f"rows acknowledged (cumulative, every one present after each round): {acked}", flush=True)


def parse(args: list):
    scenarios = ["freeze"]
    if "--scenarios" in args:
        i = args.index("--scenarios")
        if i + 1 >= len(args):
            raise ValueError("--scenarios needs a value")
        scenarios = args[i + 1].split(",")
        del args[i:i + 2]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        raise ValueError(f"unknown scenario {bad[0]!r} (known: {', '.join(SCENARIOS)})")
    if len(args) > 1 or (args and not args[0].isdigit()):
        raise ValueError(f"ROUNDS must be a positive number, not {' '.join(args)!r}")
    rounds = int(args[0]) if args else 5
    if rounds < 1:
        raise ValueError("ROUNDS must be at least 1")
    return rounds, scenarios


def main() -> int:
    try:
        rounds, scenarios = parse(sys.argv[1:])
    except ValueError as e:
        print(f"measure_postgres: {e}\n{__doc__.split('Usage:')[1].strip()}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    print(f"load average at the start: {os.getloadavg()}", flush=True)
    with nvlab.Lab(hosts=3, topology="fabric", flavour="systemd", packages=list(PACKAGES),
                   cluster_net=True, memory_mb=1024, boot_timeout_s=900, volume_mib=512,
                   extra_cmdline=NO_ETCD) as lab:
        reset(lab)
        cl = PgCluster(lab)
        for step in (cl.install, cl.pg_install, cl.start_watchers, cl.init_storage, cl.start_stack, cl.configure):
            step()
        cl.create_schema()
        client = Client(cl)
        token, consensus = cl.cmap("runtime.config.totem.token"), cl.cmap("runtime.config.totem.consensus")
        print(f"cluster configured at {time.monotonic() - t0:.0f} s", flush=True)
        results = []
        for i in range(rounds * len(scenarios)):
            scenario = scenarios[i % len(scenarios)]
            try:
                r = one_round(cl, client, scenario)
            except AssertionError as e:
                cl.collect(f"measure-postgres-{i + 1}")
                print(f"round {i + 1} ({scenario}) failed: {e}\n{cl.pg_diag()}", flush=True)
                table(results, token, consensus)
                return 1
            results.append(r)
            print(f"round {i + 1}: {scenario} of {r['old']} -> {r['new']} (load {r['load']:.1f}): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["steps"].items(), key=lambda kv: kv[1])),
                  flush=True)
            print(f"    rows: {r['rows']}\n    watcher: {r['watcher']}\n    pacemaker: {r['pacemaker']}", flush=True)
        table(results, token, consensus)
    print(f"total {time.monotonic() - t0:.0f} s; load average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
