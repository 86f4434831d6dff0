#!/usr/bin/env bash
# The loadable extension in Debian's own sqlite3 shell (.load) and in
# Python's sqlite3 module (enable_load_extension): the VFS registers, a
# database on a regular file commits and reads back, the SQL functions
# answer, and an unknown URI parameter is refused with its reason.
# Usage: load_extension.sh BUILD/lib/nvfence_sqlite.so
set -euo pipefail
ext=${1%.so}
command -v sqlite3 >/dev/null || { echo "load_extension: sqlite3 shell missing (scripts/setup.sh)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$(sqlite3 2>&1 <<SQL
.load $ext
.open file:$dir/shell.db?vfs=nvfence
CREATE TABLE t(x); INSERT INTO t VALUES(42);
SELECT 'row', x FROM t;
SELECT 'token', nvfence_token();
SELECT 'status', json_extract(nvfence_status(), '\$.fenced'), json_extract(nvfence_status(), '\$.message');
PRAGMA integrity_check;
SQL
)
echo "$out"
grep -qx 'row|42' <<<"$out" || fail "shell: row not read back"
grep -qx 'token|0' <<<"$out" || fail "shell: nvfence_token()"
grep -qx 'status|0|ok' <<<"$out" || fail "shell: nvfence_status()"
grep -qx 'ok' <<<"$out" || fail "shell: integrity_check"
[ "$(head -c 8 "$dir/shell.db")" = "NVFSQLT1" ] || fail "shell: no nvfence superblock at offset 0"

out=$(sqlite3 2>&1 <<SQL || true
.load $ext
.open file:$dir/other.db?vfs=nvfence&journal=wal
.open :memory:
SELECT 'why', nvfence_last_error();
SQL
)
echo "$out"
grep -q "unknown URI parameter 'journal'" <<<"$out" || fail "shell: unknown parameter not explained"
[ ! -e "$dir/other.db" ] || fail "shell: a refused open created a file"

/usr/bin/python3 - "$ext" "$dir" <<'PY'
import json, sqlite3, sys
ext, d = sys.argv[1], sys.argv[2]
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(ext)
c.close()
db = sqlite3.connect(f"file:{d}/py.db?vfs=nvfence", uri=True)
db.execute("create table t(x)")
db.executemany("insert into t values(?)", [(i,) for i in range(100)])
db.commit()
st = json.loads(db.execute("select nvfence_status()").fetchone()[0])
assert st["fenced"] is False and st["token"] == 0 and st["message"] == "ok", st
db.close()
db = sqlite3.connect(f"file:{d}/py.db?vfs=nvfence", uri=True)
assert db.execute("select sum(x) from t").fetchone()[0] == 4950
assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
print("python: ok", st)
PY
echo "load_extension: ok"
