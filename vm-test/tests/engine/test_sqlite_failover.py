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
import time

import pytest

from nvlab.steps import OK, nvf, reset
from nvlab.workloads import sqlite as sq


def start_a(a):
    """A holds the reservation and commits; returns (A's token, its program)."""
    sq.fresh_layout(a)
    assert nvf(a, "register", "--node", "1").rc == OK
    r = nvf(a, "acquire")
    assert r.rc == OK, r
    return r.json["epoch"], sq.start_committing(a)


def take_over(b, ea):
    """B preempts A and commits 5 rows; returns (B's token, B's acks, rows, ms)."""
    t0 = time.monotonic()
    p = nvf(b, "preempt", "--node", "2")
    assert p.rc == OK, p
    eb = p.json["epoch"]
    assert eb > ea
    acked_b = sq.commit_as_holder(b, eb)
    ms = (time.monotonic() - t0) * 1000
    return eb, acked_b, sq.rows(b), ms


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
        sq.assert_fenced(a, bg, ea, eb)
    n = sq.assert_media(a, b, ea, eb, acked_b, before)
    print(f"sqlite failover ({what}): A acked {n} (token {ea}), B's first 5 commits "
          f"{ms:.0f} ms after the takeover began (preempt included, TCG guest)")
