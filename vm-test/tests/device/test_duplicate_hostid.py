"""Scenario 7: two hosts connected with the same host id are one registrant
to the target. nvfence notices on register: the report shows this host's id
bound to another node's key, and it says so instead of re-keying."""
import pytest

import nvlab
from nvlab.steps import CONFLICT, OK, nvf, report, reset

SHARED = "5f3c0a1e-0000-4000-8000-00000000beef"


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=2, topology="fabric", hostids={"a": SHARED, "b": SHARED}) as lab:
        yield lab


def test_duplicate_host_id_detected(lab):
    reset(lab)
    a, b = lab.hosts
    ra = nvf(a, "register", "--node", "1")
    assert ra.rc == OK, ra
    rb = nvf(b, "register", "--node", "2")
    assert rb.rc == CONFLICT, rb
    assert "host id is already registered with " + ra.json["key_text"] in rb.err
    assert "unique hostid" in rb.err
    # Nothing changed on the device: still one registrant, A's key.
    st = report(b)
    assert [x["key"] for x in st["registrants"]] == [ra.json["key"]]
