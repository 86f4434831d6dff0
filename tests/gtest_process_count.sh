#!/usr/bin/env bash
# After a sanitizer build's GoogleTest binaries ran one process each (the
# CTest tests <binary>.all, label gtest_process; cmake/NvfenceGtest.cmake):
# checks that each binary's JUnit report holds every case the binary lists
# (--gtest_list_tests) and that none failed, and prints the counts. A binary
# whose process did not run, or stopped before its report, fails the check.
#   gtest_process_count.sh BUILD_DIR
# Exit 0: every report complete, nothing failed; 1: otherwise (what differs
# is printed); 2: usage.
set -euo pipefail
build=${1:?usage: gtest_process_count.sh BUILD_DIR}
[ -d "$build" ] || { echo "gtest_process_count: no build directory $build" >&2; exit 2; }
ctest --test-dir "$build" -N -L '^gtest_process$' --show-only=json-v1 > "$build/gtest_process.json"
/usr/bin/python3 - "$build/gtest_process.json" <<'PY'
import json, os, re, subprocess, sys, xml.etree.ElementTree as ET
tests = json.load(open(sys.argv[1]))["tests"]
if not tests:
    sys.exit("FAIL: the build registers no gtest_process test (not a sanitizer build?)")
bad = total = skipped = 0
for t in tests:
    binary, out = t["command"][0], t["command"][1]
    report = re.fullmatch(r"--gtest_output=xml:(.+)", out).group(1)
    listed = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True, check=True,
                            env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).stdout
    want = sum(1 for line in listed.splitlines() if line.startswith("  "))
    if not os.path.exists(report):
        print(f"FAIL: {t['name']}: no report {report} ({want} cases listed)")
        bad += 1
        continue
    cases = list(ET.parse(report).getroot().iter("testcase"))
    failed = [f"{c.get('classname')}.{c.get('name')}" for c in cases
              if c.find("failure") is not None or c.find("error") is not None]
    skipped += sum(1 for c in cases if c.find("skipped") is not None or c.get("result") == "skipped")
    total += len(cases)
    if len(cases) != want or failed:
        print(f"FAIL: {t['name']}: {len(cases)} cases in its report, {want} listed; failed: {failed}")
        bad += 1
print(f"gtest cases run one process per binary: {total} in {len(tests)} processes ({skipped} skipped)")
sys.exit(1 if bad else 0)
PY
