#!/bin/bash
# nvfence-sim's command line (CTest sim_cli, label unit): exit codes 0/1/2,
# a replayed seed prints the same trace hash twice, a violation prints its
# seed and the replay command. Usage: sim_cli.sh <nvfence-sim>
set -u
SIM=$1
fail=0
check() {  # expected-rc description command...
    local want=$1 what=$2
    shift 2
    out=$("$@" 2>&1)
    local rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: $what: exit $rc, expected $want"
        echo "$out" | tail -5
        fail=1
    fi
}
check 2 "no arguments" "$SIM"
check 2 "unknown option" "$SIM" --bogus
check 2 "seed with schedules" "$SIM" --seed 1 --schedules 3
check 2 "unknown fault kind" "$SIM" --schedules 1 --faults nosuchfault
check 2 "unknown invariant" "$SIM" --schedules 1 --tolerate nosuchinvariant
check 2 "unknown cluster manager" "$SIM" --seed 1 --cluster nosuchcluster
check 0 "--help" "$SIM" --help
"$SIM" --help | grep -q '^usage: nvfence-sim' || { echo "FAIL: --help prints no usage on stdout"; fail=1; }
for c in etcd pacemaker; do
    "$SIM" --seed 3 --cluster $c | grep -q "^seed 3 ($c):" || { echo "FAIL: --cluster $c not run"; fail=1; }
done
check 0 "a clean seed in known-defect mode" "$SIM" --seed 1 --known-defects
check 0 "a few schedules in known-defect mode" "$SIM" --schedules 20 --jobs 2 --known-defects --progress-ms 0
# A violation exits 1 with its seed, step, trace and replay line (no seed
# breaks an invariant on today's code: --fail-at-step asks for one).
check 1 "a violation" "$SIM" --seed 640 --fail-at-step 30
out=$("$SIM" --seed 640 --fail-at-step 30 2>&1)
grep -q '^VIOLATION of self_test at step 30 (seed 640)' <<<"$out" || { echo "FAIL: no violation line"; fail=1; }
grep -q '^replay: nvfence-sim --seed 640' <<<"$out" || { echo "FAIL: no replay line"; fail=1; }
grep -q 'step    30  VIOLATION: self_test' <<<"$out" || { echo "FAIL: no trace"; fail=1; }
# Kinds beyond the default ones are part of the replay line.
out=$("$SIM" --seed 640 --fail-at-step 30 --faults all 2>&1)
grep -q '^replay: nvfence-sim --seed 640 --faults freeze,.*,link_degraded,target_crash_loop,fence_delay,fence_race,paused_win,paused_token,late_timeout$' <<<"$out" ||
    { echo "FAIL: no --faults in the replay line"; fail=1; }
check 1 "a violation among schedules" "$SIM" --schedules 4 --jobs 2 --fail-at-step 5 --progress-ms 0
check 2 "a step of 0" "$SIM" --seed 1 --fail-at-step 0
h1=$("$SIM" --seed 77 --known-defects | grep -o 'trace hash [0-9a-f]*')
h2=$("$SIM" --seed 77 --known-defects | grep -o 'trace hash [0-9a-f]*')
[ -n "$h1" ] && [ "$h1" = "$h2" ] || { echo "FAIL: seed 77 replayed with '$h1' then '$h2'"; fail=1; }
p=$("$SIM" --schedules 10 --jobs 1 --known-defects --progress-ms 0)
grep -q '^done: 10 schedules (.*/s; [0-9]* Pacemaker, [0-9]* with role = watch), [0-9]* steps (.*/s), [0-9]* invariant checks; faults: freeze=' <<<"$p" ||
    { echo "FAIL: progress line: $p"; fail=1; }
[ $fail = 0 ] && echo "sim_cli: all checks passed"
exit $fail
