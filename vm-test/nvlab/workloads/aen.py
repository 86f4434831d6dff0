"""Time from a preempt to the victim's agent saying FENCED, with and without
the NVME_AEN uevent wake-up (aen_wakeup). Used by test_aen.py (one round,
a bound) and measure_aen.py (medians for docs/PERFORMANCE.md).

The victim A runs nvfenced as the holder; its fence action writes to a
FIFO that a blocked `cat` in A reads, so the host learns the moment the
fence action ran (right after FENCED was entered and persisted) from that
command's return. B registers with nvme-cli and preempts A's key with
`nvme resv-acquire --racqa=2`; the time is taken when that command returns.
Both ends go through the same guest-agent channel, so its latency mostly
cancels out."""
import json
import re
import threading
import time

from nvlab.steps import hexkey, reset

VOL = "vol"
FIFO = "/tmp/aen.fifo"
B_KEY = 0x0B


def start_victim(a, interval_ms, wakeup):
    """Starts A's agent as the holder; returns its key."""
    a.run("pkill -9 -x nvfenced; true")
    a.wait_for("! pgrep -x nvfenced", timeout_s=30).check()
    a.run(f"rm -rf /var/lib/nvfence /run/nvfence {FIFO}; mkfifo {FIFO}", check=True)
    cmd = (f'nvfenced --device "$NVFENCE_DEV" --node-id 1 --role acquire --interval-ms {interval_ms} '
           f"--name {VOL} --aen-wakeup {'true' if wakeup else 'false'} --log-level debug "
           f"--fence-action command --fence-command 'echo fenced > {FIFO}'")
    a.spawn(cmd, log_path="/tmp/aen-agent.log")
    r = a.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"HOLDER\"'", timeout_s=60)
    assert r.rc == 0, a.run("tail -30 /tmp/aen-agent.log").out
    st = json.loads(a.run(f"nvfence status {VOL} --json", check=True).out.strip().splitlines()[-1])
    return int(st["key"], 16) if isinstance(st["key"], str) else int(st["key"])


def one_round(lab, interval_ms, wakeup, paused, settle_s=1.0):
    """One preempt of A by B. Returns seconds from the preempt's return
    (paused=False) or from A's resume (paused=True) to A's fence action."""
    return one_round_detail(lab, interval_ms, wakeup, paused, settle_s)["took"]


def one_round_detail(lab, interval_ms, wakeup, paused, settle_s=1.0):
    """one_round() with more: `took` (s), `first_rpc` (paused only: s from
    the resume to A's answer to a trivial command, i.e. how long the resumed
    VM itself takes to respond) and `event_to_fenced` (s in A's own clock
    from the agent's "asynchronous event" line to its FENCED line; None
    without a wake-up)."""
    a, b = lab.hosts[0], lab.hosts[1]
    a.run("pkill -9 -x nvfenced; true")
    reset(lab)
    key = start_victim(a, interval_ms, wakeup)
    b.run(f'nvme resv-register "$NVFENCE_DEV" --nrkey={hexkey(B_KEY)} --rrega=0', check=True)
    done = {}

    def wait_fenced():
        r = a.run(f"cat {FIFO}", timeout_s=120)
        done["t"] = time.monotonic()
        done["r"] = r

    waiter = threading.Thread(target=wait_fenced, daemon=True)
    waiter.start()
    time.sleep(0.3)  # the cat is blocked on the FIFO in A before the preempt
    preempt = (f'nvme resv-acquire "$NVFENCE_DEV" --crkey={hexkey(B_KEY)} --prkey={hexkey(key)} '
               f"--rtype=1 --racqa=2")
    first_rpc = None
    if paused:
        a.pause()
        try:
            b.run(preempt, check=True)
            time.sleep(settle_s)
        finally:
            t0 = time.monotonic()
            a.resume()
        a.run("true")
        first_rpc = time.monotonic() - t0
    else:
        b.run(preempt, check=True)
        t0 = time.monotonic()
    waiter.join(timeout=120)
    log = agent_log(a)
    assert "t" in done and done["r"].out.strip() == "fenced", (done, log[-3000:])
    return {"took": done["t"] - t0, "first_rpc": first_rpc, "event_to_fenced": event_to_fenced(log)}


def _stamp(line):
    m = re.match(r"\S+ (\d+):(\d+):(\d+\.\d+) ", line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def event_to_fenced(log):
    """Seconds between the agent's first "asynchronous event" line and its
    FENCED line (A's clock), or None."""
    ev = fenced = None
    for line in log.splitlines():
        if ev is None and "asynchronous event of" in line:
            ev = _stamp(line)
        if "-> FENCED" in line:
            fenced = _stamp(line)
    return fenced - ev if ev is not None and fenced is not None and fenced >= ev else None


def agent_log(a):
    return a.run("cat /tmp/aen-agent.log").out
