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
# Rows of a job that ran beside the phases: "name<TAB>seconds<TAB>state" lines.
add_rows() { # file
  local n s st
  [ -r "$1" ] || return 0
  while IFS=$'\t' read -r n s st; do names+=("$n"); secs+=("$s"); states+=("$st"); done < "$1"
}
# One row per lab test, from ctest's JUnit report, and under it one per
# scenario (setup included) that took a second or more or did not pass,
# from the test's own pytest report ($logs/vm/<test>.xml; vm-test/CMakeLists.txt).
lab_rows() { # junit.xml
  /usr/bin/python3 - "$1" <<'EOF'
import os, sys, xml.etree.ElementTree as ET
def state(tc):
    if tc.find("failure") is not None or tc.find("error") is not None:
        return "FAILED"
    if tc.find("skipped") is not None:
        return "skipped"
    st = tc.get("status") or "run"
    return {"run": "ok", "fail": "FAILED", "failed": "FAILED"}.get(st, st)
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = tc.get("name")
    print(f"  lab {name}\t{float(tc.get('time') or 0):.0f}\t{state(tc)}")
    own = os.path.join(os.path.dirname(sys.argv[1]), "vm", name + ".xml")
    if os.path.exists(own):
        short = 0
        for sc in ET.parse(own).getroot().iter("testcase"):
            secs, st = float(sc.get("time") or 0), state(sc)
            if secs < 1 and st == "ok":
                short += 1
                continue
            print(f"      {sc.get('name')}\t{secs:.0f}\t{st}")
        if short:
            print(f"      ({short} more passed in under a second each)\t0\tok")
EOF
}
table() { # exit status
  local i total=$(( $(date +%s) - start ))
  printf '\n=== phase table (%s)\n' "$([ "$1" = 0 ] && echo passed || echo "FAILED, exit $1")"
  printf '%-60s %7s  %s\n' phase seconds result
  for i in "${!names[@]}"; do printf '%-60s %7s  %s\n' "${names[$i]}" "${secs[$i]}" "${states[$i]}"; done
  printf '%-60s %7s\n' "total (wall)" "$total"
}

# ------------------------------------------------------------ jobs beside
# A job runs beside the phases: its row goes to $logs/<id>.row, its output to
# $logs/<id>.log; bg_wait fails the phase that waits for it if it failed.
declare -A bg_pid=()
bg_start() { # id "row name" command...
  local id=$1 name=$2; shift 2
  ( t0=$(date +%s); st=ok
    "$@" > "$logs/$id.log" 2>&1 || st=FAILED
    printf '  %s\t%s\t%s\n' "$name" $(( $(date +%s) - t0 )) "$st" > "$logs/$id.row"
    [ "$st" = ok ] ) &
  bg_pid[$id]=$!
}
bg_wait() { # id
  local pid=${bg_pid[$1]}
  unset "bg_pid[$1]"
  if ! wait "$pid"; then
    echo "$1 failed; last lines of $logs/$1.log:" >&2
    tail -n 60 "$logs/$1.log" >&2
    return 1
  fi
}

kill_tree() { # pid: it and every descendant
  local c
  for c in $(pgrep -P "$1" || true); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
on_exit() {
  local rc=$? id
  if [ -n "$cur" ]; then names+=("$cur"); secs+=($(( $(date +%s) - cur_t0 ))); states+=(FAILED); cur=""; fi
  for id in "${!bg_pid[@]}"; do kill_tree "${bg_pid[$id]}"; done
  for id in images debsrc toolsoff; do add_rows "$logs/$id.row"; done
  [ -f "$logs/vm.xml" ] && add_rows <(lab_rows "$logs/vm.xml")
  table "$rc"
  exit "$rc"
}
trap on_exit EXIT

phase "setup"
scripts/setup.sh
mkdir -p "$logs"
rm -rf "$logs"/*.row "$logs/vm.xml" "$logs/vm"

# The builds (plain, ASan, without etcd, fuzz) go through ccache: a second run of
# this script, in any clone, recompiles only what changed. Paths are made
# relative to the clone so that clones in other directories share entries.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true

# The lab's guest kernel, busybox initramfs and every Debian root image the
# lab tests boot are built beside the compiler (downloads and dpkg: mostly
# waiting), cached under /var/cache/nvfence-lab by the hash of what they
# contain, so a warm machine reuses them (vm-test/README.md "Images").
bg_start images "lab images (beside the build)" env NVFENCE_BUILD_DIR="$root/build" vm-test/lab images

phase "build (warnings are errors)"
cmake -S . -B build -G Ninja -DNVFENCE_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

phase "unit tests"
# SQLite's own tests need testfixture, built with the other builds (below):
# they run after the lab; the Debian source package test has a phase of its own.
ctest --test-dir build -L unit --output-on-failure -j "$jobs" -E '^(sqlite_testfixture_.*|debian_source_package)$'

# The other builds run before the lab tests, not beside them: TCG guests are
# slowed by any compiler on the same cores, even at nice 19 (a cold run with
# them beside the lab took its etcd and Pacemaker labs 40-60 % longer than
# before); the lab's timing-bound scenarios need the machine to themselves.
# (Called where set -e does not act: every step says || return.)
other_builds() {
  cmake -S . -B build-asan -G Ninja -DNVFENCE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null || return
  cmake --build build-asan -j "$jobs" --target unit_tests nvfence-cli nvfenced capi_test elector_unit_tests \
    etcd_live_tests nvfence-failover-bench nvfence-bench nvfence-elect fence_nvfence sim_unit_tests \
    sim_known_defects nvfence-sim nvfence_config_keys sqlite_vfs_tests nvfence_sqlite_ext nvfence-kit-failover \
    nvfence-sqlite-example nvfence-epoll-example sqlite_failover_bench logengine-kit-test || return
  cmake -S . -B build-noetcd -G Ninja -DNVFENCE_ETCD=OFF -DNVFENCE_TESTS=OFF -DNVFENCE_WERROR=ON >/dev/null || return
  cmake --build build-noetcd -j "$jobs" --target nvfenced nvfence-cli fence_nvfence || return
  tests/fuzz/run.sh --build-only || return
  # SQLite's TCL test harness from Debian's sqlite3 source (cached by version).
  tests/sqlite/build_testfixture.sh || return
}
# dpkg-buildpackage of debian/, lintian, the split against cpack, the symbols
# file: a unit test that is a whole build of its own (tests/package/debian_source_test.sh),
# beside the other builds: on a warm machine both are mostly ccache lookups,
# links and lintian's one thread, so together they take less than one after
# the other; on a cold one they share the cores as the builds' own jobs do.
bg_start debsrc "Debian source package test (beside the other builds)" \
  ctest --test-dir build -R '^debian_source_package$' --output-on-failure
# The library alone (-DNVFENCE_TOOLS=OFF) in a Debian chroot where the
# tools' packages are absent: configure, build, its unit tests, install, the
# kit example and an add_subdirectory consumer (tests/build/tools_off.sh;
# the chroot is cached by its package list, the compiler goes through ccache).
bg_start toolsoff "library alone, chroot without the tools' packages (beside the other builds)" \
  tests/build/tools_off.sh .
phase "other builds: ASan+UBSan, no-etcd, fuzz, SQLite's testfixture"
other_builds

phase "library alone (waiting for the job beside the other builds)"
bg_wait toolsoff

phase "Debian source package test (waiting for the job beside the other builds)"
bg_wait debsrc

phase "lab images (waiting for the job beside the build)"
bg_wait images

phase "lab tests (QEMU, kernel nvmet reservations)"
NVFENCE_LAB_PREBUILT=1 NVFENCE_BUILD_DIR="$root/build" ctest --test-dir build -L vm --output-on-failure -j 2 \
  --output-junit "$logs/vm.xml"

phase "SQLite's own tests through the nvfence VFS (testfixture)"
ctest --test-dir build -R '^sqlite_testfixture_' --output-on-failure -j "$jobs"

phase "unit tests under ASan+UBSan"
# The install and .deb tests check the plain build's packaging (above); the
# SQLite extension is loaded into programs built without ASan (Debian's
# sqlite3, python3, testfixture), which cannot load an ASan-built object:
# its code runs under ASan in sqlite_vfs_tests.
# Each GoogleTest binary runs as one process (its CTest test <binary>.all,
# cmake/NvfenceGtest.cmake), not one process per case: the same cases, without
# ~800 ASan start-ups; then every registered case must be in their reports.
# clear_shadow_mmap_threshold: ASan clears the shadow of a fiber's stack at
# every swapcontext (the simulator's hosts run on 1 MiB fiber stacks); above
# this size it does so by mmap and madvise, and the page faults after them
# were a third of the simulator tests' time. memset clears the same shadow:
# nothing is detected less.
rm -rf build-asan/test-logs/gtest
ASAN_OPTIONS=detect_leaks=1:clear_shadow_mmap_threshold=1048576 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs" \
  -E '^(install_consumers|deb_package|debian_source_package|sqlite_load_extension|sqlite_testfixture_.*)$'
tests/gtest_process_count.sh build-asan

phase "build without the etcd elector: checks"
tests/build/no_etcd.sh build-noetcd

phase "fuzzers (${NVFENCE_FUZZ_SECONDS:-10}s each)"
tests/fuzz/run.sh "${NVFENCE_FUZZ_SECONDS:-10}"

# A fixed slice of the simulator, seeded from the commit so a given commit
# always runs the same schedules, with every fault kind and the stability
# window (leader_unstable); Pacemaker schedules run either watcher (role =
# acquire, or the check-only role = watch the docs configure). Every
# invariant fails the step (no defect is known: known_defect() is empty, so
# no --known-defects). docs/RELIABILITY.md "Simulator".
sim_faults=freeze,crash,crash_in_command,crash_in_write,etcd_partition,etcd_down,device_partition,device_delay,lost_done,lost_not_done,late_answer,target_restart,cluster_partition,link_degraded,target_crash_loop,fence_delay,fence_race,paused_win,paused_token,late_timeout
sim_seed=$(( 0x$(git rev-parse HEAD 2>/dev/null | sha256sum | cut -c1-12) ))
phase "simulator: ${NVFENCE_SIM_SECONDS:-60}s slice from seed $sim_seed"
build/bin/nvfence-sim --seconds "${NVFENCE_SIM_SECONDS:-60}" --jobs "$jobs" --first-seed "$sim_seed" \
  --faults "$sim_faults" --stability --watcher any \
  --progress-ms 10000
phase_end

ccache --show-stats 2>/dev/null | grep -E '^(Cacheable calls|  Hits|  Misses)' || true
echo "all tests passed"
