"""The fault campaign's command line: `vm-test/campaign --seed 100
--schedules 10 --steps 8 --cover` (CI runs a short one through
tests/cluster/test_campaign.py). docs/RELIABILITY.md "Fault campaign"."""

from __future__ import annotations

import argparse
import json
import sys

from ..checkers.fencing import Violation
from . import core


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="nvfence fault campaign in the QEMU lab (see docs/RELIABILITY.md)")
    ap.add_argument("--seed", type=int, default=1, help="first seed (schedule i uses seed+i)")
    ap.add_argument("--schedules", type=int, default=20)
    ap.add_argument("--steps", type=int, default=6, help="faults per schedule")
    ap.add_argument("--hosts", type=int, default=3, choices=(2, 3, 4))
    ap.add_argument("--cover", action="store_true", help="start every schedule with each kind of fault once")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--recovery-bound-s", type=float, default=core.RECOVERY_BOUND_S,
                    help=f"invariant 5's bound, for the agents to agree with the device and a holder to write "
                         f"(default {core.RECOVERY_BOUND_S:.0f}); raise it only on an overloaded "
                         "machine, and report it with the figures")
    a = ap.parse_args(argv)

    def log(msg):
        print(msg, flush=True)
    try:
        summary = core.run_campaign(a.seed, a.schedules, a.steps, a.hosts, log, a.cover, a.recovery_bound_s)
    except Violation as e:
        print(f"VIOLATION {e}", flush=True)
        return 1
    except core.ScheduleFailed as e:
        print(f"FAILED (no invariant broken) {e}", flush=True)
        return 1
    print("SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
