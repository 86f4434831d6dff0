#!/usr/bin/env bash
# `cmake --install` into a temporary DESTDIR, then check what an engine gets:
# the layout, the SONAME and the library's own dependencies, an out-of-tree
# CMake project (find_package(nvfence), C++20 carried by the target) and a
# C11 program built with pkg-config, both against the installed tree alone.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?build dir}; src=${2:?source dir}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
prefix=$(cache CMAKE_INSTALL_PREFIX); unitdir=$(cache NVFENCE_SYSTEMDUNITDIR)
case "$unitdir" in /*) ;; *) unitdir=$prefix/$unitdir ;; esac
DESTDIR="$tmp/dest" cmake --install "$build" >"$tmp/install.log" 2>&1 \
    || { cat "$tmp/install.log"; echo "FAIL: cmake --install"; exit 1; }
root="$tmp/dest$prefix"
libdir=$(cd "$root" && ls -d lib lib64 lib/*-linux-gnu 2>/dev/null | while read -r d; do
    [ -e "$root/$d/pkgconfig/nvfence.pc" ] && echo "$d"; done | head -n1)
[ -n "$libdir" ] || { find "$root" | sort; echo "FAIL: no nvfence.pc installed"; exit 1; }
L="$root/$libdir"

for f in bin/nvfence sbin/nvfenced include/nvfence/nvfence.h include/nvfence/fence.hpp \
         include/nvfence/testing.hpp include/nvfence/testing_model.hpp include/nvfence/testing.h \
         "$libdir/libnvfence_testing.a" \
         include/nvfence/writer.hpp "$libdir/cmake/nvfence/nvfenceConfig.cmake" \
         "$libdir/cmake/nvfence/nvfenceConfigVersion.cmake" "$libdir/pkgconfig/nvfence.pc" \
         share/man/man8/nvfence.8.gz share/man/man8/nvfenced.8.gz share/man/man5/nvfenced.conf.5.gz \
         share/man/man8/fence_nvfence.8.gz sbin/fence_nvfence \
         share/man/man3/libnvfence.3.gz share/man/man3/nvf_ns_open.3.gz share/man/man3/nvf_ns_close.3.gz \
         share/doc/nvfence/AGENT.md share/doc/nvfence/README.md \
         share/doc/nvfence/copyright share/doc/libnvfence0/copyright share/doc/libnvfence-dev/copyright \
         share/doc/nvfence/changelog.Debian.gz \
         share/bash-completion/completions/nvfence; do
    [ -e "$root/$f" ] || fail "$f not installed"
done
[ -e "$root/bin/nvfenced" ] && fail "nvfenced installed in bin (daemons go to sbin)"
# Only the engine API's headers (docs/LAYOUT.md): nothing of the agent, the
# elector or the internal helpers, whose code is not in libnvfence.
for h in agent agent_config agent_elector elector elector_config elector_run etcd etcd_json term \
         uevent following_device service_hooks fence_actions clock list; do
    [ -e "$root/include/nvfence/$h.hpp" ] && fail "internal header include/nvfence/$h.hpp installed"
done
ls "$root/include/nvfence" | grep -vE '\.(hpp|h)$' | grep . && fail "non-header files installed in include/nvfence"
find "$root/share/man" -type f ! -name '*.gz' | grep . && fail "man pages installed uncompressed"
if [ -e "$L/libnvfence.so" ]; then
    so=$(readlink "$L/libnvfence.so")
    soname=$(objdump -p "$L/libnvfence.so" | awk '$1 == "SONAME" {print $2}')
    case "$soname" in libnvfence.so.[0-9]*) ;; *) fail "SONAME is '$soname'" ;; esac
    [ -e "$L/$soname" ] || fail "$soname missing beside libnvfence.so ($so)"
    needed=$(objdump -p "$L/libnvfence.so" | awk '$1 == "NEEDED" {print $2}' | tr '\n' ' ')
    echo "libnvfence: SONAME $soname, NEEDED $needed"
    for n in $needed; do
        case "$n" in liburing.so.*|libstdc++.so.*|libm.so.*|libgcc_s.so.*|libc.so.*|ld-linux*|libasan.so.*|libubsan.so.*) ;;
            *) fail "libnvfence needs $n: only liburing and the C/C++ runtime belong there" ;; esac
    done
    echo "$needed" | grep -q liburing || fail "libnvfence does not link liburing"
    # PIC: a shared object with text relocations is not position-independent.
    readelf -d "$L/libnvfence.so" | grep -q TEXTREL && fail "libnvfence.so has text relocations"
    # The unit runs nvfenced from sbin and names its documentation.
    unit="$tmp/dest$unitdir/nvfenced@.service"
    grep -q "^ExecStart=$prefix/sbin/nvfenced " "$unit" || fail "unit does not run sbin/nvfenced: $(grep ExecStart "$unit")"
    for d in $(sed -n 's/^Documentation=//p' "$unit"); do
        case "$d" in
            man:*) p=${d#man:}; name=${p%(*}; sec=${p#*(}; sec=${sec%)}
                   [ -e "$root/share/man/man$sec/$name.$sec.gz" ] || fail "Documentation=$d not installed" ;;
            file:*) [ -e "$tmp/dest${d#file:}" ] || fail "Documentation=$d not installed" ;;
        esac
    done
else
    [ -e "$L/libnvfence.a" ] || fail "neither libnvfence.so nor libnvfence.a installed"
fi

# The rules and the unit name the directories of the install's own prefix,
# also when `cmake --install --prefix` (or cpack) gives another one.
if [ "$(cache NVFENCE_SYSTEMDUNITDIR)" = lib/systemd/system ] && [ "$(cache NVFENCE_UDEVRULESDIR)" = lib/udev/rules.d ]; then
    DESTDIR="$tmp/reloc" cmake --install "$build" --prefix /opt/nvf >"$tmp/reloc.log" 2>&1 \
        || { cat "$tmp/reloc.log"; fail "cmake --install --prefix /opt/nvf"; }
    grep -qx 'ExecStart=/opt/nvf/sbin/nvfenced --config /opt/nvf/etc/nvfence/%i.conf --name %i' \
        "$tmp/reloc/opt/nvf/lib/systemd/system/nvfenced@.service" 2>/dev/null \
        || fail "--prefix /opt/nvf: unit $(grep ExecStart "$tmp/reloc/opt/nvf/lib/systemd/system/nvfenced@.service" 2>&1)"
    grep -q '^IMPORT{program}="/opt/nvf/bin/nvfence udev-probe ' "$tmp/reloc/opt/nvf/lib/udev/rules.d/70-nvfence.rules" 2>/dev/null \
        || fail "--prefix /opt/nvf: rules $(grep IMPORT "$tmp/reloc/opt/nvf/lib/udev/rules.d/70-nvfence.rules" 2>&1)"
    rm -rf "$tmp/reloc"
fi

# The installed headers stand alone: nothing includes the source tree.
grep -rq "$src" "$root/include" "$L/cmake" "$L/pkgconfig" && fail "installed files name the source tree"

# 1. find_package(nvfence) from an out-of-tree CMake project.
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S "$src/examples/cmake-consumer" -B "$tmp/consumer" "${gen[@]}" -DCMAKE_PREFIX_PATH="$root" \
        -DCMAKE_BUILD_TYPE=Release >"$tmp/consumer.log" 2>&1 \
   && cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1; then
    grep -rq -- "-std=.*c++20\|-std=.*gnu++20" "$tmp/consumer" || fail "nvfence::nvfence did not carry C++20"
    grep -rqs "$src/include" "$tmp/consumer/build.ninja" "$tmp/consumer/CMakeFiles" && fail "consumer used the source tree's headers"
    out=$(LD_LIBRARY_PATH="$L" "$tmp/consumer/nvfence-consumer" /dev/null) || fail "nvfence-consumer: $out"
    echo "cmake consumer: $out"
    # The testing kit: an engine's failover unit test, run out of tree.
    out=$(LD_LIBRARY_PATH="$L" "$tmp/consumer/nvfence-kit-failover" 2>&1) || fail "kit failover test: $out"
    echo "kit failover test: $out"
else
    cat "$tmp/consumer.log"; fail "out-of-tree find_package(nvfence) project did not build"
fi

# 2. A C11 program through pkg-config (the pc file finds its own prefix).
export PKG_CONFIG_PATH="$L/pkgconfig"
flags=$(pkg-config --cflags --libs nvfence) || fail "pkg-config nvfence"
echo "pkg-config: $flags"
inc=$(pkg-config --variable=includedir nvfence); libd=$(pkg-config --variable=libdir nvfence)
[ "$(realpath "$inc")" = "$(realpath "$root/include")" ] || fail "pkg-config includedir $inc is not $root/include"
[ "$(realpath "$libd")" = "$(realpath "$L")" ] || fail "pkg-config libdir $libd is not $L"
if cc -std=c11 -Wall -Wextra -pedantic -Werror -o "$tmp/c-example" "$src/examples/c/nvfence-c-example.c" $flags \
        2>"$tmp/cc.log"; then
    out=$(LD_LIBRARY_PATH="$L" "$tmp/c-example" version) || fail "c example version: $out"
    echo "c example: $out"
    LD_LIBRARY_PATH="$L" "$tmp/c-example" info /dev/null 2>"$tmp/err"; rc=$?
    [ "$rc" -eq 4 ] || fail "c example info /dev/null exited $rc (want 4): $(cat "$tmp/err")"
    grep -q "not an NVMe namespace" "$tmp/err" || fail "c example: no clear message: $(cat "$tmp/err")"
else
    cat "$tmp/cc.log"; fail "C11 program did not build with pkg-config"
fi

# 3. The testing kit's C face (nvfence/testing.h, in libnvfence_testing.a)
# from C11: a failover through the C API's own handles; the kit is C++, so
# the link is c++'s.
cat >"$tmp/kit.c" <<'KIT'
#include <nvfence/testing.h>
#include <stdio.h>
int main(void) {
    nvf_sim_cluster *c; nvf_fence *f0, *f1; nvf_writer *w; nvf_outcome o; nvf_completion done;
    nvf_fence_options fo = NVF_FENCE_OPTIONS_INIT;
    static _Alignas(4096) unsigned char buf[4096];
    if (nvf_sim_cluster_new(2, &c)) return 1;
    fo.tag = 1; fo.node = 1; if (nvf_sim_host_fence(c, 0, &fo, &f0)) return 2;
    fo.node = 2; if (nvf_sim_host_fence(c, 1, &fo, &f1)) return 3;
    if (nvf_fence_takeover(f0, 0, &o) || nvf_sim_host_writer_open(c, 0, NULL, &w)) return 4;
    if (nvf_fence_takeover(f1, 0, &o)) return 5;
    if (nvf_writer_queue_write(w, 0, buf, sizeof buf, 1) || nvf_writer_submit(w) != 1) return 6;
    if (nvf_writer_reap(w, &done, 1, 1) != 1 || done.status != NVF_IO_FENCED || !nvf_writer_settled(w)) return 7;
    nvf_writer_close(w); nvf_fence_free(f1); nvf_fence_free(f0); nvf_sim_cluster_free(c);
    puts("fenced");
    return 0;
}
KIT
if [ -e "$L/libnvfence.so" ] && cc -std=c11 -Wall -Wextra -pedantic -Werror -c -o "$tmp/kit.o" "$tmp/kit.c" \
        -I"$root/include" 2>"$tmp/kit.log" \
   && c++ -o "$tmp/kit" "$tmp/kit.o" "$L/libnvfence_testing.a" -L"$L" -lnvfence 2>>"$tmp/kit.log"; then
    out=$(LD_LIBRARY_PATH="$L" "$tmp/kit" 2>&1) || fail "kit C face failover: $out"
    echo "kit C face: $out"
elif [ -e "$L/libnvfence.so" ]; then
    cat "$tmp/kit.log"; fail "C11 program on nvfence/testing.h did not build"
fi

[ "$fails" -eq 0 ] && echo "install test passed"
[ "$fails" -eq 0 ]
