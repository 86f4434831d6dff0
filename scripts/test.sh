#!/usr/bin/env bash
# Runs every nvfence test on a Debian 12 machine, installing what is missing:
# unit tests (plain and under ASan+UBSan), the fuzzers for a short time, the
# simulator slice and the QEMU lab tests against real NVMe reservations.
# Exits non-zero on any failure; a missing lab is a failure, never a skip.
# Ends, pass or fail, with a phase table: one row per phase (and per lab
# test) with its seconds, and the total (docs/TESTING.md).
#   scripts/test.sh            everything
#   NVFENCE_FUZZ_SECONDS=60 scripts/test.sh   longer fuzzing
#   NVFENCE_SIM_SECONDS=600 scripts/test.sh    a longer simulator slice
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
start=$(date +%s)
logs="$root/build/test-logs"

# ------------------------------------------------------------ phase table
# A phase is begun and ended in this shell (set -e stays in force inside
# it); a phase still open when the script exits is the one that failed.
names=() secs=() states=()
cur="" cur_t0=0
phase() { phase_end; cur=$1; cur_t0=$(date +%s); printf '\n=== %s (at %ds)\n' "$1" $(( cur_t0 - start )); }
phase_end() {
  [ -n "$cur" ] || return 0
  names+=("$cur"); secs+=($(( $(date +%s) - cur_t0 ))); states+=(ok); cur=""
}
# Rows of a phase that ran beside others: "name<TAB>seconds<TAB>state" lines.
add_rows() { # file
  local n s st
  [ -f "$1" ] || return 0
  while IFS=$'\t' read -r n s st; do names+=("$n"); secs+=("$s"); states+=("$st"); done < "$1"
}
table() { # exit status
  local i total=$(( $(date +%s) - start ))
  printf '\n=== phase table (%s)\n' "$([ "$1" = 0 ] && echo passed || echo "FAILED, exit $1")"
  printf '%-58s %7s  %s\n' phase seconds result
  for i in "${!names[@]}"; do printf '%-58s %7s  %s\n' "${names[$i]}" "${secs[$i]}" "${states[$i]}"; done
  printf '%-58s %7s\n' "total (wall)" "$total"
}
on_exit() {
  local rc=$?
  if [ -n "$cur" ]; then names+=("$cur"); secs+=($(( $(date +%s) - cur_t0 ))); states+=(FAILED); cur=""; fi
  if [ -n "${images_pid:-}" ] && kill -0 "$images_pid" 2>/dev/null; then kill "$images_pid" 2>/dev/null || true; fi
  add_rows "$logs/images.row"
  [ -f "$logs/vm.xml" ] && add_rows <(lab_rows "$logs/vm.xml")
  table "$rc"
  exit "$rc"
}
trap on_exit EXIT
# One row per lab test from ctest's JUnit report.
lab_rows() {
  /usr/bin/python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    st = tc.get("status") or ("failed" if tc.find("failure") is not None else "run")
    state = {"run": "ok", "fail": "FAILED", "failed": "FAILED"}.get(st, st)
    print(f"  lab {tc.get('name')}\t{float(tc.get('time') or 0):.0f}\t{state}")
EOF
}

phase "setup"
scripts/setup.sh
mkdir -p "$logs"
rm -f "$logs/images.row" "$logs/vm.xml"

# The lab's guest kernel, busybox initramfs and every Debian root image the
# lab tests boot are built beside the compiler (downloads and dpkg: mostly
# waiting), cached under /var/cache/nvfence-lab by the hash of their
# content, so a warm machine reuses them (vm-test/README.md "Images").
( t0=$(date +%s); st=ok
  vm-test/lab images > "$logs/images.log" 2>&1 || st=FAILED
  printf '  lab images (beside the builds)\t%s\t%s\n' $(( $(date +%s) - t0 )) "$st" > "$logs/images.row"
  [ "$st" = ok ] ) &
images_pid=$!

# The builds (plain, ASan, without etcd, fuzz) go through ccache: a second run of
# this script, in any clone, recompiles only what changed. Paths are made
# relative to the clone so that clones in other directories share entries.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true

phase "build (warnings are errors)"
cmake -S . -B build -G Ninja -DNVFENCE_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

phase "unit tests"
ctest --test-dir build -L unit --output-on-failure -j "$jobs"

phase "build under ASan+UBSan"
cmake -S . -B build-asan -G Ninja -DNVFENCE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$jobs" --target unit_tests nvfence-cli nvfenced capi_test elector_unit_tests etcd_live_tests nvfence-failover-bench nvfence-bench nvfence-elect fence_nvfence sim_unit_tests sim_known_defects nvfence-sim nvfence_config_keys

phase "unit tests under ASan+UBSan"
# The install and .deb tests check the plain build's packaging (above).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs" -E '^(install_consumers|deb_package)$'

phase "build without the etcd elector (NVFENCE_ETCD=OFF)"
cmake -S . -B build-noetcd -G Ninja -DNVFENCE_ETCD=OFF -DNVFENCE_TESTS=OFF -DNVFENCE_WERROR=ON >/dev/null
cmake --build build-noetcd -j "$jobs" --target nvfenced nvfence-cli fence_nvfence
tests/build/no_etcd.sh build-noetcd

phase "fuzzers (${NVFENCE_FUZZ_SECONDS:-10}s each)"
tests/fuzz/run.sh "${NVFENCE_FUZZ_SECONDS:-10}"

# A fixed slice of the simulator, seeded from the commit so a given commit
# always runs the same schedules, with every fault kind and the stability
# window (leader_unstable); Pacemaker schedules run either watcher (role =
# acquire, or the check-only role = watch the docs configure). Every
# invariant fails the step (no defect is known: known_defect() is empty, so
# no --known-defects). docs/RELIABILITY.md "Simulator".
sim_faults=freeze,crash,crash_in_command,crash_in_write,etcd_partition,etcd_down,device_partition,device_delay,lost_done,lost_not_done,late_answer,target_restart,cluster_partition,link_degraded,target_crash_loop,fence_delay,fence_race,paused_win,paused_token
sim_seed=$(( 0x$(git rev-parse HEAD 2>/dev/null | sha256sum | cut -c1-12) ))
phase "simulator: ${NVFENCE_SIM_SECONDS:-60}s slice from seed $sim_seed"
build/bin/nvfence-sim --seconds "${NVFENCE_SIM_SECONDS:-60}" --jobs "$jobs" --first-seed "$sim_seed" \
  --faults "$sim_faults" --stability --watcher any \
  --progress-ms 10000

phase "lab images (waiting for the background build)"
if ! wait "$images_pid"; then
  images_pid=""
  echo "lab images failed; last lines of $logs/images.log:" >&2
  tail -n 40 "$logs/images.log" >&2
  exit 1
fi
images_pid=""

phase "lab tests (QEMU, kernel nvmet reservations)"
NVFENCE_LAB_PREBUILT=1 NVFENCE_BUILD_DIR="$root/build" ctest --test-dir build -L vm --output-on-failure -j 2 \
  --output-junit "$logs/vm.xml"
phase_end

ccache --show-stats 2>/dev/null | grep -E '^(Cacheable calls|  Hits|  Misses)' || true
echo "all tests passed"
