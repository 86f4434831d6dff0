#!/bin/sh
# man/fence_nvfence.8 is what `fence_nvfence -o manpage` prints (the man page
# is generated from the metadata's table and checked in, so the installed
# page and the agent cannot drift), it renders without a groff warning, and
# its stdin example gives the agent the options it shows.
# Usage: manpage_check.sh FENCE_NVFENCE CHECKED_IN_PAGE
set -eu
bin=$1
page=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin" -o manpage > "$work/argv.8"
"$bin" --action manpage > "$work/long.8"
printf 'action=manpage\n' | "$bin" > "$work/stdin.8"
cmp -s "$work/argv.8" "$work/long.8" || fail "-o manpage and --action manpage differ"
cmp -s "$work/argv.8" "$work/stdin.8" || fail "-o manpage and action=manpage on stdin differ"
if ! diff -u "$page" "$work/argv.8"; then
  fail "$page is not 'fence_nvfence -o manpage': regenerate it (build/bin/fence_nvfence -o manpage > man/fence_nvfence.8)"
fi
# The comparison can fail: one changed line is caught.
sed '5s/$/ changed/' "$page" > "$work/bad.8"
if cmp -s "$work/bad.8" "$work/argv.8"; then fail "a changed page compared equal"; fi

command -v man >/dev/null || fail "man not installed (apt-get install man-db)"
warn=$(MANWIDTH=80 man --warnings=w -l "$page" 2>&1 >/dev/null) || true
[ -z "$warn" ] || fail "groff warnings: $warn"
MANWIDTH=200 man -l "$page" 2>/dev/null | col -b > "$work/text"
for sec in NAME SYNOPSIS DESCRIPTION OPTIONS ACTIONS "STDIN PARAMETERS" "EXIT STATUS" EXAMPLES "SEE ALSO"; do
  grep -q "^$sec\$" "$work/text" || fail "no $sec section"
done
grep -q '^ *fence_nvfence - ' "$work/text" || fail "NAME is not 'fence_nvfence - ...'"

# The printf example as a reader sees it, run by the shell: its lines are the
# options it shows (the hand-written page once printed "\node_ids").
line=$(grep "printf 'action=off" "$work/text" | sed 's/^ *//; s/ *| *fence_nvfence *$//')
[ -n "$line" ] || fail "no printf example"
eval "$line" > "$work/example.in"
for want in action=off plug=n2 devices=/dev/nvme1n1 'node_ids=n1:1;n2:2'; do
  grep -qx "$want" "$work/example.in" || fail "the printf example does not give the line '$want': $(cat "$work/example.in")"
done
echo "ok: man page equal to -o manpage, renders cleanly, example gives the options it shows"
