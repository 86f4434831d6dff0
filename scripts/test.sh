#!/usr/bin/env bash
# Runs every nvfence test on a Debian 12 machine, installing what is missing:
# unit tests (plain and under ASan+UBSan), the fuzzers for a short time, and
# the QEMU lab tests against real NVMe reservations. Exits non-zero on any
# failure; a missing lab is a failure, never a skip.
#   scripts/test.sh            everything
#   NVFENCE_FUZZ_SECONDS=60 scripts/test.sh   longer fuzzing
#   NVFENCE_SIM_SECONDS=600 scripts/test.sh    a longer simulator slice
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
start=$(date +%s)
step() { printf '\n=== %s (%ds)\n' "$*" $(( $(date +%s) - start )); }

step "setup"
scripts/setup.sh

# The builds (plain, ASan, without etcd, fuzz) go through ccache: a second run of
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
cmake --build build-asan -j "$jobs" --target unit_tests nvfence-cli nvfenced capi_test elector_unit_tests etcd_live_tests nvfence-failover-bench nvfence-bench nvfence-elect fence_nvfence sim_unit_tests sim_known_defects nvfence-sim nvfence_config_keys
# The install and .deb tests check the plain build's packaging (above).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs" -E '^(install_consumers|deb_package)$'

step "build without the etcd elector (NVFENCE_ETCD=OFF)"
cmake -S . -B build-noetcd -G Ninja -DNVFENCE_ETCD=OFF -DNVFENCE_TESTS=OFF -DNVFENCE_WERROR=ON >/dev/null
cmake --build build-noetcd -j "$jobs" --target nvfenced nvfence-cli fence_nvfence
tests/build/no_etcd.sh build-noetcd

step "fuzzers (${NVFENCE_FUZZ_SECONDS:-10}s each)"
tests/fuzz/run.sh "${NVFENCE_FUZZ_SECONDS:-10}"

# A fixed slice of the simulator (issue 25), seeded from the commit so a
# given commit always runs the same schedules, with every fault kind and
# the stability window (leader_unstable); Pacemaker schedules run either
# watcher (role = acquire, or the check-only role = watch the docs configure).
# Every invariant fails the step (no defect is known: known_defect() is
# empty, so no --known-defects). docs/RELIABILITY.md "Simulator".
sim_faults=freeze,crash,crash_in_command,crash_in_write,etcd_partition,etcd_down,device_partition,device_delay,lost_done,lost_not_done,late_answer,target_restart,cluster_partition,link_degraded,target_crash_loop,fence_delay,fence_race,paused_win,paused_token
sim_seed=$(( 0x$(git rev-parse HEAD 2>/dev/null | sha256sum | cut -c1-12) ))
step "simulator: ${NVFENCE_SIM_SECONDS:-60}s slice from seed $sim_seed (commit $(git rev-parse --short HEAD 2>/dev/null || echo none))"
build/bin/nvfence-sim --seconds "${NVFENCE_SIM_SECONDS:-60}" --jobs "$jobs" --first-seed "$sim_seed" \
  --faults "$sim_faults" --stability --watcher any \
  --progress-ms 10000

step "lab tests (QEMU, kernel nvmet reservations)"
NVFENCE_BUILD_DIR="$root/build" ctest --test-dir build -L vm --output-on-failure -j 2

ccache --show-stats 2>/dev/null | grep -E '^(Cacheable calls|  Hits|  Misses)' || true
step "all tests passed"
