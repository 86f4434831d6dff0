#!/usr/bin/env bash
# CLI bad input that needs no NVMe device: each case must print one line on
# stderr naming the problem and exit with the documented code.
set -u
nvf=${1:?path to nvfence}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo data > "$tmp/file"
fails=0; n=0
expect() {  # expect CODE ARGS...
  local want=$1; shift
  n=$((n + 1))
  "$nvf" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  local lines; lines=$(wc -l < "$tmp/err")
  if [ "$rc" -ne "$want" ] || [ "$lines" -lt 1 ] || ! grep -q '^nvfence: ' "$tmp/err"; then
    echo "FAIL: nvfence $* -> exit $rc (want $want), stderr: $(cat "$tmp/err")"
    fails=$((fails + 1))
  fi
}
expect 2 report /nonexistent/dev
expect 4 report /dev/null
expect 4 report "$tmp"
expect 4 report "$tmp/file"
expect 4 info "$tmp/file" --json
expect 2 preempt /dev/null --node 1 --victim ""
expect 2 preempt /dev/null --node 1 --victim 0x
expect 2 preempt /dev/null --node 1 --victim -1
expect 2 preempt /dev/null --node 1 --victim 0x10000000000000000
expect 2 preempt /dev/null --node 1 --victim 12abc
# A foreign key (fence_scsi's, LVM's, any tool's) as --victim needs --foreign:
# refused before any device is opened. With --foreign it gets to the device.
expect 2 preempt /dev/null --node 1 --victim 0x7a3d0001
expect 2 preempt /dev/null --node 1 --victim 0x1000000000000001
expect 4 preempt /dev/null --node 1 --victim 0x7a3d0001 --foreign
expect 4 preempt /dev/null --node 1 --victim nf:0:2:3
expect 2 preempt /dev/null --node 1 --victim-node 2 --foreign
expect 2 preempt /dev/null --node 1 --victim nf:0:0:1
expect 2 preempt /dev/null --node 1 --victim nf:256:1:1
expect 2 preempt /dev/null --node 1 --victim 0x1 --holder
expect 2 preempt /dev/null --node 1 --victim-node 0
expect 2 preempt /dev/null --node 1 --victim-node 256
expect 2 preempt /dev/null --node 1 --victim-node x
expect 2 preempt /dev/null --node 1 --victim-node 2 --victim 0x1
expect 2 preempt /dev/null --node 1 --victim-node 2 --holder
expect 2 register /dev/null --node 0
expect 2 write /dev/null --lba 0 --wait-s 0
expect 2 write /dev/null --lba 0 --wait-s 3601
expect 2 read /dev/null --lba 0 --wait-s 0
expect 4 write /dev/null --lba 0 --wait-s 3600
expect 2 register /dev/null --node 256
expect 2 register /dev/null --node -1
expect 2 register /dev/null --node x
expect 2 register /dev/null --node 1 --epoch 0
expect 2 register /dev/null --node 1 --epoch 4294967296
expect 2 acquire /dev/null --type bogus
expect 2 acquire /dev/null --type 7
expect 2 clear /dev/null
expect 2 write /dev/null
expect 2 frobnicate /dev/null
expect 2
# --json failures also print one JSON object on stdout.
"$nvf" report /dev/null --json >"$tmp/out" 2>/dev/null
if ! grep -q '"exit_code":4' "$tmp/out"; then echo "FAIL: --json error object missing"; fails=$((fails + 1)); fi
n=$((n + 1))
# --help lists the exit codes.
"$nvf" --help | grep -q "6  lost a takeover race" || { echo "FAIL: --help lacks exit codes"; fails=$((fails + 1)); }
n=$((n + 1))
# Conventions (issue 17): --version, blkpr's type names, decimal keys as
# nvme-cli takes them, an example in every subcommand's help, and a schema
# version in every JSON document.
check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1; shift
  n=$((n + 1))
  if ! "$@" >/dev/null 2>&1; then echo "FAIL: $what"; fails=$((fails + 1)); fi
}
check "--version prints nvfence and a version" sh -c '"$0" --version | grep -Eq "^nvfence [0-9]+\.[0-9]+\.[0-9]+$"' "$nvf"
for t in write-exclusive exclusive-access write-exclusive-registrants-only exclusive-access-registrants-only \
         write-exclusive-all-registrants exclusive-access-all-registrants write_exclusive WRITE-EXCLUSIVE-REG-ONLY \
         exclusive-access-all-regs we WERO shared exclusive; do
  expect 4 acquire /dev/null --type "$t"     # the name is accepted: the device is what fails
done
expect 2 acquire /dev/null --type write-exclusive-bogus
expect 2 acquire /dev/null --type 1
expect 4 preempt /dev/null --node 1 --victim 17654223897458606089 --foreign   # decimal, as nvme-cli (a foreign key)
expect 4 preempt /dev/null --node 1 --victim 1 --foreign
expect 2 preempt /dev/null --node 1 --victim 18446744073709551616  # 2^64
expect 2 preempt /dev/null --node 1 --victim 0
expect 2 preempt /dev/null --node 1 --victim +5
expect 2 takeover --victim 12abc
for sub in info report register unregister acquire preempt release clear write read notifications \
           status takeover handoff rejoin udev-probe; do
  check "'$sub --help' has an example" sh -c '"$0" "$1" --help | grep -q "^Example: nvfence $1 "' "$nvf" "$sub"
done
"$nvf" report /dev/null --json >"$tmp/out" 2>/dev/null
n=$((n + 1))
grep -q '^{"schema_version":1,' "$tmp/out" || { echo "FAIL: JSON lacks schema_version first: $(cat "$tmp/out")"; fails=$((fails + 1)); }
"$nvf" frobnicate --json >"$tmp/out" 2>/dev/null
n=$((n + 1))
grep -q '^{"schema_version":1,' "$tmp/out" || { echo "FAIL: usage-error JSON lacks schema_version: $(cat "$tmp/out")"; fails=$((fails + 1)); }
echo "cli exit codes: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
