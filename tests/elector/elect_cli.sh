#!/bin/sh
# nvfence-elect's bad input: a message and the documented exit code, before
# any device or etcd is touched (2 usage, 4 not an NVMe namespace).
set -u
bin="$1"
fails=0
. "$(dirname "$0")/check_lib.sh"
E=http://127.0.0.1:9
check 2 "required" /dev/null
check 2 "lease_ttl_s" /dev/null --node 1 --etcd-endpoints $E --lease-ttl-s 1
check 2 "etcd_endpoints" /dev/null --node 1 --etcd-endpoints 127.0.0.1:2379
check 2 "lease_loss" /dev/null --node 1 --etcd-endpoints $E --lease-loss maybe
check 2 "need https" /dev/null --node 1 --etcd-endpoints $E --etcd-ca-file /etc/ca.pem
check 2 "needs etcd_password_file" /dev/null --node 1 --etcd-endpoints $E --etcd-user nvfence
check 2 "etcd_password_file = /nonexistent-nvfence.pw: No such file" /dev/null --node 1 --etcd-endpoints https://127.0.0.1:9 --etcd-user nvfence --etcd-password-file /nonexistent-nvfence.pw
check 2 "in clear over http://" /dev/null --node 1 --etcd-endpoints $E --etcd-user nvfence --etcd-password-file /nonexistent-nvfence.pw
check 2 "node" /dev/null --node 0 --etcd-endpoints $E
check 2 "no such device" /nonexistent-nvfence-dev --node 1 --etcd-endpoints $E
check 4 "not an NVMe namespace" /dev/null --node 1 --etcd-endpoints $E
[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
