"""Scenario 5: two hosts run `nvfence preempt` at the same moment against a
third holder: exactly one wins (exit 0), the other exits 6 naming the
winner, and the device agrees.

Both name the failed holder with --victim, as a cluster manager failing over
from a known node does: the device then arbitrates (the preempt key is a
compare-and-swap), so the outcome does not depend on how closely the two
commands overlap. With the default (--holder) a preempt that starts after
the other finished would preempt the new holder instead."""
import threading

import pytest

import nvlab
from nvlab.steps import LOST_RACE, OK, nvf, report, reset


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=3, topology="fabric") as lab:
        yield lab


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_preempt(lab, round_):
    reset(lab)
    a, b, c = lab.hosts
    assert nvf(c, "register", "--node", "3").rc == OK
    acq = nvf(c, "acquire")
    assert acq.rc == OK, acq
    victim = acq.json["key"]
    # Pre-register both contenders in odd rounds so the race is on the
    # preempt itself, not on registration.
    if round_ % 2:
        assert nvf(a, "register", "--node", "1").rc == OK
        assert nvf(b, "register", "--node", "2").rc == OK
    results = {}
    barrier = threading.Barrier(2)

    def go(name, host, node):
        barrier.wait()
        results[name] = nvf(host, "preempt", "--node", node, "--victim", victim)

    ts = [threading.Thread(target=go, args=("a", a, "1")), threading.Thread(target=go, args=("b", b, "2"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    codes = sorted(r.rc for r in results.values())
    assert codes == [OK, LOST_RACE], results
    winner = next(r for r in results.values() if r.rc == OK)
    loser = next(r for r in results.values() if r.rc == LOST_RACE)
    # The loser lost at the device (its preempt found the victim gone), or
    # before sending anything (its first report already showed the winner
    # holding: nothing was changed). Either way exit 6, naming the winner.
    assert "lost the takeover race" in loser.err or "matches no registrant" in loser.err, loser.err
    assert winner.json["key_text"] in loser.err, (winner.json, loser.err)
    assert loser.json["holder"] == winner.json["key"]
    st = report(c)
    assert st["holder"] == winner.json["key"]
    holders = [x for x in st["registrants"] if x["holder"]]
    assert len(holders) == 1
