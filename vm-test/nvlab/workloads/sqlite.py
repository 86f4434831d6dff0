"""The SQLite workload: nvfence-sqlite-example on the shared namespace
through the nvfence VFS (docs/SQLITE.md), and the checks every SQLite
failover scenario makes from the new holder and the media.

The program commits one row per transaction, keyed by id, and prints
"ack ID TOKEN" for every commit SQLite acknowledged; `check` prints every
row ("row ID TOKEN") and PRAGMA integrity_check's verdict. A host whose
write the device refused exits 3 with "fenced: ..." on stderr, naming the
holder."""

from __future__ import annotations

import re

EX = "nvfence-sqlite-example"
URI = '"file:$NVFENCE_DEV?vfs=nvfence"'
ACKS = "/tmp/sqlite-a.acks"


def rows(host) -> list:
    """(id, token) of every row, read through the VFS; integrity ok."""
    r = host.run(f"{EX} {URI} check", timeout_s=120)
    assert r.rc == 0, r
    assert "integrity ok" in r.out, r.out
    return [tuple(int(x) for x in line.split()[1:]) for line in r.out.splitlines() if line.startswith("row ")]


def fresh_layout(host) -> None:
    """Zero the superblocks an earlier run left: the next open formats."""
    r = host.run('dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=2 oflag=direct 2>&1', timeout_s=60)
    assert r.rc == 0, r


def start_committing(host, at_least=40):
    """The program committing on host without end; returns it once it has
    at_least acknowledged commits."""
    bg = host.spawn(f"{EX} {URI} 1000000 0 > {ACKS}")
    w = host.wait_for(f"[ $(grep -c '^ack' {ACKS}) -ge {at_least} ]", timeout_s=180)
    assert w.rc == 0, (w, bg.output())
    return bg


def commit_as_holder(host, token, n=5):
    """n commits on host, which holds under token; returns their ids."""
    s = host.run(f"{EX} {URI} {n} 0", timeout_s=180)
    assert s.rc == 0, s
    assert f"writing under fencing token {token}" in s.out, s.out
    acked = [int(m) for m in re.findall(r"^ack (\d+) %d$" % token, s.out, re.M)]
    assert len(acked) == n, s.out
    return acked


def assert_fenced(host, bg, old_token, new_token) -> None:
    """The old holder's program lived on: the device refused it and it said
    so (exit 3, fenced, who holds now), not a generic I/O error."""
    assert bg.wait(timeout_s=120), bg.output()
    err = bg.output()
    assert host.run("true").rc == 0  # the guest answers again
    assert "fenced: the device refused this host's write under fencing token %d" % old_token in err, err
    assert "held by nf:" in err and (":%d" % new_token) in err, err


def assert_media(old, new, old_token, new_token, acked_new, before) -> int:
    """From the new holder: every commit the old holder's program saw
    acknowledged is there exactly once under its token, the new holder's
    after them, at most one unacknowledged commit of the old holder (in
    flight when it stopped), and nothing changed since `before` (rows read
    right after the takeover): nothing of the old holder landed later.
    Returns how many commits the old holder saw acknowledged."""
    acked_old = [int(x) for x in re.findall(r"^ack (\d+) %d$" % old_token,
                                              old.run(f"cat {ACKS}", timeout_s=30).out, re.M)]
    assert len(acked_old) >= 40
    after = rows(new)
    assert after == before, "rows changed after the old holder stopped"
    ids = [i for i, _ in after]
    assert len(ids) == len(set(ids))
    tokens = dict(after)
    for i in acked_old:
        assert tokens.get(i) == old_token, f"the old holder's acknowledged commit {i} missing or changed"
    for i in acked_new:
        assert tokens.get(i) == new_token
    old_rows = [i for i, t in after if t == old_token]
    assert max(old_rows) < min(acked_new)
    assert len(old_rows) - len(acked_old) in (0, 1), (len(old_rows), len(acked_old))
    return len(acked_old)
