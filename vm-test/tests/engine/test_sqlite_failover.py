"""SQLite through the nvfence VFS failing over on the shared namespace
(docs/SQLITE.md), on the module's two-host fabric lab.

Host A takes the reservation (`nvfence acquire`) and runs
nvfence-sqlite-example on `file:$NVFENCE_DEV?vfs=nvfence`: one committed row
per transaction, every acknowledged commit recorded ("ack ID TOKEN"). Then
one of three things happens to A mid-stream:
  - frozen: its VM stops (a pause past any lease) and is resumed after B
    has taken over;
  - killed: its program dies (SIGKILL), leaving whatever journal it had;
  - running: nothing happens to A; it keeps committing with its storage
    path up, as a host whose cluster link was cut does, and B takes over
    beside it.
B takes over with `nvfence preempt`, opens the database (rolling back A's
hot journal if A stopped mid-transaction) and commits rows of its own.
Checked from B and from the media:
  - PRAGMA integrity_check is ok;
  - every commit A acknowledged is there exactly once (rows are keyed by
    id), under A's token, and every row of B's token after them;
  - nothing of A lands after the preempt: the rows are the same when B has
    committed and after A has stopped;
  - A, when it lives on, reports *fenced* (exit 3, who holds now), not a
    generic I/O error.
"""
import re
import time

import pytest

from nvlab.steps import OK, nvf, reset

EX = "nvfence-sqlite-example"
URI = '"file:$NVFENCE_DEV?vfs=nvfence"'


def rows(host):
    r = host.run(f"{EX} {URI} check", timeout_s=120)
    assert r.rc == 0, r
    assert "integrity ok" in r.out, r.out
    got = [tuple(int(x) for x in line.split()[1:]) for line in r.out.splitlines() if line.startswith("row ")]
    return got


def start_a(a):
    """A holds the reservation and commits; returns (A's token, its program)."""
    # A fresh layout: zero the superblocks left by an earlier run.
    a.run('dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=2 oflag=direct 2>/dev/null', timeout_s=60)
    assert nvf(a, "register", "--node", "1").rc == OK
    r = nvf(a, "acquire")
    assert r.rc == OK, r
    bg = a.spawn(f"{EX} {URI} 1000000 0 > /tmp/sqlite-a.acks")
    w = a.wait_for("[ $(grep -c '^ack' /tmp/sqlite-a.acks) -ge 40 ]", timeout_s=180)
    assert w.rc == 0, (w, bg.output())
    return r.json["epoch"], bg


def take_over(b, ea):
    """B preempts A and commits 5 rows; returns (B's token, B's acks, rows, ms)."""
    t0 = time.monotonic()
    p = nvf(b, "preempt", "--node", "2")
    assert p.rc == OK, p
    eb = p.json["epoch"]
    assert eb > ea
    s = b.run(f"{EX} {URI} 5 0", timeout_s=180)
    ms = (time.monotonic() - t0) * 1000
    assert s.rc == 0, s
    assert f"writing under fencing token {eb}" in s.out, s.out
    acked_b = [int(m) for m in re.findall(r"^ack (\d+) %d$" % eb, s.out, re.M)]
    assert len(acked_b) == 5, s.out
    return eb, acked_b, rows(b), ms


def assert_a_fenced(a, bg, ea, eb):
    """A lived on: the device refused it and it said so (exit 3)."""
    assert bg.wait(timeout_s=120), bg.output()
    err = bg.output()
    assert a.run("true").rc == 0  # the guest answers again
    assert "fenced: the device refused this host's write under fencing token %d" % ea in err, err
    assert "held by nf:" in err and (":%d" % eb) in err, err


def assert_media(a, b, ea, eb, acked_b, before):
    acked_a = [int(x) for x in re.findall(r"^ack (\d+) %d$" % ea,
                                            a.run("cat /tmp/sqlite-a.acks", timeout_s=30).out, re.M)]
    assert len(acked_a) >= 40
    after = rows(b)
    assert after == before, "rows changed after A stopped"
    ids = [i for i, _ in after]
    assert len(ids) == len(set(ids))
    tokens = dict(after)
    for i in acked_a:
        assert tokens.get(i) == ea, f"A's acknowledged commit {i} missing or changed"
    for i in acked_b:
        assert tokens.get(i) == eb
    # A's rows all precede B's; at most one unacknowledged commit of A (in
    # flight when A stopped, acknowledged by the device but not yet printed).
    a_rows = [i for i, t in after if t == ea]
    assert max(a_rows) < min(acked_b)
    assert len(a_rows) - len(acked_a) in (0, 1), (len(a_rows), len(acked_a))
    return len(acked_a)


@pytest.mark.parametrize("what", ["frozen", "killed", "running"])
def test_sqlite_failover(lab, what):
    reset(lab)
    a, b = lab.hosts
    ea, bg = start_a(a)
    if what == "frozen":
        a.pause()
        try:
            eb, acked_b, before, ms = take_over(b, ea)
        finally:
            a.resume()
    else:
        if what == "killed":
            bg.signal("KILL")
            assert bg.wait(timeout_s=60), bg.output()
        eb, acked_b, before, ms = take_over(b, ea)
    if what != "killed":
        assert_a_fenced(a, bg, ea, eb)
    n = assert_media(a, b, ea, eb, acked_b, before)
    print(f"sqlite failover ({what}): A acked {n} (token {ea}), B's first 5 commits "
          f"{ms:.0f} ms after the takeover began (preempt included, TCG guest)")
