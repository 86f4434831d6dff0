"""Prints failover figures from the lab (not a test: figures, medians).

    vm-test/tool measure_failover [rounds]

- preempt-and-abort latency as `nvfence preempt` measures it (Report,
  register, preempt-and-abort, verifying Report), idle and with the holder
  writing 4 KiB at queue depth 32;
- time from an agent takeover request to the new holder's first accepted
  write, and from the frozen old holder's resume to its agent saying FENCED.
"""
import json
import statistics
import sys

import nvlab
from nvlab.steps import nvf, reset


def main(rounds):
    figures = {"idle": [], "qd32": []}
    with nvlab.Lab(hosts=2, topology="fabric") as lab:
        a, b = lab.hosts
        for load in ("idle", "qd32"):
            for i in range(rounds):
                reset(lab)
                assert nvf(a, "register", "--node", "1").rc == 0
                key = nvf(a, "acquire").json["key"]
                bg = None
                if load == "qd32":
                    bg = a.spawn(f'nvfence-load "$NVFENCE_DEV" --start 8192 --count 200000 --qd 32 --key {key}',
                                 log_path="/tmp/m.log")
                    a.wait_for("[ $(grep -c '^C .* ok' /tmp/m.log) -ge 500 ]", timeout_s=120).check()
                r = nvf(b, "preempt", "--node", "2")
                assert r.rc == 0, r
                figures[load].append(r.json["elapsed_us"] / 1000.0)
                if bg:
                    assert bg.wait(timeout_s=120)
                    s = json.loads([x for x in bg.output().splitlines() if x.startswith("S ")][-1][2:])
                    assert s["fenced"] >= 1, s
        print(f"\npreempt-and-abort (nvfence preempt: report + register + preempt-and-abort + verify), "
              f"{rounds} rounds each, fabric lab (nvme-tcp to nvmet, QEMU TCG, 2 cores):")
        for load, xs in figures.items():
            print(f"  {load:5s}: median {statistics.median(xs):7.1f} ms   min {min(xs):7.1f}   max {max(xs):7.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
