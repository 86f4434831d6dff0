"""Scenario 3: access rules for all six reservation types. Host a holds,
host b is a registrant, host c is not registered; each reads and writes
through the nvfence CLI, and the device accepts or refuses exactly as the
NVMe Base Specification's "Command Behavior in the Presence of a
Reservation" table says."""
import pytest

import nvlab
from nvlab.steps import CONFLICT, OK, nvf, report, reset

# type -> {role: (read allowed, write allowed)}
RULES = {
    "we":   {"holder": (1, 1), "registrant": (1, 0), "other": (1, 0)},
    "ea":   {"holder": (1, 1), "registrant": (0, 0), "other": (0, 0)},
    "wero": {"holder": (1, 1), "registrant": (1, 1), "other": (1, 0)},
    "earo": {"holder": (1, 1), "registrant": (1, 1), "other": (0, 0)},
    "wear": {"holder": (1, 1), "registrant": (1, 1), "other": (1, 0)},
    "eaar": {"holder": (1, 1), "registrant": (1, 1), "other": (0, 0)},
}
SHORT = {"we": "WE", "ea": "EA", "wero": "WERO", "earo": "EARO", "wear": "WEAR", "eaar": "EAAR"}


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=3, topology="loop") as lab:
        yield lab


@pytest.mark.parametrize("rtype", list(RULES))
def test_access_rules(lab, rtype):
    reset(lab)
    a, b, c = lab.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    assert nvf(b, "register", "--node", "2").rc == OK
    r = nvf(a, "acquire", "--type", rtype)
    assert r.rc == OK, r
    st = report(c)
    assert st["type"] == SHORT[rtype]
    observed = {}
    for role, host, lba in (("holder", a, 100), ("registrant", b, 200), ("other", c, 300)):
        rd = nvf(host, "read", "--lba", str(lba))
        wr = nvf(host, "write", "--lba", str(lba))
        for what, res in (("read", rd), ("write", wr)):
            assert res.rc in (OK, CONFLICT), (rtype, role, what, res)
        observed[role] = (int(rd.rc == OK), int(wr.rc == OK))
        if wr.rc == CONFLICT:
            assert "FENCED" in wr.err and "Reservation Conflict" in wr.err, wr
    assert observed == RULES[rtype], (rtype, observed)
