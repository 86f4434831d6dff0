"""nvfenced in the lab (issue 5): the paused holder, kill -9 and restart,
clean stop, a host cut off from the target, a target restart, and bad
configuration. Agents run for real in the host VMs; `nvfence
status|takeover|rejoin` talk to them over their control sockets, and so
does the C API's nvf_agent_request (examples/c)."""
import json
import re
import time

import pytest

import nvlab
from nvlab.steps import OK, nvf, report, reset, start_load

INTERVAL_MS = 200
VOL = "vol"   # agent instance name: socket /run/nvfence/vol.sock


@pytest.fixture
def clean(lab):
    for h in lab.hosts:
        h.run("pkill -9 nvfenced; pkill -9 nvfence-load; rm -rf /var/lib/nvfence /run/nvfence /tmp/fenced*; true")
    reset(lab)
    return lab


def start_agent(host, node, role="standby", extra="", expect=None):
    cmd = (f'nvfenced --device "$NVFENCE_DEV" --node-id {node} --role {role} --interval-ms {INTERVAL_MS} '
           f"--name {VOL} --fence-action command "
           f"--fence-command 'echo \"$NVFENCE_REASON\" > /tmp/fenced.{host.name}' {extra}")
    bg = host.spawn(cmd, log_path=f"/tmp/agent.{host.name}.log")
    want = expect or ("HOLDER" if role == "acquire" else "STANDBY|HOLDER|FENCED")
    r = host.wait_for(f"nvfence status {VOL} --json | grep -Eq '\"state\":\"({want})\"'", timeout_s=60)
    if r.rc != 0:
        print(host.run(f"cat /tmp/agent.{host.name}.log; nvfence status {VOL}").out)
    assert r.rc == 0, "agent did not reach " + want
    return bg


def kill9(host):
    host.run("pkill -9 -x nvfenced")
    host.wait_for("! pgrep -x nvfenced", timeout_s=30).check()


def status(host):
    r = host.run(f"nvfence status {VOL} --json", timeout_s=30)
    assert r.rc == 0, (r.out, r.err)
    return json.loads(r.out.strip().splitlines()[-1])


def wait_state(host, state, timeout_s=60):
    t0 = time.monotonic()
    r = host.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"{state}\"'", timeout_s=timeout_s,
                      interval_s=0.05)
    assert r.rc == 0, (state, status(host), host.run(f"tail -20 /tmp/agent.{host.name}.log").out)
    return time.monotonic() - t0


def takeover(host):
    r = host.run(f"nvfence takeover {VOL} --json", timeout_s=90)
    return r.rc, json.loads(r.out.strip().splitlines()[-1])


def stays(host, state, checks=5):
    """The agent is still in `state` after several more intervals."""
    n0 = status(host)["checks"]
    host.wait_for(f"[ $(nvfence status {VOL} --json | sed 's/.*\"checks\":\\([0-9]*\\).*/\\1/') -ge {n0 + checks} ]",
                  timeout_s=60).check()
    assert status(host)["state"] == state


def test_paused_holder_is_fenced_on_resume(clean):
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    key = status(a)["key"]
    load = start_load(a, key, 21, "/tmp/load.log", extra="--interval-us 500")

    a.pause()
    try:
        t0 = time.monotonic()
        rc, out = takeover(b)
        assert rc == OK and out["state"] == "HOLDER", out
        w = nvf(b, "write", "--lba", "4096", "--blocks", "8")
        assert w.rc == OK, w
        to_first_write = time.monotonic() - t0
    finally:
        a.resume()
    t1 = time.monotonic()
    to_fenced = wait_state(a, "FENCED", timeout_s=60)
    print(f"\nMEASURED takeover request -> B's first accepted write: {to_first_write:.3f}s; "
          f"A resumed -> A's agent FENCED: {to_fenced:.3f}s (interval {INTERVAL_MS} ms)")
    # The fence action ran, with the reason.
    assert a.run(f"cat /tmp/fenced.{a.name}").out.strip(), "fence action did not run"
    # A's writer was fenced by the device, and nothing of it landed over B's.
    assert load.wait(timeout_s=120)
    out = load.output()
    summary = json.loads([x for x in out.splitlines() if x.startswith("S ")][-1][2:])
    assert summary["fenced"] >= 1 and summary["latched"], summary
    got = nvf(b, "read", "--lba", "4096", "--blocks", "8").json["blocks"]
    assert all(x["stamp"] and x["node"] == 2 for x in got), got
    # Safety rule 2: A stays fenced, B holds.
    stays(a, "FENCED")
    st = report(b)
    assert st["holder"] == status(b)["key"]
    assert time.monotonic() - t1 < 120


def test_kill9_and_restart(clean):
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    key_a = status(a)["key"]
    # Crash while holding: on restart the device says A holds -> HOLDER.
    kill9(a)
    start_agent(a, 1, "acquire")
    assert status(a)["state"] == "HOLDER" and status(a)["key"] == key_a
    # Crash, then B takes over while A's agent is down.
    kill9(a)
    rc, out = takeover(b)
    assert rc == OK, out
    start_agent(a, 1, "acquire", expect="STANDBY|HOLDER|FENCED")
    assert status(a)["state"] == "FENCED", status(a)
    stays(a, "FENCED")
    assert report(a)["holder"] == status(b)["key"]
    # Only an operator brings it back, as a standby with a new epoch.
    r = a.run(f"nvfence rejoin {VOL} --json", timeout_s=60)
    assert r.rc == OK, (r.out, r.err)
    st = status(a)
    assert st["state"] == "STANDBY" and st["epoch"] > int(key_a, 16) & 0xffffffff
    stays(a, "STANDBY")


def test_clean_stop_releases(clean):
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    a.run("pkill -TERM -x nvfenced")
    a.wait_for("! pgrep -x nvfenced", timeout_s=30).check()
    assert a.run(f"grep -c . /tmp/agent.{a.name}.log").rc == 0
    st = report(b)
    assert st["holder"] is None, st
    rc, out = takeover(b)
    assert rc == OK and out["state"] == "HOLDER", out
    assert out["previous_holder"] is None, out     # acquired, nothing preempted


def c_agent(host, op, target=VOL):
    """nvfence-c-example agent OP TARGET: the C API's nvf_agent_request."""
    r = host.run(f"nvfence-c-example agent {op} {target}", timeout_s=90)
    m = re.search(r"^agent: exit (\d+) state (\d+) changed (\d) key (\S+) holder (\S+) volume (\S*)$", r.out, re.M)
    assert m, (r.rc, r.out, r.err)
    assert int(m.group(1)) == r.rc, r
    return {"exit": r.rc, "state": STATES[int(m.group(2))], "changed": m.group(3) == "1",
            "key": m.group(4), "holder": m.group(5), "volume": m.group(6), "out": r.out}


STATES = ["STARTING", "STANDBY", "HOLDER", "FENCED", "STOPPING", "WAITING", "WATCHING"]


def test_c_api_asks_the_agent(clean):
    """An engine asks its nvfenced through the C API: the same answers as
    `nvfence status|handoff|takeover`, the agent's refusals as exit codes."""
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    st = c_agent(a, "status")
    assert st["exit"] == OK and st["state"] == "HOLDER" and st["volume"] == status(a)["volume"], st
    assert st["key"] == st["holder"] == status(a)["key_text"], (st, status(a))
    r = c_agent(b, "handoff")   # B holds nothing
    assert r["exit"] != OK and r["state"] == "STANDBY" and "does not hold" in r["out"], r
    r = c_agent(a, "handoff")
    assert r["exit"] == OK and r["state"] == "STANDBY" and r["changed"], r
    assert report(b)["holder"] is None
    r = c_agent(b, "takeover")
    assert r["exit"] == OK and r["state"] == "HOLDER" and r["key"] == r["holder"], r
    assert report(a)["holder_key"] == r["key"]
    r = a.run("nvfence-c-example agent status /run/nvfence/nope.sock")
    assert r.rc == 1 and "No such file" in r.err, r


def test_cut_off_holder_ends_fenced(clean):
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    key = status(a)["key"]
    load = start_load(a, key, 22, "/tmp/load.log", extra="--interval-us 500 --timeout-ms 300000")
    a.cut()
    try:
        rc, out = takeover(b)
        assert rc == OK, out
        assert nvf(b, "write", "--lba", "4096", "--blocks", "8").rc == OK
    finally:
        a.heal()
    wait_state(a, "FENCED", timeout_s=120)
    assert load.wait(timeout_s=300)
    got = nvf(b, "read", "--lba", "4096", "--blocks", "8").json["blocks"]
    assert all(x["stamp"] and x["node"] == 2 for x in got), got
    stays(a, "FENCED")


def test_target_restart_is_noticed(clean):
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    gen = status(a)["generation"]
    assert gen >= 2
    # The target restarts: hosts are cut from the subsystem, the namespace is
    # re-created (every registration gone, generation back to 0), and the
    # hosts reconnect to the same namespace.
    t = clean.target
    nqn = nvlab.NQN
    t.run(f"T=/sys/kernel/config/nvmet; S=$T/subsystems/{nqn}; "
          f"for p in $T/ports/*; do rm $p/subsystems/{nqn}; done; "
          f"echo 0 > $S/namespaces/1/enable && echo 1 > $S/namespaces/1/enable && "
          f"for p in $T/ports/*; do ln -s $S $p/subsystems/{nqn}; done", check=True, timeout_s=60)
    wait_state(a, "FENCED", timeout_s=120)
    wait_state(b, "FENCED", timeout_s=120)
    for h in (a, b):
        log = h.run(f"cat /tmp/agent.{h.name}.log").out
        assert "restart" in log or "generation" in log, log[-3000:]
    stays(a, "FENCED")
    st = report(a)
    assert st["holder"] is None and st["registrants"] == [], st


def test_namespace_removed_and_back(clean):
    """The namespace disappears (disabled on the target: every key is lost)
    and comes back, under a new name on the hosts. The agents must follow
    it: a holder that kept watching the dead node would never learn that
    its reservation is gone."""
    a, b = clean.hosts
    start_agent(a, 1, "acquire")
    start_agent(b, 2)
    old = {h.name: h.dev for h in (a, b)}
    clean.target.ns_disable()
    try:
        a.wait_for(f"nvfence status {VOL} --json | grep -q 'disappeared'", timeout_s=60).check()
    finally:
        clean.target.ns_enable()     # waits until every host sees it again
    for h in (a, b):
        wait_state(h, "FENCED", timeout_s=120)
        st = status(h)
        assert "target restart" in st["fence_reason"], st
        assert st["device"] == h.dev, (st["device"], h.dev, old[h.name])
        log = h.run(f"cat /tmp/agent.{h.name}.log").out
        assert f"is back as {h.dev}" in log, log[-3000:]
    stays(a, "FENCED")
    # Back to work on the new node: rejoin both, B takes over and writes.
    for h in (a, b):
        r = h.run(f"nvfence rejoin {VOL} --json", timeout_s=60)
        assert r.rc == OK, (r.out, r.err)
    rc, out = takeover(b)
    assert rc == OK and out["state"] == "HOLDER", out
    assert nvf(b, "write", "--lba", "4096").rc == OK
    assert report(a)["holder"] == status(b)["key"]


def test_bad_configuration_and_second_agent(clean):
    a = clean.hosts[0]
    for args, word in (("--node-id 0", "node_id"), ("--node-id 1 --mode bogus", "mode"),
                       ("--node-id 1 --interval-ms 5", "interval_ms"), ("--node-id 1 --role boss", "role")):
        r = a.run(f'nvfenced --device "$NVFENCE_DEV" {args}', timeout_s=30)
        assert r.rc == 2, (args, r.rc, r.out, r.err)
        assert word in r.err, (args, r.err)
    r = a.run("nvfenced --device /dev/null --node-id 1", timeout_s=30)
    assert r.rc == 4, (r.rc, r.err)
    start_agent(a, 1)
    r = a.run(f'nvfenced --device "$NVFENCE_DEV" --node-id 1 --name {VOL}', timeout_s=30)
    assert r.rc == 3, (r.rc, r.out, r.err)
    assert "already" in r.err or "pid" in r.err, r.err
