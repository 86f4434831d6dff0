"""Issue 29, scale: EBS's 16 attachments on one namespace and several
namespaces under one fence, on the loop lab (one VM, nvmet over nvme-loop,
16 fabrics connections, each its own host identity a..p).

- all 16 hosts register (node ids 1..16) and one `nvfence report` lists
  every registrant with its own 128-bit host id;
- a failover among 16: the holder is preempted (verified preempt-and-abort)
  by another host, its writes are then refused and the new holder's
  accepted, the other 14 keep their keys; `preempt --victim-node` evicts
  one more and leaves the rest;
- fence_nvfence over 4 namespaces: 'off' of one node removes its key on
  every namespace, refuses its writes on each and leaves the others."""
import pytest

import nvlab
from nvlab.steps import (CONFLICT, OK, add_namespaces, fence_agent_cmd, node_keys, node_of, nvf, remove_namespaces,
                    report, reset)

N = 16


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=N, topology="loop") as lab:
        # One VM for all 16 identities: each gets its own epoch store, as a
        # host of its own would have.
        for h in lab.hosts:
            h.env["NVFENCE_STATE_DIR"] = f"/tmp/state-{h.name}"
        yield lab


def hexid(s):
    return s.replace("-", "").lower().removeprefix("0x")


def register_all(lab):
    reset(lab)
    for h in lab.hosts:
        r = nvf(h, "register", "--node", str(node_of(h)))
        assert r.rc == OK, (h.name, r)


def test_sixteen_hosts(lab):
    assert len(lab.hosts) == N
    assert len({h.hostid for h in lab.hosts}) == N and len({h.dev for h in lab.hosts}) == N
    register_all(lab)
    st = report(lab.hosts[-1])
    regs = st["registrants"]
    assert len(regs) == N, st
    assert all(not r["foreign"] for r in regs), st
    assert {r["node"]: hexid(r["host_id"]) for r in regs} == {
        node_of(h): hexid(h.env["NVFENCE_HOSTID"]) for h in lab.hosts}, st
    assert len({r["key"] for r in regs}) == N and st["holder"] is None, st


def test_failover_among_sixteen(lab):
    register_all(lab)
    hs = lab.hosts
    old, new, evicted = hs[0], hs[6], hs[15]
    r = nvf(old, "acquire")
    assert r.rc == OK, r
    k_old = r.json["key"]
    assert nvf(old, "write", "--lba", "64").rc == OK

    r = nvf(new, "preempt")        # the holder-preempt form: verified preempt-and-abort
    assert r.rc == OK, r
    assert r.json["action"] == "preempt-and-abort" and r.json["removed"] == [k_old], r.json
    k_new = r.json["key"]
    assert r.json["report"]["holder"] == k_new, r.json

    w = nvf(old, "write", "--lba", "65")
    assert w.rc == CONFLICT and w.json["result"] == "fenced", w
    w = nvf(new, "write", "--lba", "66")
    assert w.rc == OK and w.json["result"] == "accepted", w
    st = report(hs[3])
    assert sorted(node_keys(st)) == [node_of(h) for h in hs[1:]], st
    assert st["holder"] == k_new, st

    # --victim-node: the holder evicts node 16 (every key of it); 14 remain.
    r = nvf(new, "preempt", "--victim-node", str(node_of(evicted)))
    assert r.rc == OK, r
    st = report(hs[3])
    assert sorted(node_keys(st)) == [node_of(h) for h in hs[1:15]], st
    assert st["holder"] == k_new, st
    assert nvf(evicted, "write", "--lba", "67").rc == CONFLICT


def fa(host, *lines, devices, node_ids):
    return host.run(fence_agent_cmd(lines, devices, node_ids, f"/tmp/state-{host.name}"), timeout_s=120)


def test_fence_four_namespaces(lab):
    reset(lab)
    hs = lab.hosts
    fencer, victim = hs[0], hs[9]
    nodes = [hs[0], hs[3], hs[9], hs[12]]
    ids = ";".join(f"{h.name}:{node_of(h)}" for h in nodes)
    extra = [2, 3, 4]
    try:
        devs = add_namespaces(lab, extra)
        every = {h.name: ["$NVFENCE_DEV"] + [devs[h.name][n] for n in extra] for h in hs}

        def on_each(h):
            """{device: sorted nodes registered} over the 4 namespaces, seen from h."""
            out = {}
            for d in every[h.name]:
                r = nvf(h, "report", dev=None if d == "$NVFENCE_DEV" else d)
                assert r.rc == OK, r
                out[d] = sorted(node_keys(r.json))
            return out

        for h in nodes:
            r = fa(h, "action=on", f"nodename={h.name}", devices=",".join(every[h.name]), node_ids=ids)
            assert r.rc == 0 and "Success: Powered ON" in r.out, (h.name, r)
        want = sorted(node_of(h) for h in nodes)
        assert on_each(fencer) == {d: want for d in every[fencer.name]}
        for d in every[victim.name]:
            w = nvf(victim, "write", "--lba", "80", dev=None if d == "$NVFENCE_DEV" else d)
            assert w.rc == OK, (d, w)

        r = fa(fencer, "action=off", f"plug={victim.name}", devices=",".join(every[fencer.name]), node_ids=ids)
        assert r.rc == 0 and "Success: Powered OFF" in r.out, r
        left = sorted(node_of(h) for h in nodes if h is not victim)
        assert on_each(hs[3]) == {d: left for d in every[hs[3].name]}
        for d in every[victim.name]:
            w = nvf(victim, "write", "--lba", "81", dev=None if d == "$NVFENCE_DEV" else d)
            assert w.rc == CONFLICT, (d, w)
        for h in nodes:
            if h is not victim:
                for d in every[h.name]:
                    w = nvf(h, "write", "--lba", "82", dev=None if d == "$NVFENCE_DEV" else d)
                    assert w.rc == OK, (h.name, d, w)
    finally:
        remove_namespaces(lab, extra)
