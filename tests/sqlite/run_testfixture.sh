#!/usr/bin/env bash
# SQLite's own tests through the nvfence VFS (docs/SQLITE.md, "SQLite's own
# tests"). Gets the cached testfixture (build_testfixture.sh: Debian's
# sqlite3 source, same version as libsqlite3-dev), loads the extension into
# it and runs SQLite's test files with `-vfs nvfence` for every database,
# under the permutation name "onefile": the name SQLite's tests use to skip
# what a VFS whose journal is not a file of its own cannot do (copying
# test.db-journal), as for its test_onefile.c demo.
# Fails on any error. Runs in a tmpfs scratch directory when there is one:
# every xSync of the VFS is a real fdatasync.
# Usage: run_testfixture.sh [--per-file] EXTENSION.so [FILE.test ...]
#   FILE: a file of the source tree's test/ by name (select1.test), or an
#   extension's by its path from the source root (ext/fts5/test/fts5aa.test);
#   default files: the onefile set of permutations.test.
#   --per-file: one testfixture process per file, each reported PASS/FAIL
#   with its time (for sorting files into tests/sqlite/veryquick.txt and
#   the exclusions of docs/SQLITE.md); default: all files in one process.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
per_file=0
if [ "${1:-}" = --per-file ]; then per_file=1; shift; fi
ext=$(realpath "$1"); shift
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(conflict.test insert.test insert2.test insert3.test rollback.test select1.test select2.test select3.test)
fi
cache=$("$here/build_testfixture.sh")
for i in "${!files[@]}"; do
  case ${files[$i]} in
    /*) ;;
    */*) files[$i]="$cache/${files[$i]}" ;;
  esac
  [ -f "${files[$i]}" ] || [ -f "$cache/test/${files[$i]}" ] || {
    echo "run_testfixture: no test file ${files[$i]} in $cache" >&2; exit 2; }
done
cp "$here/nvfence_vfs.test" "$cache/test/nvfence_vfs.test"
base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
dir=$(mktemp -d "$base/nvfence-sqlite-tests.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
if [ $per_file -eq 0 ]; then
  t0=$(date +%s)
  set +e
  "$cache/testfixture" "$cache/test/nvfence_vfs.test" "$ext" onefile "${files[@]}" > log.txt 2>&1
  rc=$?
  set -e
  { grep -E '^!|^Error|^Time:|^nvfence VFS' log.txt || true; } | head -400
  line=$(grep -E '^[0-9]+ errors out of [0-9]+ tests' log.txt | tail -1 || true)
  if ! grep -q '^nvfence VFS under test: superblock NVFSQLT1' log.txt; then
    echo "FAIL: no nvfence superblock: the VFS was not the one under test"; exit 1
  fi
  if [ $rc -ne 0 ] || [ -z "$line" ] || [ "${line%% *}" != 0 ]; then
    tail -30 log.txt
    echo "FAIL: SQLite's tests through the nvfence VFS (exit $rc): ${line:-no summary}"; exit 1
  fi
  echo "sqlite testfixture through nvfence: ${#files[@]} files, $line, $(( $(date +%s) - t0 )) s"
  exit 0
fi
# One testfixture process per file: a file that stops with a Tcl error is
# reported as failed on its own instead of ending the run.
failed=0; total=0; files_ok=0
for f in "${files[@]}"; do
  name=$(basename "$f" .test)
  mkdir -p "$dir/$name" && cd "$dir/$name"
  t0=$(date +%s%N)
  set +e
  timeout 120 "$cache/testfixture" "$cache/test/nvfence_vfs.test" "$ext" onefile "$f" > log.txt 2>&1
  rc=$?
  set -e
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  line=$(grep -E '^[0-9]+ errors out of [0-9]+ tests' log.txt | tail -1 || true)
  if ! grep -q '^nvfence VFS under test: superblock NVFSQLT1' log.txt; then
    line="the nvfence VFS was not the one under test"; rc=1
  fi
  n=$(awk '{print $5}' <<<"$line"); total=$((total + ${n:-0}))
  if [ $rc -ne 0 ] || [ -z "$line" ] || [ "${line%% *}" != 0 ]; then
    failed=$((failed + 1))
    echo "FAIL ${f#"$cache/"} (${ms} ms): ${line:-stopped (exit $rc)}"
    { grep -E '^!|^Error' log.txt || true; } | head -6 | sed 's/^/    /'
  else
    files_ok=$((files_ok + 1))
    echo "PASS ${f#"$cache/"} (${ms} ms): $line"
  fi
  cd "$dir"
done
echo "sqlite testfixture through nvfence: $files_ok of ${#files[@]} files passed, $total tests, $failed files failed"
[ $failed -eq 0 ]
