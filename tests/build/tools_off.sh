#!/usr/bin/env bash
# The library alone (-DNVFENCE_TOOLS=OFF) where the tools' packages are
# absent, not hidden: a Debian minbase chroot (mmdebstrap) with only the
# library's build dependencies. In it: configure, build, the unit tests,
# install, the kit example, and an add_subdirectory consumer
# (examples/subdir-consumer). Needs root, mmdebstrap and the machine's apt
# sources (read from /etc/apt/sources.list.d/*.sources, never named here).
#   tests/build/tools_off.sh SOURCE_DIR [CHROOT_DIR]
# CHROOT_DIR defaults to a cache, /var/cache/nvfence-tools-off/<hash of the
# package list>, kept for the next run (scripts/test.sh runs this beside
# the other builds). The compiler goes through ccache with the host's cache
# directory mounted, so a warm machine recompiles only what changed.
# /proc, /sys and /dev are mounted in the chroot while it builds and tests.
# Prints the seconds of each step.
set -eu
src=$(realpath "${1:?usage: tools_off.sh SOURCE_DIR [CHROOT_DIR]}")
deps=cmake,ninja-build,g++,pkg-config,liburing-dev,libgtest-dev,ccache,python3,abigail-tools
root=${2:-/var/cache/nvfence-tools-off/$(echo "minbase bookworm $deps" | sha256sum | cut -c1-12)}
ccache_dir=$(ccache -k cache_dir 2>/dev/null || echo /root/.cache/ccache)
mkdir -p "$ccache_dir"
mounted=()
cleanup() { local m; for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
t0=$(date +%s)
step() { echo "--- $1 ($(( $(date +%s) - t0 )) s so far)"; }
sources=$(ls /etc/apt/sources.list.d/*.sources | head -n1)
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9
# Mounts left by a run that was killed: unmounted before anything is
# removed (a removal through a /dev bind mount would reach the host's /dev).
unmount_under() {
    local m
    for m in $(awk -v r="$1" 'index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m"; done
    ! awk -v r="$1" 'index($2, r "/") == 1 {f = 1} END {exit !f}' /proc/mounts
}
unmount_under "$root" || { echo "FAIL: cannot unmount what is mounted under $root"; exit 1; }
if [ ! -x "$root/usr/bin/ccache" ]; then
    step "mmdebstrap minbase + $deps"
    rm -rf "$root" "$root.new"
    mmdebstrap --quiet --variant=minbase --include="$deps" bookworm "$root.new" "$sources"
    mv "$root.new" "$root"
fi
step "absent: the tools' packages"
# (libcurl4 itself is there: Debian's cmake links it; its headers, pkg-config
# and CMake files are not.)
for p in libspdlog-dev libspdlog1.10 libcli11-dev nlohmann-json3-dev libcurl4-openssl-dev libcurl4-gnutls-dev \
         libnvme-dev libnvme1; do
    if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
        echo "FAIL: $p is installed in the chroot"; exit 1
    fi
done
[ ! -e "$root/usr/include/curl" ] && [ ! -e "$root/usr/include/spdlog" ] && [ ! -e "$root/usr/include/CLI" ] \
    && [ ! -e "$root/usr/include/nlohmann" ] || { echo "FAIL: a tool's headers are in the chroot"; exit 1; }
rm -rf "$root/src" "$root/b" "$root/c" "$root/inst"
mkdir -p "$root/src"
tar -C "$src" --exclude=./build --exclude='./build-*' --exclude=./.git -cf - . | tar -C "$root/src" -xf -
for m in proc sys dev ccache; do
    mkdir -p "$root/$m"
    case $m in
        proc) mount -t proc proc "$root/proc" ;;
        ccache) mount --bind "$ccache_dir" "$root/ccache" ;;
        *) mount --rbind "/$m" "$root/$m" ;;
    esac
    mounted=("$root/$m" "${mounted[@]}")
done
run() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root CCACHE_DIR=/ccache \
            CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=true CCACHE_COMPILERCHECK=content CMAKE_CXX_COMPILER_LAUNCHER=ccache \
            CMAKE_C_COMPILER_LAUNCHER=ccache sh -ec "$1"; }
step "configure (NVFENCE_TOOLS=OFF)"
run 'cmake -S /src -B /b -G Ninja -DNVFENCE_TOOLS=OFF -DNVFENCE_WERROR=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
     -DCMAKE_C_COMPILER_LAUNCHER=ccache >/b.log 2>&1 || { cat /b.log; exit 1; }'
step "build"
run 'cmake --build /b -j2 >>/b.log 2>&1 || { tail -n 50 /b.log; exit 1; }'
step "unit tests"
run 'ctest --test-dir /b -L unit --output-on-failure -j2 >/t.log 2>&1 || { tail -n 40 /t.log; exit 1; }; tail -n 3 /t.log'
step "install"
run 'DESTDIR=/inst cmake --install /b >/dev/null && ls /inst/usr/local/include/nvfence/testing.hpp /inst/usr/local/lib/*/libnvfence_testing.a /inst/usr/local/lib/*/libnvfence.so.0 >/dev/null'
run '/b/bin/nvfence-kit-failover'
step "add_subdirectory consumer"
run 'cmake -S /src/examples/subdir-consumer -B /c -G Ninja >/c.log 2>&1 && cmake --build /c -j2 >>/c.log 2>&1 || { tail -n 50 /c.log; exit 1; }; /c/engine-failover-test'
step "done"
echo "tools-off build: ok in $(( $(date +%s) - t0 )) s"
