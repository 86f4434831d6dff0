#!/usr/bin/env bash
# Runs every file of SQLite's "veryquick" suite (permutations.test, as the
# cached source tree defines it) through the nvfence VFS, one testfixture
# process per file (run_testfixture.sh --per-file, 120 s per file), in
# LANES parallel lanes. Prints one PASS/FAIL line per file, sorted, and the
# totals; the table "SQLite's own tests" in docs/SQLITE.md and the files of
# tests/sqlite/veryquick.txt come from its output. A survey, not a test: it
# exits 0 when every file ran, whatever the files' results.
#   tests/sqlite/sweep_veryquick.sh EXTENSION.so [LANES (default 2)] [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ext=$(realpath "${1:?usage: sweep_veryquick.sh EXTENSION.so [LANES] [OUT_DIR]}")
lanes=${2:-2}
case $lanes in ''|*[!0-9]*|0) echo "sweep_veryquick: LANES must be a positive number" >&2; exit 2 ;; esac
out=${3:-$(mktemp -d)}
mkdir -p "$out"
cache=$("$here/build_testfixture.sh")
cp "$here/list_suite.tcl" "$cache/test/list_suite.tcl"
(cd "$out" && "$cache/testfixture" "$cache/test/list_suite.tcl" veryquick > files.txt)
n=$(wc -l < "$out/files.txt")
[ "$n" -gt 0 ] || { echo "sweep_veryquick: the veryquick suite lists no file" >&2; exit 1; }
echo "veryquick: $n files, $lanes lanes, output in $out"
t0=$(date +%s)
pids=()
for ((l = 0; l < lanes; l++)); do
  awk -v l="$l" -v n="$lanes" '(NR - 1) % n == l' "$out/files.txt" > "$out/lane$l.txt"
  mapfile -t lane < "$out/lane$l.txt"
  "$here/run_testfixture.sh" --per-file "$ext" "${lane[@]}" > "$out/lane$l.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
grep -hE '^(PASS|FAIL) ' "$out"/lane*.log | sort -k2 > "$out/results.txt"
ran=$(wc -l < "$out/results.txt")
cat "$out/results.txt"
echo "veryquick through nvfence: $(grep -c '^PASS' "$out/results.txt" || true) of $n files passed," \
     "$(grep -c '^FAIL' "$out/results.txt" || true) failed, $(( $(date +%s) - t0 )) s"
[ "$ran" -eq "$n" ] || { echo "sweep_veryquick: $ran of $n files reported a result" >&2; exit 1; }
