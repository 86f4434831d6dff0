"""SQLite through the nvfence VFS failing over on the shared namespace
(docs/SQLITE.md), on the module's two-host fabric lab.

Host A takes the reservation (`nvfence acquire`) and runs
nvfence-sqlite-example on `file:$NVFENCE_DEV?vfs=nvfence`: one committed row
per transaction, every acknowledged commit recorded ("ack ID TOKEN"). A is
frozen mid-stream; B takes over with `nvfence preempt`, opens the database
(rolling back A's hot journal if A was frozen mid-transaction) and commits
rows of its own; A is resumed. Checked from B and from the media:
  - PRAGMA integrity_check is ok;
  - every commit A acknowledged is there exactly once (rows are keyed by
    id), under A's token, and every row of B's token after them;
  - nothing of A lands after the preempt: the rows are the same before and
    after A was resumed and stopped;
  - A reports *fenced* (exit 3, who holds now), not a generic I/O error.
"""
import re
import time

from nvlab.steps import OK, nvf, reset

EX = "nvfence-sqlite-example"
URI = '"file:$NVFENCE_DEV?vfs=nvfence"'


def rows(host):
    r = host.run(f"{EX} {URI} check", timeout_s=120)
    assert r.rc == 0, r
    assert "integrity ok" in r.out, r.out
    got = [tuple(int(x) for x in line.split()[1:]) for line in r.out.splitlines() if line.startswith("row ")]
    return got


def test_sqlite_failover(lab):
    reset(lab)
    a, b = lab.hosts
    # A fresh layout: zero the superblocks left by an earlier run.
    a.run('dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=2 oflag=direct 2>/dev/null', timeout_s=60)
    assert nvf(a, "register", "--node", "1").rc == OK
    r = nvf(a, "acquire")
    assert r.rc == OK, r
    ea = r.json["epoch"]

    bg = a.spawn(f"{EX} {URI} 1000000 0 > /tmp/sqlite-a.acks")
    w = a.wait_for("[ $(grep -c '^ack' /tmp/sqlite-a.acks) -ge 40 ]", timeout_s=180)
    assert w.rc == 0, (w, bg.output())

    a.pause()
    t0 = time.monotonic()
    try:
        p = nvf(b, "preempt", "--node", "2")
        assert p.rc == OK, p
        eb = p.json["epoch"]
        assert eb > ea
        s = b.run(f"{EX} {URI} 5 0", timeout_s=180)
        t_first = time.monotonic() - t0
        assert s.rc == 0, s
        assert f"writing under fencing token {eb}" in s.out, s.out
        acked_b = [int(m) for m in re.findall(r"^ack (\d+) %d$" % eb, s.out, re.M)]
        assert len(acked_b) == 5, s.out
        before = rows(b)
    finally:
        a.resume()

    # A, resumed, is refused by the device and says it was fenced.
    assert bg.wait(timeout_s=120), bg.output()
    err = bg.output()
    rc = a.run("true").rc  # the guest answers again
    assert rc == 0
    assert "fenced: the device refused this host's write under fencing token %d" % ea in err, err
    assert "held by nf:" in err and (":%d" % eb) in err, err

    acked_a = [int(x) for x in re.findall(r"^ack (\d+) %d$" % ea,
                                            a.run("cat /tmp/sqlite-a.acks", timeout_s=30).out, re.M)]
    assert len(acked_a) >= 40

    after = rows(b)
    assert after == before, "rows changed after A was resumed"
    ids = [i for i, _ in after]
    assert len(ids) == len(set(ids))
    tokens = dict(after)
    for i in acked_a:
        assert tokens.get(i) == ea, f"A's acknowledged commit {i} missing or changed"
    for i in acked_b:
        assert tokens.get(i) == eb
    # A's rows all precede B's; at most one unacknowledged commit of A (in
    # flight when A froze, acknowledged by the device but not yet printed).
    a_rows = [i for i, t in after if t == ea]
    assert max(a_rows) < min(acked_b)
    assert len(a_rows) - len(acked_a) in (0, 1), (len(a_rows), len(acked_a))
    print(f"sqlite failover: A acked {len(acked_a)} (token {ea}), B's first 5 commits "
          f"{t_first * 1000:.0f} ms after the freeze (preempt included, TCG guest)")
