"""Scenario 4: failover by the CLI. Host A holds and writes; B runs
`nvfence preempt`; A's next write is refused by the device (exit 3) in both
I/O modes, B's is accepted; the report shows B holding with a higher epoch;
A's controller got a Registration Preempted notification."""
from nvlab.steps import CONFLICT, OK, nvf, nvme_keys, nvme_report, report, reset


def test_failover(lab):
    reset(lab)
    a, b = lab.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    r = nvf(a, "acquire")
    assert r.rc == OK, r
    ka, ea = int(r.json["key"], 16), r.json["epoch"]
    assert nvf(a, "write", "--lba", "0", "--blocks", "8").rc == OK
    assert nvf(a, "write", "--lba", "8", "--passthrough").rc == OK
    nvf(a, "notifications")  # drain anything older than this scenario
    # A one-block write touches exactly one block, in both modes.
    assert nvf(a, "write", "--lba", "40").rc == OK
    assert nvf(a, "write", "--lba", "41", "--passthrough").rc == OK
    around = nvf(a, "read", "--lba", "39", "--blocks", "4").json["blocks"]
    assert [x["stamp"] for x in around] == [False, True, True, False], around
    assert [x.get("stamped_lba") for x in around[1:3]] == [40, 41]

    # B is not registered at all: preempt registers it, then takes over.
    r = nvf(b, "preempt", "--node", "2")
    assert r.rc == OK, r
    kb, eb = int(r.json["key"], 16), r.json["epoch"]
    assert eb > ea
    assert r.json["previous_holder"] == "0x%016x" % ka
    assert r.json["removed"] == ["0x%016x" % ka]
    assert r.json["report"]["holder"] == "0x%016x" % kb

    # The device now refuses A, whatever A believes.
    for mode in ([], ["--passthrough"]):
        w = nvf(a, "write", "--lba", "16", *mode)
        assert w.rc == CONFLICT, (mode, w)
        assert w.json["result"] == "fenced"
    w = nvf(b, "write", "--lba", "16")
    assert w.rc == OK and w.json["result"] == "accepted", w

    st = report(a)
    assert int(st["holder"], 16) == kb and st["type"] == "WE"
    assert [x["key"] for x in st["registrants"]] == ["0x%016x" % kb]
    assert nvme_keys(nvme_report(b)) == {kb: True}

    # A's controller was told: Registration Preempted.
    n = nvf(a, "notifications")
    assert n.rc == OK, n
    assert any(x["type"] == "registration preempted" for x in n.json["notifications"]), n.json

    # Blocks A wrote before the takeover are A's; the one B wrote is B's.
    rd = nvf(b, "read", "--lba", "0", "--blocks", "17").json["blocks"]
    assert all(x["stamp"] and x["epoch"] == ea for x in rd[:9]), rd[:9]
    assert rd[16]["stamp"] and rd[16]["epoch"] == eb

    # Idempotent: preempting again as holder changes nothing.
    r = nvf(b, "preempt")
    assert r.rc == OK and r.json["changed"] is False, r
    assert report(a)["generation"] == st["generation"]
