"""A 3-member etcd cluster on the systemd host VMs (cluster network only)
and nvfenced with `elector = etcd` on each host: shared by
test_etcd_cluster.py and measure_etcd.py.

Debian's etcd-server runs etcd.service with /etc/default/etcd; each member
binds its cluster address only (169.254.100.<n>, never a host address).
Every guest's nvfenced lists its own member first, then the others.
"""
import json
import os
import shlex
import time

import nvlab

VOL = "vol"
# nvfenced's volume id (the election is nvfence/<volume id>).
VOL_ID = "vol-" + nvlab.DISK_SERIAL[3:]
NVFENCED = "/usr/local/sbin/nvfenced"
NVFENCE = "/usr/local/bin/nvfence"
ETCD_DATA = "/var/lib/etcd/nvlab"
# The cluster image starts corosync and pacemaker at boot: not needed here,
# and on a loaded machine every guest CPU cycle counts.
NO_PACEMAKER = "systemd.mask=corosync.service systemd.mask=pacemaker.service"
# The agents' check interval: the elector wakes the agent for a win at once;
# the interval only bounds how soon a preempted holder notices by itself.
INTERVAL_MS = 500
# More nvfenced flags for every agent, e.g. "--etcd-timeout-ms 5000" with a
# long TTL on a machine where etcd answers in seconds.
AGENT_FLAGS = os.environ.get("NVFENCE_ETCD_AGENT_FLAGS", "")


def writer_loop():
    """The writer loop (nvlab.workloads.writer.WRITER_LOOP), polling the agent
    once a second while not HOLDER instead of 5 times, and writing 50 times
    a second instead of 500 (3 guests' CPUs are shared with etcd)."""
    from nvlab.workloads.writer import WRITER_LOOP
    loop = WRITER_LOOP.replace("nvfence status vol", f"{NVFENCE} status {VOL}")
    slow = loop.replace("*) usleep 200000; continue;;", "*) usleep 1000000; continue;;")
    # 50 writes/s instead of 500: each NVMe/TCP write costs the TCG guest
    # CPU that its etcd member needs (at 500/s a guest was 0 % idle and
    # etcd answered in up to 5.8 s; docs/RELIABILITY.md "etcd lab: what the lab showed").
    slower = slow.replace("--interval-us 2000 ", "--interval-us 20000 ")
    assert slow != loop and slower != slow, "WRITER_LOOP changed: update nvlab.clusters.etcd.writer_loop"
    return slower


# TCG guests on a loaded machine: raft timing 5x etcd's defaults (100 ms,
# 1000 ms), so a slow guest does not lose its raft leadership on every
# hiccup. etcd grants no lease shorter than 1.5 election timeouts: 4 s with
# these, 2 s with etcd's defaults (measure_etcd.py uses those for TTL 2 s).
HEARTBEAT_MS = 250
ELECTION_MS = 2500


def etcd_defaults(lab, h, state="new", data=ETCD_DATA, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS):
    ip = h.cluster_ip
    cluster = ",".join(f"{x.name}=http://{x.cluster_ip}:2380" for x in lab.hosts)
    return (f"ETCD_NAME={h.name}\nETCD_DATA_DIR={data}\n"
            f"ETCD_LISTEN_PEER_URLS=http://{ip}:2380\nETCD_LISTEN_CLIENT_URLS=http://{ip}:2379\n"
            f"ETCD_INITIAL_ADVERTISE_PEER_URLS=http://{ip}:2380\nETCD_ADVERTISE_CLIENT_URLS=http://{ip}:2379\n"
            f"ETCD_INITIAL_CLUSTER={cluster}\nETCD_INITIAL_CLUSTER_STATE={state}\n"
            f"ETCD_INITIAL_CLUSTER_TOKEN=nvfence-lab\nETCD_HEARTBEAT_INTERVAL={heartbeat_ms}\n"
            f"ETCD_ELECTION_TIMEOUT={election_ms}\n")


def endpoints(lab, h):
    """This host's member first, then the others."""
    order = [h] + [x for x in lab.hosts if x is not h]
    return ",".join(f"http://{x.cluster_ip}:2379" for x in order)


def etcdctl(h, args, timeout_s=30):
    return h.run(f"ETCDCTL_API=3 etcdctl --endpoints=http://{h.cluster_ip}:2379 --command-timeout=5s {args}",
                 timeout_s=timeout_s)


def http_cmd(ip, path, body=None, port=2379):
    """A shell command doing one HTTP/1.0 request to etcd with bash's
    /dev/tcp and printing the reply: etcdctl (a Go binary) takes 10-50 s
    just to start in a TCG guest on a loaded machine."""
    if body is None:
        req = f"GET {path} HTTP/1.0\\r\\n\\r\\n"
    else:
        req = (f"POST {path} HTTP/1.0\\r\\nContent-Type: application/json\\r\\n"
               f"Content-Length: {len(body)}\\r\\n\\r\\n{body}")
    inner = f"exec 3<>/dev/tcp/{ip}/{port} && printf '{req}' >&3 && timeout 10 cat <&3"
    return f"bash -c {shlex.quote(inner)}"


def healthy_cmd(h):
    return http_cmd(h.cluster_ip, "/health") + " | grep -q '\"health\":\"true\"'"


def start_etcd(lab, state="new", data=ETCD_DATA, wipe=True, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS):
    """(Re)configures and starts the 3 members; waits until all are healthy."""
    for h in lab.hosts:
        h.run("systemctl stop etcd", timeout_s=120)
        if wipe:
            h.run(f"rm -rf {data}", timeout_s=30)
        h.put(etcd_defaults(lab, h, state, data, heartbeat_ms, election_ms).encode(), "/etc/default/etcd")
    for h in lab.hosts:
        h.run("systemctl start --no-block etcd", timeout_s=60, check=True)
    for h in lab.hosts:
        r = h.wait_for(healthy_cmd(h), timeout_s=180, interval_s=1)
        assert r.rc == 0, (h.name, r.out, r.err, h.journal("etcd.service", lines=30))


def agent_cmd(lab, h, node, ttl_s, extra="", interval_ms=None):
    interval_ms = interval_ms or INTERVAL_MS
    # Without the lab agent's JOURNAL_STREAM/INVOCATION_ID nvfenced logs with
    # timestamps (measure_etcd.py reads them), not journald's "<N>" prefixes.
    return (f"env -u JOURNAL_STREAM -u INVOCATION_ID "
            f"{NVFENCED} --device \"$NVFENCE_DEV\" --node-id {node} --name {VOL} --interval-ms {interval_ms} "
            f"--elector etcd --etcd-endpoints {endpoints(lab, h)} --lease-ttl-s {ttl_s} "
            f"--fence-action command --fence-command 'echo \"$NVFENCE_REASON\" >> /tmp/fenced' {AGENT_FLAGS} {extra}")


def start_agent(lab, h, node, ttl_s, boot=1, extra=""):
    h.spawn(agent_cmd(lab, h, node, ttl_s, extra), log_path=f"/tmp/agent.{boot}.log")
    r = h.wait_for(f"{NVFENCE} status {VOL} --json | grep -Eq '\"state\":\"(STANDBY|HOLDER|FENCED)\"'",
                   timeout_s=90)
    assert r.rc == 0, (h.name, h.run(f"tail -30 /tmp/agent.{boot}.log").out)


def status(h, timeout_s=20):
    if h.paused or not h.alive:
        return None
    r = h.run(f"{NVFENCE} status {VOL} --json", timeout_s=timeout_s)
    for line in reversed(r.out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def holders(hosts):
    out = {}
    for h in hosts:
        s = status(h)
        if s and s["state"] == "HOLDER":
            out[h.name] = s
    return out


def wait_holder(hosts, exclude=(), timeout_s=90, interval_s=0.3):
    """The one host of hosts (not in exclude) whose agent says HOLDER."""
    end = time.monotonic() + timeout_s
    cand = [h for h in hosts if h.name not in exclude]
    last = None
    while time.monotonic() < end:
        for h in cand:
            s = status(h)
            last = (h.name, s)
            if s and s["state"] == "HOLDER":
                return h, s
        time.sleep(interval_s)
    raise AssertionError(f"no holder among {[h.name for h in cand]} within {timeout_s}s; last {last}")


def freeze(h):
    """SIGSTOP the host's agent and its writer (a pause, not a kill), at a
    moment when the writer loop is inside a write pass (nvfence-load
    running, waited for up to 30 s in the guest), so that the resumed
    writer's next write reaches the device. Frozen between passes, the
    loop asks the agent first and, finding it FENCED, never writes: no
    refused write to show (run 10)."""
    h.run("end=$(( $(cut -d. -f1 /proc/uptime) + 30 )); "
          "while ! pgrep -x nvfence-load >/dev/null && [ $(cut -d. -f1 /proc/uptime) -lt $end ]; do usleep 20000; done; "
          "pkill -STOP -x nvfence-load; pkill -STOP -f '[w]l.sh'; pkill -STOP -x nvfenced; true", timeout_s=60)


def thaw(h):
    h.run("pkill -CONT -x nvfenced; pkill -CONT -f '[w]l.sh'; pkill -CONT -x nvfence-load; true", timeout_s=30)


def clock_offset(h, rounds=3):
    """guest CLOCK_REALTIME minus host time.time(), best of a few round trips."""
    best = None
    for _ in range(rounds):
        t0 = time.time()
        r = h.run("date +%s.%N", timeout_s=30)
        t1 = time.time()
        if r.rc != 0:
            continue
        off = float(r.out.strip()) - (t0 + t1) / 2
        if best is None or (t1 - t0) < best[0]:
            best = (t1 - t0, off)
    return best[1] if best else 0.0


def log_time(line):
    """Seconds since the epoch of an nvfenced log line (`YYYY-mm-dd HH:MM:SS.mmm nvfenced[...]`)."""
    import datetime
    stamp = " ".join(line.split()[:2])
    dt = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")
    return dt.replace(tzinfo=datetime.timezone.utc).timestamp()


def agent_log(h, boot=1):
    return h.run(f"cat /tmp/agent.{boot}.log", timeout_s=60).out


def install_load(lab, build_dir):
    """nvfence-load is a test tool, not installed: copy it into each guest."""
    for h in lab.hosts:
        h.put(f"{build_dir}/bin/nvfence-load", "/usr/local/bin/nvfence-load", mode=0o755)


def q(s):
    return shlex.quote(s)
