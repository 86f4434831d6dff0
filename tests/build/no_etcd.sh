#!/usr/bin/env bash
# The build without the etcd elector (cmake -DNVFENCE_ETCD=OFF, issue 26):
# nvfenced links no libcurl, refuses `elector = etcd` at its configuration
# check with the documented exit code (2) and a message that says how to get
# it, accepts `elector = none`, and nvfence-elect is not built.
# Usage: tests/build/no_etcd.sh BUILD_DIR   (configured with NVFENCE_ETCD=OFF
# and built: nvfenced)
set -u
b=${1:?usage: no_etcd.sh BUILD_DIR}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
[ -x "$b/bin/nvfenced" ] || { echo "FAIL: $b/bin/nvfenced not built"; exit 1; }
grep -q '^NVFENCE_ETCD:BOOL=OFF$' "$b/CMakeCache.txt" || bad "$b is not configured with NVFENCE_ETCD=OFF"
[ -e "$b/bin/nvfence-elect" ] && bad "nvfence-elect was built without the etcd elector"
if ldd "$b/bin/nvfenced" | grep -q libcurl; then bad "nvfenced links libcurl"; fi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
printf 'device = /dev/nvme0n1\nnode_id = 1\nrole = standby\nelector = etcd\netcd_endpoints = http://127.0.0.1:2379\n' > "$d/etcd.conf"
out=$("$b/bin/nvfenced" --check-config --config "$d/etcd.conf" 2>&1); rc=$?
[ "$rc" = 2 ] || bad "elector = etcd: exit $rc, want 2 ($out)"
case $out in *"built without the etcd elector"*NVFENCE_ETCD=ON*) ;; *) bad "elector = etcd: message does not say why: $out" ;; esac
printf 'device = /dev/nvme0n1\nnode_id = 1\nrole = standby\n' > "$d/none.conf"
out=$("$b/bin/nvfenced" --check-config --config "$d/none.conf" 2>&1); rc=$?
[ "$rc" = 0 ] || bad "elector = none: exit $rc, want 0 ($out)"
[ "$fail" = 0 ] && echo "no-etcd build: ok"
exit $fail
