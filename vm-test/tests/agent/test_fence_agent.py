"""fence_nvfence against real nvmet reservations, three host VMs (a, b, c)
on one fabric target, options on stdin as Pacemaker's fencer passes them.

Unfencing registers each node's key and one of them takes the Write
Exclusive - Registrants Only reservation; `off` removes the victim's key
with a verified preempt-and-abort and the device then refuses the victim's
writes while the other registrants keep writing; already off is success;
the local node is refused; off of the holder moves the reservation to the
fencer; `on` brings a fenced node back with a newer epoch; `monitor` and
`validate-all` catch a wrong device and a bad node map. Also `nvfence
preempt --victim-node N` (the node's key whatever its epoch)."""
import pytest

import nvlab
from nvlab.steps import (CONFLICT, LOST_RACE, OK, USAGE, add_second_namespace, fence_agent_cmd, node_keys, nvf,
                    remove_second_namespace, report, reset)

MAP = "a:1;b:2;c:3"


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=3, topology="fabric") as lab:
        yield lab


def fa(host, *lines, devices='$NVFENCE_DEV', node_ids=MAP):
    """fence_nvfence on host, options on stdin."""
    return host.run(fence_agent_cmd(lines, devices, node_ids), timeout_s=90)


def holder_node(st):
    for r in st["registrants"]:
        if r["holder"]:
            return r["node"]
    return None


def write(host, lba):
    return nvf(host, "write", "--lba", str(lba))


def test_unfence_fence_and_refuse(lab):
    reset(lab)
    a, b, c = lab.hosts
    for h, name in ((a, "a"), (b, "b"), (c, "c")):
        r = fa(h, "action=on", f"nodename={name}")
        assert r.rc == 0 and "Success: Powered ON" in r.out, r
    st = report(a)
    assert sorted(node_keys(st)) == [1, 2, 3], st
    assert st["type"] == "WERO" and holder_node(st) == 1, st
    # Every registrant writes under Registrants Only.
    for i, h in enumerate((a, b, c)):
        w = write(h, 100 + i)
        assert w.rc == OK, (h.name, w)

    r = fa(a, "action=status", "plug=b")
    assert r.rc == 0 and "Status: ON" in r.out, r
    r = fa(a, "action=list", devices=None)
    assert r.rc == 0 and r.out.split() == ["a,1", "b,2", "c,3"], r
    for h in (a, b, c):
        assert fa(h, "action=monitor").rc == 0, h.name
        assert fa(h, "action=validate-all").rc == 0, h.name

    # Fence b from a: b's key is gone and the device refuses b's writes,
    # in both I/O paths; a and c still write.
    r = fa(a, "action=off", "port=b")
    assert r.rc == 0 and "Success: Powered OFF" in r.out, r
    st = report(a)
    assert sorted(node_keys(st)) == [1, 3] and holder_node(st) == 1, st
    for mode in ([], ["--passthrough"]):
        w = nvf(b, "write", "--lba", "110", *mode)
        assert w.rc == CONFLICT and w.json["result"] == "fenced", (mode, w)
    dd = b.run('dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=1 seek=30 oflag=direct')
    assert dd.rc != 0 and "Invalid exchange" in dd.err, dd
    assert write(a, 111).rc == OK and write(c, 112).rc == OK
    r = fa(c, "action=status", "plug=b")
    assert r.rc == 2 and "Status: OFF" in r.out, r

    # Already off: success, nothing changes.
    gen = report(a)["generation"]
    r = fa(c, "action=off", "nodename=b")
    assert r.rc == 0 and "Success: Already OFF" in r.out, r
    assert report(a)["generation"] == gen

    # The local node is refused, and nothing is sent.
    r = fa(a, "action=off", "plug=a")
    assert r.rc == 1 and "refusing to fence the local node" in r.err, r
    assert sorted(node_keys(report(a))) == [1, 3]
    # reboot is not an action of a fabric fencing agent.
    r = fa(a, "action=reboot", "plug=c")
    assert r.rc == 1 and "not supported" in r.err, r

    # Off of the holder: the fencer takes the reservation over.
    r = fa(c, "action=off", "plug=a")
    assert r.rc == 0 and "Success: Powered OFF" in r.out, r
    st = report(c)
    assert sorted(node_keys(st)) == [3] and holder_node(st) == 3 and st["type"] == "WERO", st
    assert write(a, 113).rc == CONFLICT

    # b reboots and is unfenced again: a newer epoch, its writes accepted.
    old_b = 1
    r = fa(b, "action=on", "nodename=b")
    assert r.rc == 0, r
    st = report(b)
    assert node_keys(st)[2][0] > old_b, st
    assert write(b, 114).rc == OK
    r = fa(a, "action=on", "nodename=a")
    assert r.rc == 0, r
    assert sorted(node_keys(report(a))) == [1, 2, 3]


def test_monitor_and_validate_catch_wrong_device_and_bad_map(lab):
    a, b, c = lab.hosts
    reset(lab)
    for h, name in ((a, "a"), (b, "b"), (c, "c")):
        assert fa(h, "action=on", f"nodename={name}").rc == 0
    assert fa(a, "action=monitor").rc == 0
    # Wrong devices: not NVMe, missing, one good plus one bad.
    for dev, words in (("/dev/null", "not an NVMe namespace"), ("/dev/nvme9n9", "no such device"),
                       ("$NVFENCE_DEV,/dev/null", "not an NVMe namespace")):
        for action in ("monitor", "validate-all"):
            r = fa(a, f"action={action}", devices=dev)
            assert r.rc == 1 and words in r.err, (dev, action, r)
    r = fa(a, "action=off", "plug=b", devices="/dev/null")
    assert r.rc == 1, r
    assert sorted(node_keys(report(a))) == [1, 2, 3]
    # Bad maps.
    r = fa(a, "action=monitor", node_ids="a:1;b:2")  # c's key (node 3) is in no entry
    assert r.rc == 1 and "no node_ids entry has" in r.err, r
    r = fa(a, "action=monitor", node_ids="a:2;b:1;c:3")  # a is node 1 on the device
    assert r.rc == 1 and "registered as node 1" in r.err, r
    r = fa(a, "action=validate-all", node_ids="b:2;c:3")  # this node missing
    assert r.rc == 1 and "not in node_ids" in r.err, r
    r = fa(a, "action=validate-all", node_ids="a:1;b:1;c:3")
    assert r.rc == 1 and "given to two nodes" in r.err, r
    r = fa(a, "action=validate-all", "reservation_type=5")
    assert r.rc == 1 and "NVMe type 3" in r.err, r
    # Nothing above changed the reservation.
    assert sorted(node_keys(report(a))) == [1, 2, 3]


def test_cli_preempt_victim_node(lab):
    a, b, c = lab.hosts
    reset(lab)
    assert nvf(a, "register", "--node", "1").rc == OK
    assert nvf(a, "acquire").rc == OK
    assert nvf(b, "register", "--node", "2").rc == OK
    # Re-key b twice: its epoch is no longer 1; the node id still finds it.
    assert nvf(b, "register", "--node", "2", "--replace").rc == OK
    kb = [x["key"] for x in report(b)["registrants"] if x["node"] == 2]
    assert len(kb) == 1 and node_keys(report(b))[2][0] > 1
    # c is not registered: --victim-node never registers it (a fenced host
    # must not fence others), nothing is sent. (It registered c until the
    # eviction became Fence::evict_node, fence_nvfence off's routine.)
    r = nvf(c, "preempt", "--node", "3", "--victim-node", "2")
    assert r.rc == CONFLICT and "not registered" in r.err, r
    st = report(c)
    assert [x["key"] for x in st["registrants"] if x["node"] == 2] == kb and 3 not in node_keys(st), st
    assert nvf(c, "register", "--node", "3").rc == OK
    r = nvf(c, "preempt", "--node", "3", "--victim-node", "2")
    assert r.rc == OK, r
    assert r.json["removed"] == kb, r
    st = report(c)
    assert 2 not in node_keys(st) and holder_node(st) == 1, st  # b was not the holder: a keeps it
    assert write(b, 120).rc == CONFLICT
    # The holder as the victim: c takes over.
    r = nvf(c, "preempt", "--victim-node", "1")
    assert r.rc == OK and holder_node(report(c)) == 3, r
    assert write(a, 121).rc == CONFLICT
    # Node 2 has no key now: c holds, so nothing to do; from a registered
    # host that does not hold, the holder is named (exit 6); b, fenced,
    # is refused first (not registered, exit 3).
    r = nvf(c, "preempt", "--victim-node", "2")
    assert r.rc == OK and r.json["changed"] is False, r
    r = nvf(b, "preempt", "--node", "2", "--victim-node", "1")
    assert r.rc == CONFLICT and "not registered" in r.err, r
    assert nvf(b, "register", "--node", "2").rc == OK
    r = nvf(b, "preempt", "--node", "2", "--victim-node", "1")
    assert r.rc == LOST_RACE and "holds the reservation" in r.err, r
    # A host's own node is refused.
    r = nvf(c, "preempt", "--victim-node", "3")
    assert r.rc == USAGE and "own node" in r.err, r
    assert holder_node(report(a)) == 3


def test_through_the_local_nvfenced(lab):
    """Where nvfenced holds this host's registration, fence_nvfence goes
    through its control socket: 'on' leaves the agent's key alone and 'off'
    makes the agent take over with the victim's key, so the agent never sees
    its key changed behind its back (it would fence itself)."""
    a, b, c = lab.hosts
    for h in lab.hosts:
        h.run("pkill -9 -x nvfenced; rm -rf /var/lib/nvfence /run/nvfence; true")
    reset(lab)
    for h, name in ((b, "b"), (c, "c")):
        assert fa(h, "action=on", f"nodename={name}").rc == 0
    a.spawn('nvfenced --device "$NVFENCE_DEV" --node-id 1 --role standby --interval-ms 200 --name vol '
            "--fence-action command --fence-command 'echo \"$NVFENCE_REASON\" > /tmp/fenced.a'",
            log_path="/tmp/agent.a.log")
    try:
        r = a.wait_for("nvfence status vol --json | grep -q '\"state\":\"STANDBY\"'", timeout_s=60)
        assert r.rc == 0, a.run("cat /tmp/agent.a.log").out
        ka = [x["key"] for x in report(a)["registrants"] if x["node"] == 1]
        r = fa(a, "action=on", "nodename=a", "verbose=1")
        assert r.rc == 0 and "nvfenced at /run/nvfence/vol.sock" in r.err, r
        assert [x["key"] for x in report(a)["registrants"] if x["node"] == 1] == ka

        r = fa(a, "action=off", "plug=b", "verbose=1")
        assert r.rc == 0 and "Success: Powered OFF" in r.out, r
        assert "takeover" in r.err, r
        st = report(a)
        assert 2 not in node_keys(st) and holder_node(st) == 1, st
        assert write(b, 130).rc == CONFLICT
        s = a.run("nvfence status vol --json")
        assert '"state":"HOLDER"' in s.out, (s.out, a.run("cat /tmp/agent.a.log").out)
        assert a.run("test -e /tmp/fenced.a").rc != 0, "the agent fenced itself"
    finally:
        a.run("pkill -9 -x nvfenced; true")


def test_two_namespaces_one_fence(lab):
    """fence_nvfence with two namespaces: 'off' fences the node on both and
    verifies that both have the same nodes left; two nodes fencing each
    other cannot each keep one namespace (fence-agents issue 278): both go
    through the namespaces in one order (volume name, then namespace id,
    whatever order devices lists them in) and a fencer stops at the first
    one it lost; 'off' fails naming the namespace whose nodes differ."""
    reset(lab)
    a, b, c = lab.hosts
    dev2 = add_second_namespace(lab)
    try:
        both = {h.name: f"$NVFENCE_DEV,{dev2[h.name]}" for h in lab.hosts}

        def nodes(h, dev=None):
            return sorted(node_keys(nvf(h, "report", dev=dev).json))

        for h in (a, b, c):
            r = fa(h, "action=on", f"nodename={h.name}", devices=both[h.name])
            assert r.rc == 0, r
        assert nodes(a) == [1, 2, 3] and nodes(a, dev2["a"]) == [1, 2, 3]

        # One fence, both namespaces: b's key gone from each, its writes refused on each.
        r = fa(a, "action=off", "plug=b", devices=both["a"])
        assert r.rc == 0 and "Success: Powered OFF" in r.out, r
        assert nodes(a) == [1, 3] and nodes(a, dev2["a"]) == [1, 3]
        assert nvf(b, "write", "--lba", "40").rc == CONFLICT
        assert nvf(b, "write", "--lba", "40", dev=dev2["b"]).rc == CONFLICT

        # c fences a on namespace 1 only; then a, listing namespace 2 first,
        # tries to fence c: it lost namespace 1 (first in order) and leaves
        # namespace 2 alone, so c keeps both.
        r = fa(c, "action=off", "plug=a")
        assert r.rc == 0, r
        gen2 = nvf(c, "report", dev=dev2["c"]).json["generation"]
        r = fa(a, "action=off", "plug=c", devices=f"{dev2['a']},$NVFENCE_DEV")
        assert r.rc == 1 and "this host is not registered" in r.err, r
        assert "not fencing on the devices after" in r.err, r
        st2 = nvf(c, "report", dev=dev2["c"]).json
        assert st2["generation"] == gen2 and sorted(node_keys(st2)) == [1, 3], st2
        # The cluster finishes fencing a on both.
        r = fa(c, "action=off", "plug=a", devices=both["c"])
        assert r.rc == 0, r
        assert nodes(c) == [3] and nodes(c, dev2["c"]) == [3]

        # b unfenced on namespace 1 only: fencing a again leaves {2,3} on
        # one and {3} on the other, and 'off' says so.
        assert fa(b, "action=on", "nodename=b").rc == 0
        assert fa(a, "action=on", "nodename=a", devices=both["a"]).rc == 0
        r = fa(c, "action=off", "plug=a", devices=both["c"])
        assert r.rc == 1, r
        assert "different nodes registered" in r.err and f"{dev2['c']} (" in r.err and "nodes 3" in r.err, r
        assert nodes(c) == [2, 3] and nodes(c, dev2["c"]) == [3]
    finally:
        remove_second_namespace(lab)


def test_aptpl_on_nvmet(lab):
    """aptpl=1 needs a namespace that persists reservations through power
    loss: nvmet reports no PTPL in RESCAP, so 'on' fails and registers
    nothing; a device that claims PTPL but leaves PTPLS off fails too."""
    reset(lab)
    a = lab.hosts[0]
    info = nvf(a, "info")
    assert info.rc == OK, info
    r = fa(a, "action=on", "nodename=a", "aptpl=1")
    assert r.rc == 1 and "aptpl" in r.err and "Persist Through Power Loss" in r.err, r
    st = report(a)
    if not info.json["ptpl"]:
        assert "does not support Persist Through Power Loss" in r.err, r
        assert st["registrants"] == [], st
    # Without aptpl the same node is unfenced.
    assert fa(a, "action=on", "nodename=a").rc == 0
