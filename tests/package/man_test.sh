#!/usr/bin/env bash
# The man pages render with man(1) without a single groff warning, name
# their program, and nvfenced.conf(5) documents every key of the example
# configuration (so a new key cannot go undocumented).
#   man_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
command -v man >/dev/null || { echo "FAIL: man not installed (apt-get install man-db)"; exit 1; }
for p in nvfence.8 nvfenced.8 nvfenced.conf.5; do
    f="$src/man/$p"
    [ -f "$f" ] || { fail "$p missing"; continue; }
    out=$(MANWIDTH=80 man --warnings=w -l "$f" 2>&1 >/dev/null)
    [ -z "$out" ] || fail "$p: groff warnings: $out"
    text=$(MANWIDTH=80 man -l "$f" 2>/dev/null | col -b)
    for sec in NAME SYNOPSIS DESCRIPTION "SEE ALSO"; do
        echo "$text" | grep -q "^$sec" || fail "$p: no $sec section"
    done
    echo "$text" | grep -q "^EXAMPLE" || fail "$p: no example"
done
keys=$(sed -n 's/^#\{0,1\}\([a-z_]*\) *=.*/\1/p' "$src/udev/nvfenced.conf.example" | sort -u)
conf=$(MANWIDTH=200 man -l "$src/man/nvfenced.conf.5" 2>/dev/null | col -b)
for k in $keys; do
    echo "$conf" | grep -qw -- "$k" || fail "nvfenced.conf(5) does not document '$k'"
done
echo "man pages: $(echo $keys | wc -w) config keys checked, $fails failures"
[ "$fails" -eq 0 ]
