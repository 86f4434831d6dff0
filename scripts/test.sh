#!/usr/bin/env bash
# Runs every nvfence test on a Debian 12 machine, installing what is missing:
# unit tests (plain and under ASan+UBSan), the fuzzers for a short time, and
# the QEMU lab tests against real NVMe reservations. Exits non-zero on any
# failure; a missing lab is a failure, never a skip.
#   scripts/test.sh            everything
#   NVFENCE_FUZZ_SECONDS=60 scripts/test.sh   longer fuzzing
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
start=$(date +%s)
step() { printf '\n=== %s (%ds)\n' "$*" $(( $(date +%s) - start )); }

step "setup"
scripts/setup.sh

# The three builds (plain, ASan, fuzz) go through ccache: a second run of
# this script, in any clone, recompiles only what changed. Paths are made
# relative to the clone so that clones in other directories share entries.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true

step "build (warnings are errors)"
cmake -S . -B build -G Ninja -DNVFENCE_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

step "unit tests"
ctest --test-dir build -L unit --output-on-failure -j "$jobs"

step "unit tests under ASan+UBSan"
cmake -S . -B build-asan -G Ninja -DNVFENCE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$jobs" --target unit_tests nvfence-cli nvfenced capi_test elector_unit_tests etcd_live_tests nvfence-elect fence_nvfence
# The install and .deb tests check the plain build's packaging (above).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs" -E '^(install_consumers|deb_package)$'

step "fuzzers (${NVFENCE_FUZZ_SECONDS:-10}s each)"
tests/fuzz/run.sh "${NVFENCE_FUZZ_SECONDS:-10}"

step "lab tests (QEMU, kernel nvmet reservations)"
NVFENCE_BUILD_DIR="$root/build" ctest --test-dir build -L vm --output-on-failure -j 2

ccache --show-stats 2>/dev/null | grep -E '^(Cacheable calls|  Hits|  Misses)' || true
step "all tests passed"
