"""PostgreSQL 15 fails over on the shared namespace (issue 28): three
systemd hosts (corosync, pacemaker, nvfenced as each node's watcher), the
stonith resource fence_nvfence with unfencing, the group pg (Filesystem
ext4 on the namespace, systemd:postgresql@15-main) on a or b, the client on
c. The recipe is docs/POSTGRES.md's (nvlab.clusters.postgres.RECIPE_*), applied
verbatim.

1. start: PostgreSQL runs on an unfenced node, the client's commits are
   acknowledged there;
2. the primary's VM frozen (QMP stop) past the token timeout: the survivor
   fences it through fence_nvfence, mounts, recovers and serves; the time
   from the freeze to the first commit acknowledged by the new primary is
   measured. With the group stopped (the media quiet), the old primary
   resumes: a commit on its still running server is not acknowledged, and
   the namespace's sha256 is the same after it resumed, tried `sync` and
   was taken out of the cluster by its watcher as before. The group starts
   again: crash recovery was clean, every acknowledged row is present, no
   row twice, pg_amcheck passes.
3. the old primary rejoins as a standby (docs/POSTGRES.md, then
   PACEMAKER.md's procedure); the primary's cluster link is cut, its
   storage path up: the standby fences it, mounts and serves; with the
   group stopped, the cut node's commit is not acknowledged and the
   namespace's sha256 is the same while it runs cut and after the heal;
   the same row checks;
4. it rejoins in turn; the primary's VM is killed (SIGKILL to QEMU): the
   standby fences it, recovers and serves; the same row checks.
"""
import os
import re
import subprocess
import time

import pytest

import nvlab
from nvlab.steps import CONFLICT, nvf, reset
from nvlab.clusters.pacemaker import NO_ETCD, NODE_IDS, keys_by_node
from nvlab.clusters.postgres import (CLIENT_DIR, CLIENT_NODE, CLIENT_SCRIPT, DB_NODES, MOUNT, PACKAGES, RECIPE_CIB, RECIPE_NODE, RECIPE_REJOIN, RECIPE_STORAGE,
                          PGLOG, Client, PgCluster, check_rows, failover_steps)

T0 = time.monotonic()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def cl():
    with nvlab.Lab(hosts=3, topology="fabric", flavour="systemd", packages=list(PACKAGES),
                   cluster_net=True, memory_mb=1024, boot_timeout_s=900, volume_mib=512,
                   extra_cmdline=NO_ETCD) as lab:
        print(f"lab up in {time.monotonic() - T0:.0f} s; load: {os.getloadavg()}", flush=True)
        reset(lab)
        c = PgCluster(lab)
        c.install()
        c.pg_install()
        c.start_watchers()
        c.init_storage()
        c.start_stack()
        c.configure()
        print(f"cluster configured at {time.monotonic() - T0:.0f} s", flush=True)
        yield c
        print(f"test_postgres_failover: {time.monotonic() - T0:.0f} s in all", flush=True)


@pytest.fixture(scope="module")
def client(cl):
    c = Client(cl)
    yield c
    if c.bg:
        c.stop()


@pytest.fixture(autouse=True)
def diag_on_failure(request):
    t = time.monotonic()
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and "cl" in request.fixturenames:
        cl = request.getfixturevalue("cl")
        cl.collect(request.node.name)
        print(cl.pg_diag(), flush=True)
    print(f"\n[{request.node.name}: {time.monotonic() - t:.0f} s; at {time.monotonic() - T0:.0f} s]", flush=True)


def stale_commit(h):
    """A commit on h's own server (the fenced old primary's): it must not
    be acknowledged. Returns what psql said."""
    r = h.run("timeout 90 runuser -u postgres -- psql -X -A -t -v ON_ERROR_STOP=1 -d nvlab "
              "-c \"INSERT INTO acked_rows (id, via) VALUES (-1, 'stale') RETURNING id\" 2>&1; "
              "echo rc=$?", timeout_s=150)
    m = re.search(r"rc=(\d+)\s*$", r.out)
    assert m and m.group(1) != "0" and not re.search(r"^-1$", r.out, re.M), \
        f"the fenced old primary {h.name} acknowledged a commit: {r.out}"
    return r


def standby_back(cl):
    """A database node that an earlier scenario left fenced and out of the
    cluster back as a standby, by the documented procedure."""
    # The client's node is always a member: its view, not a fenced node's.
    r = cl.by_name[CLIENT_NODE].run("crm_mon -1", timeout_s=60)
    online = re.search(r"Online: \[ ([^\]]*) \]", r.out)
    assert online and CLIENT_NODE in online.group(1).split(), r.out
    up = set(online.group(1).split())
    for n in DB_NODES:
        if n not in up and n not in cl.killed:
            cl.pg_rejoin(n)
            keys = keys_by_node(cl.report())
            assert NODE_IDS[n] in keys, (n, keys)


def log_offsets(hosts):
    return {h.name: int(h.run(f"stat -c %s {PGLOG} 2>/dev/null || echo 0", timeout_s=30).out.strip() or 0)
            for h in hosts}


def test_0_recipe_is_the_documented_one():
    # What the lab applies stands in docs/POSTGRES.md, in the same order
    # (tests/docs/postgres_recipe_test.py checks the same without a VM).
    with open(os.path.join(ROOT, "docs", "POSTGRES.md")) as f:
        doc = f.read()
    pos = -1
    for cmd in RECIPE_NODE + RECIPE_STORAGE + RECIPE_CIB + RECIPE_REJOIN:
        i = doc.find(cmd)
        assert i >= 0, f"not in docs/POSTGRES.md: {cmd}"
        assert i > pos, f"docs/POSTGRES.md has it in another order: {cmd}"
        pos = i


# A scripted psql for the client's test on the lab's host: at 10.0.0.1 it
# answers three rows, then its session dies (a server crash); at 10.0.0.9
# the connection is refused; at 10.0.0.2 it answers every row.
FAKE_PSQL = r"""#!/bin/bash
case "$*" in *" -h 10.0.0.9 "*) echo "psql: error: connection refused"; exit 2;; esac
k=0
while IFS= read -r l; do
  k=$((k+1)); id=${l#*VALUES (}; id=${id%%,*}
  if [[ "$*" == *" -h 10.0.0.1 "* ]] && [ $k -gt 3 ]; then exit 2; fi
  echo "$id"
done
"""


def test_0b_client_acks_only_answered_rows_moves_on_and_keeps_its_pace(tmp_path):
    # The client (CLIENT_SCRIPT) on this host against a scripted psql: an
    # ack only for a row whose id came back, a failure moves to the next
    # node and ends the session there, at most 5 rows a second.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "psql").write_text(FAKE_PSQL)
    (tmp_path / "bin" / "psql").chmod(0o755)
    d = tmp_path / "d"
    (tmp_path / "pgclient").write_text(CLIENT_SCRIPT.replace(CLIENT_DIR, str(d)))
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    p = subprocess.Popen(["bash", str(tmp_path / "pgclient"), "a:10.0.0.1", "x:10.0.0.9", "b:10.0.0.2"], env=env)
    t0 = time.monotonic()
    time.sleep(4)
    (d / "stop").touch()
    assert p.wait(timeout=30) == 0
    secs = time.monotonic() - t0
    lines = [ln.split() for ln in (d / "log").read_text().splitlines()]
    assert lines[-1][0] == "stopped", lines[-3:]
    rows = [(k, int(i), node) for k, i, node, *_ in lines[:-1]]
    acks = [(i, node) for k, i, node in rows if k == "ack"]
    fails = [(i, node) for k, i, node in rows if k == "fail"]
    assert acks[:3] == [(1, "a"), (2, "a"), (3, "a")], rows
    assert fails[:2] == [(4, "a"), (5, "x")], rows
    assert acks[3] == (6, "b") and all(node == "b" for _, node in acks[3:]), rows
    tried = [i for k, i, _ in rows if k == "try"]
    assert tried == list(range(1, len(tried) + 1)), tried
    assert len(acks) <= 5 * secs + 1, f"{len(acks)} rows in {secs:.1f} s: more than 5 a second"


def test_1_postgres_serves_on_an_unfenced_node(cl, client):
    n = cl.create_schema()
    assert n != CLIENT_NODE, n
    keys = keys_by_node(cl.report())
    assert sorted(keys) == [1, 2, 3], keys
    client.start()
    first = client.wait_acks(20, node=n, timeout_s=300)
    r = cl.by_name[n].run("findmnt -n -o SOURCE,FSTYPE /srv/pgdata", timeout_s=30)
    assert r.rc == 0 and "ext4" in r.out, r
    print(f"PostgreSQL on {n}; first acknowledged commit at {first:.1f}; mount: {r.out.strip()}", flush=True)


def test_2_freeze_primary_fails_over_nothing_acknowledged_lost(cl, client):
    old = cl.wait_pg()
    frozen = cl.by_name[old]
    client.wait_acks(5, node=old, after_wall=time.time(), timeout_s=300)
    survivors = [h for h in cl.live() if h is not frozen]
    acked_before = len(client.acked())
    # Where each survivor's server log ends now: what recovery logs comes after.
    log_at = log_offsets(survivors)
    cl.sync_clock(cl.by_name[CLIENT_NODE])   # the client's acks are stamped with its clock
    load = os.getloadavg()
    wall0 = time.time()
    frozen.pause()
    try:
        new = cl.wait_pg(timeout_s=900, exclude=(old,))
        first = client.wait_acks(1, node=new, after_wall=wall0, timeout_s=300)
        seen = time.time()   # the host saw it (an upper bound, polled every 0.5 s)
        client.wait_acks(20, node=new, after_wall=wall0, timeout_s=300)
        client.stop()
        done = time.time()
        steps, lines = failover_steps(cl, survivors, old, new, wall0, first, done)
        steps["first commit seen by the test"] = seen - wall0
        # The media quiet: the group stopped on the new primary (a clean
        # shutdown: checkpoint, unmount), then its digest.
        cl.set_pg("Stopped")
        before = cl.media_digest()
    finally:
        frozen.resume()
    print(f"freeze of {old} (load before: {load}): "
          + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(steps.items(), key=lambda kv: kv[1])), flush=True)
    print("\n".join(lines), flush=True)

    # The old primary's server still runs, mounted, believing it is primary:
    # a commit there must not be acknowledged (its WAL flush is refused).
    stale = stale_commit(frozen)
    # Its page cache and file system try to write back; its watcher takes it
    # out of the cluster.
    sync = frozen.run("timeout 60 sync; echo rc=$?", timeout_s=90)
    cl.sync_clock(frozen)
    watcher = cl.wait_watcher_fenced(old, wall0)
    stopped = cl.wait_stopped_itself(old)
    after = cl.media_digest()
    pg_left = frozen.run("pgrep -a postgres | head -3; findmnt -n /srv/pgdata; "
                         "tail -5 /var/log/postgresql/postgresql-15-main.log", timeout_s=60)
    print(f"{old} after resume: commit attempt: {stale.out.strip()[-300:]}\nsync: {sync.out.strip()}\n"
          f"watcher: {watcher}\npacemaker: {stopped}\nleft: {pg_left.out.strip()[-600:]}", flush=True)
    assert after == before, (f"the namespace changed while the fenced {old} resumed "
                             f"(group stopped): {before} -> {after}")

    # The database again on the new primary: crash recovery happened at the
    # failover and the server started cleanly; every acknowledged row there.
    cl.set_pg("Started")
    n = cl.wait_pg(timeout_s=600, exclude=(old,))
    assert n == new, (n, new)
    log = cl.by_name[n].run(f"tail -c +{log_at[n] + 1} {PGLOG}", timeout_s=60).out
    assert re.search(r"not properly shut down; automatic recovery in progress|database system was interrupted",
                     log), log[-2000:]
    assert "redo done" in log, log[-2000:]
    assert not re.search(r"\b(PANIC|FATAL):.*(checksum|invalid page|could not)", log), log[-2000:]
    res = check_rows(cl, client, n)
    assert res["acked"] > acked_before, res
    print(f"after the failover to {n}: {res}; time to first commit {steps['first commit']:.1f} s", flush=True)


def test_3_cut_primary_cluster_link_storage_up(cl, client):
    # The dangerous one: the primary loses its cluster link only and keeps
    # running, its storage path up.
    standby_back(cl)
    old = cl.wait_pg()
    h = cl.by_name[old]
    survivors = [x for x in cl.live() if x is not h]
    via = survivors[0]   # the cut node's own view is its partition's
    log_at = log_offsets(survivors)
    cl.sync_clock(cl.by_name[CLIENT_NODE])
    client.start()
    client.wait_acks(5, node=old, after_wall=time.time(), timeout_s=300)
    acked_before = len(client.acked())
    load = os.getloadavg()
    wall0 = time.time()
    h.cut("cluster")
    try:
        assert "storage" not in h.cut_paths, h.cut_paths
        new = cl.wait_pg(timeout_s=900, exclude=(old,), via=via)
        first = client.wait_acks(1, node=new, after_wall=wall0, timeout_s=300)
        client.wait_acks(20, node=new, after_wall=wall0, timeout_s=300)
        client.stop()
        done = time.time()
        steps, lines = failover_steps(cl, survivors, old, new, wall0, first, done)
        print(f"cluster link of {old} cut (load before: {load}): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(steps.items(), key=lambda kv: kv[1])), flush=True)
        # Its storage path is up: a write of its own reaches the device and
        # is refused (Reservation Conflict), not lost on the way.
        w = nvf(h, "write", "--lba", "205", timeout_s=180)
        assert w.rc == CONFLICT, (w.rc, w.out, w.err, cl.kernel_log(old))
        rd = h.run("dd if=$NVFENCE_DEV of=/dev/null bs=4096 count=1 iflag=direct 2>&1; echo rc=$?", timeout_s=60)
        cl.set_pg("Stopped", via=via)
        before = cl.media_digest()
        stale = stale_commit(h)
        sync = h.run("timeout 60 sync; echo rc=$?", timeout_s=90)
        watcher = cl.wait_watcher_fenced(old, wall0)
        cut_digest = cl.media_digest()
    finally:
        h.heal("cluster")
    stopped = cl.wait_stopped_itself(old)
    h.run("timeout 60 sync", timeout_s=90)
    healed_digest = cl.media_digest()
    left = h.run(f"pgrep -a postgres | head -3; findmnt -n {MOUNT}; tail -8 {PGLOG}", timeout_s=60)
    print(f"{old} (cut, then healed): commit attempt: {stale.out.strip()[-400:]}\nsync: {sync.out.strip()}\n"
          f"watcher: {watcher}\npacemaker: {stopped}\nleft: {left.out.strip()[-900:]}\n"
          f"its own write: rc {w.rc} (3 = conflict); a direct read: {rd.out.strip()}", flush=True)
    assert before == cut_digest == healed_digest, \
        f"the namespace changed while the fenced {old} ran: {before} -> {cut_digest} -> {healed_digest}"

    cl.set_pg("Started", via=via)
    n = cl.wait_pg(timeout_s=600, exclude=(old,), via=via)
    assert n == new, (n, new)
    log = cl.by_name[n].run(f"tail -c +{log_at[n] + 1} {PGLOG}", timeout_s=60).out
    # The cut node may have stopped its database cleanly (no quorum) before
    # the fence landed: crash recovery on the survivor is not required here.
    assert "ready to accept connections" in log, log[-2000:]
    recovered = bool(re.search(r"automatic recovery in progress", log))
    res = check_rows(cl, client, n)
    assert res["acked"] > acked_before, res
    print(f"after the cut, on {n} (crash recovery: {recovered}): {res}; "
          f"time to first commit {steps['first commit']:.1f} s", flush=True)


def test_4_kill_primary_fails_over_to_the_rejoined_node(cl, client):
    # The previous scenario left its old primary fenced and out of the
    # cluster: back as a standby first.
    standby_back(cl)
    old = cl.wait_pg()
    victim = cl.by_name[old]
    survivors = [h for h in cl.live() if h is not victim]
    log_at = log_offsets(survivors)
    cl.sync_clock(cl.by_name[CLIENT_NODE])
    client.start()
    client.wait_acks(5, node=old, after_wall=time.time(), timeout_s=300)
    acked_before = len(client.acked())
    load = os.getloadavg()
    wall0 = time.time()
    victim.kill()
    cl.killed.add(old)
    new = cl.wait_pg(timeout_s=900, exclude=(old,))
    first = client.wait_acks(1, node=new, after_wall=wall0, timeout_s=300)
    client.wait_acks(20, node=new, after_wall=wall0, timeout_s=300)
    client.stop()
    done = time.time()
    steps, lines = failover_steps(cl, survivors, old, new, wall0, first, done)
    print(f"kill of {old} (load before: {load}): "
          + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(steps.items(), key=lambda kv: kv[1])), flush=True)
    log = cl.by_name[new].run(f"tail -c +{log_at[new] + 1} {PGLOG}", timeout_s=60).out
    assert re.search(r"not properly shut down; automatic recovery in progress|database system was interrupted",
                     log), log[-2000:]
    assert "redo done" in log, log[-2000:]
    res = check_rows(cl, client, new)
    assert res["acked"] > acked_before, res
    print(f"after the kill, on {new}: {res}; time to first commit {steps['first commit']:.1f} s", flush=True)
