#!/usr/bin/env bash
# `cpack -G DEB` in the build directory gives the three packages
# (cmake/NvfencePackage.cmake), inspected with dpkg-deb: each package's
# contents and none of another's, Depends (dpkg-shlibdeps, and the -dev
# package's on everything nvfence.pc requires), shlibs and the ldconfig
# trigger, copyright and changelog in every package, compressed man pages,
# the multiarch libdir, the hardening of the binaries, and the maintainer
# scripts run against stub udevadm/systemctl (they must reload udev and
# systemd, and call neither when not running).
#   deb_test.sh BUILD_DIR
set -u
build=${1:?build dir}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
# The package's prefix (NVFENCE_PACKAGE_PREFIX, /usr unless set), whatever
# the build's CMAKE_INSTALL_PREFIX.
prefix=$(cache NVFENCE_PACKAGE_PREFIX)
prefix=${prefix:-/usr}
libdir=$(cache CMAKE_INSTALL_LIBDIR)
case "$libdir" in /*) L=$libdir ;; *) L=$prefix/$libdir ;; esac
if [ "$(cache NVFENCE_MULTIARCH_LIBDIR)" = ON ]; then
    [ "$libdir" = "lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" ] \
        || fail "libdir $libdir is not lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH) (multiarch)"
fi
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
debver=$(sed -n '1s/^nvfence (\([^)]*\)).*/\1/p' "$(cache CMAKE_HOME_DIRECTORY)/packaging/deb/changelog")
case "$debver" in "$version"-[0-9]*) ;; *) fail "changelog version $debver is not $version-N" ;; esac
soname_major=${version%%.*}
lib=libnvfence$soname_major

(cd "$build" && flock -w 900 .cpack.lock cpack -G DEB -B "$tmp/out") >"$tmp/cpack.log" 2>&1 \
    || { cat "$tmp/cpack.log"; echo "FAIL: cpack -G DEB"; exit 1; }
ls "$tmp"/out/*.deb >/dev/null 2>&1 || { cat "$tmp/cpack.log"; echo "FAIL: no .deb"; exit 1; }
declare -A deb
for f in "$tmp"/out/*.deb; do
    p=$(dpkg-deb -f "$f" Package); deb[$p]=$f
    echo "package: $(basename "$f")"
done
[ "${#deb[@]}" -eq 3 ] || fail "want 3 packages, got: ${!deb[*]}"
for p in "$lib" libnvfence-dev nvfence; do
    [ -n "${deb[$p]:-}" ] || { fail "no package $p"; echo "deb test: $fails failures"; exit 1; }
done

# dep_names DEB: the package names of Depends, one a line
dep_names() { dpkg-deb -f "$1" Depends | tr ',' '\n' | sed 's/^ *//; s/ .*//' | sed '/^$/d'; }
for p in "${!deb[@]}"; do
    f=${deb[$p]}
    [ "$(dpkg-deb -f "$f" Version)" = "$debver" ] || fail "$p: Version $(dpkg-deb -f "$f" Version) is not $debver"
    m=$(dpkg-deb -f "$f" Maintainer)
    case "$m" in *'<'*@*.*'>') ;; *) fail "$p: Maintainer '$m' has no address" ;; esac
    case "$m" in *localhost*) fail "$p: Maintainer '$m' is a local address" ;; esac
    [ "$(dpkg-deb -f "$f" Source)" = nvfence ] || fail "$p: Source is not nvfence"
    # Every dependency is a Debian package name with an optional version.
    dpkg-deb -f "$f" Depends | tr ',' '\n' | sed 's/^ *//' | sed '/^$/d' \
        | grep -Ev '^[a-z0-9][a-z0-9.+-]+( \((>=|=) [^)]+\))?$' && fail "$p: malformed Depends"
    dpkg-deb -c "$f" | awk '{print $6}' | sed 's|^\./|/|' > "$tmp/$p.contents"
    for d in copyright changelog.Debian.gz; do
        grep -qx "$prefix/share/doc/$p/$d" "$tmp/$p.contents" || fail "$p: no $prefix/share/doc/$p/$d"
    done
    grep -E '/share/man/man[0-9]/[^/]+\.[0-9]$' "$tmp/$p.contents" && fail "$p: man pages not compressed"
    grep -q '^/usr/local/' "$tmp/$p.contents" && [ "$prefix" != /usr/local ] \
        && fail "$p: files under /usr/local: $(grep '^/usr/local/' "$tmp/$p.contents" | head -3)"
    dpkg-deb -x "$f" "$tmp/root-$p"
    # The copyright is machine-readable (DEP-5) and names the MIT license.
    c="$tmp/root-$p$prefix/share/doc/$p/copyright"
    [ "$(head -n1 "$c" 2>/dev/null)" = "$(grep -m1 '^Format: ' /usr/share/doc/dpkg/copyright)" ] \
        || fail "$p: copyright is not DEP-5"
    grep -qx 'License: MIT' "$c" 2>/dev/null || fail "$p: copyright names no MIT license"
    zcat "$tmp/root-$p$prefix/share/doc/$p/changelog.Debian.gz" 2>/dev/null | head -n1 | grep -q "^nvfence ($debver)" \
        || fail "$p: changelog.Debian.gz does not start with nvfence ($debver)"
done
echo "Depends: $lib: $(dpkg-deb -f "${deb[$lib]}" Depends)"
echo "Depends: libnvfence-dev: $(dpkg-deb -f "${deb[libnvfence-dev]}" Depends)"
echo "Depends: nvfence: $(dpkg-deb -f "${deb[nvfence]}" Depends)"

# --- libnvfence0: the shared library, nothing else.
c="$tmp/$lib.contents"
grep -Eqx "$L/libnvfence\.so\.$soname_major" "$c" || fail "$lib: no $L/libnvfence.so.$soname_major"
grep -Eqx "$L/libnvfence\.so\.$version" "$c" || fail "$lib: no $L/libnvfence.so.$version"
grep -Eq '/libnvfence\.so$|/include/|\.pc$|/cmake/|/bin/|/sbin/' "$c" \
    && fail "$lib: carries files of another package: $(grep -E '/libnvfence\.so$|/include/|\.pc$|/cmake/|/bin/' "$c" | head -3)"
[ "$(dpkg-deb -f "${deb[$lib]}" Section)" = libs ] || fail "$lib: Section is not libs"
for d in libc6 liburing2 libstdc++6; do
    dep_names "${deb[$lib]}" | grep -qxF "$d" || fail "$lib: Depends lacks $d"
done
dpkg-deb -e "${deb[$lib]}" "$tmp/ctl-lib"
grep -Eq "^libnvfence $soname_major $lib( |$)" "$tmp/ctl-lib/shlibs" 2>/dev/null \
    || fail "$lib: shlibs does not map libnvfence $soname_major to $lib: $(cat "$tmp/ctl-lib/shlibs" 2>&1)"
grep -qx 'activate-noawait ldconfig' "$tmp/ctl-lib/triggers" 2>/dev/null || fail "$lib: no ldconfig trigger"
so="$tmp/root-$lib$L/libnvfence.so.$version"
[ "$(objdump -p "$so" 2>/dev/null | awk '$1 == "SONAME" {print $2}')" = "libnvfence.so.$soname_major" ] \
    || fail "$lib: SONAME is not libnvfence.so.$soname_major"

# --- libnvfence-dev: headers, the .so link, nvfence.pc, the CMake package.
c="$tmp/libnvfence-dev.contents"
for f in "$prefix/include/nvfence/nvfence.h" "$prefix/include/nvfence/fence.hpp" "$L/libnvfence.so" \
         "$L/pkgconfig/nvfence.pc" "$L/cmake/nvfence/nvfenceConfig.cmake" \
         "$L/cmake/nvfence/nvfenceConfigVersion.cmake" "$L/cmake/nvfence/nvfenceTargets.cmake" \
         "$prefix/include/nvfence/testing.hpp" "$L/libnvfence_testing.a" \
         "$prefix/share/man/man3/libnvfence.3.gz" "$prefix/share/man/man3/nvf_ns_open.3.gz" \
         "$prefix/share/man/man3/nvfence::Fence.3.gz"; do
    grep -qx "$f" "$c" || fail "libnvfence-dev: $f not in the package"
done
# The API reference (man3) is the one man section the -dev package ships.
grep -Eq '/libnvfence\.so\.|/bin/|/sbin/|/man/man[^3]' "$c" && fail "libnvfence-dev: carries files of another package"
[ "$(dpkg-deb -f "${deb[libnvfence-dev]}" Section)" = libdevel ] || fail "libnvfence-dev: Section is not libdevel"
dpkg-deb -f "${deb[libnvfence-dev]}" Depends | tr ',' '\n' | sed 's/^ *//' | grep -qx "$lib (= $debver)" \
    || fail "libnvfence-dev: does not depend on $lib (= $debver)"
# Every module nvfence.pc requires (Requires and Requires.private: pkg-config
# reads both for --libs) comes with a package libnvfence-dev depends on.
pc="$tmp/root-libnvfence-dev$L/pkgconfig/nvfence.pc"
mods=$(sed -n 's/^Requires\(\.private\)\{0,1\}: *//p' "$pc" | tr ',' '\n' | sed 's/^ *//; s/[ <>=].*//' | sed '/^$/d')
for m in $mods; do
    owner=$(pkg-config --path "$m" 2>/dev/null | xargs -r realpath | xargs -r dpkg -S 2>/dev/null | head -n1 | cut -d: -f1)
    if [ -z "$owner" ]; then fail "nvfence.pc requires $m, which no installed package provides here"; continue; fi
    dep_names "${deb[libnvfence-dev]}" | grep -qxF "$owner" || fail "nvfence.pc requires $m ($owner), not in libnvfence-dev's Depends"
    echo "nvfence.pc requires $m: package $owner, in libnvfence-dev's Depends"
done
[ -n "$mods" ] || echo "nvfence.pc requires no module"

# --- nvfence: tools, agent, fence agent, rules, unit, docs, man pages.
c="$tmp/nvfence.contents"
for f in "$prefix/bin/nvfence" "$prefix/sbin/nvfenced" "$prefix/sbin/fence_nvfence" \
         "$prefix/share/man/man8/nvfence.8.gz" "$prefix/share/man/man8/nvfenced.8.gz" \
         "$prefix/share/man/man8/fence_nvfence.8.gz" "$prefix/share/man/man5/nvfenced.conf.5.gz" \
         "$prefix/share/doc/nvfence/AGENT.md" "$prefix/share/bash-completion/completions/nvfence"; do
    grep -qx "$f" "$c" || fail "nvfence: $f not in the package"
done
grep -Eq '/libnvfence\.so|/include/|\.pc$|/cmake/|/man/man3/' "$c" && fail "nvfence: carries library or -dev files"
[ "$(dpkg-deb -f "${deb[nvfence]}" Section)" = admin ] || fail "nvfence: Section is not admin"
dpkg-deb -f "${deb[nvfence]}" Depends | tr ',' '\n' | sed 's/^ *//' | grep -qx "$lib (= $debver)" \
    || fail "nvfence: does not depend on $lib (= $debver)"
for d in libc6 libstdc++6 libnvme1; do
    dep_names "${deb[nvfence]}" | grep -qxF "$d" || fail "nvfence: Depends lacks $d"
done
# The etcd elector loads libcurl at run time (no binary links it, so
# dpkg-shlibdeps cannot find it): the package states it.
if [ "$(cache NVFENCE_ETCD)" = ON ]; then
    dep_names "${deb[nvfence]}" | grep -qxF libcurl4 || fail "nvfence: built with etcd, Depends lacks libcurl4"
fi
# Where udev and systemd read them, and naming the package's own paths.
grep -qx "$prefix/lib/udev/rules.d/70-nvfence.rules" "$c" \
    || fail "udev rules not in $prefix/lib/udev/rules.d: $(grep 70-nvfence "$c")"
grep -qx "$prefix/lib/systemd/system/nvfenced@.service" "$c" \
    || fail "unit not in $prefix/lib/systemd/system: $(grep 'nvfenced@' "$c")"
root="$tmp/root-nvfence"
if [ "$prefix" = /usr ]; then etc=/etc; else etc=$prefix/etc; fi
rules="$root$prefix/lib/udev/rules.d/70-nvfence.rules"
unit="$root$prefix/lib/systemd/system/nvfenced@.service"
grep -q "^IMPORT{program}=\"$prefix/bin/nvfence udev-probe " "$rules" 2>/dev/null \
    || fail "rules do not run $prefix/bin/nvfence: $(grep IMPORT "$rules" 2>&1)"
grep -q "^TEST==\"$etc/nvfence/" "$rules" 2>/dev/null || fail "rules do not test $etc/nvfence/: $(grep TEST "$rules" 2>&1)"
grep -qx "ExecStart=$prefix/sbin/nvfenced --config $etc/nvfence/%i.conf --name %i" "$unit" 2>/dev/null \
    || fail "unit ExecStart: $(grep ExecStart "$unit" 2>&1)"
grep -qx "ConditionPathExists=$etc/nvfence/%i.conf" "$unit" || fail "unit condition: $(grep Condition "$unit")"
grep -q "file:$prefix/share/doc/nvfence/AGENT.md" "$unit" || fail "unit Documentation: $(grep Documentation "$unit")"
# The man pages render from the package as they are (gzip).
for m in "$root$prefix"/share/man/man*/*.gz; do
    gzip -t "$m" || fail "$m: not gzip"
    out=$(MANWIDTH=80 man --warnings=w -l "$m" 2>&1 >/dev/null)
    [ -z "$out" ] || fail "$(basename "$m"): groff warnings: $out"
done

# --- Hardening (dpkg-buildflags, hardening=+all): every packaged ELF file
# is PIE or a shared object, has full RELRO (GNU_RELRO + BIND_NOW) and the
# stack protector; the fortified functions where the build had them.
if [ "$(cache NVFENCE_DPKG_BUILDFLAGS)" = ON ]; then
    for e in "$root$prefix/bin/nvfence" "$root$prefix/sbin/nvfenced" "$root$prefix/sbin/fence_nvfence" \
             "$tmp/root-$lib$L/libnvfence.so.$version"; do
        n=$(basename "$e")
        readelf -h "$e" | grep -q 'Type:.*DYN' || fail "$n: not PIE"
        readelf -lW "$e" | grep -q GNU_RELRO || fail "$n: no RELRO"
        readelf -dW "$e" | grep -Eq 'BIND_NOW|FLAGS.*NOW' || fail "$n: no BIND_NOW"
        readelf -sW --dyn-syms "$e" | grep -q '__stack_chk_fail' || fail "$n: no stack protector"
    done
    readelf -sW --dyn-syms "$root$prefix/sbin/nvfenced" "$root$prefix/bin/nvfence" | grep -q '__[a-z_]*_chk@' \
        || fail "nvfence, nvfenced: no fortified function (_FORTIFY_SOURCE)"
fi

# --- Maintainer scripts of nvfence, run with stubs that log their calls.
dpkg-deb -e "${deb[nvfence]}" "$tmp/ctl"
[ -x "$tmp/ctl/postinst" ] && [ -x "$tmp/ctl/prerm" ] && [ -x "$tmp/ctl/postrm" ] \
    || fail "postinst/prerm/postrm missing or not executable"
[ -e "$tmp/ctl/triggers" ] && fail "nvfence has a triggers file (the ldconfig trigger is $lib's)"
mkdir -p "$tmp/stub"
for t in udevadm systemctl deb-systemd-invoke; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\n' "$t" "$tmp" > "$tmp/stub/$t"; chmod +x "$tmp/stub/$t"
done
run() { : > "$tmp/calls"; PATH="$tmp/stub:$PATH" sh "$tmp/ctl/$1" "$2" || fail "$1 $2 exited $?"; }
run postinst configure
if [ -d /run/udev ]; then
    grep -qx 'udevadm control --reload' "$tmp/calls" || fail "postinst did not reload udev: $(cat "$tmp/calls")"
    grep -q '^udevadm trigger .*--subsystem-match=block' "$tmp/calls" || fail "postinst did not trigger block devices"
else
    grep -q udevadm "$tmp/calls" && fail "postinst called udevadm without a running udev"
fi
if [ -d /run/systemd/system ]; then
    grep -qx 'systemctl daemon-reload' "$tmp/calls" || fail "postinst did not reload systemd: $(cat "$tmp/calls")"
else
    grep -q systemctl "$tmp/calls" && fail "postinst called systemctl without a running systemd"
fi
# The guards themselves, whatever this host runs: the reload lines sit
# behind the checks for a running udev and systemd.
grep -q '\[ -d /run/systemd/system \].*systemctl' "$tmp/ctl/postinst" || fail "postinst: systemctl not guarded"
grep -q 'udevadm control --reload' "$tmp/ctl/postinst" || fail "postinst does not reload udev"
grep -q 'systemctl daemon-reload' "$tmp/ctl/postrm" || fail "postrm does not reload systemd"
run postrm upgrade
grep -q . "$tmp/calls" && fail "postrm upgrade reloaded: $(cat "$tmp/calls")"
run postrm remove
echo "calls on remove: $(tr '\n' ';' < "$tmp/calls")"
# prerm stops the agents on removal, not on upgrade.
grep -q "deb-systemd-invoke stop 'nvfenced@\*.service'" "$tmp/ctl/prerm" || fail "prerm does not stop the agents"
grep -q '\[ -d /run/systemd/system \].*deb-systemd-invoke' "$tmp/ctl/prerm" || fail "prerm: deb-systemd-invoke not guarded"
run prerm upgrade
grep -q . "$tmp/calls" && fail "prerm upgrade called: $(cat "$tmp/calls")"
run prerm remove
if [ -d /run/systemd/system ]; then
    grep -qx 'deb-systemd-invoke stop nvfenced@\*.service' "$tmp/calls" || fail "prerm remove did not stop the agents: $(cat "$tmp/calls")"
fi
grep -q 'udevadm trigger .*--subsystem-match=block' "$tmp/ctl/postrm" || fail "postrm does not re-trigger block devices"

[ "$fails" -eq 0 ] && echo "deb test passed"
[ "$fails" -eq 0 ]
