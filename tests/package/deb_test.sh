#!/usr/bin/env bash
# `cpack -G DEB` in the build directory, then the package inspected with
# dpkg-deb: contents, Depends from dpkg-shlibdeps, the shlibs/ldconfig
# trigger, and the maintainer scripts run against stub udevadm/systemctl
# (they must reload udev and systemd, and call neither when not running).
#   deb_test.sh BUILD_DIR
set -u
build=${1:?build dir}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# The package's prefix (NVFENCE_PACKAGE_PREFIX, /usr unless set), whatever
# the build's CMAKE_INSTALL_PREFIX.
prefix=$(sed -n 's/^NVFENCE_PACKAGE_PREFIX:[A-Z]*=//p' "$build/CMakeCache.txt")
prefix=${prefix:-/usr}

(cd "$build" && cpack -G DEB -B "$tmp/out") >"$tmp/cpack.log" 2>&1 \
    || { cat "$tmp/cpack.log"; echo "FAIL: cpack -G DEB"; exit 1; }
deb=$(ls "$tmp"/out/*.deb 2>/dev/null | head -n1)
[ -n "$deb" ] || { cat "$tmp/cpack.log"; echo "FAIL: no .deb"; exit 1; }
echo "package: $(basename "$deb")"

[ "$(dpkg-deb -f "$deb" Package)" = nvfence ] || fail "Package is not nvfence"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for d in libc6 liburing2 libstdc++6; do
    echo "$depends" | tr ',' '\n' | sed 's/^ *//; s/ .*//' | grep -qxF "$d" || fail "Depends lacks $d"
done
# Every dependency is a Debian package name with an optional version.
echo "$depends" | tr ',' '\n' | sed 's/^ *//' | grep -Ev '^[a-z0-9][a-z0-9.+-]+( \((>=|=) [^)]+\))?$' \
    && fail "malformed Depends"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$tmp/contents"
for f in "$prefix/bin/nvfence" "$prefix/sbin/nvfenced" "$prefix/include/nvfence/nvfence.h" \
         "$prefix/share/man/man8/nvfence.8" "$prefix/share/man/man5/nvfenced.conf.5" \
         "$prefix/share/doc/nvfence/AGENT.md"; do
    grep -qx "$f" "$tmp/contents" || fail "$f not in the package"
done
grep -Eq '/libnvfence\.so\.[0-9]+$' "$tmp/contents" || fail "libnvfence.so.N not in the package"
# Where udev and systemd read them, and naming the package's own paths.
grep -qx "$prefix/lib/udev/rules.d/70-nvfence.rules" "$tmp/contents" \
    || fail "udev rules not in $prefix/lib/udev/rules.d: $(grep 70-nvfence "$tmp/contents")"
grep -qx "$prefix/lib/systemd/system/nvfenced@.service" "$tmp/contents" \
    || fail "unit not in $prefix/lib/systemd/system: $(grep 'nvfenced@' "$tmp/contents")"
grep -q '^/usr/local/' "$tmp/contents" && [ "$prefix" != /usr/local ] \
    && fail "files under /usr/local: $(grep '^/usr/local/' "$tmp/contents" | head -3)"
dpkg-deb -x "$deb" "$tmp/root"
if [ "$prefix" = /usr ]; then etc=/etc; else etc=$prefix/etc; fi
rules="$tmp/root$prefix/lib/udev/rules.d/70-nvfence.rules"
unit="$tmp/root$prefix/lib/systemd/system/nvfenced@.service"
grep -q "^IMPORT{program}=\"$prefix/bin/nvfence udev-probe " "$rules" 2>/dev/null \
    || fail "rules do not run $prefix/bin/nvfence: $(grep IMPORT "$rules" 2>&1)"
grep -q "^TEST==\"$etc/nvfence/" "$rules" 2>/dev/null || fail "rules do not test $etc/nvfence/: $(grep TEST "$rules" 2>&1)"
grep -qx "ExecStart=$prefix/sbin/nvfenced --config $etc/nvfence/%i.conf --name %i" "$unit" 2>/dev/null \
    || fail "unit ExecStart: $(grep ExecStart "$unit" 2>&1)"
grep -qx "ConditionPathExists=$etc/nvfence/%i.conf" "$unit" || fail "unit condition: $(grep Condition "$unit")"
grep -q "file:$prefix/share/doc/nvfence/AGENT.md" "$unit" || fail "unit Documentation: $(grep Documentation "$unit")"

dpkg-deb -e "$deb" "$tmp/ctl"
[ -x "$tmp/ctl/postinst" ] && [ -x "$tmp/ctl/prerm" ] && [ -x "$tmp/ctl/postrm" ] \
    || fail "postinst/prerm/postrm missing or not executable"
grep -q 'libnvfence' "$tmp/ctl/shlibs" 2>/dev/null || fail "no shlibs file for libnvfence"
grep -qx 'activate-noawait ldconfig' "$tmp/ctl/triggers" 2>/dev/null || fail "no ldconfig trigger"

# Run the scripts with stubs that log their calls.
mkdir -p "$tmp/stub"
for t in udevadm systemctl; do
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
grep -q "systemctl stop 'nvfenced@\*.service'" "$tmp/ctl/prerm" || fail "prerm does not stop the agents"
grep -q '\[ -d /run/systemd/system \].*systemctl' "$tmp/ctl/prerm" || fail "prerm: systemctl not guarded"
run prerm upgrade
grep -q . "$tmp/calls" && fail "prerm upgrade called: $(cat "$tmp/calls")"
run prerm remove
if [ -d /run/systemd/system ]; then
    grep -qx 'systemctl stop nvfenced@\*.service' "$tmp/calls" || fail "prerm remove did not stop the agents: $(cat "$tmp/calls")"
fi
grep -q 'udevadm trigger .*--subsystem-match=block' "$tmp/ctl/postrm" || fail "postrm does not re-trigger block devices"

[ "$fails" -eq 0 ] && echo "deb test passed"
[ "$fails" -eq 0 ]
