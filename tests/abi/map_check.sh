#!/usr/bin/env bash
# libnvfence's version script lists every exported symbol by name
# (src/capi/libnvfence.map), and the library exports exactly that list:
#   map_check.sh LIB MAP OBJECTS SYMBOLS VERSION
# OBJECTS: the library's object files joined with ':' (what they mark for
# export: global, default visibility, nvf_* or nvfence::); SYMBOLS:
# debian/libnvfence0.symbols; VERSION: the project version, for the line a
# new symbol takes there. Fails when
#  - the map has a pattern (a glob outside a quoted name) other than local: *;
#  - the library exports a symbol the map does not list, or the map lists
#    one the library lacks;
#  - an object marks a symbol for export (NVFENCE_API) that the map leaves
#    local, i.e. a new API function without its map line;
#  - a private member function known to be private is exported;
#  - the Debian symbols file differs from what the library exports.
# Each failure says which line to add or remove, and where.
set -u
lib=${1:?libnvfence.so}; map=${2:?libnvfence.map}; objects=${3:?objects}
symbols=${4:?debian symbols file}; version=${5:?project version}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for t in nm readelf c++filt; do
    command -v "$t" >/dev/null || { echo "FAIL: $t missing (apt-get install binutils)"; exit 1; }
done
api_names() { grep '^nvf_\|^nvfence::\|^\(vtable\|typeinfo\|typeinfo name\|non-virtual thunk to\) for nvfence::\|^non-virtual thunk to nvfence::'; }

# The map without its comments, and its global names (C bare, C++ quoted).
body=$(sed 's|/\*.*\*/||; /\/\*/,/\*\//d' "$map")
listed=$( { sed -n 's/^ *\([A-Za-z_][A-Za-z0-9_]*\);$/\1/p' <<<"$body"; sed -n 's/^ *"\(.*\)";$/\1/p' <<<"$body"; } | sort)
unquoted=$(sed 's/"[^"]*"//g' <<<"$body" | sed '/^ *local: *$/,/^ *};/d')
grep -n '[*?[]' <<<"$unquoted" | sed 's/^/FAIL: the map has a pattern, list symbols by name: /' | grep . && fails=$((fails + 1))
dups=$(uniq -d <<<"$listed")
[ -z "$dups" ] || fail "the map lists twice: $dups"

# What the library exports (nm -D -C), without the version's own symbol.
exported=$(nm -D -C --defined-only "$lib" | sed -E 's/^[0-9a-f]+ [A-Za-z] //; s/@@?NVFENCE_[0-9.]+$//' \
    | grep -vx 'NVFENCE_1\.0' | sort -u)
# What the objects mark for export: defined, global or weak, default visibility.
marked=$(tr ':' '\n' <<<"$objects" | while read -r o; do
    [ -n "$o" ] && readelf -sW "$o" | awk '($5=="GLOBAL"||$5=="WEAK") && $6=="DEFAULT" && $7!="UND" {print $8}'
done | c++filt | api_names | sort -u)
[ -n "$marked" ] || fail "no symbol marked for export in the objects ($objects)"

# add_line NAME: the line NAME takes in the map.
add_line() { case $1 in nvf_*) printf '    %s;' "$1" ;; *) printf '      "%s";' "$1" ;; esac; }
where() { case $1 in nvf_*) echo 'under "global:" of NVFENCE_1.0' ;; *) echo 'inside extern "C++" { } of NVFENCE_1.0' ;; esac; }
while IFS= read -r s; do
    [ -n "$s" ] && fail "libnvfence exports $s, which the map does not list: a pattern crept back? add to $map $(where "$s") the line
$(add_line "$s")"
done < <(comm -23 <(echo "$exported") <(echo "$listed"))
while IFS= read -r s; do
    [ -n "$s" ] && fail "$s is marked for export (NVFENCE_API) but the map leaves it local: add to $map $(where "$s") the line
$(add_line "$s")"
done < <(comm -23 <(echo "$marked") <(echo "$listed"))
while IFS= read -r s; do
    [ -n "$s" ] && fail "the map lists $s, which the library does not export: remove from $map the line
$(add_line "$s")"
done < <(comm -13 <(echo "$exported") <(echo "$listed"))

# Private members (and nvfenced's control server) are never exported.
private='nvfence::Fence::\(evict_round\|evict_rekey\|evict_send\|evict_allowed\|register_args\|register_fresh\|token_usable\|node_for\|fresh_key\|start\|takeover_after\|after_acquire_failure\|acquire_verified\|verify_rekeyed\|finish\)(\|nvfence::Reservations::report_once(\|nvfence::FencedWriter::sync_(\|nvfence::ControlServer\|nvfence::control_listen(\|nvfence::control_op_allowed('
grep "$private" <<<"$exported" | sed 's/^/FAIL: a private member or the agent'"'"'s server is exported: /' | grep . && fails=$((fails + 1))
grep "$private" <<<"$listed" | sed 's/^/FAIL: the map lists a private member or the agent'"'"'s server: /' | grep . && fails=$((fails + 1))

# debian/libnvfence0.symbols: the same names, at NVFENCE_1.0.
deb=$(sed -n 's/^ (c++)"\(.*\)@NVFENCE_1\.0" .*/\1/p; s/^ \([A-Za-z_][A-Za-z0-9_]*\)@NVFENCE_1\.0 .*/\1/p' "$symbols" | grep -vx 'NVFENCE_1\.0' | sort -u)
deb_line() { case $1 in nvf_*) printf ' %s@NVFENCE_1.0 %s' "$1" "$version" ;; *) printf ' (c++)"%s@NVFENCE_1.0" %s' "$1" "$version" ;; esac; }
while IFS= read -r s; do
    [ -n "$s" ] && fail "$symbols does not list $s: add the line
$(deb_line "$s")"
done < <(comm -23 <(echo "$exported") <(echo "$deb"))
while IFS= read -r s; do
    [ -n "$s" ] && fail "$symbols lists $s, which the library does not export: remove its line"
done < <(comm -13 <(echo "$exported") <(echo "$deb"))

echo "libnvfence exports $(wc -l <<<"$exported") symbols, the map lists $(wc -l <<<"$listed") by name"
[ "$fails" -eq 0 ] && echo "map check passed"
[ "$fails" -eq 0 ]
