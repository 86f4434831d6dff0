"""The fencing checker: the invariants a run of writers must keep, proven
from what the media holds and what the writers were told (the campaign's
evidence goes through it). docs/RELIABILITY.md "Invariants"."""

from __future__ import annotations

from collections import Counter

QUEUE_DEPTH = 8            # the writers' --qd (the campaign's and the Pacemaker lab's)


# The one-holder sampler (invariant 2) must have looked: a schedule fails
# with fewer than MIN_SAMPLES reports, or fewer than one per
# SAMPLE_EVERY_S seconds of the schedule (it asks every 0.5 s; paused,
# cut and killed hosts are skipped, and TCG is slow).
MIN_SAMPLES = 5


SAMPLE_EVERY_S = 10.0


def epoch_of(key: int | None) -> int:
    return (key or 0) & 0xffffffff


def hexk(key: int | None) -> str:
    return "none" if not key else "0x%016x" % key


class Violation(AssertionError):
    pass


def check_sampler(samples: int, tries: int, seconds: float, errors: list) -> None:
    """Invariant 2 is only as good as its samples: fewer than MIN_SAMPLES,
    or than one per SAMPLE_EVERY_S seconds of the schedule, fails the run."""
    need = max(MIN_SAMPLES, int(seconds / SAMPLE_EVERY_S))
    if samples < need:
        raise Violation(f"invariant 2 unchecked: the sampler got {samples} reports in {seconds:.0f}s "
                        f"({tries} tries), fewer than the minimum {need}; last errors: {errors[-3:]}")


def check(blocks: list, writers: list, final_holder: int | None, samples: list, grants: list,
          totals: Counter, log=print) -> dict:
    """The invariants over what the media holds and what the writers logged.
    Raises Violation naming the block, writer and invariant."""
    byid = {w.wid: w for w in writers}
    status_of = {}            # (wid, seq) -> status
    acked_at: dict = {}       # lba -> list of (epoch, wid, seq)
    for w in writers:
        _check_writer(w, status_of, acked_at, totals)
    _check_holders(samples, grants)
    unknown, unlogged = _check_blocks(blocks, byid, status_of, acked_at, final_holder, totals)
    _check_unlogged(unlogged, byid)
    totals["blocks_checked"] += len(blocks)
    totals["unlogged_stamps"] += unknown
    return {"final_holder": hexk(final_holder), "writers": len(writers), "unlogged_stamps": unknown,
            "unlogged_by_writer": unlogged,
            "acked": sum(len(v) for v in acked_at.values()), "samples": len(samples), "grants": len(grants)}


def _check_writer(w, status_of: dict, acked_at: dict, totals: Counter) -> None:
    """Invariant 4 over one writer's completions; records its statuses and
    acknowledged writes for the media checks."""
    seen = set()
    first_fenced = None
    ok_after = 0
    for i, (lba, seq, st, detail) in enumerate(w.completions):
        if seq in seen:
            raise Violation(f"invariant 4: writer {w.wid} ({w.host}) completed seq {seq} twice (a retry)")
        seen.add(seq)
        status_of[(w.wid, seq)] = st
        if st == "fenced" and first_fenced is None:
            first_fenced = i
        if st == "ok":
            if first_fenced is not None:
                # Allowed by the device only for a write admitted before
                # the preempt completed, i.e. one the writer had handed
                # over before it latched; its effect on the media is
                # checked by epoch under invariant 1.
                ok_after += 1
                if w.fenced_next is None or seq >= w.fenced_next:
                    raise Violation(f"invariant 4: writer {w.wid} ({w.host}) got ok for seq {seq}, queued after "
                                    f"its latch (first fenced completion: every queued seq below "
                                    f"{w.fenced_next})")
                if ok_after > QUEUE_DEPTH - 1:
                    raise Violation(f"invariant 4: writer {w.wid} ({w.host}): {ok_after} ok completions after "
                                    f"its first fenced one, more than the {QUEUE_DEPTH - 1} others in flight")
            acked_at.setdefault(lba, []).append((epoch_of(w.key), w.wid, seq))
        if st == "error" and "onflict" in detail:
            raise Violation(f"invariant 4: writer {w.wid}: a reservation conflict reported as an I/O error: "
                            f"{detail}")
    _count_writer(w, first_fenced, ok_after, totals)


def _count_writer(w, first_fenced, ok_after: int, totals: Counter) -> None:
    totals["writers"] += 1
    totals["acked"] += sum(1 for c in w.completions if c[2] == "ok")
    totals["fenced_completions"] += sum(1 for c in w.completions if c[2] == "fenced")
    totals["error_completions"] += sum(1 for c in w.completions if c[2] == "error")
    if first_fenced is not None:
        totals["fenced_writers"] += 1
    totals["ok_after_fenced"] += ok_after
    if ok_after:
        totals["writers_with_ok_after_fenced"] += 1
    if w.settled_ms is not None:
        totals["settled_ms_max"] = max(totals["settled_ms_max"], int(w.settled_ms + 0.5))


def _check_holders(samples: list, grants: list) -> None:
    """Invariant 2 over the samples and the grants."""
    prev = None
    for t, holder, keys in samples:
        if holder and prev and holder != prev and epoch_of(holder) <= epoch_of(prev):
            raise Violation(f"invariant 2: holder {hexk(holder)} at {t:.2f}s after {hexk(prev)}: epoch went down")
        if holder:
            prev = holder
    for t, key, before, who in grants:
        if before and epoch_of(key) <= before:
            raise Violation(f"invariant 2: grant {hexk(key)} to {who} at {t:.2f}s is not above epoch {before} "
                            "seen before it")


def _check_blocks(blocks: list, byid: dict, status_of: dict, acked_at: dict, final_holder, totals: Counter):
    """Invariants 1 and 3 over every block on the media; returns the count of
    stamps no log completed and, per writer, [count, log known, max logged
    seq, min unlogged seq]."""
    final_epoch = epoch_of(final_holder)
    unknown = 0
    unlogged: dict = {}
    for b in blocks:
        lba = b["lba"]
        acked = max(acked_at.get(lba, []), default=None)
        if not b.get("stamp"):
            if acked:
                raise Violation(f"invariant 3: LBA {lba} holds no stamp but write {acked} was acknowledged")
            continue
        wid, seq, ep = b["writer_id"], b["seq"], b["epoch"]
        if b.get("stamped_lba") != lba:
            raise Violation(f"LBA {lba} holds a stamp for LBA {b.get('stamped_lba')}")
        st = status_of.get((wid, seq))
        if st is None:
            unknown += 1
            w = byid.get(wid)
            u = unlogged.setdefault(wid, [0, bool(w), max((c[1] for c in w.completions), default=-1) if w else None,
                                          seq])
            u[0] += 1
            u[3] = min(u[3], seq)
        if st == "fenced":
            _fenced_but_landed(lba, wid, seq, ep, final_holder, final_epoch, totals)
        if acked and ep < acked[0]:
            raise Violation(f"invariant 1: LBA {lba} holds epoch {ep} (writer {wid} seq {seq}) on top of a write "
                            f"acknowledged under epoch {acked[0]} (writer {acked[1]} seq {acked[2]})")
        mine = [a for a in acked_at.get(lba, []) if a[0] == final_epoch] if final_holder else []
        if mine:
            last = max(mine)
            if ep != final_epoch or (wid, seq) < (last[1], last[2]):
                raise Violation(f"invariant 3: LBA {lba}: the final holder's acknowledged write (writer {last[1]} "
                                f"seq {last[2]}) is not on the media (found epoch {ep} writer {wid} seq {seq})")
    return unknown, unlogged


def _fenced_but_landed(lba, wid, seq, ep, final_holder, final_epoch: int, totals: Counter) -> None:
    """A command the kernel sent again (after a path error or an abort)
    completes with the last attempt's status: an earlier attempt admitted
    before the preempt may have landed. That is ordered before the new
    holder, so it is judged by its effect: never above the final holder's
    epoch, never on top of a write acknowledged under a higher epoch
    (checked by the caller)."""
    if final_holder and ep >= final_epoch:
        raise Violation(f"invariant 1: LBA {lba} holds writer {wid} seq {seq} under epoch {ep}, a write "
                        f"that completed FENCED, not below the final holder's epoch {final_epoch}")
    totals["fenced_but_landed"] += 1
    print(f"campaign: LBA {lba} holds writer {wid} seq {seq} (epoch {ep}), which completed FENCED: "
          "an earlier attempt landed before the preempt", flush=True)


def _check_unlogged(unlogged: dict, byid: dict) -> None:
    for wid, (count, known, max_logged, min_unlogged) in unlogged.items():
        w = byid.get(wid)
        if w is None:
            raise Violation(f"LBA stamps of writer {wid}, which no log knows")
        # Only the writes in flight when a writer was killed may be on the
        # media without a logged completion.
        if not w.killed_host and (w.ended or count > QUEUE_DEPTH):
            raise Violation(f"invariant 4: {count} block(s) of writer {wid} ({w.host}) are on the media without a "
                            f"logged completion (first seq {min_unlogged}, last logged {max_logged}, "
                            f"{'ended' if w.ended else 'killed'})")
