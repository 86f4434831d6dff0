#!/usr/bin/env bash
# Builds SQLite's TCL test harness (testfixture) from Debian's sqlite3 source
# package, the same version as the installed libsqlite3-dev, and caches it
# outside the work tree. Prints the cache directory (holding `testfixture`
# and the source tree's `test/`) on stdout.
#
# The deb-src entries are derived at run time from the machine's own apt
# sources (same URIs, suites and keys, Types: deb-src) in a private apt
# configuration: the machine's apt state is not touched and no mirror host
# name is written anywhere in the repository.
#
# Cache key: the source version and the hash of this script, so a warm CI
# skips the download and the build (~3 min on 2 cores).
# Environment: NVFENCE_SQLITE_CACHE (default /var/cache/nvfence-sqlite).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${NVFENCE_SQLITE_CACHE:-/var/cache/nvfence-sqlite}
ver=$(dpkg-query -W -f='${Version}' libsqlite3-dev 2>/dev/null) || {
  echo "build_testfixture: libsqlite3-dev is not installed (scripts/setup.sh)" >&2; exit 4; }
command -v tclsh >/dev/null && [ -d /usr/lib/tcl8.6 ] || {
  echo "build_testfixture: tcl-dev is not installed (scripts/setup.sh)" >&2; exit 4; }
key=$(cat "$0" | sha256sum | cut -c1-12)
dir="$cache_root/sqlite3-$ver-$key"
if [ -x "$dir/testfixture" ] && [ -d "$dir/test" ]; then echo "$dir"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ -x "$dir/testfixture" ] && [ -d "$dir/test" ]; then echo "$dir"; exit 0; fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt/sources.list.d" "$work/apt/lists/partial" "$work/src"
n=0
for f in /etc/apt/sources.list.d/*.sources; do
  [ -e "$f" ] || continue
  sed -E 's/^Types:.*$/Types: deb-src/' "$f" > "$work/apt/sources.list.d/$(basename "$f")"
  n=$((n + 1))
done
if [ -f /etc/apt/sources.list ]; then
  grep -E '^deb ' /etc/apt/sources.list | sed -E 's/^deb /deb-src /' > "$work/apt/sources.list" || true
  [ -s "$work/apt/sources.list" ] && n=$((n + 1))
fi
touch "$work/apt/sources.list"
[ "$n" -gt 0 ] || { echo "build_testfixture: no apt sources to derive deb-src from" >&2; exit 4; }
aptopts=(-o "Dir::Etc::SourceList=$work/apt/sources.list"
         -o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
         -o "Dir::State::Lists=$work/apt/lists"
         -o "APT::Sandbox::User=root")
echo "build_testfixture: fetching sqlite3 $ver source" >&2
apt-get "${aptopts[@]}" -qq update >&2
(cd "$work/src" && apt-get "${aptopts[@]}" -qq source "sqlite3=$ver" >&2)
srcdir=$(find "$work/src" -maxdepth 1 -mindepth 1 -type d -name 'sqlite3-*' | head -1)
[ -n "$srcdir" ] || { echo "build_testfixture: source not unpacked" >&2; exit 1; }
echo "build_testfixture: building testfixture (a few minutes)" >&2
mkdir -p "$work/bld"
# The modules Debian's libsqlite3 is built with (`PRAGMA compile_options` of
# the stock sqlite3 shell), so that SQLite's tests of FTS3/4/5, R-Tree, the
# session extension and the rest run through the VFS instead of skipping
# themselves; not the options that change SQLite's defaults (SECURE_DELETE,
# DEFAULT_PAGE_SIZE, OMIT_LOOKASIDE...), which SQLite's tests do not expect.
features="-DSQLITE_ENABLE_FTS3 -DSQLITE_ENABLE_FTS3_PARENTHESIS -DSQLITE_ENABLE_FTS3_TOKENIZER -DSQLITE_ENABLE_FTS4
  -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_RTREE -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_PREUPDATE_HOOK
  -DSQLITE_ENABLE_DBSTAT_VTAB -DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_ENABLE_UNLOCK_NOTIFY
  -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT -DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_SOUNDEX"
(cd "$work/bld" && CFLAGS="-O2 $(echo $features)" "$srcdir/configure" --with-tcl=/usr/lib/tcl8.6 \
  --enable-load-extension >&2 && nice -n 10 make -j2 testfixture >&2)
# Each module asked for must be in the harness: a file of its tests would
# otherwise skip itself and still pass.
echo 'sqlite3 db :memory:; puts [db eval {PRAGMA compile_options}]' > "$work/options.tcl"
options=$(cd "$work" && "$work/bld/testfixture" "$work/options.tcl")
for f in $features; do
  [[ " $options " == *" ${f#-DSQLITE_} "* ]] || {
    echo "build_testfixture: testfixture lacks ${f#-DSQLITE_} (compile options: $options)" >&2; exit 1; }
done
mkdir -p "$work/out"
cp "$work/bld/testfixture" "$work/out/"
cp -r "$srcdir/test" "$work/out/test"
cp -r "$srcdir/ext" "$work/out/ext" 2>/dev/null || true
echo "$ver" > "$work/out/VERSION"
rm -rf "$dir"
mv "$work/out" "$dir"
echo "$dir"
