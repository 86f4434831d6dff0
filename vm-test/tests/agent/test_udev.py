"""udev rules with the real udev (issue 6): Debian 12's systemd-udevd and
udevadm run inside the host VMs on the shipped udev/70-nvfence.rules.in and
udev/nvfenced@.service.in, configured for the guest the way CMake configures
them (binaries in /usr/local/bin, configuration in /etc); see nvlab/udev.py
for how udev gets there (fetched once with apt-get download, cached).

- After `udevadm trigger` and `udevadm settle` the EBS-identity shared
  namespace (fabric lab, ebs=True) gets /dev/nvfence/vol-0123456789abcdef0
  and the NVFENCE_* properties of `nvfence udev-probe`; a non-EBS fabrics
  namespace gets /dev/nvfence/<serial>-n<nsid>.
- The `plain` namespace (QEMU's own, no reservations; its serial even maps to
  the same volume id) gets no link and no NVFENCE_* property, configured or not.
- Removing and re-adding the namespace (target disables and re-enables it;
  `nvme disconnect` and `nvme connect`) removes and recreates the link.
- fence_nvfence without `devices` uses the link (status read from it).
- `nvfence udev-probe` prints nothing and exits 0 on a non-NVMe block device
  (/dev/vda, virtio-blk) and on /dev/null.
- systemd is not run: PID 1 of a lab guest is the lab's agent, and running
  systemd as PID 1 of a PID namespace in the busybox guest (cgroup2, units,
  libsystemd-shared) is not cheap. So (the issue's fallback) "the unit is
  wanted for a configured volume only" is checked on the SYSTEMD_WANTS
  property and the systemd tag that systemd acts on; then the unit's own
  ExecStart (from the configured nvfenced@.service) is run for that
  instance, as systemd would start it, and the agent must find its device.
- The agent resolves its device: an EBS volume id by scanning sysfs with no
  udev running at all, the udev link as a device path, and a non-EBS volume
  id through /dev/nvfence/<id> (and says so when the link is gone).

Two lab boots: fabric with one host (+ target) and plain with one host.
"""
import json
import re
import shlex

import pytest

from nvlab import udev

VOL = "vol-0123456789abcdef0"
LINK = f"/dev/nvfence/{VOL}"
CONF_DIR = "/etc/nvfence"
NQN2 = "nqn.2024-01.org.nvfence.lab:vol2"
ALL_TYPES = "WE,EA,WERO,EARO,WEAR,EAAR"   # nvmet supports all six reservation types
EVENT_WAIT_S = 60                        # bound for udev to act on a device event


@pytest.fixture(scope="module")
def lab():
    with udev.UdevLab(hosts=1, topology="fabric", ebs=True) as lab:
        yield lab


def nvfence_props(props):
    return {k: v for k, v in props.items() if k.startswith("NVFENCE_")}


def probe(host, dev):
    r = host.run(f"nvfence udev-probe {shlex.quote(dev)}", timeout_s=30)
    assert r.rc == 0, r
    return dict(line.split("=", 1) for line in r.out.splitlines())


def realpath(host, path):
    r = host.run(f"readlink -f {shlex.quote(path)}", timeout_s=30)
    return r.out.strip() if r.rc == 0 else None


def configure(host, volume, body="node_id = 1\n"):
    host.run(f"mkdir -p {CONF_DIR} && printf %s {shlex.quote(body)} > {CONF_DIR}/{volume}.conf", check=True)


def unconfigure(host, volume):
    host.run(f"rm -f {CONF_DIR}/{volume}.conf", check=True)


def change_event(host, dev):
    udev.trigger_settle(host, f"--action=change {shlex.quote(dev)}")


def wait_link(host, link, dev):
    """Wait (bounded) until udev has made link point at dev (dev None: gone)."""
    test = f"[ \"$(readlink -f {link})\" = {dev} ]" if dev else f"! [ -e {link} ] && ! [ -L {link} ]"
    r = host.wait_for(f"udevadm settle --timeout=10 && {test}", timeout_s=EVENT_WAIT_S, interval_s=0.2)
    if r.rc != 0:
        state = host.run("ls -l /dev/nvfence/ 2>&1; ls /sys/block").out
        pytest.fail(f"{link} should {'point at ' + dev if dev else 'be gone'} within {EVENT_WAIT_S}s; now: {state}")


def run_unit(host, instance, expect_state="STANDBY"):
    """Start nvfenced as nvfenced@<instance>.service would (its ExecStart),
    wait for its state, return its status, and stop it cleanly."""
    cmd = udev.unit_exec_start(host, instance)
    assert cmd.startswith("/usr/local/bin/nvfenced ") and f"{CONF_DIR}/{instance}.conf" in cmd, cmd
    log = f"/tmp/unit.{instance}.log"
    bg = host.spawn(cmd, log_path=log)
    try:
        r = host.wait_for(f"nvfence status {instance} --json | grep -q '\"state\":\"{expect_state}\"'",
                          timeout_s=60)
        assert r.rc == 0, (cmd, host.run(f"cat {log}; nvfence status {instance}").out)
        st = host.run(f"nvfence status {instance} --json", timeout_s=30, check=True)
        return json.loads(st.out.strip().splitlines()[-1])
    finally:
        bg.signal("TERM")
        assert bg.wait(timeout_s=60), host.run(f"cat {log}").out
        host.run("rm -rf /var/lib/nvfence")


def test_agent_resolves_ebs_volume_id_without_udev(lab):
    a = lab.hosts[0]
    if udev.running(a):
        udev.stop(a)
        a.run("rm -rf /dev/nvfence /run/udev", check=True)
    assert a.run("[ -e /dev/nvfence ]").rc != 0
    # No link, no udev: the EBS volume id is found by its serial in sysfs.
    configure(a, VOL)
    try:
        st = run_unit(a, VOL)
    finally:
        unconfigure(a, VOL)
    assert st["device"] == a.dev and st["volume"] == VOL, st


def test_ebs_namespace_link_and_properties(lab):
    a = lab.hosts[0]
    unconfigure(a, VOL)
    udev.start(a)          # systemd-udevd --daemon; udevadm trigger --action=add; udevadm settle
    assert "252" in a.run("udevadm --version", check=True).out   # Debian 12's udev
    assert realpath(a, LINK) == a.dev
    assert a.run(f"[ -L {LINK} ]").rc == 0
    props = udev.properties(a, a.dev)
    want = {
        "NVFENCE_NVME": "1",
        "NVFENCE_NSID": "1",
        "NVFENCE_MODEL": "Amazon_Elastic_Block_Store",
        "NVFENCE_VOLUME_ID": VOL,
        "NVFENCE_RESERVATIONS": "1",
        "NVFENCE_RESV_TYPES": ALL_TYPES,
        "NVFENCE_SHARED": "1",
        "NVFENCE_SHARED_REASON": "ebs",
    }
    assert nvfence_props(props) == want, props
    # udev imported exactly what the probe prints.
    assert probe(a, a.dev) == want
    assert LINK in props["DEVLINKS"].split(), props
    # Debian's own rules ran too (the link EC2 hosts know).
    assert "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0" in props["DEVLINKS"].split()
    assert ":systemd:" in props.get("TAGS", ""), props
    # Not configured: the agent's unit is not wanted.
    assert "SYSTEMD_WANTS" not in props, props
    # The link is a device path the CLI and the agent accept.
    r = a.run(f"nvfence info {LINK} --json", timeout_s=30)
    assert r.rc == 0, r
    assert json.loads(r.out.strip().splitlines()[-1])["device"] == a.dev


def test_fence_nvfence_finds_the_link_without_devices(lab):
    """fence_nvfence given no devices uses the links under /dev/nvfence to
    this cluster's namespaces: the EBS namespace's link, once a key of the
    cluster tag is registered there (a's unfencing, naming the link), so
    status of b, never registered, is OFF (exit 2) read from that device.
    Before, with no key of the tag, the link is skipped with a warning."""
    a = lab.hosts[0]
    assert a.run(f"[ -L {LINK} ]").rc == 0
    status = "printf 'action=status\\nplug=b\\nnode_ids=a:1;b:2\\nverbose=1\\n' | fence_nvfence"
    r = a.run(status, timeout_s=60)
    assert r.rc == 1 and f"{LINK}: skipped: no key of cluster tag 0" in r.err, r
    on = f"printf 'action=on\\nplug=a\\nnode_ids=a:1;b:2\\ndevices={LINK}\\n' | fence_nvfence"
    r = a.run(on, timeout_s=60)
    assert r.rc == 0, r
    try:
        r = a.run(status, timeout_s=60)
        assert r.rc == 2 and "Status: OFF" in r.out, r
        assert f"no devices given: using {LINK}" in r.err, r
    finally:
        a.run(f"nvfence unregister {LINK}", timeout_s=60)


def test_unit_wanted_only_for_configured_volume(lab):
    a = lab.hosts[0]
    udev.start(a, trigger=False)
    # Configured (here through the udev link as device path): wanted.
    configure(a, VOL, f"node_id = 1\ndevice = {LINK}\n")
    try:
        change_event(a, a.dev)
        props = udev.properties(a, a.dev)
        assert props.get("SYSTEMD_WANTS") == f"nvfenced@{VOL}.service", props
        assert ":systemd:" in props.get("TAGS", ""), props
        # What systemd would start: the unit's ExecStart for that instance.
        instance = re.fullmatch(r"nvfenced@(.+)\.service", props["SYSTEMD_WANTS"]).group(1)
        st = run_unit(a, instance)
        assert st["device"] == a.dev and st["volume"] == VOL, st
    finally:
        unconfigure(a, VOL)
    # Configuration gone: no longer wanted; link and tag stay.
    change_event(a, a.dev)
    props = udev.properties(a, a.dev)
    assert "SYSTEMD_WANTS" not in props, props
    assert ":systemd:" in props.get("TAGS", ""), props
    assert realpath(a, LINK) == a.dev


def test_namespace_removed_and_readded(lab):
    a = lab.hosts[0]
    udev.start(a, trigger=False)
    wait_link(a, LINK, a.dev)
    lab.target.ns_disable()
    try:
        wait_link(a, LINK, None)
    finally:
        lab.target.ns_enable()          # waits until the host sees the namespace again
    wait_link(a, LINK, a.dev)
    assert udev.properties(a, a.dev)["NVFENCE_VOLUME_ID"] == VOL


def test_fabrics_volume_link_disconnect_reconnect(lab):
    """A second, non-EBS subsystem: its volume id is not vol-..., so the agent
    finds it only through udev's /dev/nvfence/<id> link."""
    a, t = lab.hosts[0], lab.target
    udev.start(a, trigger=False)
    s = f"/sys/kernel/config/nvmet/subsystems/{NQN2}"
    t.run(f"[ -d {s} ] || {{ truncate -s 64M /tmp/vol2.img && mkdir {s} && "
          f"echo 1 > {s}/attr_allow_any_host && echo nvlab-vol2 > {s}/attr_serial && "
          f"mkdir {s}/namespaces/1 && echo /tmp/vol2.img > {s}/namespaces/1/device_path && "
          f"echo 1 > {s}/namespaces/1/buffered_io && echo 1 > {s}/namespaces/1/resv_enable && "
          f"echo 1 > {s}/namespaces/1/enable && "
          f"ln -s {s} /sys/kernel/config/nvmet/ports/1/subsystems/{NQN2}; }}", check=True)
    connect = (f"nvme connect -t tcp -a 169.254.1.1 -s 4420 -n {NQN2} "
               f"--hostnqn=$NVFENCE_HOSTNQN --hostid=$NVFENCE_HOSTID")
    find = (f"for c in /sys/class/nvme/nvme*; do [ \"$(cat $c/subsysnqn)\" = {NQN2} ] || continue; "
            f"for n in $c/nvme*n*; do [ -b /dev/${{n##*/}} ] && echo /dev/${{n##*/}} && exit 0; done; done; exit 1")

    def connect_dev():
        a.run(connect, timeout_s=60, check=True)
        r = a.wait_for(find, timeout_s=EVENT_WAIT_S)
        assert r.rc == 0, r
        return r.out.strip()

    dev2 = connect_dev()
    try:
        udev.settle(a)
        props = udev.properties(a, dev2)
        vid = props.get("NVFENCE_VOLUME_ID", "")
        assert vid and not vid.startswith("vol-") and vid == probe(a, dev2)["NVFENCE_VOLUME_ID"], props
        assert props["NVFENCE_RESERVATIONS"] == "1" and props["NVFENCE_SHARED_REASON"] == "fabrics", props
        link2 = f"/dev/nvfence/{vid}"
        wait_link(a, link2, dev2)
        assert realpath(a, LINK) == a.dev       # the EBS volume keeps its own link

        configure(a, vid)                       # device = the instance name (the volume id)
        change_event(a, dev2)
        assert udev.properties(a, dev2).get("SYSTEMD_WANTS") == f"nvfenced@{vid}.service"
        st = run_unit(a, vid)
        assert st["device"] == dev2 and st["volume"] == vid, st

        # Disconnect: the link goes, and the agent says why it cannot start.
        a.run(f"nvme disconnect -n {NQN2}", timeout_s=60, check=True)
        wait_link(a, link2, None)
        r = a.run(udev.unit_exec_start(a, vid), timeout_s=60)
        assert r.rc == 2 and "/dev/nvfence/ link" in r.err, r
        # Reconnect: the link comes back, pointing at the new namespace.
        dev2 = connect_dev()
        wait_link(a, link2, dev2)
        assert udev.properties(a, dev2).get("SYSTEMD_WANTS") == f"nvfenced@{vid}.service"
        assert run_unit(a, vid)["device"] == dev2
    finally:
        unconfigure(a, "*")
        a.run(f"nvme disconnect -n {NQN2}", timeout_s=60)


def test_probe_silent_on_non_nvme(lab):
    a = lab.hosts[0]
    udev.start(a, trigger=False)
    # The tools disk (virtio-blk, serial nvlab-tools) is a block device that
    # is not NVMe: load its driver; udevd sees it appear.
    a.run("for f in $(grep '^virtio_blk:' /usr/lib/modules/nvlab/deps | cut -d: -f2); do "
          "grep -q \"^$(basename $f .ko | tr - _) \" /proc/modules || insmod /usr/lib/modules/nvlab/$f; done",
          check=True)
    vda = a.wait_for("for s in /sys/block/vd*/serial; do [ \"$(cat $s)\" = nvlab-tools ] && "
                     "[ -b /dev/$(basename ${s%/serial}) ] && echo /dev/$(basename ${s%/serial}) && exit 0; done; exit 1",
                     timeout_s=EVENT_WAIT_S)
    assert vda.rc == 0, vda
    vda = vda.out.strip()
    for dev in (vda, "/dev/null"):
        r = a.run(f"nvfence udev-probe {dev}", timeout_s=30)
        assert (r.rc, r.out, r.err) == (0, "", ""), (dev, r)
    udev.settle(a)
    props = udev.properties(a, vda)
    assert props.get("ID_SERIAL") == "nvlab-tools", props      # udev did process it...
    assert not nvfence_props(props) and "SYSTEMD_WANTS" not in props, props   # ...and we left it alone
    assert "/dev/nvfence/" not in props.get("DEVLINKS", "")


def test_plain_namespace_gets_nothing():
    with udev.UdevLab(hosts=1, topology="plain") as lab:
        p = lab.hosts[0]
        # QEMU's namespace has serial vol0123456789abcdef0, so its volume id
        # is the EBS one: even configured it must get nothing (no reservations).
        configure(p, VOL)
        udev.start(p)
        props = udev.properties(p, p.dev)
        # udev processed it (Debian's rules made its by-id link)...
        assert props.get("ID_SERIAL_SHORT") == "vol0123456789abcdef0", props
        assert any(x.startswith("/dev/disk/by-id/nvme-") for x in props.get("DEVLINKS", "").split()), props
        # ...the probe sees an NVMe namespace without reservations...
        seen = probe(p, p.dev)
        assert seen["NVFENCE_NVME"] == "1" and seen["NVFENCE_RESERVATIONS"] == "0", seen
        assert seen["NVFENCE_VOLUME_ID"] == VOL, seen
        # ...and the rules leave it alone: no link, no property, no unit.
        assert not nvfence_props(props), props
        assert "SYSTEMD_WANTS" not in props, props
        assert "/dev/nvfence/" not in props.get("DEVLINKS", ""), props
        assert p.run("[ -e /dev/nvfence ]").rc != 0, p.run("ls -lR /dev/nvfence").out
