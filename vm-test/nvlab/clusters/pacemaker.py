"""A real Corosync/Pacemaker cluster on the lab's systemd hosts, fencing
through fence_nvfence (issue 15). Used by test_pacemaker_cluster.py and
measure_pacemaker.py.

- Corosync 3 (knet, no crypto: the lab's cluster network is private) on the
  cluster network (169.254.100.n), nodeids a=1, b=2, c=3, with the token
  set for the lab (TOKEN_MS, consensus CONSENSUS_MS = 1.2 x token, no
  per-node token coefficient): long enough for a loaded TCG lab to hold
  its membership.
- fence_nvfence as the stonith resource `nvfence` (provides=unfencing,
  node_ids=a:1;b:2;c:3, the host list learnt through the agent's `list`
  action: pcmk_host_check=dynamic-list). Pacemaker looks for agents in
  /usr/sbin; the lab installs the project under /usr/local, so a symlink
  /usr/sbin/fence_nvfence -> /usr/local/sbin/fence_nvfence is made.
- The writer resource `writer` (systemd:nvwriter, requires=unfencing): a
  loop of nvfence-load passes over one region of the shared namespace,
  every block stamped (writer id, seq, epoch = the pass's start second),
  every completion logged under /var/lib/nvwriter (root disk); a pass
  that does not end cleanly (fenced, I/O error) ends the unit, so the
  resource fails instead of spinning.
- check_media(): the fencing checker (nvlab.checkers.fencing.check) over the region
  and every pass's log: no write of a fenced writer on top of a newer
  acknowledged one, the last writer's acknowledged writes on the media,
  nothing acknowledged after a writer's first fenced completion except
  what it had already handed to the device.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections import Counter

from nvlab.checkers import fencing as checker
from nvlab.workloads import writer as workload
from nvlab.util import build_dir
from nvlab.steps import CONFLICT, OK, agent_conf_path, nvf, stamps

NODE_IDS = {"a": 1, "b": 2, "c": 3}
# The stonith resource's static host list (pcmk_host_list).
HOST_LIST = " ".join(sorted(NODE_IDS))
NODE_MAP = "a:1;b:2;c:3"
# Corosync's token (token_coefficient 0) and consensus (1.2 x token, its own
# rule). Corosync's default for three nodes is 3650 ms; the lab default is
# 10 s because the loaded TCG lab (load 25+ on 2 cores) cannot hold a
# membership with 3 s: measured, after 10 min the ring id was 1.182 and
# the membership held only the local node. NVFENCE_PCMK_TOKEN_MS sets another (the
# figures of measure_pacemaker.py give the value they ran with).
TOKEN_MS = int(os.environ.get("NVFENCE_PCMK_TOKEN_MS", "10000"))
CONSENSUS_MS = TOKEN_MS * 6 // 5
REGION_START = 8192
REGION_BLOCKS = 1024
QD = checker.QUEUE_DEPTH
WRITER_DIR = "/var/lib/nvwriter"
# The cluster image carries etcd too (one image for the cluster labs); its
# unit, enabled by the package and unconfigured, restarts in a loop and
# slows the boot: not started here.
NO_ETCD = "systemd.mask=etcd.service"

WRITER_SCRIPT = r"""#!/bin/sh
# nvwriter: passes of nvfence-load over the region while the device takes
# them. Pacemaker runs it as systemd:nvwriter.
. /etc/nvwriter.conf
mkdir -p @DIR@
while :; do
  n=$(cat @DIR@/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > @DIR@/count
  id=$((NODE * 100000 + n)); ep=$(date +%s)
  echo "start $id $NODE $ep" >> @DIR@/index
  nvfence-load "$DEV" --start @START@ --count @BLOCKS@ --qd @QD@ --interval-us 2000 \
      --key nf:0:$NODE:$ep --writer-id $id --timeout-ms 60000 > @DIR@/$id.log 2>&1
  rc=$?
  echo "end $id $rc" >> @DIR@/index
  [ $rc -eq 0 ] || exit $rc
done
""".replace("@DIR@", WRITER_DIR).replace("@START@", str(REGION_START)).replace(
    "@BLOCKS@", str(REGION_BLOCKS)).replace("@QD@", str(QD))

WRITER_UNIT = b"""[Unit]
Description=nvfence lab writer (a Pacemaker resource)

[Service]
Type=simple
ExecStart=/usr/local/bin/nvwriter
TimeoutStopSec=60s
"""


def corosync_conf(hosts, token_ms=TOKEN_MS, consensus_ms=CONSENSUS_MS) -> bytes:
    nodes = "".join(f"  node {{\n    ring0_addr: {h.cluster_ip}\n    name: {h.name}\n    nodeid: {NODE_IDS[h.name]}\n  }}\n"
                    for h in hosts)
    return ("totem {\n  version: 2\n  cluster_name: nvlab\n  transport: knet\n"
            "  crypto_cipher: none\n  crypto_hash: none\n"
            f"  token: {token_ms}\n  token_coefficient: 0\n  consensus: {consensus_ms}\n}}\n"
            f"nodelist {{\n{nodes}}}\n"
            "quorum {\n  provider: corosync_votequorum\n}\n"
            "logging {\n  to_syslog: yes\n  to_stderr: no\n  timestamp: on\n}\n").encode()


def stonith_xml(dev: str, monitor_s: int = 10) -> str:
    return ('<primitive id="nvfence" class="stonith" type="fence_nvfence">'
            '<instance_attributes id="nvfence-ia">'
            f'<nvpair id="nvfence-devices" name="devices" value="{dev}"/>'
            f'<nvpair id="nvfence-node-ids" name="node_ids" value="{NODE_MAP}"/>'
            # A static host list, as docs/PACEMAKER.md configures it: with
            # dynamic-list the fencer runs the agent's `list` before a fence
            # once its cached list is old (measure_pacemaker.py --host-check both).
            f'<nvpair id="nvfence-host-list" name="pcmk_host_list" value="{HOST_LIST}"/>'
            '<nvpair id="nvfence-host-check" name="pcmk_host_check" value="static-list"/>'
            '</instance_attributes>'
            '<meta_attributes id="nvfence-meta">'
            '<nvpair id="nvfence-provides" name="provides" value="unfencing"/></meta_attributes>'
            f'<operations><op id="nvfence-monitor" name="monitor" interval="{monitor_s}s"/></operations>'
            '</primitive>')


def bad_stonith_xml(rid: str, dev: str, node_map: str) -> str:
    """A second fence_nvfence device, misconfigured (scenario 5): no
    provides=unfencing, a static host list so the fencer never asks it."""
    return (f'<primitive id="{rid}" class="stonith" type="fence_nvfence">'
            f'<instance_attributes id="{rid}-ia">'
            f'<nvpair id="{rid}-devices" name="devices" value="{dev}"/>'
            f'<nvpair id="{rid}-node-ids" name="node_ids" value="{node_map}"/>'
            f'<nvpair id="{rid}-host-list" name="pcmk_host_list" value="a b c"/>'
            '</instance_attributes>'
            f'<meta_attributes id="{rid}-meta">'
            f'<nvpair id="{rid}-threshold" name="migration-threshold" value="1"/></meta_attributes>'
            f'<operations><op id="{rid}-monitor" name="monitor" interval="10s"/></operations>'
            '</primitive>')


WRITER_XML = ('<primitive id="writer" class="systemd" type="nvwriter">'
              '<meta_attributes id="writer-meta">'
              '<nvpair id="writer-requires" name="requires" value="unfencing"/>'
              '<nvpair id="writer-stickiness" name="resource-stickiness" value="100"/></meta_attributes>'
              # start/stop timeouts as pcs sets them for a systemd resource
              # (the agent's advertised 100 s): Pacemaker's default of 20 s
              # fails a start on a slow node (daemon-reload first), and a
              # failed stop is fenced.
              '<operations><op id="writer-monitor" name="monitor" interval="5s"/>'
              '<op id="writer-start" name="start" interval="0s" timeout="100s"/>'
              '<op id="writer-stop" name="stop" interval="0s" timeout="100s"/></operations>'
              '</primitive>')


def wait(pred, timeout_s, what, interval_s=0.5):
    """pred() until truthy (returned), bounded by timeout_s."""
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def keys_by_node(st) -> dict:
    out = {}
    for r in st["registrants"]:
        if not r["foreign"]:
            out.setdefault(r["node"], []).append(r["epoch"])
    return out


# Bringing a node back after it was fenced at the storage, step by step:
# what docs/PACEMAKER.md "Bringing a fenced node back" tells the operator to
# run, verbatim (test_pacemaker_cluster.py checks that every command is
# there), and what Cluster.rejoin() runs. (where, command, bound in s, what
# it establishes). "node" is the fenced node, "survivor" any other member;
# "wait: CMD" re-runs CMD until it succeeds.
REJOIN_STEPS = (
    ("node", "timeout 120 systemctl stop pacemaker.service || systemctl kill --kill-who=all --signal=KILL pacemaker.service",
     150,
     "the node's Pacemaker is stopped"),
    ("node", "systemctl stop corosync.service; systemctl reset-failed pacemaker.service corosync.service; "
     "! pgrep -x 'pacemakerd|pacemaker-.*|corosync'", 90,
     "nothing of the old stack runs on the node"),
    ("survivor", "wait: crm_mon -1 | grep -Eq 'OFFLINE: \\[.* {node}( |\\])' && "
     "! stonith_admin --history {node} | grep -q pending", 180,
     "the survivors see the node offline, no fencing of it pending"),
    ("node", "systemctl start corosync.service", 90, "corosync starts on the node"),
    ("node", "wait: for id in {ids}; do corosync-quorumtool -l | grep -Eq \"^ +$id \" || exit 1; done", 180,
     "corosync's membership has every live node"),
    ("node", "systemctl start pacemaker.service", 90, "Pacemaker starts on the node"),
    ("node", "wait: crm_mon -1 | grep -q 'Online: \\[ {names} \\]'", 300,
     "Pacemaker shows every live node online"),
    ("survivor", "wait: stonith_admin --history {node} | head -1 | grep -Eq '(unfencing|on) of {node} successful'", 300,
     "Pacemaker unfenced the node"),
    ("node", "wait: nvfence status {vol} --json | grep -q '\"state\":\"WATCHING\"' && "
     "nvfence report {dev} --json | grep -q '\"node\":{nodeid},'", 120,
     "the node's watcher watches again and its key is on the device again"),
)


class Cluster:
    """The cluster on lab.hosts (a, b, c)."""

    def __init__(self, lab, log=print):
        self.lab = lab
        self.hosts = list(lab.hosts)
        self.by_name = {h.name: h for h in self.hosts}
        self.log = log
        devs = {h.dev for h in self.hosts}
        assert len(devs) == 1, f"the hosts name the shared namespace differently: {devs}"
        self.dev = devs.pop()
        self.logs: dict = {}            # (host, file) -> longest text seen
        self.killed: set = set()        # hosts whose VM was killed

    # ---------------------------------------------------------------- setup
    def install(self, token_ms=TOKEN_MS, consensus_ms=CONSENSUS_MS) -> None:
        conf = corosync_conf(self.hosts, token_ms, consensus_ms)
        # nvfence-load is a lab tool, not installed by cmake --install.
        with tempfile.NamedTemporaryFile() as tmp:
            subprocess.run(["strip", "--strip-debug", "-o", tmp.name, str(build_dir() / "bin" / "nvfence-load")],
                           check=True)
            load = open(tmp.name, "rb").read()

        def one(h):
            # The Debian packages start corosync (single-node default
            # configuration) and pacemaker at boot: stop them, forget that CIB.
            h.run("systemctl stop pacemaker corosync; rm -f /var/lib/pacemaker/cib/* "
                  "/var/lib/pacemaker/pengine/* 2>/dev/null; true", timeout_s=180)
            self.sync_clock(h)
            h.put(conf, "/etc/corosync/corosync.conf")
            h.put(WRITER_SCRIPT.encode(), "/usr/local/bin/nvwriter", mode=0o755)
            h.put(load, "/usr/local/bin/nvfence-load", mode=0o755)
            h.put(WRITER_UNIT, "/etc/systemd/system/nvwriter.service")
            h.put(f"NODE={NODE_IDS[h.name]}\nDEV={self.dev}\n".encode(), "/etc/nvwriter.conf")
            h.run(f"rm -rf {WRITER_DIR}; ln -sf /usr/local/sbin/fence_nvfence /usr/sbin/fence_nvfence && "
                  "systemctl daemon-reload", timeout_s=120, check=True)
            r = h.run("fence_nvfence -o metadata", timeout_s=30)
            assert r.rc == 0 and "<resource-agent name=\"fence_nvfence\"" in r.out, r
        self._all(one)

    # nvfenced on every node, as the watcher that fence_scsi_check is for
    # fence_scsi (docs/PACEMAKER.md's recipe): check-only (role = watch), it
    # never registers (Pacemaker's unfencing does; fence_nvfence acts on the
    # device directly), and when the node's key, once seen, is gone (the
    # node was fenced) it leaves the membership at once, so a node that
    # resumes after a freeze cannot rejoin with a stale Pacemaker and have
    # others fenced.
    WATCHER_CONF = ("node_id = {node}\nrole = watch\ninterval_ms = 500\n"
                    "fence_action = command\n"
                    "fence_command = \"systemctl kill --signal=KILL corosync.service || true && "
                    "systemctl stop --no-block pacemaker.service\"\n")

    def start_watchers(self) -> None:
        import nvlab
        vol = "vol-" + nvlab.DISK_SERIAL[3:]

        def one(h):
            path = agent_conf_path(h, vol)
            h.run(f"mkdir -p {shlex.quote(os.path.dirname(path))}", timeout_s=30, check=True)
            h.put(self.WATCHER_CONF.format(node=NODE_IDS[h.name]).encode(), path)
            h.run(f"systemctl start nvfenced@{vol}.service", timeout_s=120, check=True)
            # WAITING until Pacemaker unfences the node, WATCHING after.
            r = h.wait_for(f"nvfence status {vol} --json | grep -Eq '\"state\":\"(WAITING|WATCHING)\"'",
                           timeout_s=120)
            assert r.rc == 0, (h.name, h.run(f"journalctl -u nvfenced@{vol} -n 30 --no-pager").out)
        self._all(one)
        self.watchers = vol

    def sync_clock(self, h) -> None:
        """The guests have no NTP; a VM that was paused resumes with its clock
        behind by the pause, and the writer's stamps order passes by their
        start second: set the guest's clock from the host's."""
        h.run(f"date -s @{time.time():.3f} >/dev/null", timeout_s=30, check=True)

    def _all(self, fn, hosts=None):
        errs = []

        def wrap(h):
            try:
                fn(h)
            except BaseException as e:  # noqa: BLE001 - reported below
                errs.append((h.name, e))
        ts = [threading.Thread(target=wrap, args=(h,)) for h in (hosts or self.hosts)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise errs[0][1]

    def start_stack(self, hosts=None, timeout_s=450, attempts=2) -> None:
        """Starts corosync and Pacemaker on hosts and waits until Pacemaker
        shows every live node online. A stack that does not get there in
        timeout_s (once in CI: corosync quorate, but no CIB for 600 s after
        an RCU stall in one guest) is stopped for good on every node, with
        the diagnostics kept, and started again: attempts in all, then a
        clear error."""
        names = " ".join(sorted(h.name for h in self.live()))
        a = self.live()[0]
        stop = REJOIN_STEPS[0][1] + "; " + REJOIN_STEPS[1][1]
        seen = []
        for attempt in range(1, attempts + 1):
            since = self._guest_now(hosts or self.hosts)
            self._all(lambda h: h.run("systemctl start corosync pacemaker", timeout_s=180, check=True), hosts)
            # Bounds for a loaded TCG host: the first join took 4+ min at load 25.
            r = a.wait_for(f"crm_mon -1 2>/dev/null | grep -q 'Online: \\[ {names} \\]'", timeout_s=timeout_s,
                           interval_s=3)
            if r.rc == 0 and self._restart_fencers_without_cib(hosts or self.hosts, since, names, timeout_s):
                return
            why = a.run("crm_mon -1; corosync-cfgtool -s; corosync-quorumtool -s", timeout_s=120)
            seen.append(f"attempt {attempt}: {(why.out + why.err).strip()[-800:]}")
            self.log(f"the cluster stack did not come up within {timeout_s} s ({seen[-1]})")
            self.collect(f"start-stack-{attempt}")
            if attempt < attempts:
                self._all(lambda h: h.run(stop, timeout_s=240, check=True), hosts)
        raise AssertionError(f"Pacemaker did not show every node online after {attempts} starts:\n" + "\n".join(seen))

    @staticmethod
    def _guest_now(hosts) -> dict:
        """Each guest's own clock, a second back: journalctl --since."""
        return {h.name: int(h.run("date +%s", timeout_s=30, check=True).out) - 1 for h in hosts}

    def _restart_fencers_without_cib(self, hosts, since: dict, names: str, timeout_s: float) -> bool:
        """Pacemaker 2.1.5's fencer tries the CIB once at start: on a loaded
        TCG guest it can log "Could not connect to the CIB manager" and then
        run for good without the CIB, so it never learns of the stonith
        device and that node's unfencing fails with "No fence device" (seen
        in CI: the writer never started, 600 s lost). Such a node's
        Pacemaker is restarted once (corosync stays up), as an operator
        would; False when the cluster is then not back online."""
        grep = ("journalctl -b --no-pager -u pacemaker --since @{since} | "
                "grep -q 'pacemaker-fenced.*Could not connect to the CIB manager'")
        bad = [h for h in hosts if h.run(grep.format(since=since[h.name]), timeout_s=60).rc == 0]
        if not bad:
            return True
        self.log(f"fencer without the CIB on {[h.name for h in bad]}: restarting Pacemaker there")
        restart_at = self._guest_now(bad)
        self._all(lambda h: h.run("systemctl restart pacemaker", timeout_s=240, check=True), bad)
        a = self.live()[0]
        r = a.wait_for(f"crm_mon -1 2>/dev/null | grep -q 'Online: \\[ {names} \\]'", timeout_s=timeout_s,
                       interval_s=3)
        still = [h.name for h in bad if h.run(grep.format(since=restart_at[h.name]), timeout_s=60).rc == 0]
        if still:
            self.log(f"the fencer on {still} again started without the CIB")
        return r.rc == 0 and not still

    def set_host_check(self, static: bool) -> None:
        """The stonith resource's pcmk_host_check: static-list (the host
        list from the node map, as docs/PACEMAKER.md configures it with
        pcs) or dynamic-list (the fencer asks the agent's `list`)."""
        a = self.any()
        if static:
            a.run(f"crm_resource -r nvfence --set-parameter pcmk_host_list --parameter-value '{HOST_LIST}' && "
                  "crm_resource -r nvfence --set-parameter pcmk_host_check --parameter-value static-list",
                  timeout_s=60, check=True)
        else:
            a.run("crm_resource -r nvfence --set-parameter pcmk_host_check --parameter-value dynamic-list && "
                  "crm_resource -r nvfence --delete-parameter pcmk_host_list", timeout_s=60, check=True)

    def configure(self, monitor_s: int = 10) -> None:
        a = self.hosts[0]
        for cmd in ("crm_attribute -t crm_config -n stonith-enabled -v true",
                    "crm_attribute -t crm_config -n stonith-timeout -v 60s",
                    f"cibadmin -C -o resources -X {shlex.quote(stonith_xml(self.dev, monitor_s))}",
                    f"cibadmin -C -o resources -X {shlex.quote(WRITER_XML)}"):
            a.run(cmd, timeout_s=60, check=True)

    # ---------------------------------------------------------------- views
    def live(self):
        return [h for h in self.hosts if h.name not in self.killed and not h.paused]

    def any(self, exclude=()):
        return next(h for h in self.live() if h.name not in exclude)

    def writer_node(self, via=None):
        """The node Pacemaker says runs the writer (None when stopped)."""
        h = via or self.any()
        r = h.run("crm_resource --locate -r writer 2>/dev/null", timeout_s=30)
        m = re.search(r"is running on: (\S+)", r.out)
        return m.group(1) if m else None

    def report(self, via=None):
        from nvlab.steps import report
        return report(via or self.any())

    def history(self, via=None, attempts=5) -> str:
        """The fencer's history (`stonith_admin --history`). The fencer can
        fail the query while it is busy with a membership change: asked
        again, up to `attempts` times."""
        h = via or self.any()
        for _ in range(attempts):
            r = h.run("stonith_admin --history '*' --verbose", timeout_s=60)
            if r.rc == 0 and "events found" in r.out:
                return r.out
            time.sleep(2)
        return f"(no fencing history from {h.name}: rc {r.rc}, {r.out.strip()} {r.err.strip()})"

    def unfenced(self, names) -> bool:
        ks = keys_by_node(self.report())
        return all(NODE_IDS[n] in ks for n in names)

    def wait_writer(self, timeout_s=180, exclude=(), via=None):
        return wait(lambda: (lambda n: n if n and n not in exclude else None)(self.writer_node(via)), timeout_s,
                    f"the writer to run (not on {list(exclude)})", 1)

    def wait_writing(self, name, timeout_s=300):
        """The writer on `name` has an acknowledged write in a pass started now or later."""
        h = self.by_name[name]
        r = h.wait_for(f"f=$(ls -t {WRITER_DIR}/*.log 2>/dev/null | head -1); [ -n \"$f\" ] && "
                       f"grep -q '^C .* ok' $f", timeout_s=timeout_s, interval_s=0.2)
        assert r.rc == 0, (name, h.run(f"tail -5 {WRITER_DIR}/index; systemctl status nvwriter --no-pager").out)

    def kernel_log(self, name, lines=40) -> str:
        """The NVMe and stall lines of a node's kernel log: what explains a
        write that waited for the target."""
        r = self.by_name[name].run("journalctl -b -k -o short-unix --no-pager | "
                                   f"grep -E 'nvme|rcu_|hung_task|soft lockup|watchdog' | tail -{lines}",
                                   timeout_s=60)
        return r.out + r.err

    def health(self) -> str:
        """Each live node's cluster stack and what its journal says about
        fencing and membership: printed after every scenario and on a
        failed rejoin."""
        cmd = ("echo \"stack: $(systemctl is-active corosync) $(systemctl is-active pacemaker)\"; "
               "journalctl -b -o short-unix --no-pager -u corosync -u pacemaker | grep -E "
               "'allegedly|Unfencing|unfenc|Requesting fencing|Operation .(on|off|reboot|monitor).|terminated|"
               "Shutting|shut down|fatal|FATAL|crit:|error:|Members left|Members joined|wants to fence|"
               "not part of|Node .* state is now lost|Stopping .*writer|Starting .*writer|Recover|Move ' | tail -40; "
               "echo '(kernel: nvme and stalls)'; journalctl -b -k -o short-unix --no-pager | "
               "grep -E 'nvme|rcu_|hung_task|soft lockup|watchdog' | tail -15")
        out = []
        for h in self.live():
            r = h.run(cmd, timeout_s=120)
            out.append(f"--- {h.name}\n{r.out}{r.err}")
        return "\n".join(out)

    # What collect() keeps of each node when a scenario fails: the stack's,
    # the watcher's and the writer's journals, the membership as corosync,
    # votequorum and Pacemaker see it, the fencing history, the device.
    DIAG_CMDS = (
        ("journal", "journalctl -b --no-pager -o short-unix -u corosync -u pacemaker -u 'nvfenced@*' -u nvwriter"),
        ("systemctl", "systemctl status --no-pager -l corosync pacemaker 'nvfenced@*' nvwriter"),
        ("corosync-cfgtool", "corosync-cfgtool -s; corosync-cfgtool -n"),
        ("quorum", "corosync-quorumtool -s"),
        ("crm_mon", "crm_mon -1 --include=all"),
        ("history", "stonith_admin --history '*' --verbose"),
        ("device", "nvfence report \"$NVFENCE_DEV\"; nvfence status --json 2>&1; ip -s link"),
        ("kernel", "journalctl -b -k -o short-unix --no-pager | tail -400"),
    )

    def collect(self, label: str) -> str:
        """Keeps every reachable node's DIAG_CMDS output and the cluster
        hub's view of each port under the lab's run dir (kept by the lab
        when a test failed); returns the directory."""
        d = self.lab.run_dir / "diag" / re.sub(r"[^\w.-]+", "_", label)
        d.mkdir(parents=True, exist_ok=True)
        for h in self.hosts:
            if h.name in self.killed or h.paused:
                (d / f"{h.name}.txt").write_text("(killed or frozen: nothing collected)\n")
                continue
            parts = []
            for name, cmd in self.DIAG_CMDS:
                try:
                    r = h.run(cmd, timeout_s=120)
                    parts.append(f"===== {name}: {cmd} (rc {r.rc})\n{r.out}{r.err}")
                except Exception as e:  # noqa: BLE001 - a dead guest must not hide the others
                    parts.append(f"===== {name}: {cmd}\n(failed: {e})")
            (d / f"{h.name}.txt").write_text("\n".join(parts))
        if self.lab.hub:
            (d / "hub.txt").write_text(self.lab.hub.describe())
        self.log(f"diagnostics of {label} kept in {d}")
        return str(d)

    def rejoin(self, name, attempts=2) -> None:
        """The documented procedure for a node fenced at the storage
        (docs/PACEMAKER.md "Bringing a fenced node back"; REJOIN_STEPS):
        its stack stopped for good, the survivors done with its fencing,
        corosync first (membership checked), then Pacemaker, which unfences
        it. A bounded retry of the start (attempts), then a clear error with
        every node's diagnostics kept."""
        h = self.by_name[name]
        survivor = self.any(exclude=(name,))
        live = [x for x in self.live()]
        ids = " ".join(str(NODE_IDS[x.name]) for x in live)
        names = " ".join(sorted(x.name for x in live))
        errors = []
        for attempt in range(1, attempts + 1):
            try:
                self._rejoin_once(h, survivor, ids, names)
                return
            except AssertionError as e:
                errors.append(f"attempt {attempt}: {e}")
                self.log(f"rejoin of {name}, attempt {attempt} failed: {e}")
                self.collect(f"rejoin-{name}-{attempt}")
        raise AssertionError(f"{name} did not rejoin after {attempts} attempts:\n" + "\n".join(errors))

    def _rejoin_once(self, h, survivor, ids, names) -> None:
        name = h.name
        for where, cmd, timeout_s, what in REJOIN_STEPS:
            x = h if where == "node" else survivor
            cmd = cmd.format(node=name, nodeid=NODE_IDS[name], ids=ids, names=names, dev=self.dev, vol=self.watchers)
            if cmd.startswith("wait: "):
                r = x.wait_for(cmd[len("wait: "):], timeout_s=timeout_s, interval_s=1)
            else:
                r = x.run(cmd, timeout_s=timeout_s)
            assert r.rc == 0, f"{what}: `{cmd}` on {x.name} failed (rc {r.rc}): {(r.out + r.err).strip()[-600:]}"

    def problems(self) -> list:
        """What keeps the cluster from the state every scenario starts
        from: every node online in Pacemaker, each unfenced (its key on the
        device), the writer running with no failed operations."""
        out = []
        live = self.live()
        names = " ".join(sorted(h.name for h in live))
        a = live[0]
        r = a.run("crm_mon -1", timeout_s=60)
        if f"Online: [ {names} ]" not in r.out:
            out.append("not every node online: " + " | ".join(
                l.strip() for l in r.out.splitlines() if "Online" in l or "OFFLINE" in l or "UNCLEAN" in l))
        try:
            keys = keys_by_node(self.report(a))
        except AssertionError as e:
            keys = {}
            out.append(f"no report: {e}")
        missing = [h.name for h in live if NODE_IDS[h.name] not in keys]
        if missing:
            out.append(f"not unfenced (no key on the device): {missing}")
        if self.writer_node(a) is None:
            out.append("the writer does not run")
        if self.failed_ops("writer", a) or self.failed_ops("nvfence", a):
            out.append(f"failed operations: {self.failed_ops('writer', a) + self.failed_ops('nvfence', a)}")
        return out

    def ensure_ready(self, label: str, timeout_s: float = 300) -> None:
        """Brings the cluster to the state every scenario starts from, so
        that one scenario's broken cluster does not fail the next ones: a
        frozen or cut node is resumed/healed, a node out of the cluster
        rejoins by the documented procedure, failed operations are
        cleaned up, the writer is started; if that does not do it, the whole
        stack restarts on every node. Raises, naming what is still wrong,
        when the cluster cannot be brought there."""
        for h in self.hosts:
            if h.name in self.killed:
                continue
            if h.paused:
                h.resume()
            if h.cut_paths:
                h.heal(*sorted(h.cut_paths))
        found = self.problems()
        if not found:
            return
        self.log(f"before {label}: the cluster is not ready ({'; '.join(found)}): repairing")
        self.collect(f"before-{label}")
        try:
            self._repair()
        except AssertionError as e:
            self.log(f"before {label}: repair failed ({e}); restarting every node's stack")
            self.restart_stacks()
            self._repair()
        left = self.problems()
        assert not left, f"before {label}: the cluster could not be brought to its starting state: {left}"

    def _repair(self) -> None:
        a = self.live()[0]
        r = a.run("crm_mon -1", timeout_s=60)
        names = sorted(h.name for h in self.live())
        online = re.search(r"Online: \[ ([^\]]*) \]", r.out)
        up = set(online.group(1).split()) if online else set()
        for n in names:
            if n not in up:
                self.rejoin(n)
        a.run("crm_resource -C -r writer; crm_resource -C -r nvfence; "
              "crm_resource -r writer --meta -p target-role -v Started", timeout_s=120)
        self.wait_writing(self.wait_writer(timeout_s=300))

    def restart_stacks(self) -> None:
        """Every node's cluster stack down, then up again (corosync first),
        as a full cluster restart: the configuration stays in the CIB."""
        stop = REJOIN_STEPS[0][1] + "; " + REJOIN_STEPS[1][1]
        self._all(lambda h: h.run(stop, timeout_s=240, check=True), self.live())
        self.start_stack(self.live())
        wait(lambda: not [p for p in self.problems() if "not unfenced" in p or "not every node" in p],
             300, "every node online and unfenced after the restart", 5)

    def stopped_itself(self, name, timeout_s=180) -> str | None:
        """Pacemaker on `name`, told it was fenced (not rebooted: fabric
        fencing), stops its own stack (fence-reaction=stop, the default):
        the controller's journal line saying so, once pacemaker.service has
        ended within timeout_s; None when it still runs."""
        h = self.by_name[name]
        r = h.wait_for("! systemctl -q is-active pacemaker", timeout_s=timeout_s, interval_s=1)
        if r.rc != 0:
            return None
        j = h.journal("pacemaker.service", lines=600)
        # pacemaker-controld's crit line when it learns its own fencing.
        m = re.search(r"^.*We were allegedly just fenced.*$", j, re.M)
        return m.group(0) if m else "pacemaker.service ended: " + (j.strip().splitlines() or ["(no journal)"])[-1]

    def watcher_fenced(self, name, since_wall, timeout_s=120) -> str | None:
        """The journal line of nvfenced on `name` saying it ran its fence
        action (after since_wall), once it is there within timeout_s; None
        when it is not."""
        h = self.by_name[name]
        cmd = (f"journalctl -o short-unix --no-pager --since @{since_wall - 1:.0f} -u 'nvfenced@*' "
               "| grep -m1 \"fence action: running\"")
        r = h.wait_for(cmd, timeout_s=timeout_s, interval_s=1)
        return r.out.strip() if r.rc == 0 else None

    def wait_watcher_fenced(self, name, since_wall, timeout_s=120) -> str:
        line = self.watcher_fenced(name, since_wall, timeout_s)
        assert line, ("nvfenced did not run its fence action",
                      self.by_name[name].journal(f"nvfenced@{self.watchers}", lines=60))
        return line

    def wait_stopped_itself(self, name, timeout_s=180) -> str:
        line = self.stopped_itself(name, timeout_s)
        assert line, ("pacemaker still runs on the fenced node", self.by_name[name].journal("pacemaker.service",
                                                                                            lines=80))
        return line

    def _history_times(self, what: str, target: str, via=None) -> list:
        import datetime
        out = []
        for line in self.history(via).splitlines():
            if not re.search(rf"{what} of {target} successful", line):
                continue
            m = re.search(r"completed='([^']+)'", line)
            if not m:
                continue
            txt = m.group(1)
            for fmt in ("%Y-%m-%d %H:%M:%S.%f %z", "%Y-%m-%d %H:%M:%S %z", "%Y-%m-%d %H:%M:%SZ",
                        "%Y-%m-%d %H:%M:%S.%fZ", "%a %b %d %H:%M:%S %Y"):
                try:
                    t = datetime.datetime.strptime(txt, fmt)
                except ValueError:
                    continue
                if t.tzinfo is None:
                    t = t.replace(tzinfo=datetime.timezone.utc)
                out.append(t.timestamp())
                break
            else:
                raise AssertionError(f"cannot read the time of: {line}")
        return out

    def unfenced_at(self, name, via=None) -> float:
        """When the first unfencing of `name` completed (epoch seconds)."""
        ts = self._history_times(r"(?:unfencing|\bon)", name, via)
        assert ts, self.history(via)
        return min(ts)

    def first_start(self, name) -> float:
        """When the writer's first pass on `name` started (its index)."""
        r = self.by_name[name].run(f"grep '^start ' {WRITER_DIR}/index | head -1", timeout_s=30)
        p = r.out.split()
        assert len(p) == 4, r
        return float(p[3])

    def failed_ops(self, rid, via=None) -> list:
        """The failed operations (start or monitor) crm_mon lists for
        resource `rid`, as (node, op_key)."""
        r = (via or self.any()).run("crm_mon -1 --output-as=xml", timeout_s=60)
        out = []
        for f in re.findall(r"<failure [^>]*>", r.out):
            a = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', f))
            if a.get("op_key", "").startswith(rid + "_"):
                out.append((a.get("node"), a["op_key"]))
        return out

    def set_writer(self, role: str, timeout_s=180) -> None:
        self.any().run(f"crm_resource -r writer --meta -p target-role -v {role}", timeout_s=60, check=True)
        if role == "Stopped":
            wait(lambda: self.writer_node() is None, timeout_s, "the writer to stop", 1)

    def cmap(self, key, via=None) -> int:
        h = via or self.any()
        r = h.run(f"corosync-cmapctl -g {key}", timeout_s=30, check=True)
        return int(r.out.strip().split("=")[-1])

    # ---------------------------------------------------------------- media
    def snapshot(self) -> None:
        for h in self.live():
            r = h.run(f"cd {WRITER_DIR} 2>/dev/null && for f in index *.log; do [ -f \"$f\" ] && "
                      "{ echo \"=== $f\"; cat \"$f\"; }; done; true", timeout_s=120)
            cur, buf = None, []
            for line in r.out.splitlines() + ["=== "]:
                if line.startswith("=== "):
                    if cur:
                        text = "\n".join(buf)
                        if len(text) >= len(self.logs.get((h.name, cur), "")):
                            self.logs[(h.name, cur)] = text
                    cur, buf = line[4:].strip(), []
                else:
                    buf.append(line)

    def writers(self) -> list:
        out = []
        for (host, name), text in self.logs.items():
            if not name.endswith(".log"):
                continue
            wid = int(name[:-4])
            epoch = 0
            for line in self.logs.get((host, "index"), "").splitlines():
                p = line.split()
                if len(p) >= 4 and p[0] == "start" and int(p[1]) == wid:
                    epoch = int(p[3])
            w = workload.Writer(wid, host, (NODE_IDS[host] << 32) | epoch, killed_host=host in self.killed)
            w.read_log(text)
            out.append(w)
        return out

    def check_media(self) -> dict:
        """With the writer stopped: the campaign's invariants over the region
        and every pass logged so far. The final holder is the last pass
        that had an acknowledged write."""
        assert self.writer_node() is None, "stop the writer first"
        self.snapshot()
        ws = self.writers()
        blocks = list(stamps(self.any(), REGION_START, REGION_BLOCKS).values())
        # A pass that a killed node started after its logs were last copied
        # out: known by its stamps only (the campaign's killed-host rule).
        known = {w.wid for w in ws}
        by_node = {v: k for k, v in NODE_IDS.items()}
        for b in blocks:
            wid = b.get("writer_id") if b.get("stamp") else None
            host = by_node.get(wid // 100000) if wid is not None else None
            if wid is not None and wid not in known and host in self.killed:
                ws.append(workload.Writer(wid, host, (NODE_IDS[host] << 32) | b["epoch"], killed_host=True))
                known.add(wid)
        acked = [w for w in ws if any(c[2] == "ok" for c in w.completions)]
        assert acked, "no writer pass had an acknowledged write"
        last = max(acked, key=lambda w: (checker.epoch_of(w.key), w.wid))
        totals = Counter()
        res = checker.check(blocks, ws, last.key, [], [], totals, self.log)
        res.update({"passes": len(ws), "fenced_passes": totals["fenced_writers"],
                    "fenced_completions": totals["fenced_completions"], "last_writer": f"{last.wid}@{last.host}"})
        return res

    def fenced_passes(self, host) -> list:
        """Passes of `host` that saw a fenced completion."""
        return [w for w in self.writers() if w.host == host and any(c[2] == "fenced" for c in w.completions)]


# stonith_admin --history names the actions "unfencing" (on), "turning
# off" (off) and "reboot".
def fenced_ok(hist: str, target: str) -> bool:
    """The history shows a successful fencing (off or reboot) of target."""
    return re.search(rf"(?:turning off|\boff|\breboot|\brebooting) of {target} successful\b", hist) is not None


def fence_failed(hist: str, target: str) -> bool:
    return re.search(rf"(?:turning off|\boff|\breboot|\brebooting) of {target} failed\b", hist) is not None


def unfenced_ok(hist: str, target: str) -> bool:
    return re.search(rf"(?:unfencing|\bon) of {target} successful\b", hist) is not None


def _poll_key_and_writer(cl, frozen, t0, timeout_s=600):
    """Times (s after t0) when the frozen node's key is gone from the
    device and when a survivor's writer has its first acknowledged write."""
    node = NODE_IDS[frozen.name]
    out = {}
    survivors = [h for h in cl.live() if h is not frozen]

    def key_gone():
        r = survivors[0].wait_for(f"r=$(nvfence report \"$NVFENCE_DEV\" --json) && "
                                  f"! echo \"$r\" | grep -q '\"node\":{node},'", timeout_s=timeout_s, interval_s=0.1)
        if r.rc == 0:
            out["key"] = time.monotonic() - t0

    def first_write():
        before = {h.name: int(h.run(f"cat {WRITER_DIR}/count 2>/dev/null || echo 0", timeout_s=30).out.strip() or 0)
                  for h in survivors}
        # Where Pacemaker starts it (asked every ~0.3 s), then its first
        # acknowledged write there (looked for every 0.1 s in the guest).
        end = time.monotonic() + timeout_s
        name = None
        while time.monotonic() < end and name not in before:
            name = cl.writer_node(survivors[0])
            time.sleep(0.2)
        if name not in before:
            return
        h = cl.by_name[name]
        r = h.wait_for(f"[ $(cat {WRITER_DIR}/count 2>/dev/null || echo 0) -gt {before[name]} ] && "
                       f"grep -q '^C .* ok' $(ls -t {WRITER_DIR}/*.log | head -1)",
                       timeout_s=max(1.0, end - time.monotonic()), interval_s=0.1)
        if r.rc == 0:
            out["write"] = time.monotonic() - t0
            out["writer"] = name
    ts = [threading.Thread(target=key_gone), threading.Thread(target=first_write)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def _first_refused_write(h, lba, timeout_s):
    """Writes one block every 0.5 s until the device answers; asserts that
    its answer is Reservation Conflict and that no write succeeded. Returns
    the seconds until that answer."""
    t0 = time.monotonic()
    seen = []
    while True:
        r = nvf(h, "write", "--lba", str(lba), timeout_s=180)   # the CLI waits up to 120 s for an answer
        seen.append((round(time.monotonic() - t0, 1), r.rc, (r.err or "").strip()[-160:]))
        assert r.rc != OK, f"{h.name}: a write after the resume succeeded: {seen}"
        if r.rc == CONFLICT:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout_s, f"{h.name}: no write reached the device in {timeout_s} s: {seen}"
        time.sleep(0.5)


def freeze_writer(cl):
    """Freeze the writer's node; returns the figures. The frozen node is
    resumed and its writes checked; it does not rejoin (Cluster.rejoin)."""
    w = cl.writer_node()
    frozen = cl.by_name[w]
    cl.wait_writing(w)
    t0 = time.monotonic()
    wall0 = time.time()
    frozen.pause()
    diag = ""
    try:
        got = _poll_key_and_writer(cl, frozen, t0)
        if "key" not in got:
            # What the survivors see while the node is still frozen.
            s = next(h for h in cl.live() if h is not frozen)
            diag = s.run("corosync-quorumtool -s; crm_mon -1; journalctl -u corosync -u pacemaker -n 120 --no-pager",
                         timeout_s=120).out
    finally:
        frozen.resume()
    assert "key" in got, f"{w}'s key was not removed: {cl.report()}\n{cl.history()}\n{diag}"
    assert "write" in got, f"the writer did not write on a survivor: {cl.history()}"
    # After resuming: the device refuses the node, whatever it believes. Its
    # NVMe/TCP controller may first have to reconnect (the target dropped it
    # at keep-alive timeout while the VM was stopped): until then a write
    # fails on the path; none may succeed.
    refused_after_s = _first_refused_write(frozen, lba=204, timeout_s=90)
    got["refused_after_resume"] = refused_after_s
    got["freeze_wall"] = wall0
    cl.sync_clock(frozen)
    # Its writer's pass, frozen mid-flight, ends fenced.
    frozen.wait_for("grep -q '^end ' /var/lib/nvwriter/index && "
                    "[ \"$(tail -1 /var/lib/nvwriter/index | cut -d' ' -f1)\" = end ]", timeout_s=120).check()
    cl.snapshot()
    # Its pass, frozen with writes in flight, ends without success: the
    # device refuses them (fenced), or they fail while the controller
    # reconnects (error), or the node's watcher stops the stack first. That
    # none landed stale is the media check's (check_media) to say.
    mine = [x for x in cl.writers() if x.host == w]
    last = max(mine, key=lambda x: x.wid)
    tally = Counter(c[2] for c in last.completions)
    got["frozen_pass"] = dict(tally)
    assert any(k != "ok" for k in tally) or not last.completions, \
        f"{w}'s pass in flight at the freeze logged only ok completions: {dict(tally)}"
    hist = cl.history()
    assert fenced_ok(hist, w), hist
    return w, got, hist


# What a survivor's journal says between a freeze and the fencing, each
# line's pattern with the step it marks (corosync 3.1.7, pacemaker 2.1.5).
STEPS = (("token lost", r"corosync\[.*A processor failed, forming new configuration"),
         ("membership without it", r"corosync\[.*A new membership .* was formed\. Members left: (\d+ )*{nid}\b"),
         ("controller saw it lost", r"pacemaker-controld\[.*Node {node} state is now lost"),
         ("transition calculated", r"pacemaker-schedulerd\[.*Calculated transition"),
         ("fencing requested", r"pacemaker-fenced\[.*Client pacemaker-controld\S* wants to fence \((reboot|off)\) {node} "),
         ("agent done", r"pacemaker-fenced\[.*Operation '(reboot|off)' targeting {node} by \S+ for .*: OK"),
         ("fencing confirmed", r"pacemaker-controld\[.*Peer {node} was (terminated|fenced)"))


def fence_steps(hosts, victim, since_wall, until_wall):
    """Seconds after since_wall at which the survivors' journals (merged:
    only the DC logs the request) first show each STEPS entry (guests'
    clocks are set from the host's), and the matching lines."""
    text = []
    for h in hosts:
        r = h.run(f"journalctl -o short-unix --no-pager --since @{since_wall - 2:.0f} --until @{until_wall + 2:.0f} "
                  f"-u corosync -u pacemaker", timeout_s=120)
        text += r.out.splitlines()
    out, lines = {}, []
    for name, pat in STEPS:
        rx = re.compile(pat.format(node=re.escape(victim), nid=NODE_IDS[victim]))
        hits = []
        for line in text:
            if rx.search(line):
                try:
                    hits.append((float(line.split()[0]) - since_wall, line))
                except ValueError:
                    continue
        hits = [x for x in hits if x[0] >= -1]
        if hits:
            t, line = min(hits)
            out[name] = t
            lines.append(line)
    return out, lines
