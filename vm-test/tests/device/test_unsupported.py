"""Scenario 6: on QEMU's own NVMe namespace (no reservation support) every
CLI command exits 4 and says the namespace has no reservation support."""
import pytest

import nvlab
from nvlab.steps import UNSUPPORTED, nvf

COMMANDS = [
    ["info"], ["report"], ["register", "--node", "1"], ["unregister"], ["acquire"],
    ["preempt", "--node", "1"], ["release"], ["clear", "--force"], ["write", "--lba", "0"],
    ["read", "--lba", "0"], ["notifications"],
]


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=1, topology="plain") as lab:
        yield lab


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_every_command_refuses(lab, args):
    h = lab.hosts[0]
    r = nvf(h, *args)
    assert r.rc == UNSUPPORTED, r
    assert "no NVMe reservation support" in r.err, r.err
    assert r.json and r.json["exit_code"] == UNSUPPORTED


def test_device_really_lacks_reservations(lab):
    # nvme-cli agrees: the device answers Invalid Command Opcode.
    res = lab.hosts[0].run('nvme resv-report "$NVFENCE_DEV"')
    assert res.rc != 0
    info = nvf(lab.hosts[0], "info").json
    assert info["reservations"] is False and info["rescap"] == 0
