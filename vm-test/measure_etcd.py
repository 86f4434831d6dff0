"""Prints the etcd elector's failover figures from the lab (not a test).

    /usr/bin/python3 vm-test/measure_etcd.py [runs] [ttl_s ...]

Three systemd host VMs, a 3-member etcd cluster on the cluster network,
nvfenced with `elector = etcd` on each (etcdlab.py). One run: the holder's
nvfenced is SIGSTOPped (a freeze); every other host runs a probe that tries
a one-block O_DIRECT write in a loop (refused while another host holds)
and prints the time of the first accepted one. From the new holder's own
log (its clock mapped to the host's by a round-trip offset):

  lease expiry     freeze -> the old leader's key gone from etcd (a poller
                   on another host asks /v3/election/leader every ~0.1 s)
  campaign         key gone -> the election won (the campaign returned, the
                   token was issued)
  preempt          won -> the agent HOLDER (Report, verified
                   preempt-and-abort with the token as epoch)
  first write      HOLDER -> the probe's first accepted write
  total            freeze -> first accepted write;  beyond TTL = total - TTL

Medians (and min/max) over the runs, per TTL. Default: 10 runs, TTL 2 and 5.
"""
import base64
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nvlab  # noqa: E402
import etcdlab as el  # noqa: E402

PROBE_LBA = 70000


def probe_cmd():
    # dd's own exit status tells: 0 accepted, else refused (Reservation Conflict).
    return (f"while ! dd if=/dev/zero of=\"$NVFENCE_DEV\" bs=4096 count=1 seek={PROBE_LBA // 8} oflag=direct "
            f"2>/dev/null; do :; done; date +%s.%N > /tmp/probe.ok")


def leader_poll_cmd(h):
    """Logs `<time> <leader key or none>` about every 0.1 s."""
    name = base64.b64encode(f"nvfence/{el.VOL_ID}".encode()).decode()
    ask = el.http_cmd(h.cluster_ip, "/v3/election/leader", f'{{"name":"{name}"}}')
    return (f"while :; do k=$({ask} 2>/dev/null | grep -o '\"key\":\"[^\"]*\"' | head -1); "
            f"echo \"$(date +%s.%N) ${{k:-none}}\"; usleep 100000; done")


def key_gone_at(text, old_key_b64):
    """The first poll time at which old_key_b64 no longer led."""
    seen = False
    for line in text.splitlines():
        p = line.split(None, 1)
        if len(p) < 2:
            continue
        if old_key_b64 in p[1]:
            seen = True
        elif seen:
            return float(p[0])
    return None


def leading_holder(lab, timeout_s=180):
    """A HOLDER whose elector leads: a holder that stepped down keeps its
    reservation until the next leader preempts it, and freezing it measures
    nothing (the 00:01 attempt froze such a host)."""
    end = time.monotonic() + timeout_s
    while True:
        hold, s = el.wait_holder(lab.hosts, timeout_s=max(10, end - time.monotonic()))
        if "leader (this host leads)" in s["message"]:
            return hold, s
        assert time.monotonic() < end, f"no holder leads in etcd: {hold.name} {s['message']}"
        time.sleep(1)


def run_once(lab, ttl, offsets, boots):
    hold, s = leading_holder(lab)
    others = [h for h in lab.hosts if h is not hold]
    for h in others:
        h.run("rm -f /tmp/probe.ok; pkill -x dd; true", timeout_s=30)
        h.spawn(probe_cmd(), log_path="/tmp/probe.log")
    poller = others[0]
    poller.run("pkill -f '[l]eader_poll.sh'; rm -f /tmp/leader_poll.log; true", timeout_s=30)
    poller.put(leader_poll_cmd(poller).encode(), "/tmp/leader_poll.sh")
    poller.spawn("sh /tmp/leader_poll.sh", log_path="/tmp/leader_poll.log")
    won_lines = [ln for ln in hold.run(f"grep 'won the election' /tmp/agent.{boots[hold.name]}.log",
                                       timeout_s=60).out.splitlines()]
    assert won_lines, f"{hold.name} holds but its log has no won election"
    # The key to watch is the one etcd shows leading now (the agent's log
    # may lag: its last "won" line named an older leadership in the 00:06
    # attempt). Freeze once the poller has logged a key at all.
    got = poller.wait_for("grep -q '\"key\"' /tmp/leader_poll.log", timeout_s=60, interval_s=0.2)
    assert got.rc == 0, poller.run("tail -3 /tmp/leader_poll.log", timeout_s=30).out
    last = poller.run("grep '\"key\"' /tmp/leader_poll.log | tail -1", timeout_s=30).out.split()[-1]
    old_key = last.split('"key":"', 1)[1].rstrip('"')
    t_freeze = time.time()
    hold.run("pkill -STOP -x nvfenced", timeout_s=30)
    t_freeze = (t_freeze + time.time()) / 2
    new, ns = el.wait_holder(lab.hosts, exclude=[hold.name], timeout_s=120)
    r = new.wait_for("test -s /tmp/probe.ok", timeout_s=60)
    assert r.rc == 0, "no accepted write on the new holder"
    t_write = float(new.run("cat /tmp/probe.ok", timeout_s=30).out.strip()) - offsets[new.name]
    log = new.run(f"cat /tmp/agent.{boots[new.name]}.log", timeout_s=60).out.splitlines()
    token = str(int(ns["key"], 16) & 0xffffffff)
    won = next(ln for ln in log if f"won the election: token {token}" in ln)
    took = next(ln for ln in log if "-> HOLDER" in ln and "etcd elector (token " + token in ln)
    t_won = el.log_time(won) - offsets[new.name]
    t_hold = el.log_time(took) - offsets[new.name]
    gone = key_gone_at(poller.run("cat /tmp/leader_poll.log", timeout_s=60).out, old_key)
    assert gone is not None, f"the poller never saw {base64.b64decode(old_key)} lead, then go"
    t_gone = gone - offsets[poller.name]
    for h in others:
        h.run("pkill -x dd; true", timeout_s=30)
    poller.run("pkill -f '[l]eader_poll.sh'; true", timeout_s=30)
    # The frozen one resumes, is fenced; restart it as a standby for the next run.
    hold.run("pkill -CONT -x nvfenced", timeout_s=30)
    hold.wait_for(f"{el.NVFENCE} status {el.VOL} --json | grep -q FENCED", timeout_s=60)
    hold.run("pkill -TERM -x nvfenced", timeout_s=30)
    hold.wait_for("! pgrep -x nvfenced", timeout_s=60)
    hold.run("rm -f /var/lib/nvfence/*.agent", timeout_s=30)
    boots[hold.name] += 1
    num = lab.hosts.index(hold) + 1
    el.start_agent(lab, hold, num, ttl, boot=boots[hold.name])
    return {"expiry": (t_gone - t_freeze) * 1000, "campaign": (t_won - t_gone) * 1000,
            "preempt": (t_hold - t_won) * 1000,
            "first_write": (t_write - t_hold) * 1000, "total": (t_write - t_freeze) * 1000}


def fmt(vals):
    return f"{statistics.median(vals):8.0f} ms (min {min(vals):.0f}, max {max(vals):.0f})"


def main(argv):
    runs = int(argv[1]) if len(argv) > 1 else 10
    ttls = [int(x) for x in argv[2:]] or [2, 5]
    with nvlab.Lab(hosts=3, topology="fabric", flavour="systemd", packages=list(nvlab.CLUSTER_PACKAGES),
                   cluster_net=True, memory_mb=1024, boot_timeout_s=480, extra_cmdline=el.NO_PACEMAKER) as lab:
        el.start_etcd(lab)
        offsets = {h.name: el.clock_offset(h) for h in lab.hosts}
        boots = {h.name: 0 for h in lab.hosts}
        for ttl in ttls:
            for i, h in enumerate(lab.hosts):
                h.run("pkill -TERM -x nvfenced; true", timeout_s=30)
                h.wait_for("! pgrep -x nvfenced", timeout_s=60)
                h.run("rm -f /var/lib/nvfence/*.agent", timeout_s=30)
            for i, h in enumerate(lab.hosts):
                boots[h.name] += 1
                el.start_agent(lab, h, i + 1, ttl, boot=boots[h.name])
            res = []
            for k in range(runs):
                r = run_once(lab, ttl, offsets, boots)
                print(f"TTL {ttl} s run {k + 1}: " + ", ".join(f"{a} {b:.0f} ms" for a, b in r.items()), flush=True)
                res.append(r)
            print(f"TTL {ttl} s, {len(res)} runs (median):")
            for part in ("expiry", "campaign", "preempt", "first_write", "total"):
                name = {"expiry": "lease expiry"}.get(part, part)
                print(f"  {name:16s} {fmt([r[part] for r in res])}")
            print(f"  {'beyond TTL':16s} {fmt([r['total'] - ttl * 1000 for r in res])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
