#!/usr/bin/env bash
# Writes debian/libnvfence0.symbols from the libnvfence.so.N of a build tree:
# every exported symbol (version node NVFENCE_1.0), C++ ones demangled with
# dpkg-gensymbols' (c++) tag. Run it after an intended change of the ABI
# (with `cmake --build build --target abi_baseline`, README "ABI"); the
# debian/ build fails on any difference (DPKG_GENSYMBOLS_CHECK_LEVEL=4,
# debian/rules). New symbols get the version in debian/changelog; a symbol
# already in the file keeps its version. A constructor or destructor
# emitted twice (C1/C2, D1/D2) demangles to one name: one line matches both.
#   packaging/deb/update-symbols.sh BUILD_DIR
set -euo pipefail
build=${1:?build dir}
src=$(cd "$(dirname "$0")/../.." && pwd)
ver=$(cd "$src" && dpkg-parsechangelog -S Version); ver=${ver%-*}
lib=$(ls "$build"/lib/libnvfence.so.[0-9]*.* | head -n1)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pkg/DEBIAN" "$tmp/pkg/usr/lib"
cp "$lib" "$tmp/pkg/usr/lib/"
old=$src/debian/libnvfence0.symbols
dpkg-gensymbols -q -plibnvfence0 -v"$ver" -P"$tmp/pkg" -O"$tmp/raw" -e"$tmp/pkg/usr/lib/$(basename "$lib")"
{
    head -n1 "$tmp/raw"
    echo "* Build-Depends-Package: libnvfence-dev"
    tail -n +2 "$tmp/raw" | while read -r sym v; do
        [ "$sym" = "*" ] && continue   # a header line dpkg-gensymbols carried over (written above)
        name=${sym%@*}; node=${sym#*@}
        case "$name" in
            _Z*) line="(c++)\"$(c++filt "$name")@$node\"" ;;
            *) line=$sym ;;
        esac
        # Keep the version a symbol already has.
        if [ -e "$old" ] && prev=$(grep -F -- " $line " "$old" | head -n1) && [ -n "$prev" ]; then
            v=${prev##* }
        fi
        echo " $line $v"
    done | LC_ALL=C sort -u
} > "$tmp/new"
mv "$tmp/new" "$old"
echo "wrote $old ($(($(wc -l < "$old") - 2)) symbols)"
