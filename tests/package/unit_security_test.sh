#!/bin/sh
# systemd-analyze security on the configured nvfenced@.service, instantiated
# under a real volume name (the offline mode rates a unit file without
# installing it); fails when the overall exposure is above MAX.
# Usage: unit_security_test.sh CONFIGURED_UNIT MAX
set -eu
unit=$1
max=$2
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not found (package systemd)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inst="$tmp/nvfenced@vol-0123456789abcdef0.service"
cp "$unit" "$inst"
echo "+ systemd-analyze security --offline=true $inst"
if ! out=$(systemd-analyze security --offline=true --no-pager "$inst" 2>&1); then
  printf '%s\n' "$out"
  echo "FAIL: systemd-analyze security did not rate the unit"
  exit 1
fi
printf '%s\n' "$out"
score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p')
if [ -z "$score" ]; then
  echo "FAIL: no overall exposure level in the output"
  exit 1
fi
if awk -v s="$score" -v m="$max" 'BEGIN { exit !(s + 0 <= m + 0) }'; then
  echo "exposure $score <= $max"
else
  echo "FAIL: exposure $score is above $max"
  exit 1
fi
