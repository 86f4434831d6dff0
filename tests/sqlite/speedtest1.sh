#!/usr/bin/env bash
# SQLite's speedtest1 (test/speedtest1.c of Debian's sqlite3 source package,
# the version of libsqlite3-dev) through the VFS `nvfence` side by side with
# SQLite's unix VFS, both databases on the same file system, alternating
# A/B rounds; prints per test the median seconds of each and the ratio
# nvfence speed / unix speed (unix s / nvfence s: 1.0 is as fast, above 1
# faster), and the total (docs/PERFORMANCE.md, "SQLite speedtest1").
#   speedtest1.sh BUILD_DIR [--size N] [--rounds R] [--dir DIR] [-- SPEEDTEST1_OPTION...]
# BUILD_DIR holds lib/libnvfence_sqlite.a and lib/libnvfence.so. The
# source comes from build_testfixture.sh's cache (built on first use). DIR
# (default /var/tmp) must not be a tmpfs: the VFS writes with O_DIRECT.
# Options after -- go to speedtest1 for both VFSes (e.g. -- --exclusive).
# Exit: 0 done, 1 a run failed or printed no result, 2 usage, 4 missing
# packages (as build_testfixture.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: speedtest1.sh BUILD_DIR [--size N] [--rounds R] [--dir DIR] [-- SPEEDTEST1_OPTION...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
build=$(cd "$1" && pwd); shift
size=100 rounds=3 dir=/var/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
extra=("$@")
[[ "$size" =~ ^[0-9]+$ && "$rounds" =~ ^[0-9]+$ && "$size" -ge 1 && "$rounds" -ge 1 ]] || usage
src=$("$here/build_testfixture.sh")
[ -f "$src/test/speedtest1.c" ] || { echo "speedtest1: no test/speedtest1.c in $src" >&2; exit 1; }
work=$(mktemp -d "$dir/nvfence-speedtest1.XXXXXX")
trap 'rm -rf "$work"' EXIT

# speedtest1's own main, renamed, behind one that registers the VFS first.
cat > "$work/main.c" <<'C'
#include <stdio.h>
int nvf_sqlite_register(int make_default);
int speedtest1_main(int argc, char **argv);
int main(int argc, char **argv) {
  if (nvf_sqlite_register(0) != 0) { fprintf(stderr, "nvf_sqlite_register failed\n"); return 1; }
  return speedtest1_main(argc, argv);
}
C
cc -O2 -w -Dmain=speedtest1_main -c "$src/test/speedtest1.c" -o "$work/speedtest1.o"
cc -O2 -c "$work/main.c" -o "$work/main.o"
c++ -o "$work/speedtest1" "$work/main.o" "$work/speedtest1.o" "$build/lib/libnvfence_sqlite.a" \
  -L"$build/lib" -Wl,-rpath,"$build/lib" -lnvfence -lsqlite3 -lm

run() {  # run VFS ROUND: the per-test lines "NUM seconds" of one run
  local vfs=$1 out="$work/$1.$2.out" args=()
  [ "$vfs" = nvfence ] && args=(--vfs nvfence)
  "$work/speedtest1" "${args[@]}" "${extra[@]}" --size "$size" "$work/$vfs.db" > "$out" 2>&1 || {
    echo "speedtest1 ($vfs) failed:" >&2; tail -5 "$out" >&2; exit 1; }
  grep -q 'TOTAL' "$out" || { echo "speedtest1 ($vfs): no TOTAL line" >&2; tail -5 "$out" >&2; exit 1; }
  rm -f "$work/$vfs.db" "$work/$vfs.db-journal"
}
echo "speedtest1 --size $size ${extra[*]}, $rounds rounds each, A/B alternating, in $dir; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run unix "$r"; run nvfence "$r"; else run nvfence "$r"; run unix "$r"; fi
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
line = re.compile(r"^\s*(\d+) - (.*?)\.*\s+([0-9.]+)s\s*$")
def load(vfs):
    per = {}
    names = {}
    for r in range(1, rounds + 1):
        for l in open(f"{work}/{vfs}.{r}.out"):
            m = line.match(l)
            if m:
                per.setdefault(m[1], []).append(float(m[3]))
                names[m[1]] = m[2].strip()
            elif l.startswith("       TOTAL"):
                per.setdefault("TOTAL", []).append(float(l.split()[-1].rstrip("s")))
    return {k: statistics.median(v) for k, v in per.items()}, names
u, names = load("unix")
n, _ = load("nvfence")
if set(u) != set(n) or "TOTAL" not in u:
    sys.exit("speedtest1: the two VFSes ran different tests")
print(f"{'test':<52} {'unix s':>8} {'nvfence s':>9} {'speed':>6}")
for k in sorted(u, key=lambda x: (x == "TOTAL", int(x) if x.isdigit() else 0)):
    name = "TOTAL" if k == "TOTAL" else f"{k} {names[k]}"[:52]
    ratio = u[k] / n[k] if n[k] > 0 else float("inf")
    print(f"{name:<52} {u[k]:>8.3f} {n[k]:>9.3f} {ratio:>6.2f}")
PY
