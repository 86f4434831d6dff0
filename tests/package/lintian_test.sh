#!/usr/bin/env bash
# lintian on the packages `cpack -G DEB` makes from this build tree: not a
# single error (E:) or warning (W:). Overrides are shipped by the packages
# themselves (packaging/deb/lintian/, each with the reason) and are shown
# here (O:) so a review sees every one; info tags (I:) are printed too.
#   lintian_test.sh BUILD_DIR
set -u
build=${1:?build dir}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
command -v lintian >/dev/null || { echo "FAIL: lintian not installed (scripts/setup.sh installs it)"; exit 1; }
(cd "$build" && flock -w 900 .cpack.lock cpack -G DEB -B "$tmp/out") >"$tmp/cpack.log" 2>&1 \
    || { cat "$tmp/cpack.log"; echo "FAIL: cpack -G DEB"; exit 1; }
debs=("$tmp"/out/*.deb)
[ -e "${debs[0]}" ] || { cat "$tmp/cpack.log"; echo "FAIL: no .deb"; exit 1; }
echo "lintian $(lintian --version | awk '{print $2}') on: $(cd "$tmp/out" && echo *.deb)"
lintian --fail-on none --show-overrides --display-info --no-tag-display-limit "${debs[@]}" \
    >"$tmp/lintian.out" 2>"$tmp/lintian.err"
rc=$?
cat "$tmp/lintian.out"
[ "$rc" -eq 0 ] || { cat "$tmp/lintian.err"; echo "FAIL: lintian exited $rc"; exit 1; }
errors=$(grep -c '^E: ' "$tmp/lintian.out"); warnings=$(grep -c '^W: ' "$tmp/lintian.out")
overrides=$(grep -c '^O: ' "$tmp/lintian.out")
echo "lintian: $errors errors, $warnings warnings ($overrides overridden)"
[ "$errors" -eq 0 ] && [ "$warnings" -eq 0 ]
