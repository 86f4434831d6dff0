"""The nvfence fault campaign (issue 7): seeded fault schedules against real
agents, real writers and a real nvmet reservation, and a checker that
proves the fencing invariants from the media and the writers' logs.

Every host VM runs nvfenced (one volume, exclusive mode) and a writer loop:
whenever its agent is HOLDER, the loop runs `nvfence-load` passes over one
shared region, every block stamped with (key, epoch, writer id, seq), and
every completion logged (ok / fenced / error). The campaign plays the
cluster manager: it injects faults at points chosen by a seeded RNG and
drives takeovers through the agents (`nvfence takeover`) or the CLI
(`nvfence preempt`), then heals and brings the cluster back to one holder.

Faults: pause/resume of a host (QMP), kill of a host VM (then a reboot),
kill -9 of an agent (then a restart), link cut/heal, concurrent takeovers
from two standbys, namespace disable/enable on the target (every key lost),
and a takeover by `nvfence preempt` while the host's agent is down.

Invariants checked (numbers as in the issue):
 1. no write of a removed host lands after the preempt that removed it: no
    block holds a stamp whose epoch is below the epoch of a write that the
    device acknowledged at that block, and no write that completed fenced
    is on the media;
 2. at most one holder in every sampled reservation report, the holders'
    epochs only grow, and every grant's epoch is above every epoch seen on
    the device before it;
 3. every write acknowledged to the final holder reads back (the block
    holds it, or a later write of the same holder);
 4. fenced writers saw Reservation Conflict, and only what the device
    allows completed ok: no sequence number written twice, no conflict
    reported as a plain I/O error, and an ok after the writer's first
    fenced completion only for a write the writer had handed to the kernel
    before that completion (nvfence-load's `F` line: the device completes
    a write it admitted before the preempt finished, possibly after
    another write's conflict; such a write is ordered before the new
    holder, and invariant 1 checks its effect on the media by epoch), at
    most QUEUE_DEPTH - 1 of them;
 5. after each step's faults heal, a holder exists (agent HOLDER, device
    agrees, first write acknowledged) within RECOVERY_BOUND_S.

A failing schedule prints its seed: `vm-test/campaign --seed N --schedules 1`
replays the same fault sequence (the VMs' timing is not replayed).
"""
from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter


import nvlab
from nvlab.lab import DISK_SERIAL
from nvlab.checkers.fencing import QUEUE_DEPTH, Violation, check, check_sampler, epoch_of, hexk  # noqa: F401
from nvlab.workloads.writer import WRITER_LOOP, Writer  # noqa: F401

VOL = "vol"
VOLUME_ID = "vol-" + DISK_SERIAL[3:]
INTERVAL_MS = 200
REGION_START = 8192
REGION_BLOCKS = 1024
RECOVERY_BOUND_S = 60.0
CONVERGE_BOUND_S = 60.0
AGENT_START_TRIES = 10     # starts of an agent that exits on a path error at open (3 s apart)
FAULTS = {  # kind: weight
    "pause": 3, "kill_host": 1, "kill_agent": 2, "cut": 2,
    "concurrent_takeover": 2, "ns_cycle": 1, "cli_preempt": 1,
}


def last_json(text: str):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# A path-related NVMe status (type 3: 0x3xx, e.g. Host Pathing Error 0x370
# while the host's controller reconnects). nvfence exits 1 with it and
# documents "nothing was changed; re-run" (README, exit codes), so the
# campaign, as the cluster manager, re-runs a rejoin or a recovery takeover
# (bounded) and counts it, rather than calling it a violation.
_PATH_STATUS = re.compile(r"\(0x3[0-9a-f]{2}\)")


def path_error(rc: int, reply) -> bool:
    """True for exit 1 whose reply names a path-related NVMe status."""
    return rc == 1 and bool(_PATH_STATUS.search(reply if isinstance(reply, str) else json.dumps(reply)))


def concurrent_ok(rcs: list, outs: list) -> bool:
    """Two concurrent takeovers: one wins (0), the other wins too (it ran
    second) or lost the compare (6), or met a path error (its VM was frozen
    past the target's keep-alive and it changed nothing). Without a winner
    only path errors are allowed; settle() then recovers."""
    pathy = [path_error(rc, out) for rc, out in zip(rcs, outs)]
    if any(rc not in (0, 6) and not p for rc, p in zip(rcs, pathy)):
        return False
    return 0 in rcs or all(pathy)


class ScheduleFailed(Exception):
    """A schedule that stopped without breaking an invariant (a guest
    command that never answered, a reboot that failed, ...). Its evidence
    is kept like a violation's: a stop nobody can diagnose is a defect."""


class Node:
    """One host of the campaign: its VM, agent and writer loop."""

    def __init__(self, camp: "Campaign", host, num: int):
        self.c = camp
        self.h = host
        self.num = num
        self.boots = 0
        self.dead = False
        self.agent_up = False
        self.status_error = ""           # why the last status() gave None
        self.starts = 0                  # agent starts (each has its own log)
        self.logs: dict[str, str] = {}   # file name -> longest text seen
        self.setup()

    @property
    def name(self) -> str:
        return self.h.name

    def run(self, cmd: str, timeout_s: float = 60):
        return self.h.run(cmd, timeout_s=timeout_s)

    def setup(self) -> None:
        self.boots += 1
        self.run("cat > /tmp/wl.sh <<'EOF'\n" + WRITER_LOOP + "\nEOF\nmkdir -p /tmp/w", timeout_s=30)

    def start_agent(self, role: str = "standby") -> None:
        cmd = (f"nvfenced --device {VOLUME_ID} --node-id {self.num} --role {role} --interval-ms {INTERVAL_MS} "
               f"--name {VOL} --fence-action command "
               f"--fence-command 'echo \"$NVFENCE_REASON\" >> /tmp/fenced'")
        # Like systemd (the unit restarts on exit 1), start again when the
        # agent exited on a path error at open: the host's controller was
        # reconnecting (seed 61007). Bounded; anything else stops the run.
        # The wait ends early when the agent's log says it could not open
        # the device: waiting out the 60 s left no time to retry (seed 61110).
        ready = f"nvfence status {VOL} --json | grep -Eq '\"state\":\"(STANDBY|HOLDER|FENCED)\"'"
        for attempt in range(1, AGENT_START_TRIES + 1):
            # Every start logs to its own file: a restart used to truncate
            # the killed agent's log, which the evidence needs.
            self.starts += 1
            log = f"/tmp/agent.{self.boots}.{self.starts}.log"
            self.h.spawn(cmd, log_path=log)
            self.h.wait_for(f"{ready} || grep -q 'cannot open' {log}", timeout_s=60)
            if self.run(ready).rc == 0:
                break
            tail = self.run(f"tail -20 {log}").out
            if "cannot open" not in tail or not _PATH_STATUS.search(tail) or attempt == AGENT_START_TRIES:
                raise Violation(f"{self.name}: agent did not start ({attempt} start(s)): {tail}")
            if self.c:
                self.c.totals["agent_start_path_retries"] += 1
            time.sleep(3.0)
        self.agent_up = True

    def kill_agent(self) -> None:
        self.run("pkill -9 -x nvfenced")
        self.h.wait_for("! pgrep -x nvfenced", timeout_s=30).check()
        self.agent_up = False

    def start_loop(self) -> None:
        base = self.num * 1_000_000 + self.boots * 10_000
        self.h.spawn(f"sh /tmp/wl.sh {base} {REGION_START} {REGION_BLOCKS} {QUEUE_DEPTH}", log_path="/tmp/wl.out")

    def stop_writers(self, timeout_s: float = 180) -> None:
        """Kill the writer loop and its nvfence-load, then make sure both are
        gone: the media must never be checked while a writer still writes.
        The lab's pkill is a shell scan of /proc (-f forks per process):
        under load it can outlast a short bound, and a timed-out stop used to
        pass silently (seed 51800: the checker read a writer's log, the
        writer went on, and its next 194 blocks looked unlogged)."""
        gone = "! pgrep -x nvfence-load >/dev/null && ! pgrep -f 'w[l].sh' >/dev/null"
        for _ in range(2):
            self.h.run("pkill -9 -f 'w[l].sh'; pkill -9 -x nvfence-load; true", timeout_s=timeout_s)
            if self.h.wait_for(gone, timeout_s=timeout_s, interval_s=1.0).rc == 0:
                return
        raise Violation(f"{self.name}: the writer loop or nvfence-load is still running after two kills; "
                        "the media cannot be checked")

    def status(self, timeout_s: float = 20):
        if self.dead or self.h.paused:
            self.status_error = "host dead or paused"
            return None
        r = self.run(f"nvfence status {VOL} --json", timeout_s=timeout_s)
        self.status_error = "" if r.rc == 0 else f"exit {r.rc}: {(r.err or r.out).strip()[-160:]}"
        return last_json(r.out) if r.rc == 0 else None

    def takeover(self):
        r = self.run(f"nvfence takeover {VOL} --json", timeout_s=120)
        return r.rc, last_json(r.out) or {"err": r.err}

    def snapshot(self) -> None:
        """Copy the writer logs out of the VM (before it dies, and at the end)."""
        if self.dead:
            return
        r = self.run("cd /tmp/w 2>/dev/null && for f in index *.log; do [ -f \"$f\" ] && "
                     "{ echo \"=== $f\"; cat \"$f\"; }; done; true", timeout_s=120)
        cur, buf = None, []
        for line in r.out.splitlines() + ["=== "]:
            if line.startswith("=== "):
                if cur:
                    key = f"{self.boots}/{cur}"
                    text = "\n".join(buf)
                    if len(text) >= len(self.logs.get(key, "")):
                        self.logs[key] = text
                cur, buf = line[4:].strip(), []
            else:
                buf.append(line)

    def writers(self) -> list:
        out = []
        for name, text in self.logs.items():
            if not name.endswith(".log"):
                continue
            wid = int(name.split("/")[-1][:-4])
            idx = self.logs.get(name.split("/")[0] + "/index", "")
            key = 0
            for line in idx.splitlines():
                p = line.split()
                if len(p) >= 3 and p[0] == "start" and int(p[1]) == wid:
                    key = int(p[2], 16)
                if len(p) >= 3 and p[0] == "end" and int(p[1]) == wid:
                    pass
            w = Writer(wid, self.name, key, killed_host=int(name.split("/")[0]) < self.boots)
            w.read_log(text)
            out.append(w)
        return out


class Campaign:
    def __init__(self, lab, log=print):
        self.lab = lab
        self.log = log
        self.nodes = [Node(self, h, i + 1) for i, h in enumerate(lab.hosts)]
        self.faults = Counter()
        self.totals = Counter()
        # Invariant 5's bound; a long run on a machine shared at load 20+
        # may raise it (--recovery-bound-s), and must say so with its figures.
        self.recovery_bound_s = RECOVERY_BOUND_S
        self.events: list = []
        self.samples: list = []
        self.sample_tries = 0
        self.sample_errors: list = []
        self.status_errors: dict = {}    # host -> why its last status was None
        self.schedule_s = 0.0
        self.grants: list = []       # (t, key, max epoch seen before)
        self.recoveries: list = []
        self._stop = threading.Event()
        self._mon: threading.Thread | None = None
        self.rng = random.Random(0)
        self.t0 = time.monotonic()

    # ------------------------------------------------------------ helpers
    def note(self, what: str) -> None:
        t = time.monotonic() - self.t0
        self.events.append((round(t, 2), what))
        self.log(f"  [{t:7.2f}s] {what}")

    def live(self, running: bool = True) -> list:
        return [n for n in self.nodes if not n.dead and (not running or (not n.h.paused and not n.h.is_cut))]

    def any_reader(self):
        live = self.live()
        if not live:
            raise Violation("no live host left to read the device")
        return live[0]

    def report(self, node=None):
        node = node or self.any_reader()
        r = node.run('nvfence report "$NVFENCE_DEV" --json', timeout_s=30)
        return last_json(r.out) if r.rc == 0 else None

    def states(self) -> dict:
        """Agent status of every running host, asked in parallel."""
        nodes = [n for n in self.live() if n.agent_up]
        out: dict = {}
        errors: dict = {}

        def one(n):
            try:
                out[n.name] = n.status()
                if out[n.name] is None:
                    errors[n.name] = n.status_error
            except Exception as e:  # noqa: BLE001 - reported as no answer, with why
                out[n.name] = None
                errors[n.name] = f"{type(e).__name__}: {e}"[:200]
        t = time.monotonic()
        ts = [threading.Thread(target=one, args=(n,)) for n in nodes]
        for th in ts:
            th.start()
        for th in ts:
            th.join(timeout=90)
        self.status_errors = {k: f"{v} (round of {time.monotonic() - t:.1f}s)" for k, v in errors.items()}
        return {n.name: out.get(n.name) for n in nodes}

    def max_epoch_seen(self) -> int:
        m = 0
        for _, holder, keys in self.samples:
            for k in keys:
                m = max(m, epoch_of(k))
        return m

    def pick_victim(self):
        live = self.live()
        st = self.states()
        holders = [n for n in live if (st.get(n.name) or {}).get("state") == "HOLDER"]
        if holders and self.rng.random() < 0.75:
            return holders[0]
        return self.rng.choice(live)

    def standbys(self, exclude=()) -> list:
        st = self.states()
        return [n for n in self.live() if n not in exclude and (st.get(n.name) or {}).get("state") == "STANDBY"]

    def takeover(self, node, how: str = "agent"):
        before = max(self.max_epoch_seen(), self.sample_now())
        rc, out = node.takeover()
        return self.record_takeover(node, how, before, rc, out)

    def record_takeover(self, node, how: str, before: int, rc: int, out: dict):
        self.totals["takeover_requests"] += 1
        self.note(f"takeover by {node.name} ({how}): rc {rc} {out.get('state')} key {out.get('key')} "
                  f"previous {out.get('previous_holder')}")
        if rc == 0 and out.get("state") == "HOLDER" and out.get("changed"):
            self.grants.append((time.monotonic() - self.t0, int(out["key"], 16), before, node.name))
            self.totals["takeovers"] += 1
        elif path_error(rc, out):
            self.totals["takeover_path_errors"] += 1
        elif rc not in (0, 3, 6):
            raise Violation(f"takeover by {node.name}: unexpected exit {rc}: {out}")
        return rc, out

    # ------------------------------------------------------------ monitor (invariant 2)
    def sample_now(self) -> int:
        """One sample of the device's reservation; returns its max epoch."""
        nodes = self.live()
        if not nodes:
            return 0
        self.sample_tries += 1
        try:
            st = self.report(nodes[int(time.monotonic() * 10) % len(nodes)])
        except Exception as e:  # noqa: BLE001 - a host paused or killed under us; counted
            self.sample_errors.append(f"{type(e).__name__}: {e}"[:200])
            return 0
        if not st:
            self.sample_errors.append("report failed")
            return 0
        keys = [int(r["key"], 16) for r in st.get("registrants", [])]
        holders = [int(r["key"], 16) for r in st.get("registrants", []) if r.get("holder")]
        if len(holders) > 1:
            raise Violation(f"invariant 2: {len(holders)} holders in one report: {st}")
        holder = int(st["holder"], 16) if st.get("holder") else None
        self.samples.append((time.monotonic() - self.t0, holder, keys))
        return max([epoch_of(k) for k in keys] + [0])

    def _monitor(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.sample_now()
            except Violation as e:
                self.monitor_error = e
                return
            except Exception as e:  # noqa: BLE001 - counted; the minimum below decides
                self.sample_errors.append(f"{type(e).__name__}: {e}"[:200])

    # ------------------------------------------------------------ schedule
    def prepare(self) -> None:
        """Fresh state for a schedule: no agents, loads or keys; region zeroed."""
        self.events.clear()
        for n in self.nodes:
            if n.dead:
                n.h.restart()
                n.dead = False
                n.setup()
            elif n.h.paused:
                n.h.resume()
            if n.h.is_cut:
                n.h.heal()
        self.repair_paths()
        for n in self.nodes:
            n.stop_writers()
        self.lab.run_all("pkill -9 nvfenced; "
                         "rm -rf /var/lib/nvfence /run/nvfence /tmp/w /tmp/fenced; mkdir -p /tmp/w; true")
        for n in self.nodes:
            n.logs.clear()
            n.agent_up = False
        a = self.nodes[0]
        a.run('nvme resv-register "$NVFENCE_DEV" --nrkey=0xdead --rrega=0 >/dev/null 2>&1 || '
              'nvme resv-register "$NVFENCE_DEV" --nrkey=0xdead --rrega=2 --iekey >/dev/null 2>&1; '
              'nvme resv-release "$NVFENCE_DEV" --crkey=0xdead --rrela=1 --rtype=1 >/dev/null 2>&1; true')
        st = self.report(a)
        if not st or st["registrants"]:
            raise Violation(f"could not clear the reservation: {st}")
        r = a.run(f'dd if=/dev/zero of="$NVFENCE_DEV" bs=512 seek={REGION_START} count={REGION_BLOCKS} '
                  f'oflag=direct 2>&1', timeout_s=120)
        if r.rc != 0:
            raise Violation(f"zeroing the region failed: {r.out}")
        self.samples.clear()
        self.sample_tries = 0
        self.sample_errors = []
        self.grants.clear()
        self.monitor_error = None

    def repair_paths(self) -> None:
        """Every host must reach the namespace before a schedule starts. A
        host whose path died in the schedule before is rebooted, noted and
        counted (lab_path_repairs): seed 61002, after a 51 s pause under
        load, the guest's nvme-tcp reconnect outlasted the target's 5 s
        keep-alive, the target closed the new socket while the host was
        still connecting, and the kernel left the controller LIVE on the
        dead socket (every command: Host Pathing Error, and no error
        recovery ever again). That is the kernel's, not nvfence's; the
        agent on that host could not open the device."""
        # Keep the probe's answer (nvfence --json puts its error on stdout):
        # a repair must say why (seed 61014's first repair could not).
        probe = 'o=$(nvfence report "$NVFENCE_DEV" --json 2>&1); rc=$?; echo "$o" | tail -c 300; exit $rc'
        for n in self.nodes:
            r = n.h.run(probe, timeout_s=60)
            if r.rc == 0:
                continue
            why = (r.err or r.out).strip()[-200:]
            try:   # the namespace may only have come back under another name
                n.h.refresh_dev(timeout_s=30)
                if n.h.run(probe, timeout_s=60).rc == 0:
                    continue
            except Exception as e:  # noqa: BLE001 - the reboot below is the repair
                why += f"; refresh: {type(e).__name__}: {e}"[:200]
            self.note(f"lab: {n.name} cannot reach the namespace ({why}); rebooting it")
            n.h.restart()
            n.setup()
            if n.h.run(probe, timeout_s=60).rc != 0:
                raise Violation(f"{n.name} cannot reach the namespace even after a reboot: {why}")
            self.totals["lab_path_repairs"] += 1

    def run_schedule(self, seed: int, steps: int, cover: bool = False) -> dict:
        """One schedule. With cover, the first len(FAULTS) steps are every
        kind of fault once, in an order drawn from the seed."""
        self.rng = random.Random(seed)
        order = list(FAULTS)
        self.rng.shuffle(order)
        self.t0 = time.monotonic()
        self.log(f"schedule seed {seed}: {steps} steps on {len(self.nodes)} hosts")
        self.prepare()
        for i, n in enumerate(self.nodes):
            n.start_agent("acquire" if i == 0 else "standby")
            n.start_loop()
        first = self.nodes[0].status()
        if not first or first.get("state") != "HOLDER":
            raise Violation(f"the first agent did not acquire: {first}")
        self.grants.append((0.0, int(first["key"], 16), 0, self.nodes[0].name))
        self.wait_writing(self.nodes[0])
        self._stop.clear()
        self._mon = threading.Thread(target=self._monitor, daemon=True)
        self._mon.start()
        plan = []
        try:
            for step in range(steps):
                kinds = list(FAULTS)
                if cover and step < len(order):
                    kind = order[step]
                else:
                    kind = self.rng.choices(kinds, weights=[FAULTS[k] for k in kinds])[0]
                plan.append(kind)
                self.note(f"step {step + 1}/{steps}: {kind}")
                getattr(self, "f_" + kind)()
                self.faults[kind] += 1
                self.settle()
                time.sleep(self.rng.uniform(0.5, 2.5))
        finally:
            self._stop.set()
            self._mon.join(timeout=60)
        if self.monitor_error:
            raise self.monitor_error
        self.schedule_s = time.monotonic() - self.t0
        check_sampler(len(self.samples), self.sample_tries, self.schedule_s, self.sample_errors)
        result = self.finish()
        result.update(seed=seed, plan=plan, sample_tries=self.sample_tries,
                      sample_errors=len(self.sample_errors))
        return result

    def wait_writing(self, node, timeout_s: float = 60) -> float:
        """Bounded wait until node's writer has an acknowledged write under
        its current grant; returns the seconds it took."""
        t = time.monotonic()
        st = node.status()
        key = st and st.get("key")
        r = node.h.wait_for(f"grep -q 'start .* {key} ' /tmp/w/index && "
                            f"id=$(grep 'start .* {key} ' /tmp/w/index | tail -1 | cut -d' ' -f2) && "
                            f"grep -q '^C .* ok' /tmp/w/$id.log", timeout_s=timeout_s)
        if r.rc != 0:
            raise Violation(f"invariant 5: {node.name} holds with {key} but wrote nothing within {timeout_s:.0f}s: "
                            f"{node.run('tail -5 /tmp/w/index; tail -3 /tmp/wl.out').out}")
        return time.monotonic() - t

    # ------------------------------------------------------------ faults
    def maybe_takeover(self, victim, p: float) -> None:
        if self.rng.random() >= p:
            return
        cands = self.standbys(exclude=(victim,))
        if cands:
            self.takeover(self.rng.choice(cands))

    def _outage(self, start: str, end: str, first_s: tuple, then_s: tuple) -> None:
        """The victim is cut off (Host.<start>) for a while, during which a
        standby usually takes over, then comes back (Host.<end>)."""
        v = self.pick_victim()
        self.note(f"{start} {v.name}")
        getattr(v.h, start)()
        try:
            time.sleep(self.rng.uniform(*first_s))
            self.maybe_takeover(v, 0.8)
            time.sleep(self.rng.uniform(*then_s))
        finally:
            getattr(v.h, end)()
            self.note(f"{end} {v.name}")

    def f_pause(self) -> None:
        self._outage("pause", "resume", (0.2, 1.5), (0.0, 1.0))

    def f_kill_host(self) -> None:
        v = self.pick_victim()
        v.snapshot()
        self.note(f"kill host {v.name}")
        v.h.kill()
        v.dead = True
        v.agent_up = False
        self.maybe_takeover(v, 0.85)
        time.sleep(self.rng.uniform(0.5, 2.0))
        t = time.monotonic()
        v.h.restart()
        v.dead = False
        v.setup()
        v.start_agent("standby")
        v.start_loop()
        self.note(f"host {v.name} rebooted in {time.monotonic() - t:.1f}s, agent {(v.status() or {}).get('state')}")

    def f_kill_agent(self) -> None:
        v = self.pick_victim()
        self.note(f"kill -9 agent on {v.name}")
        v.kill_agent()
        self.maybe_takeover(v, 0.6)
        time.sleep(self.rng.uniform(0.3, 1.5))
        v.start_agent("standby")
        self.note(f"agent on {v.name} restarted: {(v.status() or {}).get('state')}")

    def f_cut(self) -> None:
        self._outage("cut", "heal", (0.3, 2.0), (0.5, 2.0))

    def f_concurrent_takeover(self) -> None:
        cands = self.standbys()
        if len(cands) < 2:
            self.note("concurrent takeover: fewer than two standbys, one takeover instead")
            if cands:
                self.takeover(cands[0])
            return
        two = self.rng.sample(cands, 2)
        res = {}
        before = max(self.max_epoch_seen(), self.sample_now())

        # One trigger: both VMs are frozen, both takeover commands are sent
        # (they wait in the frozen guests' agent channels), then both VMs
        # are resumed back to back, so the two preempts start within
        # milliseconds of each other instead of one guest round trip apart.
        def go(n):
            try:
                res[n.name] = n.takeover()
            except Exception as e:  # noqa: BLE001 - reported as the exit below
                res[n.name] = (-1, {"err": str(e)})
        for n in two:
            n.h.pause()
        ts = [threading.Thread(target=go, args=(n,)) for n in two]
        try:
            for t in ts:
                t.start()
            time.sleep(1.0)
        finally:
            for n in two:
                n.h.resume()
        for t in ts:
            t.join(timeout=180)
        for n in two:
            rc, out = res.get(n.name, (-1, {"err": "no answer"}))
            self.record_takeover(n, "concurrent", before, rc, out)
        got = [res.get(n.name, (-1, {})) for n in two]
        rcs = sorted(r[0] for r in got)
        if not concurrent_ok([r[0] for r in got], [r[1] for r in got]):
            raise Violation(f"concurrent takeover: exits {res}")
        # Raced = the device saw both preempts against the same holder: the
        # second one's compare failed (exit 6). Two exit-0s mean they ran
        # one after the other (the second preempted the first).
        self.totals["concurrent_takeovers"] += 1
        self.totals["concurrent_raced"] += 1 if rcs.count(6) == 1 else 0
        self.totals["lost_races"] += rcs.count(6)

    def f_ns_cycle(self) -> None:
        self.note("target: namespace disabled (every key lost)")
        self.lab.target.ns_disable()
        try:
            time.sleep(self.rng.uniform(0.3, 1.5))
        finally:
            self.lab.target.ns_enable()
            self.note("target: namespace enabled; hosts see it again")

    def f_cli_preempt(self) -> None:
        cands = self.standbys()
        if not cands:
            self.note("cli preempt: no standby")
            return
        v = self.rng.choice(cands)
        v.kill_agent()
        before = max(self.max_epoch_seen(), self.sample_now())
        r = v.run(f'nvfence preempt "$NVFENCE_DEV" --node {v.num} --json', timeout_s=120)
        out = last_json(r.out) or {}
        self.note(f"nvfence preempt on {v.name} (agent down): rc {r.rc} key {out.get('key')} "
                  f"previous {out.get('previous_holder')}")
        if r.rc == 0 and out.get("changed"):
            self.grants.append((time.monotonic() - self.t0, int(out["key"], 16), before, v.name))
            self.totals["takeovers"] += 1
        elif path_error(r.rc, r.out + r.err):
            self.totals["takeover_path_errors"] += 1
        elif r.rc not in (0, 6):
            raise Violation(f"nvfence preempt: exit {r.rc}: {r.out} {r.err}")
        v.start_agent("standby")
        st = v.status() or {}
        self.note(f"agent on {v.name} restarted: {st.get('state')}")
        if r.rc == 0 and st.get("state") not in ("HOLDER", "FENCED"):
            raise Violation(f"agent after a CLI takeover: {st}")

    # ------------------------------------------------------------ convergence (invariant 5)
    def settle(self) -> None:
        """Every fault is healed here. Wait (bounded) until the agents agree
        with the device, then, as a cluster manager would, bring fenced hosts
        back as standbys and make sure one host holds and writes."""
        t0 = time.monotonic()
        while True:
            rep = self.report()
            holder = int(rep["holder"], 16) if rep and rep.get("holder") else None
            st = self.states()
            stale = [n for n, s in st.items() if s and s["state"] == "HOLDER" and int(s["key"], 16) != holder]
            missing = [n for n, s in st.items() if not s]
            if not stale and not missing:
                break
            # Part of invariant 5: a run that raised its bound under load
            # (--recovery-bound-s) waits as long here (seed 51802 stopped at
            # a fixed 60 s while its bound was 120 s).
            bound_s = max(CONVERGE_BOUND_S, self.recovery_bound_s)
            if time.monotonic() - t0 > bound_s:
                why = "; ".join(f"{n}: {e}" for n, e in sorted(self.status_errors.items()))
                raise Violation(f"agents did not converge within {bound_s:.0f}s: device holder "
                                f"{hexk(holder)}, agents { {n: s and (s['state'], s['key']) for n, s in st.items()} }"
                                + (f"; no status from {why}" if why else ""))
            time.sleep(0.3)
        holders = [n for n in self.live() if (st.get(n.name) or {}).get("state") == "HOLDER"]
        if len(holders) > 1:
            raise Violation(f"invariant 2: {len(holders)} agents hold: {st}")
        self.rejoin([n for n in self.live() if (st.get(n.name) or {}).get("state") == "FENCED"])
        if not holders:
            cands = self.standbys()
            if not cands:
                raise Violation(f"no standby to take over: {self.states()}")
            n = self.rng.choice(cands)
            rc, out = self.takeover(n, "recovery")
            end = time.monotonic() + max(60.0, self.recovery_bound_s)
            while path_error(rc, out) and time.monotonic() < end:
                self.totals["path_error_retries"] += 1
                time.sleep(2.0)
                rc, out = self.takeover(n, "recovery, again after a path error")
            if rc != 0:
                raise Violation(f"recovery takeover by {n.name} failed: {rc} {out}")
            holders = [n]
        w = self.wait_writing(holders[0], timeout_s=max(60.0, self.recovery_bound_s))
        self.recoveries.append(time.monotonic() - t0)
        self.note(f"settled in {time.monotonic() - t0:.1f}s: {holders[0].name} holds and writes "
                  f"(first ack after {w:.1f}s)")
        if time.monotonic() - t0 > self.recovery_bound_s:
            raise Violation(f"invariant 5: no writing holder within {self.recovery_bound_s:.0f}s "
                            f"({time.monotonic() - t0:.1f}s)")

    def rejoin(self, fenced: list) -> None:
        """Brings every fenced host back as a standby, all at once: under
        load one guest round trip takes seconds, and one host after the
        other (two round trips each) used to eat most of invariant 5's
        bound after an ns_cycle (seed 51802)."""
        res: dict = {}
        retries: dict = {}
        end = time.monotonic() + max(60.0, self.recovery_bound_s)

        def one(n):
            try:
                while True:
                    # Stop the host's writers before it may write again.
                    r = n.run(f"pkill -9 -x nvfence-load; nvfence rejoin {VOL} --json", timeout_s=90)
                    res[n.name] = r
                    if not path_error(r.rc, r.out + r.err) or time.monotonic() >= end:
                        return
                    retries[n.name] = retries.get(n.name, 0) + 1
                    time.sleep(2.0)
            except Exception as e:  # noqa: BLE001 - reported as the failure below
                res[n.name] = e
        ts = [threading.Thread(target=one, args=(n,)) for n in fenced]
        for th in ts:
            th.start()
        for th in ts:
            th.join(timeout=max(60.0, self.recovery_bound_s) + 120)
        self.totals["path_error_retries"] += sum(retries.values())
        for name, k in sorted(retries.items()):
            self.note(f"rejoin on {name}: {k} path error(s) (controller reconnecting), re-run")
        for n in fenced:
            r = res.get(n.name, "no answer")
            if not hasattr(r, "rc") or r.rc != 0:
                raise Violation(f"rejoin on {n.name} failed: " +
                                (f"{r.out} {r.err}" if hasattr(r, "rc") else str(r)))
            self.totals["rejoins"] += 1

    # ------------------------------------------------------------ evidence
    def keep_evidence(self, out_dir, message: str) -> str:
        """Copies every writer's log (all boots), the writer loops' index,
        the agents' logs, each host's kernel log and the device's final
        report out of the guests into out_dir, with the violation and the
        schedule's events; returns out_dir. Best effort per file: a dead
        host keeps what the last snapshot took."""
        from pathlib import Path
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        notes = []
        for n in self.nodes:
            d = out / n.name
            d.mkdir(exist_ok=True)
            try:
                if n.h.paused:
                    n.h.resume()
                if n.h.is_cut:
                    n.h.heal()
                n.snapshot()
                r = n.run("for f in /tmp/agent.*.log /tmp/wl.out /tmp/fenced; do [ -f \"$f\" ] && "
                          "{ echo \"=== ${f#/tmp/}\"; cat \"$f\"; }; done; echo '=== dmesg'; dmesg | tail -300; true",
                          timeout_s=120)
                cur, buf = None, []
                for line in r.out.splitlines() + ["=== "]:
                    if line.startswith("=== "):
                        if cur:
                            (d / cur).write_text("\n".join(buf) + "\n")
                        cur, buf = line[4:].strip(), []
                    else:
                        buf.append(line)
            except Exception as e:  # noqa: BLE001 - keep what can be kept
                notes.append(f"{n.name}: {type(e).__name__}: {e}")
            for key, text in n.logs.items():
                boot, name = key.split("/", 1)
                (d / f"boot{boot}").mkdir(exist_ok=True)
                (d / f"boot{boot}" / name).write_text(text + "\n")
        try:
            rep = self.report()
            final = json.dumps(rep, indent=1)
        except Exception as e:  # noqa: BLE001
            final = f"no report: {e}"
        (out / "report.txt").write_text(
            f"{message}\n\nfinal reservation report:\n{final}\n\nevents:\n" +
            "\n".join(f"{t:8.2f}s {w}" for t, w in self.events) +
            f"\n\ntotals: {dict(self.totals)}\nsamples: {len(self.samples)} of {self.sample_tries} tries\n" +
            ("\nnot copied:\n" + "\n".join(notes) + "\n" if notes else ""))
        return str(out)

    # ------------------------------------------------------------ check
    def finish(self) -> dict:
        for n in self.live(running=False):
            n.stop_writers()
        for n in self.live(running=False):
            n.snapshot()
        rep = self.report()
        final = int(rep["holder"], 16) if rep.get("holder") else None
        r = self.any_reader().run(f'nvfence read "$NVFENCE_DEV" --lba {REGION_START} --blocks {REGION_BLOCKS} --json',
                                  timeout_s=300)
        media = last_json(r.out)
        if r.rc != 0 or not media:
            raise Violation(f"reading the region failed: {r.rc} {r.err}")
        writers = [w for n in self.nodes for w in n.writers()]
        return check(media["blocks"], writers, final, self.samples, self.grants, self.totals, self.log)


def run_campaign(seed: int, schedules: int, steps: int, hosts: int = 3, log=print, cover: bool = False,
                 recovery_bound_s: float = RECOVERY_BOUND_S) -> dict:
    """Runs `schedules` schedules (seeds seed, seed+1, ...) in one lab; a
    killed host is rebooted, so one lab serves them all. With cover, every
    schedule starts with each kind of fault once. Returns a summary;
    raises Violation (with the seed) on the first broken invariant."""
    summary = {"seeds": [], "violations": 0, "failed_schedules": 0}
    t0 = time.monotonic()
    # A long run shares the machine: a boot (the first, or a killed host's)
    # may take longer than the default bound under load.
    with nvlab.Lab(hosts=hosts, topology="fabric", ebs=True, boot_timeout_s=480) as lab:
        camp = Campaign(lab, log=log)
        camp.recovery_bound_s = recovery_bound_s
        for s in range(seed, seed + schedules):
            try:
                res = camp.run_schedule(s, steps, cover)
            except Exception as e:  # noqa: BLE001 - every stop keeps its evidence, then is raised again
                violation = isinstance(e, Violation)
                summary["violations" if violation else "failed_schedules"] += 1
                what = str(e) if violation else f"{type(e).__name__}: {e}"
                lab.failed = True   # keep the run dir
                where = camp.keep_evidence(lab.run_dir / f"evidence-seed{s}", f"seed {s}: {what}")
                log(f"evidence (writer logs, agent logs, dmesg, final report) kept in {where}")
                raise (Violation if violation else ScheduleFailed)(
                    f"seed {s}: {what}\nevidence: {where}\n(replay: vm-test/campaign --seed {s} --schedules 1 "
                    f"--steps {steps} --hosts {hosts}{' --cover' if cover else ''})\n"
                    f"events: {camp.events[-30:]}") from None
            log(f"seed {s}: ok: {res}")
            # Running figures after every schedule: a long run cut short
            # (machine, deadline) still says what it covered.
            log(f"running after seed {s}: schedules {len(summary['seeds']) + 1}, faults "
                f"{json.dumps(dict(camp.faults), sort_keys=True)}, totals {json.dumps(dict(camp.totals), sort_keys=True)}, "
                f"minutes {(time.monotonic() - t0) / 60:.1f}")
            summary["seeds"].append(s)
        summary.update(faults=dict(camp.faults), totals=dict(camp.totals),
                       recovery_s_median=sorted(camp.recoveries)[len(camp.recoveries) // 2] if camp.recoveries else None,
                       recovery_s_max=max(camp.recoveries) if camp.recoveries else None,
                       schedules=schedules, steps=steps, hosts=hosts, recovery_bound_s=recovery_bound_s,
                       minutes=round((time.monotonic() - t0) / 60, 1))
    return summary
