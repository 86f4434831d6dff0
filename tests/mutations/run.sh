#!/bin/bash
# Mutation check of issue 13's and issue 24's fixes (manual, not part of CI: it rebuilds
# once per patch). Each *.patch here takes one fix out again (it applies with
# `git apply` to HEAD) and names, in its header, the defect and the unit
# tests that must catch it:
#   Defect: N
#   Reverts: what the patch takes out
#   Tests: Suite.Test[:Suite.Test...]
# For every patch: build unit_tests and elector_unit_tests in a separate build directory with the
# patch applied, run each named test on its own (it must FAIL), revert the
# patch; the same tests first run on HEAD (they must PASS). Prints one table
# row per test and exits 1 when a fix is not caught (or a test fails on HEAD).
#
# Usage: tests/mutations/run.sh [PATCH...]   (default: every patch here)
# Environment: MUT_BUILD_DIR (default build-mut, next to build/);
# MUT_TEST_BIN: a test binary to run instead of $MUT_BUILD_DIR/bin/unit_tests
# (one linked against that directory's lib/libnvfence.so, e.g. with only the
# test files the patches name, on a machine too loaded to build them all);
# then only the library is built.
# Exit codes: 0 every mutation caught, 1 one was not (or HEAD fails a
# test), 2 setup error (dirty work tree, configure or build of HEAD failed).
set -u
cd "$(git rev-parse --show-toplevel)" || exit 2
HERE=tests/mutations
B=${MUT_BUILD_DIR:-build-mut}
BIN=${MUT_TEST_BIN:-$B/bin/unit_tests}
HEAD_TARGET="unit_tests elector_unit_tests"
[ -n "${MUT_TEST_BIN:-}" ] && HEAD_TARGET=nvfence
if ! git diff --quiet HEAD -- src include tools tests; then
    echo "run.sh: uncommitted changes under src/ include/ tools/ tests/: commit or stash them first" >&2
    exit 2
fi
if [ $# -gt 0 ]; then PATCHES=("$@"); else PATCHES=("$HERE"/*.patch); fi
mkdir -p "$B"
# An existing build directory is used as it is (changing its options would
# rebuild everything); a new one is configured without -Werror.
if [ ! -e "$B/CMakeCache.txt" ]; then
    cmake -S . -B "$B" -G Ninja -DNVFENCE_WERROR=OFF >"$B/mut-configure.log" 2>&1 ||
        { echo "run.sh: configure failed: $B/mut-configure.log" >&2; exit 2; }
fi

applied=""
cleanup() { if [ -n "$applied" ]; then git apply -R "$applied" && applied=""; fi; }
trap cleanup EXIT
trap 'cleanup; exit 2' INT TERM

build() {  # $1: label for the log, $2: target (default unit_tests)
    local log="$B/mut-build-$1.log"
    # shellcheck disable=SC2086  # $2 may name several targets
    nice -n 10 cmake --build "$B" -j2 --target ${2:-unit_tests elector_unit_tests} >"$log" 2>&1 ||
        { echo "build failed: $log"; return 1; }
}
# A patch that only touches the library's sources (src/device, src/fence,
# src/writer, src/client, src/capi) needs only the shared library rebuilt:
# unit_tests loads it at run time (no relink per patch). The agent and the
# elector (src/agent, src/elector) are static libraries: their tests relink.
target_for() {
    if [ -e "$B/lib/libnvfence.so" ] &&
        ! git apply --numstat "$1" | awk '{print $3}' | grep -qvE '^src/(device|fence|writer|client|capi)/'; then
        echo nvfence
    elif [ -n "${MUT_TEST_BIN:-}" ]; then
        echo "run.sh: $1 touches more than the library: MUT_TEST_BIN cannot test it" >&2
        echo none
    else
        echo "unit_tests elector_unit_tests"
    fi
}
field() { sed -n "s/^$1: //p" "$2" | head -n1; }
# PASS or FAIL for one gtest name (a test that is not found counts as an error).
one() {
    local out
    local bin=$BIN
    # The elector's tests live in their own binary.
    case $1 in AgentElectorTest.* | ElectorDriver*.* | ElectorPolicy.* | Elector*.*)
        [ -z "${MUT_TEST_BIN:-}" ] && bin=$B/bin/elector_unit_tests ;;
    esac
    out=$(timeout 300 "$bin" --gtest_filter="$1" 2>&1)
    if ! grep -q "^\[==========\] 1 test from" <<<"$out"; then echo "NOT-FOUND"; return; fi
    if grep -q "^\[  PASSED  \] 1 test" <<<"$out"; then echo "PASS"; else echo "FAIL"; fi
}

build head "$HEAD_TARGET" || exit 2
declare -A BASE
for p in "${PATCHES[@]}"; do
    IFS=: read -ra ts <<<"$(field Tests "$p")"
    for t in "${ts[@]}"; do [ -n "${BASE[$t]:-}" ] || BASE[$t]=$(one "$t"); done
done

rc=0
printf '%-36s %-6s %-92s %-8s %-8s %s\n' patch defect test HEAD mutated verdict
for p in "${PATCHES[@]}"; do
    name=$(basename "$p" .patch)
    defect=$(field Defect "$p")
    IFS=: read -ra ts <<<"$(field Tests "$p")"
    if ! git apply "$p"; then echo "$name: does not apply to HEAD"; rc=1; continue; fi
    applied=$p
    if ! build "$name" "$(target_for "$p")"; then
        echo "$name: the mutated tree does not build"
        rc=1
        cleanup
        continue
    fi
    caught=0
    results=()
    for t in "${ts[@]}"; do
        r=$(one "$t")
        results+=("$r")
        [ "$r" = FAIL ] && caught=1
    done
    cleanup
    for i in "${!ts[@]}"; do
        t=${ts[$i]}
        verdict=$([ $caught = 1 ] && echo caught || echo NOT-CAUGHT)
        [ "${BASE[$t]}" = PASS ] || verdict="HEAD-FAILS"
        printf '%-36s %-6s %-92s %-8s %-8s %s\n' "$name" "$defect" "$t" "${BASE[$t]}" "${results[$i]}" "$verdict"
        [ "$verdict" = caught ] || rc=1
    done
done
build head-restored "$HEAD_TARGET" >/dev/null || true  # leave the build dir matching HEAD
exit $rc
