#!/usr/bin/env bash
# No shipped binary links libcurl (ELF NEEDED, readelf -d): the etcd elector
# dlopen()s it when one is created (src/elector/curl_api.hpp), so an
# nvfenced without an elector maps neither libcurl nor its dependency tree.
#   no_libcurl_needed.sh ELF...
set -u
[ "$#" -gt 0 ] || { echo "usage: no_libcurl_needed.sh ELF..."; exit 2; }
fails=0
for f in "$@"; do
    needed=$(readelf -d "$f" 2>&1) || { echo "FAIL: readelf -d $f: $needed"; fails=$((fails + 1)); continue; }
    curl=$(printf '%s\n' "$needed" | grep 'NEEDED' | grep -i 'libcurl')
    if [ -n "$curl" ]; then
        echo "FAIL: $f links libcurl: $curl"
        fails=$((fails + 1))
    else
        echo "ok: $f: no NEEDED libcurl ($(printf '%s\n' "$needed" | grep -c NEEDED) NEEDED)"
    fi
done
exit $((fails > 0))
