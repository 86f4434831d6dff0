#!/usr/bin/env bash
# The debian/ source package: `dpkg-buildpackage -us -uc -b` on a copy of
# the source tree (its files as git lists them), then lintian on what it
# built (0 errors, 0 warnings), the split against `cpack -G DEB` of this
# build tree (the same three packages with the same files), and the
# library's symbols file (debian/rules sets DPKG_GENSYMBOLS_CHECK_LEVEL=4:
# a symbol added or lost fails the build). The copy is always at the same
# path under the build tree, so with ccache (CMAKE_CXX_COMPILER_LAUNCHER=
# ccache in the environment, as CI sets it) a second run compiles nothing.
#   debian_source_test.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?build dir}; src=${2:?source dir}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for t in dpkg-buildpackage dh lintian; do
    command -v "$t" >/dev/null || { echo "FAIL: $t not installed (scripts/setup.sh installs it)"; exit 1; }
done
ver=$(cd "$src" && dpkg-parsechangelog -S Version) || { echo "FAIL: debian/changelog"; exit 1; }
work=$build/debian-source
copy=$work/nvfence-${ver%-*}
rm -rf "$work"; mkdir -p "$copy"
# The files of the source tree: tracked and untracked-but-not-ignored (a
# tree being edited builds what it has); a tree without git: all but build*.
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z --cached --others --exclude-standard | grep -zv '^build' \
        | while IFS= read -r -d '' f; do { [ -e "$f" ] || [ -L "$f" ]; } && printf '%s\0' "$f"; done \
        | cpio -0 -pdm --quiet "$copy") || { echo "FAIL: copy of the source tree"; exit 1; }
else
    (cd "$src" && find . -path ./build -prune -o -path './build-*' -prune -o -print0 | cpio -0 -pdm --quiet "$copy")
fi
# debhelper (compat 13) gives the build its own HOME: keep ccache's cache.
if [ "${CMAKE_CXX_COMPILER_LAUNCHER:-}" = ccache ] && command -v ccache >/dev/null; then
    export CCACHE_DIR=${CCACHE_DIR:-$(ccache -k cache_dir)}
fi
start=$(date +%s)
(cd "$copy" && DEB_BUILD_OPTIONS="nocheck parallel=${NVFENCE_DEB_JOBS:-2}" \
    dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1
rc=$?
echo "dpkg-buildpackage -us -uc -b: exit $rc in $(( $(date +%s) - start )) s (log: $work/build.log)"
if [ "$rc" -ne 0 ]; then tail -n 60 "$work/build.log"; echo "FAIL: dpkg-buildpackage"; exit 1; fi
grep -E '^dpkg-gensymbols: (warning|error)' "$work/build.log" && fail "dpkg-gensymbols: the symbols file does not match"

changes=("$work"/nvfence_*.changes)
[ -e "${changes[0]}" ] || { echo "FAIL: no .changes"; exit 1; }
declare -A deb
# dh's automatic -dbgsym packages (detached debug info) are not counted:
# cpack ships stripped binaries without them.
for f in "$work"/*.deb; do
    p=$(dpkg-deb -f "$f" Package); echo "package: $(basename "$f")"
    case "$p" in *-dbgsym) continue ;; esac
    deb[$p]=$f
done
for p in libnvfence0 libnvfence-dev nvfence; do [ -n "${deb[$p]:-}" ] || fail "no package $p"; done
[ "${#deb[@]}" -eq 3 ] || fail "want 3 packages, got: ${!deb[*]}"

echo "lintian $(lintian --version | awk '{print $2}') on $(basename "${changes[0]}")"
lintian --fail-on none --show-overrides --display-info --no-tag-display-limit "${changes[0]}" \
    >"$work/lintian.out" 2>"$work/lintian.err"
rc=$?
cat "$work/lintian.out"
[ "$rc" -eq 0 ] || { cat "$work/lintian.err"; fail "lintian exited $rc"; }
e=$(grep -c '^E: ' "$work/lintian.out"); w=$(grep -c '^W: ' "$work/lintian.out")
echo "lintian: $e errors, $w warnings"
[ "$e" -eq 0 ] && [ "$w" -eq 0 ] || fail "lintian: $e errors, $w warnings"

# The fence agent where fence-agents puts fence_scsi, and a shlibs/symbols
# Depends on the library.
dpkg-deb -c "${deb[nvfence]}" | grep -q ' \./usr/sbin/fence_nvfence$' || fail "nvfence: no /usr/sbin/fence_nvfence"
dpkg-deb -I "${deb[libnvfence0]}" symbols >/dev/null 2>&1 || fail "libnvfence0: no symbols control file"
dpkg-deb -f "${deb[nvfence]}" Depends | grep -q 'libnvfence0 (= ' || fail "nvfence: no Depends on libnvfence0 (= version)"

# The same split as `cpack -G DEB` of this build tree: each package's files.
if [ -e "$build/CPackConfig.cmake" ]; then
    (cd "$build" && flock -w 900 .cpack.lock cpack -G DEB -B "$work/cpack") >"$work/cpack.log" 2>&1 \
        || { cat "$work/cpack.log"; fail "cpack -G DEB"; }
    for f in "$work"/cpack/*.deb; do
        p=$(dpkg-deb -f "$f" Package)
        [ -n "${deb[$p]:-}" ] || { fail "cpack's package $p is not built from debian/"; continue; }
        # The CMake package's per-configuration file is named after the
        # build type (cpack: RelWithDebInfo, dh: None).
        list() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ {print $6}' | sed 's/nvfenceTargets-[a-z]*\.cmake$/nvfenceTargets-CONFIG.cmake/' | sort; }
        diff <(list "$f") <(list "${deb[$p]}") >"$work/diff.$p" \
            || { cat "$work/diff.$p"; fail "$p: files differ between cpack (<) and debian/ (>)"; }
    done
fi
[ "$fails" -eq 0 ] && echo "debian source package: ok"
[ "$fails" -eq 0 ]
