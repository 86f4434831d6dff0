"""Issue 15's five scenarios in one real Corosync/Pacemaker cluster: three
systemd host VMs (Debian 12's corosync, pacemaker), knet on the cluster
network, a stonith resource fence_nvfence with provides=unfencing, a writer
resource (systemd:nvwriter) that requires unfencing, and nvfenced on every
node as its watcher (nvlab.clusters.pacemaker.Cluster.start_watchers; docs/PACEMAKER.md).

1. start: every node unfenced (3 keys) before the writer starts;
2. `stonith_admin --fence`: the node's key gone, its writes refused; it
   rejoins with a new key;
3. the writer's node frozen (QMP stop): fenced through fence_nvfence, the
   writer restarts on a survivor, the frozen node resumes, its writes are
   refused and its watcher takes it out of the membership; media check;
5. `monitor` and `validate-all` (through Pacemaker and with the fencer's
   stdin) catch a wrong device and a bad map;
6. pcmk_host_map (the fencer sends the node's alias as plug) and a second
   namespace: one `stonith_admin --fence` removes the node from both, its
   rejoin unfences it on both;
7. `fence_nvfence -o setup-watcher` on every node and `-o check-config`
   (docs/PACEMAKER.md, "Setting up the watchers");
4. (last) only the writer node's cluster network cut, storage up: fenced at
   the device although it still reaches it.
After every scenario each node's stack and fencing log are printed.
"""
import re
import shlex
import time

import pytest

import nvlab
from nvlab.steps import CONFLICT, OK, add_second_namespace, agent_conf_path, nvf, remove_second_namespace, reset
from nvlab.clusters.pacemaker import (NO_ETCD, NODE_IDS, NODE_MAP, Cluster, bad_stonith_xml, fence_steps, fenced_ok,
                           freeze_writer, keys_by_node, unfenced_ok, wait)

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
        c.start_watchers()
        c.start_stack()
        c.configure()
        print(f"cluster configured at {time.monotonic() - T0:.0f} s", flush=True)
        yield c
        print(f"test_pacemaker_cluster: {time.monotonic() - T0:.0f} s in all", flush=True)


@pytest.fixture(autouse=True)
def health_after(cl, request):
    # Each scenario after the first starts from the same state (every node
    # online and unfenced, the writer running): a scenario that left the
    # cluster broken is repaired here, or this one fails saying why.
    if not request.node.name.startswith("test_1_"):
        cl.ensure_ready(request.node.name)
    t = time.monotonic()
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        cl.collect(request.node.name)
    print(f"\n[{request.node.name}: {time.monotonic() - t:.0f} s; at {time.monotonic() - T0:.0f} s]\n"
          f"{cl.health()}", flush=True)


def agent_stdin(cl, action, target, via=None, **over):
    """The agent with its options on stdin, as pacemaker-fenced runs it."""
    opts = {"action": action, "port": target, "nodename": target, "devices": cl.dev, "node_ids": NODE_MAP}
    opts.update(over)
    text = "".join(f"{k}={v}\n" for k, v in opts.items())
    return (via or cl.any()).run(f"printf %s {shlex.quote(text)} | fence_nvfence", timeout_s=60)


def test_1_start_unfences_every_node_before_the_writer(cl):
    w = cl.wait_writer(timeout_s=600)
    cl.wait_writing(w)
    st = cl.report()
    assert sorted(keys_by_node(st)) == [1, 2, 3], st
    assert st["type"] == "WERO", st
    hist = cl.history()
    for n in NODE_IDS:
        assert unfenced_ok(hist, n), hist
    # The writer's node was unfenced before the writer's first pass: with
    # registrants-only, an unregistered host's writes are refused, and the
    # first pass ended (or still runs) without one fenced completion.
    cl.snapshot()
    first = min((x for x in cl.writers() if x.host == w), key=lambda x: x.wid)
    assert first.completions and all(c[2] == "ok" for c in first.completions), first.completions[:5]
    t_unfence = cl.unfenced_at(w)
    t_start = cl.first_start(w)
    assert t_unfence <= t_start + 1, (t_unfence, t_start, hist)   # `date +%s` truncates
    print(f"writer on {w}, started {t_start - t_unfence:.0f} s after its node was unfenced; history:\n{hist}",
          flush=True)

    a = cl.any()
    # monitor: the start and the recurring op of the stonith resource.
    r = a.run("crm_resource -O -r nvfence", timeout_s=60)
    assert re.search(r"nvfence_monitor_10000 .*rc=0", r.out), r.out
    r = a.run("stonith_admin --query nvfence --timeout 60", timeout_s=90)
    assert r.rc == 0, r
    # list: the agent names the nodes it can fence (what the fencer asks with
    # pcmk_host_check=dynamic-list); the resource's static host list covers c.
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
    t = time.monotonic()
    wall0 = time.time()
    r = via.run(f"stonith_admin --fence {victim} --timeout 120", timeout_s=180)
    assert r.rc == 0, (r.out, r.err, via.journal("pacemaker.service", lines=60))
    took = time.monotonic() - t
    st = cl.report(via)
    assert NODE_IDS[victim] not in keys_by_node(st), st
    r = nvf(cl.by_name[victim], "write", "--lba", "201", timeout_s=180)
    assert r.rc == CONFLICT, (r, cl.kernel_log(victim))
    assert agent_stdin(cl, "status", victim).rc == 2
    hist = cl.history(via)
    assert fenced_ok(hist, victim), hist
    print(f"fenced {victim} by stonith_admin in {took:.1f} s; history:\n{hist}", flush=True)
    # Told it was fenced, the victim's own Pacemaker stops (fence-reaction=stop).
    line = cl.wait_stopped_itself(victim)
    print(f"{victim}'s own Pacemaker stopped: {line}", flush=True)
    line = cl.wait_watcher_fenced(victim, wall0)
    print(f"{victim}'s watcher: {line}", flush=True)
    cl.rejoin(victim)
    r = nvf(cl.by_name[victim], "write", "--lba", "202", timeout_s=180)
    assert r.rc == OK, (r, cl.kernel_log(victim))
    assert cl.writer_node() == w, "the writer moved although its node was not fenced"


def test_3_freeze_the_writer_node(cl):
    w, got, hist = freeze_writer(cl)
    print(f"freeze {w}: key removed after {got['key']:.1f} s, first write on {got['writer']} after "
          f"{got['write']:.1f} s; after the resume its first write reaching the device was refused "
          f"({got['refused_after_resume']:.1f} s); its pass in flight: {got['frozen_pass']}; history:\n{hist}", flush=True)
    steps, lines = fence_steps([h for h in cl.live() if h.name != w], w, got["freeze_wall"],
                               got["freeze_wall"] + got["write"])
    print("survivor's journal, s after the freeze: " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()), flush=True)
    # Its watcher saw its key gone and took the node out of the membership
    # (docs/PACEMAKER.md): the fence action ran and the stack is down.
    line = cl.wait_watcher_fenced(w, got["freeze_wall"])
    print(f"{w}'s watcher: {line}", flush=True)
    print(f"{w} after resuming: {cl.wait_stopped_itself(w, timeout_s=60)}", flush=True)
    cl.set_writer("Stopped")
    # The invariants over the media (check_media raises on a violation). The
    # frozen pass need not log a fenced completion: the watcher may stop the
    # writer before its writes in flight come back from the reconnecting
    # path; the device's refusal is asserted in freeze_writer.
    res = cl.check_media()
    print(f"media check: {res}", flush=True)
    assert res["acked"] > 0 and res["last_writer"].endswith(f"@{got['writer']}"), res
    cl.rejoin(w)
    cl.set_writer("Started")
    cl.wait_writer()


def test_5_monitor_and_validate_catch_wrong_device_and_bad_map(cl):
    a = cl.any()
    before = sorted(keys_by_node(cl.report(a)))
    assert before == [1, 2, 3], before
    # Through Pacemaker: validate-all of the agent (stonith_admin --validate
    # runs it through the fencer's library).
    def validate(**params):
        opts = " ".join(f"--option {shlex.quote(f'{k}={v}')}" for k, v in params.items())
        return a.run(f"stonith_admin --validate --agent fence_nvfence {opts} --timeout 60", timeout_s=90)
    r = validate(devices=cl.dev, node_ids=NODE_MAP)
    assert r.rc == 0, r
    for params in ({"devices": "/dev/nvme9n9", "node_ids": NODE_MAP}, {"devices": "/dev/null", "node_ids": NODE_MAP},
                   {"devices": cl.dev, "node_ids": "b:2;c:3"}, {"devices": cl.dev, "node_ids": "a:1;b:1;c:3"}):
        r = validate(**params)
        assert r.rc != 0, (params, r)
    # A stonith resource with a wrong device, one with a map that lacks a
    # node whose key is on the device: the cluster runs their start and
    # monitor, and they fail; the good device keeps running.
    for rid, dev, nmap in (("nvfence-baddev", "/dev/nvme9n9", NODE_MAP), ("nvfence-badmap", cl.dev, "a:1;b:2")):
        a.run(f"cibadmin -C -o resources -X {shlex.quote(bad_stonith_xml(rid, dev, nmap))}", timeout_s=60,
              check=True)
    try:
        for rid in ("nvfence-baddev", "nvfence-badmap"):
            fails = wait(lambda: cl.failed_ops(rid, a), 300, f"an operation of {rid} to fail", 2)
            print(f"{rid}: failed {fails}", flush=True)
        print(a.run("crm_mon -1 --include=failcounts,operations", timeout_s=60).out, flush=True)
        r = a.run("crm_resource -O -r nvfence", timeout_s=60)
        assert re.search(r"nvfence_monitor_10000 .*rc=0", r.out), r.out
    finally:
        for rid in ("nvfence-baddev", "nvfence-badmap"):
            a.run(f"crm_resource -r {rid} --meta -p target-role -v Stopped; "
                  f"cibadmin -D -o resources -X '<primitive id=\"{rid}\"/>'; crm_resource -C -r {rid}",
                  timeout_s=120)
    # The agent itself, with the fencer's stdin.
    r = agent_stdin(cl, "monitor", "a", via=a, devices="/dev/nvme9n9")
    assert r.rc == 1 and "no such device" in r.err, r
    r = agent_stdin(cl, "monitor", "a", via=a, node_ids="a:1;b:2")   # c's key is in no entry
    assert r.rc == 1 and "no node_ids entry has" in r.err, r
    r = agent_stdin(cl, "validate-all", "a", via=a, node_ids="a:1;b:1;c:3")
    assert r.rc == 1 and "given to two nodes" in r.err, r
    # Nothing above changed the reservation; the writer still writes.
    assert sorted(keys_by_node(cl.report(a))) == [1, 2, 3]
    cl.wait_writing(cl.wait_writer())


def test_6_host_map_and_two_namespaces(cl):
    """Pacemaker's own fencing (stonith_admin) with the stonith resource
    configured as fence_mpath users do (pcmk_host_map: the fencer sends the
    alias "2", not "b", as plug) over two namespaces: one fence removes the
    node's key from both and leaves the same nodes on each; its rejoin
    unfences it on both."""
    def nodes_on(h, dev):
        r = nvf(h, "report", dev=dev)
        return sorted(keys_by_node(r.json)) if r.rc == OK and r.json else None

    dev2s = add_second_namespace(cl.lab)
    try:
        assert len(set(dev2s.values())) == 1, f"the hosts name the second namespace differently: {dev2s}"
        dev2 = dev2s["a"]
        both = f"{cl.dev},{dev2}"
        a = cl.any()
        a.run(f"crm_resource -r nvfence --set-parameter devices --parameter-value {shlex.quote(both)} && "
              f"crm_resource -r nvfence --set-parameter pcmk_host_map --parameter-value {shlex.quote(NODE_MAP)}",
              timeout_s=60, check=True)
        for n in sorted(NODE_IDS):
            r = a.run(f"stonith_admin --unfence {n} --timeout 120", timeout_s=180)
            assert r.rc == 0, (n, r.out, r.err)
        wait(lambda: nodes_on(a, dev2) == [1, 2, 3], 120,
             "every node's key on the second namespace")
        w = cl.wait_writer()
        cl.wait_writing(w)
        victim = next(n for n in ("b", "c", "a") if n != w)
        via = cl.by_name[w]
        wall0 = time.time()
        r = via.run(f"stonith_admin --fence {victim} --timeout 120", timeout_s=180)
        assert r.rc == 0, (r.out, r.err, via.journal("pacemaker.service", lines=60))
        left = sorted(n for n in NODE_IDS.values() if n != NODE_IDS[victim])
        for dev in (cl.dev, dev2):
            assert nodes_on(via, dev) == left, (dev, nvf(via, "report", dev=dev))
            r = nvf(cl.by_name[victim], "write", "--lba", "203", dev=dev, timeout_s=180)
            assert r.rc == CONFLICT, (dev, r, cl.kernel_log(victim))
        # What the fencer sends with the map: the alias as port, the name as nodename.
        assert agent_stdin(cl, "status", str(NODE_IDS[victim]), via=via, nodename=victim, devices=both).rc == 2
        hist = cl.history(via)
        assert fenced_ok(hist, victim), hist
        cl.wait_stopped_itself(victim)
        cl.wait_watcher_fenced(victim, wall0)
        cl.rejoin(victim)
        wait(lambda: nodes_on(via, dev2) == [1, 2, 3], 120,
             f"{victim}'s key back on the second namespace after its unfencing")
        r = nvf(cl.by_name[victim], "write", "--lba", "204", dev=dev2, timeout_s=180)
        assert r.rc == OK, (r, cl.kernel_log(victim))
        print(f"fenced {victim} on {both} through pcmk_host_map; history:\n{cl.history(via)}", flush=True)
    finally:
        cl.any().run("crm_resource -r nvfence --set-parameter devices --parameter-value " + shlex.quote(cl.dev) +
                     "; crm_resource -r nvfence --delete-parameter pcmk_host_map", timeout_s=60)
        # The resource's monitor runs with the new parameters before the namespace goes.
        time.sleep(15)
        remove_second_namespace(cl.lab)


def test_7_setup_watcher_and_check_config(cl):
    """docs/PACEMAKER.md "Setting up the watchers": check-config names every
    node whose watcher recorded nothing (the watchers of start_watchers()
    were written by hand); `fence_nvfence -o setup-watcher` on every node,
    from the stonith resource in the CIB, replaces them (the hand-written
    file moved aside) and records them; check-config then agrees (exit 0),
    and names a node whose record differs (exit 2)."""
    a = cl.any()
    r = a.run("fence_nvfence -o check-config", timeout_s=120)
    assert r.rc == 2 and "no watcher recorded" in r.out, r
    vol = cl.watchers
    for h in cl.live():
        path = agent_conf_path(h, vol)
        h.run(f"mv {shlex.quote(path)} {shlex.quote(path)}.by-hand", timeout_s=30, check=True)
        r = h.run("fence_nvfence -o setup-watcher", timeout_s=240)
        assert r.rc == 0 and "written" in r.out and f"nvfence-watcher of {h.name}" in r.out, r
        conf = h.run(f"cat {shlex.quote(path)}", timeout_s=30, check=True).out
        assert f"\nnode_id = {NODE_IDS[h.name]}\n" in conf and "\nrole = watch\n" in conf, conf
        w = h.wait_for(f"nvfence status {vol} --json | grep -q '\"state\":\"WATCHING\"'", timeout_s=120)
        assert w.rc == 0, (h.name, h.journal(f"nvfenced@{vol}.service", lines=30))
        r = h.run("fence_nvfence -o setup-watcher", timeout_s=240)
        assert r.rc == 0 and "unchanged" in r.out, r
    r = a.run("fence_nvfence -o check-config", timeout_s=120)
    assert r.rc == 0 and "every node agrees" in r.out, r
    print(r.out, flush=True)
    b = next(h for h in cl.live() if h is not a)
    wrong = f"node_id=9 cluster_tag=0 interval_ms=500 device_timeout_ms=5000 state_dir=/var/lib/nvfence devices={cl.dev}"
    a.run(f"crm_attribute --type nodes --node {b.name} --name nvfence-watcher --update {shlex.quote(wrong)}",
          timeout_s=60, check=True)
    try:
        r = a.run("fence_nvfence -o check-config", timeout_s=120)
        assert r.rc == 2, r
        assert f"{b.name} (node {NODE_IDS[b.name]}): differs: node_id 9, the stonith resource says " \
               f"{NODE_IDS[b.name]}" in r.out, r
        print(r.out, flush=True)
    finally:
        b.run("fence_nvfence -o setup-watcher", timeout_s=240)
    assert a.run("fence_nvfence -o check-config", timeout_s=120).rc == 0


# Scenario 4 runs last: after the heal, the cut node's stale partition meets
# the cluster again (see the rejoin below), the one step that touches the
# survivors' stacks.
def test_4_cut_cluster_network_of_the_writer_node(cl):
    w = cl.writer_node()
    h = cl.by_name[w]
    cl.wait_writing(w)
    others = [x for x in cl.live() if x is not h]
    h.cut("cluster")
    try:
        assert not h.is_cut and "storage" not in h.cut_paths   # storage still up
        wait(lambda: NODE_IDS[w] not in keys_by_node(cl.report(others[0])), 240, f"{w}'s key to be removed", 0.5)
        moved = cl.wait_writer(exclude=(w,), timeout_s=240, via=others[0])
        # The node still reaches the device, and the device refuses it.
        assert h.run("dd if=$NVFENCE_DEV of=/dev/null bs=4096 count=1 iflag=direct", timeout_s=60).rc == 0
        r = nvf(h, "write", "--lba", "205", timeout_s=180)
        assert r.rc == CONFLICT, (r, cl.kernel_log(h.name))
        hist = cl.history(cl.by_name[moved])
        assert fenced_ok(hist, w), hist
        print(f"cut {w}'s cluster network: fenced, writer on {moved}; history:\n{hist}", flush=True)
    finally:
        h.heal("cluster")
    cl.wait_writing(moved)
    print(f"{w} after healing: {cl.stopped_itself(w, timeout_s=60)}", flush=True)
    diag = ("systemctl is-active corosync pacemaker; journalctl -b -u corosync -u pacemaker --no-pager -o short-monotonic"
            " | grep -E 'allegedly|shut down|Shutting|fatal|FATAL|error|Membership|membership' | tail -25")
    for x in cl.live():
        print(f"--- {x.name} after the heal:\n{x.run(diag, timeout_s=60).out}", flush=True)
    try:
        cl.rejoin(w)
    finally:
        for x in cl.live():
            print(f"--- {x.name} after the rejoin:\n{x.run(diag, timeout_s=60).out}", flush=True)
