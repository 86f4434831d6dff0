"""Issue 14: a link cut longer than the NVMe/TCP reconnect and
controller-loss timeouts, with native NVMe multipath off and on. A holds
and writes at QD 32; A's link to the target is cut; B preempts and writes
over A's region; after ctrl_loss_tmo has run out the link comes back. A's
queued writes must complete with an error (bounded), and none may land
later: every block B wrote still holds B's stamp.

Prints, per multipath setting, how long A's writer waited for its first
failed completion after the cut and what the completions returned."""
import json
import time
from collections import Counter

import pytest

from nvlab.steps import OK, exit_code, nvf, reset, stamps

CTRL_LOSS_TMO_S = 6
START = 4096
B_BLOCKS = 4096



@pytest.mark.parametrize("multipath", ["N", "Y"])
def test_queued_writes_fail_and_never_land_after_a_long_cut(lab_factory, multipath):
    lab = lab_factory(hosts=2, topology="fabric", ebs=True,
                      connect_opts=f"reconnect_delay=1,ctrl_loss_tmo={CTRL_LOSS_TMO_S}",
                      extra_cmdline=f"nvme_core.multipath={multipath}")
    a, b = lab.hosts
    reset(lab)
    assert a.run("cat /sys/module/nvme_core/parameters/multipath").out.strip() == multipath
    r = nvf(a, "register", "--node", "1")
    assert r.rc == OK, r
    r = nvf(a, "acquire")
    assert r.rc == OK, r
    key = r.json["key"]
    assert nvf(b, "register", "--node", "2").rc == OK
    log = "/tmp/outage.log"
    bg = a.spawn(f'nvfence-load "$NVFENCE_DEV" --start {START} --count 60000 --qd 32 --interval-us 2000 '
                 f'--timeout-ms 300000 --writer-id 51 --key {key}; echo $? > {log}.rc',
                 log_path=log)
    a.wait_for(f"[ $(grep -c '^C .* ok' {log}) -ge 50 ]", timeout_s=120).check()
    a.cut()
    t_cut = time.monotonic()
    try:
        r = nvf(b, "preempt", "--node", "2")
        assert r.rc == OK and r.json.get("changed"), r
        w = b.run(f'for i in $(seq 0 {B_BLOCKS // 256 - 1}); do nvfence write "$NVFENCE_DEV" '
                  f'--lba $(({START} + i * 256)) --blocks 256 >/dev/null || exit 1; done', timeout_s=180)
        assert w.rc == 0, w
        # Wait for A's first failed completion (bounded), while still cut.
        first = a.wait_for(f"grep -qE '^C [0-9]+ [0-9]+ (error|fenced)' {log}", timeout_s=120)
        waited_s = time.monotonic() - t_cut
        assert first.rc == 0, "no queued write of A failed within 120 s of the cut"
        time.sleep(max(0.0, CTRL_LOSS_TMO_S + 4 - (time.monotonic() - t_cut)))
    finally:
        a.heal()
    assert bg.wait(timeout_s=300), "A's writer hung after the outage"
    rc = exit_code(bg)
    time.sleep(5)   # anything still queued somewhere would land now
    out = bg.output()
    comps = [line.split(None, 4) for line in out.splitlines() if line.startswith("C ")]
    summary = json.loads(next(x for x in out.splitlines() if x.startswith("S "))[2:])
    after = Counter((c[3], c[4] if len(c) > 4 else "-") for c in comps if c[3] != "ok")
    media = stamps(b, START, B_BLOCKS)
    mine_late = [l for l, blk in media.items() if not (blk["stamp"] and blk["node"] == 2)]
    print(f"\nmultipath={multipath}: first failed completion {waited_s:.1f}s after the cut "
          f"(ctrl_loss_tmo {CTRL_LOSS_TMO_S}s); writer exit {rc}; failed completions {dict(after)}; "
          f"summary {summary}; blocks of B overwritten later: {len(mine_late)}")
    assert not mine_late, mine_late[:10]
    assert summary["in_flight"] == 0 and rc in (1, 3), (rc, summary)
    assert summary["error"] + summary["fenced"] >= 1, summary
