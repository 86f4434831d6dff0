"""PostgreSQL 15 failing over on the shared namespace under Pacemaker with
fence_nvfence (issue 28). Used by test_postgres_failover.py.

The cluster is nvlab.clusters.pacemaker.Cluster's (three systemd hosts a, b, c,
corosync on the cluster network, nvfenced as each node's watcher); what
this module adds is the database and its workload, as reusable parts:

- RECIPE_NODE, RECIPE_STORAGE, RECIPE_CIB: docs/POSTGRES.md's recipe, the
  shell commands the lab runs verbatim (test_postgres_failover.py checks
  that each is in the document). $DEV is the shared namespace.
- PgCluster: the Cluster with the recipe applied (pg_install, init_storage,
  configure), where the database runs (pg_node), the database's readiness.
- Client: the workload on a guest that never runs the database (c: the
  group has a -INFINITY location there): one transaction per uniquely
  numbered row, tried against a and b in turn, every acknowledged commit
  logged with the node that acknowledged it and the guest's wall time.
- check_rows(): every acknowledged row present, no id twice, nothing
  present that was never tried; pg_amcheck over the table and its index.
- media_digest(): a sha256 of the whole namespace's media (the file QEMU
  keeps it in), to show that a fenced node's resume changed nothing.
"""
from __future__ import annotations

import datetime
import re
import shlex

import nvlab
from nvlab.clusters.pacemaker import HOST_LIST, NODE_IDS, NODE_MAP, Cluster, fence_steps, fenced_ok, keys_by_node, wait

# The cluster image's packages plus the database's: postgresql-15 (with
# its contrib: amcheck), resource-agents (the Filesystem agent; already
# pulled in by pacemaker, named because the recipe needs it) and psmisc
# (fuser, which the Filesystem agent uses to stop what holds the mount).
PACKAGES = nvlab.IMAGE_SETS["postgres"]
MOUNT = "/srv/pgdata"
PGDATA = MOUNT + "/15/main"
DB = "nvlab"
PGBIN = "/usr/lib/postgresql/15/bin"   # pg_amcheck is not on PATH in Debian
CLIENT_NODE = "c"                    # runs the client, never the database
DB_NODES = ("a", "b")
CLIENT_DIR = "/var/lib/pgclient"     # on the client's root disk

# Every node, before the cluster manages PostgreSQL: Debian's cluster 15/main
# (created by the package) is no longer started by systemd at boot
# (start.conf manual: only Pacemaker starts it), its data directory is the
# one on the shared file system, it listens on the cluster network.
RECIPE_NODE = (
    "systemctl stop postgresql@15-main.service postgresql.service",
    "echo manual > /etc/postgresql/15/main/start.conf && systemctl daemon-reload",
    f"pg_conftool 15 main set data_directory {PGDATA}",
    "pg_conftool 15 main set listen_addresses '*'",
    "grep -q '^host all all 169.254.100.0/24' /etc/postgresql/15/main/pg_hba.conf || "
    "echo 'host all all 169.254.100.0/24 trust' >> /etc/postgresql/15/main/pg_hba.conf",
    f"mkdir -p {MOUNT}",
)

# Once, on one node whose key is on the device (registered): the file
# system and an empty database cluster with data checksums on it.
RECIPE_STORAGE = (
    "mkfs.ext4 -q -F -L pgdata -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 \"$DEV\"",
    f"mount \"$DEV\" {MOUNT}",
    f"install -d -o postgres -g postgres -m 0700 {MOUNT}/15",
    f"runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb --data-checksums -D {PGDATA}",
    f"umount {MOUNT}",
)

# The cluster configuration (cibadmin, as the lab has no pcs or crmsh;
# docs/POSTGRES.md gives the pcs and crm forms too). Attribute values in
# single quotes so that the shell expands $DEV in the double-quoted XML.
RECIPE_CIB = (
    "crm_attribute -t crm_config -n stonith-enabled -v true",
    "crm_attribute -t crm_config -n stonith-timeout -v 60s",
    "cibadmin -C -o resources -X \"<primitive id='nvfence' class='stonith' type='fence_nvfence'>"
    "<instance_attributes id='nvfence-ia'>"
    "<nvpair id='nvfence-devices' name='devices' value='$DEV'/>"
    f"<nvpair id='nvfence-node-ids' name='node_ids' value='{NODE_MAP}'/>"
    f"<nvpair id='nvfence-host-list' name='pcmk_host_list' value='{HOST_LIST}'/>"
    "<nvpair id='nvfence-host-check' name='pcmk_host_check' value='static-list'/>"
    "</instance_attributes>"
    "<meta_attributes id='nvfence-meta'><nvpair id='nvfence-provides' name='provides' value='unfencing'/>"
    "</meta_attributes>"
    "<operations><op id='nvfence-monitor' name='monitor' interval='10s'/></operations></primitive>\"",
    "cibadmin -C -o resources -X \"<group id='pg'>"
    "<meta_attributes id='pg-meta'><nvpair id='pg-requires' name='requires' value='unfencing'/>"
    "<nvpair id='pg-stickiness' name='resource-stickiness' value='100'/></meta_attributes>"
    "<primitive id='pgfs' class='ocf' provider='heartbeat' type='Filesystem'>"
    "<instance_attributes id='pgfs-ia'>"
    "<nvpair id='pgfs-device' name='device' value='$DEV'/>"
    f"<nvpair id='pgfs-directory' name='directory' value='{MOUNT}'/>"
    "<nvpair id='pgfs-fstype' name='fstype' value='ext4'/>"
    "<nvpair id='pgfs-options' name='options' value='noatime'/></instance_attributes>"
    "<operations><op id='pgfs-monitor' name='monitor' interval='10s' timeout='40s'/>"
    "<op id='pgfs-start' name='start' interval='0s' timeout='120s'/>"
    "<op id='pgfs-stop' name='stop' interval='0s' timeout='120s'/></operations></primitive>"
    "<primitive id='pgsql' class='systemd' type='postgresql@15-main'>"
    "<operations><op id='pgsql-monitor' name='monitor' interval='5s' timeout='100s'/>"
    "<op id='pgsql-start' name='start' interval='0s' timeout='300s'/>"
    "<op id='pgsql-stop' name='stop' interval='0s' timeout='120s'/></operations></primitive>"
    "</group>\"",
    f"cibadmin -C -o constraints -X \"<rsc_location id='pg-not-on-{CLIENT_NODE}' rsc='pg' "
    f"node='{CLIENT_NODE}' score='-INFINITY'/>\"",
)

# On a fenced old primary, before PACEMAKER.md's "Bringing a fenced node
# back": its PostgreSQL (still running, or crashed on a refused write) is
# stopped and the file system, mounted there since before the fence, is
# unmounted; otherwise Pacemaker's probe finds pgfs active on two nodes
# when the node rejoins.
RECIPE_REJOIN = (
    "timeout 120 systemctl stop postgresql@15-main.service || "
    "systemctl kill --signal=KILL postgresql@15-main.service; "
    "systemctl reset-failed postgresql@15-main.service || true",
    f"umount {MOUNT} || umount -l {MOUNT}; ! findmnt {MOUNT}",
)

SCHEMA = ("CREATE TABLE IF NOT EXISTS acked_rows (id bigint NOT NULL, via text NOT NULL, "
          "at timestamptz NOT NULL DEFAULT now()); "
          # Not unique: a row committed twice must stay visible to the checker.
          "CREATE INDEX IF NOT EXISTS acked_rows_id ON acked_rows (id); "
          "CREATE EXTENSION IF NOT EXISTS amcheck;")

# The client: one autocommit INSERT ... RETURNING per row; psql prints the
# id only once the server acknowledged the commit (synchronous_commit on:
# the WAL is flushed). An attempt that fails or gets no answer in 20 s is
# "maybe": its row may or may not be there, never twice. A failure ends the
# session and moves to the next database node.
# One psql session per node (a bash coprocess), not one psql per row: with
# a process per row the client's VM took 98 % of a host core (88 % the
# client's, over 120 s), slowing the cluster it measures. No process is started per row ($EPOCHREALTIME, builtins only).
# At most 5 rows a second (a 0.2 s pause after each, read -t on a FIFO that
# nobody writes: a sleep without a process), so that the server's commits
# do not take the CPU the client gave back.
CLIENT_SCRIPT = r"""#!/bin/bash
# pgclient HOSTS...: name:address pairs of the nodes that may run the database.
D=@DIR@
mkdir -p $D; rm -f $D/stop
n=$(cat $D/next 2>/dev/null || echo 0)
hosts=("$@"); i=0
rm -f $D/tick; mkfifo $D/tick; exec 9<>$D/tick
pause() { read -r -t "$1" -u 9 _ || true; }
export PGCONNECT_TIMEOUT=3 LC_ALL=C
trap '' PIPE          # a session that died: its write fails, the shell stays
session() {           # a new psql session to hosts[i]; sets name, ip, PSQL
  hp=${hosts[$i]}; name=${hp%%:*}; ip=${hp#*:}
  coproc PSQL { exec stdbuf -oL psql -X -q -A -t -h "$ip" -U postgres -d @DB@ -v ON_ERROR_STOP=1 2>&1; }
}
end_session() {
  [ -n "${PSQL_PID:-}" ] || return 0
  kill -KILL "$PSQL_PID" 2>/dev/null; wait "$PSQL_PID" 2>/dev/null; unset PSQL_PID
}
while [ ! -e $D/stop ]; do
  [ -n "${PSQL_PID:-}" ] || session
  n=$((n+1)); echo $n > $D/next
  echo "try $n $name $EPOCHREALTIME" >> $D/log
  out=""
  if printf "INSERT INTO acked_rows (id, via) VALUES (%d, '%s') RETURNING id;\n" $n $name >&"${PSQL[1]}" &&
     IFS= read -r -t 20 out <&"${PSQL[0]}" && [ "$out" = "$n" ]; then
    echo "ack $n $name $EPOCHREALTIME" >> $D/log
    pause 0.2
  else
    echo "fail $n $name $EPOCHREALTIME ${out:0:160}" >> $D/log
    end_session
    i=$(( (i + 1) % ${#hosts[@]} )); pause 0.2
  fi
done
end_session
echo "stopped $EPOCHREALTIME" >> $D/log
""".replace("@DIR@", CLIENT_DIR).replace("@DB@", DB)


class PgCluster(Cluster):
    """nvlab.clusters.pacemaker.Cluster with PostgreSQL in place of the writer."""

    def env(self) -> dict:
        return {"DEV": self.dev}

    def run_recipe(self, h, cmds, timeout_s=300) -> None:
        for cmd in cmds:
            r = h.run(cmd, timeout_s=timeout_s, env=self.env())
            assert r.rc == 0, f"{h.name}: `{cmd}` failed (rc {r.rc}): {(r.out + r.err).strip()[-800:]}"

    def pg_install(self) -> None:
        self._all(lambda h: self.run_recipe(h, RECIPE_NODE))
        c = self.by_name[CLIENT_NODE]
        c.put(CLIENT_SCRIPT.encode(), "/usr/local/bin/pgclient", mode=0o755)
        c.run(f"rm -rf {CLIENT_DIR}", timeout_s=30, check=True)

    def init_storage(self) -> None:
        self.run_recipe(self.by_name[DB_NODES[0]], RECIPE_STORAGE, timeout_s=600)

    def configure(self, monitor_s: int = 10) -> None:
        self.run_recipe(self.hosts[0], RECIPE_CIB, timeout_s=60)

    def pg_rejoin(self, name) -> None:
        """A fenced database node back as a standby: RECIPE_REJOIN, then
        the documented rejoin (Cluster.rejoin)."""
        h = self.by_name[name]
        for cmd in RECIPE_REJOIN:
            r = h.run(cmd, timeout_s=240)
            assert r.rc == 0, f"{name}: `{cmd}` failed (rc {r.rc}): {(r.out + r.err).strip()[-800:]}"
        self.rejoin(name)

    # ---------------------------------------------------------------- views
    def member(self):
        """A node whose view of the cluster counts: the client's (never
        fenced by these scenarios; a fenced node's stack is stopped)."""
        c = self.by_name[CLIENT_NODE]
        return c if c in self.live() else self.any()

    def locate(self, rid, via=None):
        """The node Pacemaker says runs resource rid (None when stopped)."""
        h = via or self.member()
        r = h.run(f"crm_resource --locate -r {rid} 2>/dev/null", timeout_s=30)
        m = re.search(r"is running on: (\S+)", r.out)
        return m.group(1) if m else None

    def pg_node(self, via=None):
        """The node Pacemaker says runs PostgreSQL (None when stopped)."""
        return self.locate("pgsql", via)

    def psql(self, name, sql, timeout_s=120, db=DB):
        """sql on `name`'s own server (unix socket, as postgres)."""
        return self.by_name[name].run(
            f"runuser -u postgres -- psql -X -q -A -t -v ON_ERROR_STOP=1 -d {db} -c {shlex.quote(sql)}",
            timeout_s=timeout_s)

    def wait_pg(self, timeout_s=600, exclude=(), via=None) -> str:
        """The node where PostgreSQL runs (as `via` sees it: give a
        survivor when a live node is cut off) and answers a query (bounded)."""
        def ready():
            n = self.pg_node(via)
            if not n or n in exclude:
                return None
            r = self.by_name[n].run("runuser -u postgres -- psql -X -A -t -c 'select 1'", timeout_s=30)
            return n if r.rc == 0 and r.out.strip() == "1" else None
        try:
            return wait(ready, timeout_s, f"PostgreSQL to run and answer (not on {list(exclude)})", 2)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.pg_diag()}") from None

    def pg_diag(self) -> str:
        out = []
        for h in self.live():
            r = h.run("crm_mon -1 --include=all 2>&1 | tail -30; systemctl status --no-pager -l "
                      "'postgresql@15-main' 2>&1 | tail -15; tail -30 /var/log/postgresql/postgresql-15-main.log "
                      "2>&1; journalctl -b --no-pager -o short-unix -u pacemaker | grep -E 'pgfs|pgsql|Filesystem' "
                      "| tail -20", timeout_s=120)
            out.append(f"--- {h.name}\n{r.out}{r.err}")
        return "\n".join(out)

    def create_schema(self) -> str:
        n = self.wait_pg()
        r = self.psql(n, f"CREATE DATABASE {DB}", db="postgres")
        assert r.rc == 0 or "already exists" in r.err, r
        r = self.psql(n, SCHEMA)
        assert r.rc == 0, r
        return n

    def problems(self) -> list:
        out = []
        live = self.live()
        names = " ".join(sorted(h.name for h in live))
        a = self.member()
        r = a.run("crm_mon -1", timeout_s=60)
        if f"Online: [ {names} ]" not in r.out:
            out.append("not every node online")
        if self.pg_node(a) is None:
            out.append("PostgreSQL does not run")
        if self.failed_ops("pgsql", a) or self.failed_ops("pgfs", a) or self.failed_ops("nvfence", a):
            out.append("failed operations")
        return out

    def set_pg(self, role: str, timeout_s=300, via=None) -> None:
        h = via or self.member()
        h.run(f"crm_resource -r pg --meta -p target-role -v {role}", timeout_s=60, check=True)
        if role == "Stopped":
            wait(lambda: not self.locate("pgfs", h) and not self.locate("pgsql", h), timeout_s,
                 "the pg group to stop", 2)

    # ---------------------------------------------------------------- media
    def media_digest(self) -> str:
        """sha256 of the whole shared namespace's media (Lab.media_digest)."""
        return self.lab.media_digest()


class Client:
    """The workload on CLIENT_NODE."""

    def __init__(self, cl: PgCluster):
        self.cl = cl
        self.h = cl.by_name[CLIENT_NODE]
        self.bg = None

    def start(self) -> None:
        hosts = " ".join(f"{n}:{self.cl.by_name[n].cluster_ip}" for n in DB_NODES)
        self.h.run(f"rm -f {CLIENT_DIR}/stop", timeout_s=30)
        self.bg = self.h.spawn(f"/usr/local/bin/pgclient {hosts}", log_path="/tmp/pgclient.out")

    def stop(self, timeout_s=60) -> None:
        self.h.run(f"mkdir -p {CLIENT_DIR} && touch {CLIENT_DIR}/stop", timeout_s=30, check=True)
        if self.bg and not self.bg.wait(timeout_s):
            self.bg.signal("KILL")
            raise AssertionError(f"the client did not stop within {timeout_s} s: {self.bg.output()[-600:]}")
        self.bg = None

    def log(self) -> list:
        """(kind, id, node, wall time, rest) per line of the client's log."""
        r = self.h.run(f"cat {CLIENT_DIR}/log 2>/dev/null", timeout_s=60)
        out = []
        for line in r.out.splitlines():
            p = line.split(None, 4)
            if len(p) >= 4 and p[0] in ("try", "ack", "fail"):
                out.append((p[0], int(p[1]), p[2], float(p[3]), p[4] if len(p) > 4 else ""))
        return out

    def acked(self) -> dict:
        return {i: (node, t) for kind, i, node, t, _ in self.log() if kind == "ack"}

    def wait_acks(self, count, node=None, after_wall=0.0, timeout_s=600) -> float:
        """Wall time of the first ack (by node, after after_wall) once count
        such acks are logged (bounded)."""
        def got():
            ts = sorted(t for i, (n, t) in self.acked().items() if (node is None or n == node) and t > after_wall)
            return ts[0] if len(ts) >= count else None
        try:
            return wait(got, timeout_s, f"{count} acknowledged commits by {node or 'any node'}", 0.5)
        except AssertionError as e:
            tail = self.h.run(f"tail -15 {CLIENT_DIR}/log", timeout_s=30).out
            raise AssertionError(f"{e}\nclient log tail:\n{tail}\n{self.cl.pg_diag()}") from None


def check_rows(cl: PgCluster, client: Client, node: str) -> dict:
    """On `node`'s running server: every acknowledged row present, none
    twice, none that the client never tried; pg_amcheck on the database
    (heap of every table, every B-tree with --heapallindexed and
    --parent-check). Returns the figures."""
    log = client.log()
    acked = {i for kind, i, *_ in log if kind == "ack"}
    tried = {i for kind, i, *_ in log if kind == "try"}
    assert acked, "the client has no acknowledged commit"
    r = cl.psql(node, "SELECT id, count(*) FROM acked_rows GROUP BY id ORDER BY id", timeout_s=300)
    assert r.rc == 0, r
    present = {}
    for line in r.out.split():
        i, c = line.split("|")
        present[int(i)] = int(c)
    missing = sorted(acked - set(present))
    dup = sorted(i for i, c in present.items() if c > 1)
    unknown = sorted(set(present) - tried)
    assert not missing, f"{len(missing)} acknowledged rows missing: {missing[:50]}"
    assert not dup, f"rows present more than once: {dup[:50]}"
    assert not unknown, f"rows present that the client never tried: {unknown[:50]}"
    r = cl.by_name[node].run(f"runuser -u postgres -- {PGBIN}/pg_amcheck -d {DB} --heapallindexed "
                             "--parent-check --progress 2>&1; echo rc=$?", timeout_s=600)
    m = re.search(r"rc=(\d+)\s*$", r.out)
    assert m and m.group(1) == "0", f"pg_amcheck on {node} found problems:\n{r.out[-2000:]}"
    return {"acked": len(acked), "present": len(present), "tried": len(tried),
            "maybe_present": len(set(present) - acked), "amcheck": r.out.strip().splitlines()[-2:]}


# A survivor's journal from the fence to the database, after
# nvlab.clusters.pacemaker.STEPS (pacemaker 2.1.5's controller lines).
PG_STEPS = (("file system mounted", r"pacemaker-controld\[.*Result of start operation for pgfs on {node}: ok"),
            ("PostgreSQL start requested",
             r"pacemaker-controld\[.*Initiating start operation pgsql_start_0 (locally )?on {node}\b"),
            ("PostgreSQL started", r"pacemaker-controld\[.*Result of start operation for pgsql on {node}: ok"))


# The new primary's own server log (Debian's log_line_prefix '%m [%p] ':
# "2026-12-04 18:55:01.123 UTC [1234] LOG:  ..."), from its start to its
# first connection accepted.
PGLOG = "/var/log/postgresql/postgresql-15-main.log"
PG_LOG_STEPS = (("PostgreSQL: server starting", r"LOG:  starting PostgreSQL "),
                ("PostgreSQL: recovery started", r"database system was (interrupted|not properly shut down)"
                 r"|automatic recovery in progress"),
                ("PostgreSQL: redo done", r"redo done at"),
                ("PostgreSQL: ready", r"database system is ready to accept connections"))


def pg_log_times(text: str, since_wall: float, until_wall: float) -> dict:
    """Seconds after since_wall of the first PG_LOG_STEPS line of each
    kind in a server log's text (stamped in UTC) within the window."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) UTC ", line)
        if not m:
            continue
        stamp = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
        if not since_wall - 1 <= stamp <= until_wall + 2:
            continue
        for name, pat in PG_LOG_STEPS:
            if name not in out and re.search(pat, line):
                out[name] = stamp - since_wall
    return out


def pg_steps(hosts, new_node, since_wall, until_wall) -> dict:
    """The survivors' Pacemaker journals (PG_STEPS) and the new primary's
    server log (PG_LOG_STEPS): seconds after since_wall."""
    out = {}
    for h in hosts:
        r = h.run(f"journalctl -o short-unix --no-pager --since @{since_wall - 2:.0f} --until @{until_wall + 2:.0f} "
                  "-u pacemaker", timeout_s=120)
        for name, pat in PG_STEPS:
            rx = re.compile(pat.format(node=re.escape(new_node)))
            for line in r.out.splitlines():
                if rx.search(line):
                    try:
                        t = float(line.split()[0]) - since_wall
                    except ValueError:
                        continue
                    if t >= -1 and (name not in out or t < out[name]):
                        out[name] = t
        if h.name == new_node:
            out.update(pg_log_times(h.run(f"tail -c 200000 {PGLOG}", timeout_s=60).out, since_wall, until_wall))
    return out


def failover_steps(cl: PgCluster, survivors, old: str, new: str, wall0: float, first_wall: float,
                   done_wall: float):
    """A failover from `old` to `new` that began at wall0 (the fault), its
    first commit acknowledged at first_wall: the fencing history shows
    `old` fenced and its key is gone from the device (asserted, from the new
    primary's view); returns the seconds after wall0 of every step (the
    survivors' journals, the new primary's server log, the first commit)
    and the journal lines."""
    via = cl.by_name[new]
    hist = cl.history(via)
    assert fenced_ok(hist, old), hist
    keys = keys_by_node(cl.report(via))
    assert NODE_IDS[old] not in keys, (keys, hist)
    steps, lines = fence_steps(survivors, old, wall0, done_wall)
    steps.update(pg_steps(survivors, new, wall0, done_wall))
    steps["first commit"] = first_wall - wall0
    return steps, lines
