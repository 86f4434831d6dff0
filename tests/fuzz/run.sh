#!/usr/bin/env bash
# Builds the libFuzzer targets in a separate clang build (build-fuzz) and runs
# each for N seconds (default 20). Exits non-zero when a fuzzer finds a crash,
# leak or failed property; the input is left in build-fuzz/artifacts/.
#
#   tests/fuzz/run.sh [seconds]
#   tests/fuzz/run.sh --build-only      build them, run none (scripts/test.sh
#                                       builds beside the lab, runs after it)
#
# Needs clang++-14 and its libFuzzer runtime (Debian: clang-14 and
# libclang-rt-14-dev). Environment: BUILD_DIR (default build-fuzz under the
# source tree), CXX (default clang++-14), FUZZ_JOBS (parallel fuzzers, 1).
set -euo pipefail

build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
secs="${1:-20}"
case "$secs" in ''|*[!0-9]*) echo "usage: $0 [--build-only] [seconds]" >&2; exit 2 ;; esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$src/build-fuzz}"
cxx="${CXX:-clang++-14}"
fuzzers=()
for f in "$here"/fuzz_*.cpp; do fuzzers+=("$(basename "$f" .cpp)"); done

if ! command -v "$cxx" >/dev/null; then
    echo "$0: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
    exit 1
fi

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_COMPILER="$cxx" -DNVFENCE_FUZZ=ON >/dev/null
fi
cmake --build "$build" --target fuzzers
[ "$build_only" = 0 ] || exit 0

mkdir -p "$build/artifacts"
# One fuzzer per core at a time: each is single-threaded, and the run's
# wall time is what CI pays for.
jobs="${FUZZ_JOBS:-$(nproc)}"
case "$jobs" in ''|*[!0-9]*|0) echo "$0: FUZZ_JOBS must be a positive number" >&2; exit 2 ;; esac
run_one() {
    local f="$1" seeds="$here/corpus/$1" work="$build/corpus/$1"   # new inputs go to work, never into the seeds
    mkdir -p "$work"
    local dirs=("$work")
    [ -d "$seeds" ] && dirs+=("$seeds")
    # Inputs as large as the parser accepts: etcd replies up to 1 MiB
    # (etcd_json.hpp kMaxReplyBytes); the other parsers' inputs are small.
    local max_len=8192
    [ "$f" = fuzz_etcd ] && max_len=1048576
    "$build/tests/fuzz/$f" "${dirs[@]}" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$f-" \
        >"$build/$f.log" 2>&1
}
failed=()
declare -A pid_of=()
report() { # fuzzer, its exit status
    if [ "$2" -ne 0 ]; then
        failed+=("$1")
        echo "!! $1 FAILED (exit $2); last lines of $build/$1.log:"
        tail -n 40 "$build/$1.log"
    else
        echo "== $1: ${secs}s, $(grep -E '^stat::number_of_executed_units' "$build/$1.log" | awk '{print $2}') runs, $(grep -E '^stat::new_units_added' "$build/$1.log" | awk '{print $2}') new inputs"
    fi
}
reap_one() {
    local p f rc=0
    wait -n -p p || rc=$?
    for f in "${!pid_of[@]}"; do
        if [ "${pid_of[$f]}" = "$p" ]; then unset "pid_of[$f]"; report "$f" "$rc"; return; fi
    done
    echo "$0: lost track of fuzzer process $p" >&2
    exit 1
}
for f in "${fuzzers[@]}"; do
    while [ "${#pid_of[@]}" -ge "$jobs" ]; do reap_one; done
    run_one "$f" &
    pid_of[$f]=$!
done
while [ "${#pid_of[@]}" -gt 0 ]; do reap_one; done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzzing failed: ${failed[*]} (inputs in $build/artifacts/)"
    exit 1
fi
echo "fuzzing passed: ${fuzzers[*]}, ${secs}s each"
