#!/bin/sh
# nvfenced's elector keys (flags and config file): bad input is refused with
# the key named and exit code 2 before any device or etcd is touched; a
# good configuration passes --check-config.
set -u
bin="$1"
fails=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/check_lib.sh"
E=http://127.0.0.1:9
D="--device /dev/null --node-id 1"
check 0 "configuration ok" --check-config $D --elector etcd --etcd-endpoints $E --lease-ttl-s 2
check 0 "configuration ok" --check-config $D --elector none
check 2 "etcd_endpoints" --check-config $D --elector etcd
check 2 "role" --check-config $D --elector etcd --etcd-endpoints $E --role acquire
check 2 "needs elector = etcd" --check-config $D --lease-ttl-s 5
check 2 "lease_ttl_s" --check-config $D --elector etcd --etcd-endpoints $E --lease-ttl-s 1
check 2 "elector" --check-config $D --elector zookeeper
printf 'device = /dev/null\nnode_id = 1\nelector = etcd\netcd_endpoints = %s\nlease_loss = maybe\n' $E > "$tmp/v.conf"
check 2 "lease_loss" --check-config --config "$tmp/v.conf"
printf 'device = /dev/null\nnode_id = 1\nelector = etcd\netcd_endpoints = %s\nlease_loss = hold\n' $E > "$tmp/v.conf"
check 0 "configuration ok" --check-config --config "$tmp/v.conf"
"$bin" --help 2>&1 | grep -q -- "--etcd-endpoints" || { echo "FAIL: --help lists no --etcd-endpoints"; fails=$((fails+1)); }
[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
