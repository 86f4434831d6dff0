#!/usr/bin/env bash
# Builds the libFuzzer targets in a separate clang build (build-fuzz) and runs
# each for N seconds (default 20). Exits non-zero when a fuzzer finds a crash,
# leak or failed property; the input is left in build-fuzz/artifacts/.
#
#   tests/fuzz/run.sh [seconds]
#
# Needs clang++-14 and its libFuzzer runtime (Debian: clang-14 and
# libclang-rt-14-dev). Environment: BUILD_DIR (default build-fuzz under the
# source tree), CXX (default clang++-14), FUZZ_JOBS (parallel fuzzers, 1).
set -euo pipefail

secs="${1:-20}"
case "$secs" in ''|*[!0-9]*) echo "usage: $0 [seconds]" >&2; exit 2 ;; esac

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

mkdir -p "$build/artifacts"
failed=()
for f in "${fuzzers[@]}"; do
    seeds="$here/corpus/$f"
    work="$build/corpus/$f"   # new inputs go here, never into the seeds
    mkdir -p "$work"
    dirs=("$work")
    [ -d "$seeds" ] && dirs+=("$seeds")
    echo "== $f: ${secs}s"
    if ! "$build/tests/fuzz/$f" "${dirs[@]}" \
            -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
            -print_final_stats=1 -artifact_prefix="$build/artifacts/$f-" \
            >"$build/$f.log" 2>&1; then
        failed+=("$f")
        echo "!! $f FAILED; last lines of $build/$f.log:"
        tail -n 40 "$build/$f.log"
    else
        grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$build/$f.log" || true
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzzing failed: ${failed[*]} (inputs in $build/artifacts/)"
    exit 1
fi
echo "fuzzing passed: ${fuzzers[*]}, ${secs}s each"
