#!/bin/bash
# Mutation check against the simulator (issue 25; manual, not part of CI:
# it rebuilds nvfence-sim once per patch). For each tests/mutations/*.patch
# (default: every one) it applies the patch to a separate work tree of HEAD
# (never the shared one), rebuilds nvfence-sim there and runs it the way
# CI's slice does (every fault kind, --jobs SIM_JOBS) for SIM_SECONDS from
# SIM_FIRST_SEED, stopping at the first violation. HEAD runs first and must
# show none. One table row per patch: the first violation (invariant, seed)
# and the schedules run until it (seed - first seed + 1: seeds are handed
# out in order), or "none" with the schedules run.
#
# A fix made of several layers (a check in the agent and another in the
# library, say) is taken out whole by joining its patches with "+": the
# simulator judges the product, so one layer alone may be covered by the
# next (each layer has its unit tests: run.sh).
#
# Usage: tests/mutations/sim_run.sh [PATCH[+PATCH...]...]
# Environment: SIM_SECONDS (default 60, CI's slice), SIM_FIRST_SEED
# (default 1), SIM_ARGS (more nvfence-sim options, e.g. --steps 600),
# SIM_JOBS (default 2: the build's and the simulator's jobs; 1 on a
# machine shared with someone else, which runs half CI's schedules),
# MUT_SIM_TREE (default /tmp/nvfence-sim-mut: the work tree,
# made with `git worktree add` and reused).
# Exit codes: 0 every patch caught, 1 one was not (or HEAD broke an
# invariant), 2 setup error.
set -u
cd "$(git rev-parse --show-toplevel)" || exit 2
HERE=$PWD/tests/mutations
W=${MUT_SIM_TREE:-/tmp/nvfence-sim-mut}
SECS=${SIM_SECONDS:-60}
FIRST=${SIM_FIRST_SEED:-1}
JOBS=${SIM_JOBS:-2}
if [ $# -gt 0 ]; then PATCHES=("$@"); else PATCHES=("$HERE"/*.patch); fi
abs() {  # a+b+c -> absolute paths joined by +
    local out="" part
    IFS=+ read -ra parts <<<"$1"
    for part in "${parts[@]}"; do out+=${out:++}$(realpath "$part") || return 1; done
    echo "$out"
}
for i in "${!PATCHES[@]}"; do PATCHES[$i]=$(abs "${PATCHES[$i]}") || exit 2; done
apply() {  # $1: a+b+c; $2: -R to revert (in reverse order)
    local parts i
    IFS=+ read -ra parts <<<"$1"
    if [ "${2:-}" = -R ]; then
        for ((i = ${#parts[@]} - 1; i >= 0; i--)); do git -C "$W" apply -R "${parts[$i]}" || return 1; done
    else
        for i in "${!parts[@]}"; do
            git -C "$W" apply "${parts[$i]}" || {
                for ((i = i - 1; i >= 0; i--)); do git -C "$W" apply -R "${parts[$i]}"; done
                return 1
            }
        done
    fi
}
name_of() {  # a+b -> "a+b" without directories and .patch
    local parts n="" part
    IFS=+ read -ra parts <<<"$1"
    for part in "${parts[@]}"; do n+=${n:++}$(basename "$part" .patch); done
    echo "$n"
}
defect_of() { field Defect "${1%%+*}"; }
head=$(git rev-parse HEAD) || exit 2
if [ -e "$W/.git" ]; then
    git -C "$W" checkout -q --detach "$head" && git -C "$W" reset -q --hard && git -C "$W" clean -qfd -e build ||
        { echo "sim_run.sh: cannot reset $W" >&2; exit 2; }
else
    git worktree add -q --detach "$W" "$head" || { echo "sim_run.sh: cannot make the work tree $W" >&2; exit 2; }
fi
if [ ! -e "$W/build/CMakeCache.txt" ]; then
    cmake -S "$W" -B "$W/build" -G Ninja -DNVFENCE_WERROR=OFF >"$W/configure.log" 2>&1 ||
        { echo "sim_run.sh: configure failed: $W/configure.log" >&2; exit 2; }
fi
build() { nice -n 10 cmake --build "$W/build" -j"$JOBS" --target nvfence-sim >"$W/build-$1.log" 2>&1; }
faults=freeze,crash,crash_in_command,crash_in_write,etcd_partition,etcd_down,device_partition,device_delay,lost_done,lost_not_done,late_answer,target_restart,cluster_partition,link_degraded,target_crash_loop,fence_delay,fence_race,paused_win,paused_token,late_timeout
# Prints "<invariant> <seed> <schedules>" or "none - <schedules>".
sim() {
    local out v
    out=$("$W/build/bin/nvfence-sim" --seconds "$SECS" --jobs "$JOBS" --first-seed "$FIRST" --faults "$faults" \
        --progress-ms 0 ${SIM_ARGS:-} 2>&1)
    v=$(sed -n 's/^VIOLATION of \([a-z_]*\) at step [0-9]* (seed \([0-9]*\)).*/\1 \2/p' <<<"$out" | head -n1)
    if [ -n "$v" ]; then
        set -- $v
        echo "$1 $2 $(( $2 - FIRST + 1 ))"
    else
        echo "none - $(sed -n 's/^done: \([0-9]*\) schedules.*/\1/p' <<<"$out")"
    fi
}
field() { sed -n "s/^$1: //p" "$2" | head -n1; }

echo "nvfence-sim mutation check: HEAD $(git rev-parse --short HEAD), ${SECS}s per patch from seed $FIRST, $JOBS job(s)${SIM_ARGS:+ ($SIM_ARGS)}," \
     "load $(cut -d' ' -f1-3 /proc/loadavg) at start"
printf '%-40s %-26s %-24s %-16s %-10s %s\n' patch defect "first violation" seed schedules verdict
build head || { echo "sim_run.sh: HEAD does not build: $W/build-head.log" >&2; exit 2; }
read -r inv seed n <<<"$(sim)"
rc=0
verdict=ok
[ "$inv" = none ] || { verdict="HEAD BREAKS"; rc=1; }
printf '%-40s %-26s %-24s %-16s %-10s %s\n' "(HEAD)" - "$inv" "$seed" "$n" "$verdict"
for p in "${PATCHES[@]}"; do
    name=$(name_of "$p")
    if ! apply "$p"; then
        printf '%-40s %s\n' "$name" "does not apply"
        rc=1
        continue
    fi
    if build "$name"; then
        read -r inv seed n <<<"$(sim)"
        if [ "$inv" = none ]; then verdict="NOT CAUGHT"; rc=1; else verdict=caught; fi
    else
        inv="build failed: $W/build-$name.log" seed=- n=- verdict=ERROR rc=1
    fi
    apply "$p" -R || { echo "sim_run.sh: cannot revert $p" >&2; exit 2; }
    printf '%-40s %-26s %-24s %-16s %-10s %s\n' "$name" "$(defect_of "$p")" "$inv" "$seed" "$n" "$verdict"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
exit $rc
