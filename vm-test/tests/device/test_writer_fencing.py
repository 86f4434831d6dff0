"""FencedWriter in the lab: holder writes accepted in both modes; a writer
with 32 I/Os in flight is fenced by a preempt-and-abort, latches, fails
fast and never hangs; the same with the writer's host frozen (QMP) while its
writes are queued; registrant rules under WE and WERO; bad input refused
before anything reaches the device."""
import json

import pytest

import nvlab
from nvlab.steps import OK, exit_code, nvf, reset, start_load


@pytest.fixture(scope="module")
def lab():
    with nvlab.Lab(hosts=2, topology="fabric") as lab:
        yield lab


def load(host, *args, timeout_s=180):
    """Runs nvfence-load; returns (rc, completions, latched lines, summary)."""
    r = host.run('nvfence-load "$NVFENCE_DEV" ' + " ".join(args), timeout_s=timeout_s)
    return parse_load(r.rc, r.out, r.err)


def parse_load(rc, out, err=""):
    comps, latched, summary = [], [], None
    for line in out.splitlines():
        if line.startswith("C "):
            _, lba, seq, status, *_ = line.split(" ", 4)
            comps.append((int(lba), int(seq), status))
        elif line.startswith("L "):
            latched.append(line)
        elif line.startswith("S "):
            summary = json.loads(line[2:])
    assert summary is not None, (rc, out[-2000:], err)
    return rc, comps, latched, summary


def hold(lab, host, node, rtype="exclusive"):
    r = nvf(host, "register", "--node", str(node))
    assert r.rc == OK, r
    r = nvf(host, "acquire", "--type", rtype)
    assert r.rc == OK, r
    return r.json["key"]


def stamps(host, lba, n):
    blocks = []
    for off in range(0, n, 4096):
        r = nvf(host, "read", "--lba", str(lba + off), "--blocks", str(min(4096, n - off)))
        assert r.rc == OK, r
        blocks += r.json["blocks"]
    return {b["lba"]: b for b in blocks}


@pytest.mark.parametrize("mode", ["block", "passthrough"])
def test_holder_writes_read_back(lab, mode):
    reset(lab)
    a, b = lab.hosts
    key = hold(lab, a, 1)
    extra = "--passthrough" if mode == "passthrough" else ""
    rc, comps, _, s = load(a, "--start 1000 --count 512 --qd 32 --writer-id 7 --key", key, extra)
    assert rc == 0 and s["ok"] == 512 and s["fenced"] == 0 and s["mode"] == mode, s
    got = stamps(b, 1000, 512)
    # A read larger than one command may carry is split, in both modes.
    big = nvf(b, "read", "--lba", "1000", "--blocks", "4096", "--passthrough")
    assert big.rc == OK and len(big.json["blocks"]) == 4096, big
    assert big.json["blocks"][0]["stamp"] and big.json["blocks"][511]["writer_id"] == 7
    for lba in range(1000, 1512):
        blk = got[lba]
        assert blk["stamp"] and blk["stamped_lba"] == lba and blk["writer_id"] == 7, blk


def check_media(b, comps, writer_id):
    """Every block A's writer got ok for holds A's write; no block holds a
    write of A's that completed fenced."""
    lbas = [c[0] for c in comps]
    lo, hi = min(lbas), max(lbas)
    got = stamps(b, lo, hi - lo + 1)
    for lba, seq, status in comps:
        blk = got[lba]
        mine = blk["stamp"] and blk["writer_id"] == writer_id and blk["seq"] == seq
        if status == "ok":
            assert mine, (lba, seq, status, blk)
        else:
            assert not mine, (lba, seq, status, blk)


def test_preempt_fences_writer_in_flight(lab):
    reset(lab)
    a, b = lab.hosts
    key = hold(lab, a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    bg = start_load(a, key, 11, "/tmp/load.log", ramp_acks=200, extra="--interval-us 200")
    r = nvf(b, "preempt", "--node", "2")
    assert r.rc == OK, r
    assert bg.wait(timeout_s=120), "the fenced writer hung"
    rc, comps, latched, s = parse_load(exit_code(bg), bg.output())
    assert rc == 3, (rc, s)                              # the documented "fenced" exit
    assert s["fenced"] >= 1 and s["latched"] is True and s["settled"] is True, s
    assert s["error"] == 0 and s["in_flight"] == 0, s
    assert s["ok_after_first_fenced"] <= 32, s          # only I/O already in flight
    assert any("probe" in x and "fenced" in x for x in latched), latched
    first_fenced = next(i for i, c in enumerate(comps) if c[2] == "fenced")
    assert all(c[2] != "ok" for c in comps[first_fenced + 32:]), comps[first_fenced:first_fenced + 40]
    check_media(b, comps, 11)


def test_paused_writer_is_fenced_on_resume(lab):
    reset(lab)
    a, b = lab.hosts
    key = hold(lab, a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    bg = start_load(a, key, 12, "/tmp/load2.log", ramp_acks=200, extra="--interval-us 200")
    a.pause()
    try:
        r = nvf(b, "preempt", "--node", "2")
        assert r.rc == OK, r
        w = nvf(b, "write", "--lba", "4096", "--blocks", "8")
        assert w.rc == OK, w
    finally:
        a.resume()
    assert bg.wait(timeout_s=180), "the fenced writer hung after resume"
    rc, comps, latched, s = parse_load(exit_code(bg), bg.output())
    assert rc == 3, (rc, s)
    assert s["fenced"] >= 1 and s["latched"] is True and s["in_flight"] == 0, s
    assert s["error"] == 0, s
    # B's blocks survive; A's fenced writes never landed.
    got = stamps(b, 4096, 8)
    assert all(got[l]["stamp"] and got[l]["node"] == 2 for l in range(4096, 4104)), got
    check_media(b, [c for c in comps if c[0] >= 4104], 12)


@pytest.mark.parametrize("rtype,allowed", [("exclusive", False), ("shared", True)])
def test_registrant_rules_at_qd32(lab, rtype, allowed):
    reset(lab)
    a, b = lab.hosts
    hold(lab, a, 1, rtype)
    r = nvf(b, "register", "--node", "2")
    assert r.rc == OK, r
    rc, comps, latched, s = load(b, "--start 9000 --count 256 --qd 32 --key", r.json["key"])
    if allowed:
        assert rc == 0 and s["ok"] == 256, s
    else:
        assert rc == 3 and s["ok"] == 0 and s["fenced"] >= 1 and s["latched"], s
        assert s["fenced"] <= 32, s    # at most one queue's worth reached the device


@pytest.mark.parametrize("mode", ["block", "passthrough"])
def test_bad_input_refused_before_the_device(lab, mode):
    a = lab.hosts[0]
    extra = "--passthrough" if mode == "passthrough" else ""
    r = a.run(f'nvfence-load "$NVFENCE_DEV" --bad-input --qd 8 {extra}')
    assert r.rc == 0, (r.out, r.err)
    lines = [x for x in r.out.splitlines() if x.startswith("B ")]
    assert len(lines) == 6 and all(" ok " in x or x.split()[2] == "ok" for x in lines), r.out
