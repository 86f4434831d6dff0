#!/bin/sh
# nvfenced on a host whose libcurl is unusable (an empty file bind-mounted
# over it, in a private mount namespace): without an elector it runs (it
# does not link libcurl); with `elector = etcd` its configuration check
# fails with exit code 2 and the library and the loader's reason named,
# never a crash. Needs root for the mount namespace: 77 (skipped) without.
#   nvfenced_without_libcurl.sh NVFENCED
set -u
bin="$1"
if [ -z "${NVFENCE_IN_CURL_NS:-}" ]; then
    lib=$(ldconfig -p | awk '/libcurl\.so\.4 / {print $NF; exit}')
    [ -n "$lib" ] || { echo "FAIL: ldconfig knows no libcurl.so.4"; exit 1; }
    real=$(readlink -f "$lib")
    unshare -m true 2>/dev/null || { echo "skip: no mount namespace (not root)"; exit 77; }
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    : > "$tmp/empty"
    NVFENCE_IN_CURL_NS=1 unshare -m sh -c 'mount --bind "$1" "$2" && exec sh "$3" "$4"' \
        sh "$tmp/empty" "$real" "$0" "$bin"
    exit $?
fi
fails=0
. "$(dirname "$0")/check_lib.sh"
D="--device /dev/null --node-id 1"
check 0 "configuration ok" --check-config $D --elector none
check 2 "elector = etcd needs libcurl.so.4: " --check-config $D --elector etcd --etcd-endpoints http://127.0.0.1:9
[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
