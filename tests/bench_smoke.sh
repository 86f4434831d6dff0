#!/bin/sh
# nvfence-bench against fio on a scratch file: the tables the docs quote
# (medians, pooled percentiles, ratios with p99.9 beside p99) are printed,
# and a --bs that is not whole 512-byte blocks is refused with exit 1.
# Usage: bench_smoke.sh NVFENCE_BENCH SCRATCH_DIR
set -u
bench=$1 dir=$2
mkdir -p "$dir" || exit 2
img="$dir/bench-smoke.img"
fail() { echo "FAIL: $*"; exit 1; }
out=$("$bench" "$img" --size 8M --bs 4096 --runtime 1 --ramp 0 --repeat 2 --qd 1,4 2>&1) ||
    fail "nvfence-bench exited $?: $out"
echo "$out"
for want in '^Medians of 2 rounds' '^Pooled: every sample of the 2 rounds' '^1    nvfence ' '^4    fio-same lat ' \
    'p99 med p99.9 med  p99 pool p99.9 pool' '^4    nvfence / fio-same '; do
    echo "$out" | grep -q -- "$want" || fail "no line matching '$want'"
done
# Every pooled row has a sample count above zero.
echo "$out" | sed -n '/^Pooled:/,/^$/p' | awk 'NR > 2 && NF >= 6 && $(NF-3) + 0 <= 0 { bad = 1 } END { exit bad }' ||
    fail "a pooled row without samples"
# --nv-spin-us: nvfence's CPU per write includes the busy wait, and the run says so.
spin=$("$bench" "$img" --size 8M --bs 4096 --runtime 1 --ramp 0 --repeat 1 --qd 1 --no-fio --nv-spin-us 300 2>&1) ||
    fail "--nv-spin-us 300 exited $?: $spin"
echo "$spin" | grep -q '^# nvfence spins 300 us per write' || fail "--nv-spin-us 300 not announced: $spin"
echo "$spin" | awk '$1 == 1 && $2 == "nvfence" && $3 == 1 { found = 1; if ($NF + 0 < 300) bad = 1 } END { exit !found || bad }' ||
    fail "--nv-spin-us 300: nvfence's cpu/io is not at least 300 us: $spin"
err=$("$bench" "$img" --size 8M --bs 1000 --runtime 1 --repeat 1 --qd 1 --no-fio 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "--bs 1000 exited $rc, not 1: $err"
echo "$err" | grep -q 'a multiple of 512' || fail "--bs 1000: $err"
rm -f "$img"
echo "bench smoke: ok"
