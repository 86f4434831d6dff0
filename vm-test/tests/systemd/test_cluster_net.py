"""The cluster network (issue 12): every host VM of a systemd-flavour lab
has a second NIC on one shared L2 segment (a QEMU hub process, unix-socket
links, 169.254.100.<n>/24), separate from its storage link to the target.

- Hosts reach each other over the cluster network (and by name).
- cut("cluster") on a host: its cluster peers become unreachable, its NVMe
  I/O to the target keeps working.
- cut("storage"): its NVMe I/O stalls (keep-alive), its cluster link keeps
  working.
- heal("both") restores both: the controller reconnects and I/O works.
- A frozen host (pause) does not stall the segment for the others: frames
  sent to it are dropped, as a switch drops frames to a frozen NIC.
"""
import pytest

import nvlab

IO = "dd if=$NVFENCE_DEV of=/dev/null bs=4096 count=1 iflag=direct"
WRITE = "dd if=/dev/urandom of=$NVFENCE_DEV bs=4096 count=1 seek=100 oflag=direct"


@pytest.fixture(scope="module")
def lab():
    # Generous start bound: three TCG VMs booting systemd on a busy 2-core machine.
    with nvlab.Lab(hosts=3, flavour="systemd", boot_timeout_s=480) as lab:
        yield lab


def ping(host, ip, count=1, wait_s=2):
    return host.run(f"ping -n -q -c {count} -W {wait_s} {ip}", timeout_s=count * wait_s + 20)


def test_hosts_reach_each_other(lab):
    a, b = lab.hosts[:2]
    assert a.cluster_ip == "169.254.100.1" and b.cluster_ip == "169.254.100.2"
    assert ping(a, b.cluster_ip).rc == 0
    assert ping(b, a.cluster_ip).rc == 0
    assert ping(a, "b").rc == 0          # /etc/hosts names the cluster peers
    # The cluster NIC is not the storage NIC.
    assert a.info["cluster_if"] != a.info["storage_if"]


def test_cut_cluster_keeps_storage(lab):
    a, b = lab.hosts[:2]
    a.cut("cluster")
    try:
        assert a.cut_paths == {"cluster"} and not a.is_cut
        assert ping(a, b.cluster_ip).rc != 0
        assert ping(b, a.cluster_ip).rc != 0
        assert a.run(IO, timeout_s=60).rc == 0
        assert a.run(WRITE, timeout_s=60).rc == 0
    finally:
        a.heal("cluster")
    assert a.wait_for(f"ping -n -q -c 1 -W 1 {b.cluster_ip}", timeout_s=30).rc == 0


def test_cut_storage_keeps_cluster(lab):
    a, b = lab.hosts[:2]
    a.cut("storage")
    try:
        assert a.is_cut and a.cut_paths == {"storage"}
        assert ping(a, b.cluster_ip).rc == 0
        # The target's side of a's storage link is unreachable.
        assert a.run("ping -n -q -c 1 -W 2 169.254.1.1", timeout_s=30).rc != 0
        r = a.run(IO, timeout_s=8)
        assert r.rc != 0, "I/O completed over a cut storage link"
        assert ping(a, b.cluster_ip).rc == 0
    finally:
        a.heal("storage")
    assert a.wait_for(IO, timeout_s=90).rc == 0


def test_cut_both_and_heal(lab):
    a, b = lab.hosts[:2]
    a.cut("both")
    try:
        assert a.cut_paths == {"storage", "cluster"}
        assert ping(a, b.cluster_ip).rc != 0
        assert a.run("ping -n -q -c 1 -W 2 169.254.1.1", timeout_s=30).rc != 0
    finally:
        a.heal("both")
    assert not a.cut_paths
    assert a.wait_for(f"ping -n -q -c 1 -W 1 {b.cluster_ip}", timeout_s=30).rc == 0
    assert a.wait_for(IO, timeout_s=90).rc == 0
    assert b.run(IO, timeout_s=60).rc == 0


def test_a_frozen_host_does_not_stall_the_others(lab):
    # Found by the Pacemaker lab: QMP stop on one host, traffic to it filled
    # its hub socket, and QEMU's hub then blocked every port: the survivors'
    # TX queues timed out and corosync never saw the node go.
    a, b, c = lab.hosts
    assert ping(b, c.cluster_ip).rc == 0
    a.pause()
    try:
        # Several MB of broadcast frames at the frozen host: far more than
        # its unix-socket link buffers.
        r = b.run("ping -n -q -b -f -s 1400 -c 6000 -w 20 169.254.100.255", timeout_s=60)
        assert r.rc in (0, 1), r
        r = ping(b, c.cluster_ip, count=3, wait_s=2)
        assert r.rc == 0, f"b cannot reach c while a is frozen: {r}"
        assert ping(c, b.cluster_ip).rc == 0
    finally:
        a.resume()
    assert a.wait_for(f"ping -n -q -c 1 -W 1 {b.cluster_ip}", timeout_s=30).rc == 0
