"""nvfenced@.service under real systemd (issue 12): two host VMs of the
systemd flavour (Debian 12 root, systemd PID 1, journald, systemd-udevd) on
the fabric lab's nvmet target; the project is installed in the guests with
`cmake --install` (udev rule, unit, binaries), exactly as shipped.

- With <sysconfdir>/nvfence/vol-....conf present, the real udev rule starts
  nvfenced@vol-....service when the namespace appears (nobody runs
  systemctl start); the unit reaches active only through READY=1
  (Type=notify); `nvfence status` answers through the socket.
- b takes over (its own unit, standby) and a's agent becomes FENCED.
- SIGSTOP of a's nvfenced: systemd's watchdog (the unit's WatchdogSec)
  kills it and Restart= starts it again; the restarted agent is FENCED
  again (separate test function).
- socket_group: a member of the group asks the agent, another user is
  refused (exit 5).
- Observability (issue 50): the metrics file under metrics_dir parses with
  the Prometheus client (on the host) and has the agent's state and epoch;
  journalctl -o json has the structured record (NVFENCE_VOLUME,
  NVFENCE_STATE) of the HOLDER -> FENCED change; `nvfence status --all`
  lists the volume.
- `systemctl stop` stops the unit cleanly (Result=success, exit status 0).
- The unit's Documentation= target exists in the installed system.
"""
import json
import re
import shlex
import time

import pytest

import nvlab
from nvlab.steps import agent_conf_path, unit_show

VOL = "vol-0123456789abcdef0"
UNIT = f"nvfenced@{VOL}.service"
WAIT_S = 90          # bound for udev/systemd to act on an event under a loaded TCG host
# Debian's prometheus-node-exporter textfile directory (nvfenced.conf(5) metrics_dir).
METRICS_DIR = "/var/lib/prometheus/node-exporter"
METRICS_FILE = f"{METRICS_DIR}/nvfence_{VOL}.prom"


@pytest.fixture(scope="module")
def lab():
    # Generous start bound: three TCG VMs booting systemd on a busy 2-core machine.
    with nvlab.Lab(hosts=2, flavour="systemd", boot_timeout_s=480) as lab:
        yield lab


def show(host, *props):
    return unit_show(host, UNIT, *props)


def timespan_s(text):
    """systemd's printed time span ("30s", "1min 30s", "500ms") in seconds;
    None for "0"/"infinity"/empty."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|min|h)\b", text)
    total = sum(float(n) * units[u] for n, u in parts)
    return total or None


def conf_path(host):
    return agent_conf_path(host, VOL)


def status(host):
    r = host.run(f"nvfence status {VOL} --json", timeout_s=30)
    assert r.rc == 0, (r.out, r.err, host.journal(UNIT, lines=30))
    return json.loads(r.out.strip().splitlines()[-1])


def wait_state(host, state, timeout_s=WAIT_S):
    r = host.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"{state}\"'", timeout_s=timeout_s)
    assert r.rc == 0, (state, host.run(f"nvfence status {VOL}").out, host.journal(UNIT, lines=30))


def configure(host, node, role):
    path = conf_path(host)
    # The collector's directory is its package's; the image has none.
    host.run(f"mkdir -p {METRICS_DIR}", timeout_s=30, check=True)
    host.put(f"node_id = {node}\nrole = {role}\ninterval_ms = 500\nmetrics_dir = {METRICS_DIR}\n".encode(), path)
    return path


def replug(host):
    """The namespace goes away and comes back as udev sees it (remove + add
    uevents): systemd starts what the device unit then wants."""
    host.run(f"udevadm trigger --action=remove --settle {host.dev} && "
             f"udevadm trigger --action=add --settle {host.dev}", timeout_s=WAIT_S, check=True)


def test_documentation_target_exists(lab):
    a = lab.hosts[0]
    docs = show(a, "Documentation")["Documentation"].split()
    assert docs, "the unit has no Documentation="
    for url in (d.strip('"') for d in docs):
        if url.startswith("man:"):
            # man:NAME(S): the page is installed under some prefix's man tree.
            m = re.fullmatch(r"man:([\w.@-]+)\((\d)\)", url)
            assert m, url
            name, sec = m.groups()
            paths = [f"{p}/share/man/man{sec}/{name}.{sec}{z}"
                     for p in ("/usr", "/usr/local") for z in ("", ".gz")]
            r = a.run(" || ".join(f"test -s {x}" for x in paths))
            assert r.rc == 0, f"Documentation={url}: none of {paths} is installed"
            continue
        assert url.startswith("file:"), url
        path = url[len("file:"):]
        r = a.run(f"test -s {shlex.quote(path)}")
        assert r.rc == 0, f"Documentation={url}: {path} is not installed"


def test_udev_starts_unit_and_ready(lab):
    a, b = lab.hosts
    for h in (a, b):
        assert h.run(f"systemctl is-active {UNIT}").out.strip() == "inactive"
    configure(a, 1, "acquire")
    configure(b, 2, "standby")
    for h in (a, b):
        replug(h)
        # Started by the udev rule (SYSTEMD_WANTS), not by us.
        r = h.wait_for(f"systemctl is-active --quiet {UNIT}", timeout_s=WAIT_S)
        assert r.rc == 0, (h.run(f"udevadm info --query=property {h.dev}").out, h.journal(UNIT, lines=30))
        # ...because the namespace's device unit wants it (udev's SYSTEMD_WANTS).
        wanted_by = [u.strip('"') for u in show(h, "WantedBy")["WantedBy"].split()]
        assert any(u.endswith(".device") for u in wanted_by), wanted_by
        st = show(h, "Type", "NotifyAccess", "ActiveState", "SubState", "StatusText", "WatchdogUSec",
                  "MainPID")
        # Type=notify: 'active' only after READY=1 (else 'activating').
        assert st["Type"] == "notify" and st["ActiveState"] == "active" and st["SubState"] == "running", st
        assert st["StatusText"], st
        assert int(st["MainPID"]) > 0
        assert h.run(f"test -S /run/nvfence/{VOL}.sock").rc == 0
    wait_state(a, "HOLDER")
    wait_state(b, "STANDBY")
    # nvfence status through the socket: the key a holds is the device's holder.
    sa = status(a)
    assert sa["state"] == "HOLDER" and sa["key"]
    rep = json.loads(a.run("nvme resv-report $NVFENCE_DEV --eds -o json", check=True).out)
    holders = [r for r in rep["regctlext"] if r["rcsts"] & 1]
    assert len(holders) == 1 and int(sa["key"], 16) == holders[0]["rkey"], (sa, rep)
    assert "Started" in a.journal(UNIT)


def test_takeover_fences_a(lab):
    a, b = lab.hosts
    r = b.run(f"nvfence takeover {VOL} --json", timeout_s=90)
    assert r.rc == 0, (r.out, r.err)
    wait_state(b, "HOLDER")
    wait_state(a, "FENCED")


def metric_families(host):
    """The agent's metrics file, read in the guest, parsed here by the
    Prometheus client (Debian's python3-prometheus-client): name -> family."""
    from prometheus_client.parser import text_string_to_metric_families
    text = host.run(f"cat {METRICS_FILE}", timeout_s=30, check=True).out
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, family, name, **labels):
    for s in fams[family].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_metrics_journal_fields_and_status_all(lab):
    """After a's HOLDER -> FENCED (test_takeover_fences_a): the metrics file
    says FENCED (written at most once a second: waited for), b's says
    HOLDER with the epoch of its key; a's journal has the structured
    record of the change; `nvfence status --all` lists the volume."""
    a, b = lab.hosts
    r = a.wait_for(f"grep -q 'nvfence_state{{volume=\"{VOL}\",state=\"FENCED\"}} 1' {METRICS_FILE}", timeout_s=30)
    assert r.rc == 0, (a.run(f"ls -l {METRICS_DIR}; cat {METRICS_FILE}").out, a.journal(UNIT, lines=30))
    assert a.run(f"stat -c %a {METRICS_FILE}", check=True).out.strip() == "644"
    fams = metric_families(a)
    assert sample(fams, "nvfence_state", "nvfence_state", volume=VOL, state="FENCED") == 1, fams
    assert sample(fams, "nvfence_fences", "nvfence_fences_total", volume=VOL) >= 1
    sb = status(b)
    r = b.wait_for(f"grep -q 'nvfence_key_epoch{{volume=\"{VOL}\"}} {sb['epoch']}$' {METRICS_FILE}", timeout_s=30)
    assert r.rc == 0, b.run(f"cat {METRICS_FILE}").out
    fams = metric_families(b)
    assert sample(fams, "nvfence_state", "nvfence_state", volume=VOL, state="HOLDER") == 1, fams
    assert sample(fams, "nvfence_key_epoch", "nvfence_key_epoch", volume=VOL) == sb["epoch"]
    assert fams["nvfence_device_command_seconds"].type == "histogram"
    # The structured journal record of a's change.
    out = a.journal(UNIT, args="-o json")
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any(r.get("NVFENCE_VOLUME") == VOL and r.get("NVFENCE_STATE") == "FENCED" and
               r.get("NVFENCE_PREVIOUS_STATE") == "HOLDER" and r.get("NVFENCE_KEY", "").startswith("nf:")
               for r in recs), out[-3000:]
    # Every agent of the host, the unit's configuration directory named.
    conf_dir = conf_path(a).rsplit("/", 1)[0]
    for h, state in ((a, "FENCED"), (b, "HOLDER")):
        r = h.run(f"nvfence status --all --config-dir {conf_dir} --json", timeout_s=30)
        assert r.rc == 0, (r.out, r.err)
        vols = json.loads(r.out.strip().splitlines()[-1])["volumes"]
        assert [(v["name"], v["configured"], v["state"]) for v in vols] == [(VOL, True, state)], vols
        r = h.run("nvfence status --all", timeout_s=30)  # the socket in /run/nvfence alone
        assert r.rc == 0 and re.search(rf"^{VOL}\s+{state}\s", r.out, re.M), (r.out, r.err)


def test_watchdog_kills_and_restarts_stopped_agent(lab):
    a, _b = lab.hosts
    st0 = show(a, "MainPID", "NRestarts", "WatchdogUSec")
    pid0, n0 = int(st0["MainPID"]), int(st0["NRestarts"])
    wd_s = timespan_s(st0["WatchdogUSec"])
    assert wd_s, f"the unit has no watchdog: {st0}"
    a.run(f"kill -STOP {pid0}", check=True)
    t0 = time.monotonic()
    # Watchdog timeout + SIGABRT + RestartSec + start, with slack for TCG.
    bound = wd_s + 90
    r = a.wait_for(f"[ \"$(systemctl show -p NRestarts --value {UNIT})\" -gt {n0} ] && "
                   f"systemctl is-active --quiet {UNIT}", timeout_s=bound, interval_s=0.5)
    took = time.monotonic() - t0
    log = a.journal(UNIT)
    assert r.rc == 0, log[-3000:]
    pid1 = int(show(a, "MainPID")["MainPID"])
    assert pid1 not in (0, pid0)
    assert a.run(f"kill -0 {pid0}").rc != 0, "the stopped agent still exists"
    assert re.search(r"[Ww]atchdog timeout", log), log[-3000:]
    print(f"\nMEASURED SIGSTOP -> restarted and active again: {took:.1f}s (WatchdogSec {wd_s:.0f}s)")
    assert took > wd_s * 0.5, "restarted long before the watchdog could have fired"


def test_fenced_agent_stays_fenced_after_watchdog_restart(lab):
    a, b = lab.hosts
    wait_state(a, "FENCED")
    st = status(a)
    assert st["state"] == "FENCED", st
    # ...and it did not re-register or take anything from b.
    assert status(b)["state"] == "HOLDER"


def test_socket_group_lets_its_members_ask(lab):
    """socket_group under the hardened unit: the socket is root:<group> 0660
    (the unit keeps CAP_CHOWN for it), a member of the group asks the agent,
    another user is refused with the permission exit code (5) and a message
    that says what to do."""
    _a, b = lab.hosts
    b.run("getent group nvops >/dev/null || groupadd nvops; id opsuser >/dev/null 2>&1 || useradd -M -G nvops opsuser; "
          "id otheruser >/dev/null 2>&1 || useradd -M otheruser", timeout_s=60, check=True)
    path = configure(b, 2, "standby")
    b.run(f"echo 'socket_group = nvops' >> {shlex.quote(path)} && systemctl restart {UNIT}", timeout_s=120, check=True)
    wait_state(b, "STANDBY")   # its clean stop released; a is fenced, so nobody holds
    r = b.run(f"stat -c '%U %G %a' /run/nvfence/{VOL}.sock", timeout_s=30, check=True)
    assert r.out.split() == ["root", "nvops", "660"], r.out
    r = b.run(f"runuser -u opsuser -- nvfence status {VOL} --json", timeout_s=30)
    assert r.rc == 0 and '"state":' in r.out, (r, b.journal(UNIT, lines=30))
    r = b.run(f"runuser -u otheruser -- nvfence status {VOL} --json", timeout_s=30)
    assert r.rc == 5 and "socket_group" in r.out + r.err, r


def test_systemctl_stop_is_clean(lab):
    a, b = lab.hosts
    for h in (b, a):
        r = h.run(f"systemctl stop {UNIT}", timeout_s=120)
        assert r.rc == 0, (r.err, h.journal(UNIT, lines=30))
        st = show(h, "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
        assert st["ActiveState"] == "inactive" and st["Result"] == "success", (st, h.journal(UNIT, lines=30))
        assert st["ExecMainStatus"] == "0", st
    # The holder released on its clean stop: nobody holds.
    rep = json.loads(a.run("nvme resv-report $NVFENCE_DEV --eds -o json", check=True).out)
    assert not [r for r in rep["regctlext"] if r["rcsts"] & 1], rep
