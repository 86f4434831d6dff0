"""Prints how fast a preempted host's agent reports FENCED, with and without
the NVME_AEN uevent wake-up (not a test: figures, medians; see
docs/PERFORMANCE.md, "Reservation notifications as uevents").

    vm-test/tool measure_aen [rounds] [interval_ms]

(a) running: B preempts A (nvme resv-acquire --racqa=2) -> A's agent FENCED
    (its fence action ran);
(b) paused: A is frozen (QMP stop) across B's preempt, then resumed ->
    A's agent FENCED.
Each with aen_wakeup = true and false; interval_ms 1000 by default.
"""
import statistics
import sys

import nvlab
from nvlab.workloads.aen import one_round_detail


def figures(xs):
    xs = [x * 1000.0 for x in xs if x is not None]
    if not xs:
        return "n/a"
    return (f"median {statistics.median(xs):6.0f} ms  min {min(xs):6.0f}  max {max(xs):6.0f}  "
            f"all {' '.join(f'{x:.0f}' for x in xs)}")


def main(rounds, interval_ms):
    with nvlab.Lab(hosts=2, topology="fabric") as lab:
        print(f"kernel {lab.kernel.release}, fabric lab (nvme-tcp to nvmet, QEMU TCG), interval_ms {interval_ms}, "
              f"{rounds} rounds each", flush=True)
        for paused in (False, True):
            for wakeup in (True, False):
                rs = [one_round_detail(lab, interval_ms, wakeup, paused) for _ in range(rounds)]
                what = "(b) resume  -> FENCED" if paused else "(a) preempt -> FENCED"
                print(f"  {what}, aen_wakeup {'true ' if wakeup else 'false'}: {figures([r['took'] for r in rs])}",
                      flush=True)
                if paused:
                    print(f"      resume -> A answers a trivial command (the resumed VM's own delay): "
                          f"{figures([r['first_rpc'] for r in rs])}", flush=True)
                if wakeup:
                    print(f"      in A's clock, NVME_AEN wake-up -> FENCED: "
                          f"{figures([r['event_to_fenced'] for r in rs])}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10, int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
