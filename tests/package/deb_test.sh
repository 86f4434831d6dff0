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
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:[A-Z]*=//p' "$build/CMakeCache.txt")

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
grep -q '/udev/rules.d/70-nvfence.rules$' "$tmp/contents" || fail "udev rules not in the package"
grep -q '/systemd/system/nvfenced@.service$' "$tmp/contents" || fail "unit not in the package"

dpkg-deb -e "$deb" "$tmp/ctl"
[ -x "$tmp/ctl/postinst" ] && [ -x "$tmp/ctl/postrm" ] || fail "postinst/postrm missing or not executable"
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

[ "$fails" -eq 0 ] && echo "deb test passed"
[ "$fails" -eq 0 ]
