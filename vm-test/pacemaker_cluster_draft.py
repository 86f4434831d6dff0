"""DRAFT, NOT YET PASSING: rename to test_pacemaker_cluster.py (CTest
vm_pacemaker_cluster, label vm, by the glob in vm-test/CMakeLists.txt) once
it has passed. One run (2026-11-30, load about 21, lab boot 644 s, cluster
formed after about 4 more minutes): 1 passed; in 2 the fence passed but b
did not come back Online within 400 s after restarting its corosync and
pacemaker (Pacemaker had also fenced b on its own just before, probably a
token loss under that load); in 3 Pacemaker reported the writer on a but
its unit had not run 120 s later (a start still pending behind b's
rejoin?). 4-6 were not run. Look at the DC's journal
(`journalctl -u pacemaker`) in those two places first.

fence_nvfence in a real Corosync/Pacemaker cluster (issue 15): three
systemd hosts (a, b, c) from Debian 12 packages, Corosync (knet) on the
lab's cluster network, the stonith resource `nvfence` (fence_nvfence,
provides=unfencing) and the writer resource `writer` (systemd:nvwriter,
requires=unfencing: stamped nvfence-load passes over one region of the
shared namespace). See pacemaker_lab.py for the configuration.

1. start: every node is unfenced (3 keys) before the writer writes; the
   fencer runs the agent's monitor and list actions (`stonith_admin
   --query/--list-targets`, the recurring monitor op) and status answers
   0/2 with the options on stdin as the fencer passes them;
2. `stonith_admin --fence` of a node that does not run the writer: its
   key is gone, its writes are refused; it rejoins and is unfenced again;
3. the writer's node freezes (QMP stop): the survivors fence it through
   fence_nvfence, the writer restarts on a survivor, the frozen node
   resumes and every write of its is refused; media check clean;
4. only the cluster network of the writer's node is cut (storage up): it
   is fenced at the device although it still reaches it;
5. the writer's node is killed: fenced, the writer moves; media check of
   every pass of the whole test clean (zero stale writes);
6. a fencing that cannot reach the device (namespace gone on the target)
   is reported as a failure by stonith_admin and in the history.
After each: `stonith_admin --history` and the device's report.
"""
import re
import shlex
import time

import pytest

import nvlab
from nvtest import CONFLICT, OK, nvf, reset
from pacemaker_lab import (NO_ETCD, NODE_IDS, NODE_MAP, Cluster, fence_failed, fenced_ok, freeze_writer, keys_by_node,
                           unfenced_ok, wait)

T0 = time.monotonic()


@pytest.fixture(scope="module")
def cl():
    with nvlab.Lab(hosts=3, topology="fabric", flavour="systemd", packages=list(nvlab.CLUSTER_PACKAGES),
                   cluster_net=True, memory_mb=1024, boot_timeout_s=900,
                   extra_cmdline=NO_ETCD) as lab:
        print(f"lab up in {time.monotonic() - T0:.0f} s", flush=True)
        reset(lab)
        c = Cluster(lab)
        c.install()
        c.start_stack()
        c.configure()
        yield c
        print(f"test_pacemaker_cluster: {time.monotonic() - T0:.0f} s in all", flush=True)


def agent_stdin(cl, action, target):
    """The agent with its options on stdin, as pacemaker-fenced runs it."""
    text = (f"action={action}\nport={target}\nnodename={target}\ndevices={cl.dev}\nnode_ids={NODE_MAP}\n"
            "plug=" + target + "\n")
    return cl.any().run(f"printf %s {shlex.quote(text)} | fence_nvfence", timeout_s=60)


def test_1_start_unfences_every_node_before_the_writer(cl):
    w = cl.wait_writer(timeout_s=600)
    st = cl.report()
    assert sorted(keys_by_node(st)) == [1, 2, 3], st
    assert st["type"] == "WERO", st
    hist = cl.history()
    for n in NODE_IDS:
        assert unfenced_ok(hist, n), hist
    cl.wait_writing(w)
    print(f"writer on {w}; history:\n{hist}", flush=True)

    a = cl.any()
    # monitor: the start and the recurring op of the stonith resource.
    r = a.run("crm_resource -O -r nvfence", timeout_s=60)
    assert re.search(r"nvfence_monitor_10000 .*rc=0", r.out), r.out
    r = a.run("stonith_admin --query nvfence --timeout 60", timeout_s=90)
    assert r.rc == 0, r
    # list: the fencer asks the agent which nodes it can fence (dynamic-list).
    r = a.run("stonith_admin --list-targets nvfence --timeout 60", timeout_s=90)
    assert r.rc == 0 and all(re.search(rf"^\s*{n}\b", r.out, re.M) for n in NODE_IDS), r
    r = a.run("stonith_admin --list c --timeout 60", timeout_s=90)
    assert r.rc == 0 and "nvfence" in r.out, r
    # status with the fencer's stdin: 0 for an unfenced node.
    assert agent_stdin(cl, "status", "c").rc == 0


def test_2_stonith_admin_fence_and_rejoin(cl):
    w = cl.writer_node()
    victim = next(n for n in ("c", "b", "a") if n != w)
    via = cl.by_name[w]
    r = via.run(f"stonith_admin --fence {victim} --timeout 120", timeout_s=180)
    assert r.rc == 0, (r.out, r.err, via.journal("pacemaker.service", lines=60))
    st = cl.report(via)
    assert NODE_IDS[victim] not in keys_by_node(st), st
    assert nvf(cl.by_name[victim], "write", "--lba", "201").rc == CONFLICT
    assert agent_stdin(cl, "status", victim).rc == 2
    hist = cl.history(via)
    assert fenced_ok(hist, victim), hist
    print(f"fenced {victim} by stonith_admin; history:\n{hist}", flush=True)
    cl.rejoin(victim)
    assert nvf(cl.by_name[victim], "write", "--lba", "202").rc == OK
    assert cl.writer_node() == w, "the writer moved although its node was not fenced"


def test_3_freeze_the_writer_node(cl):
    w, got, hist = freeze_writer(cl)
    print(f"freeze {w}: key removed after {got['key']:.1f} s, first write on {got['writer']} after "
          f"{got['write']:.1f} s; history:\n{hist}", flush=True)
    cl.set_writer("Stopped")
    res = cl.check_media()
    print(f"media check: {res}", flush=True)
    cl.rejoin(w)
    cl.set_writer("Started")
    cl.wait_writer()


def test_4_cut_cluster_network_of_the_writer_node(cl):
    w = cl.writer_node()
    h = cl.by_name[w]
    cl.wait_writing(w)
    h.cut("cluster")
    try:
        assert not h.is_cut          # storage still up
        wait(lambda: NODE_IDS[w] not in keys_by_node(cl.report(cl.any(exclude=(w,)))), 180,
             f"{w}'s key to be removed", 0.5)
        moved = cl.wait_writer(exclude=(w,), timeout_s=180)
        # The node still reaches the device, and the device refuses it.
        assert h.run("dd if=$NVFENCE_DEV of=/dev/null bs=4096 count=1 iflag=direct", timeout_s=60).rc == 0
        assert nvf(h, "write", "--lba", "205").rc == CONFLICT
        hist = cl.history(cl.by_name[moved])
        assert fenced_ok(hist, w), hist
        print(f"cut {w}'s cluster network: fenced, writer on {moved}; history:\n{hist}", flush=True)
    finally:
        h.heal("cluster")
    cl.wait_writing(moved)
    cl.rejoin(w)


def test_5_kill_the_writer_node(cl):
    w = cl.writer_node()
    cl.wait_writing(w)
    cl.snapshot()
    cl.by_name[w].kill()
    cl.killed.add(w)
    wait(lambda: NODE_IDS[w] not in keys_by_node(cl.report()), 180, f"{w}'s key to be removed", 0.5)
    moved = cl.wait_writer(exclude=(w,), timeout_s=180)
    cl.wait_writing(moved)
    hist = cl.history()
    assert fenced_ok(hist, w), hist
    cl.set_writer("Stopped")
    res = cl.check_media()
    print(f"killed {w}: fenced, writer on {moved}; media check of every pass: {res}\nhistory:\n{hist}", flush=True)
    assert res["passes"] >= 4, res


def test_6_fencing_failure_is_a_failure(cl):
    live = [h.name for h in cl.live()]
    victim, via = live[-1], cl.by_name[live[0]]
    cl.lab.target.ns_disable()
    try:
        r = via.run(f"stonith_admin --fence {victim} --timeout 40", timeout_s=120)
        assert r.rc != 0, f"stonith_admin reported success with the namespace gone: {r}"
        hist = cl.history(via)
        assert fence_failed(hist, victim), hist
        print(f"fencing {victim} with the namespace gone: rc {r.rc}; history:\n{hist}", flush=True)
        r = agent_stdin(cl, "monitor", victim)
        assert r.rc == 1, r
    finally:
        cl.lab.target.ns_enable(wait_hosts=False)
