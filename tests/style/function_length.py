#!/usr/bin/python3
"""No function over 70 lines in src/, tools/ and the simulator (tests/sim/),
C++ measured by Universal Ctags (its `end:` field: first line to closing
brace, inclusive; lambdas count in the function that holds them), nor in the
lab's Python (vm-test/), measured by Python's own parser (first line of the
def, decorators excluded, to its last line; nested functions count in the
one that holds them and are measured on their own too). TigerBeetle's style
guide.

The functions that are longer today are listed in long_functions.txt with
their length: the list may only shrink. A function not on it that passes
70 lines, a listed one that grew, or a listed one that is now short enough
(or gone: drop it from the list) fails the test.

Usage: function_length.py ROOT   (exit 0 ok, 1 violations, 2 setup error)"""
import ast
import os
import subprocess
import sys

LIMIT = 70
DIRS = ("src", "tools", "tests/sim")
PY_DIRS = ("vm-test",)


def lengths(root: str) -> dict:
    try:
        out = subprocess.run(["ctags", "-R", "--languages=C++", "--c++-kinds=f", "--fields=+ne", "-o", "-", *DIRS],
                             cwd=root, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"function_length: cannot run ctags (Debian package universal-ctags): {e}", file=sys.stderr)
        sys.exit(2)
    found = {}
    for line in out.splitlines():
        cols = line.split("\t")
        if len(cols) < 4 or cols[0].startswith("__anon"):
            continue
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" not in fields or "end" not in fields:
            continue
        n = int(fields["end"]) - int(fields["line"]) + 1
        where = f"{cols[1]}:{cols[0]}"
        found[where] = max(n, found.get(where, 0))
    if not found:
        print("function_length: ctags found no function: is it Universal Ctags?", file=sys.stderr)
        sys.exit(2)
    return found


def py_lengths(root: str) -> dict:
    """FILE:QUALIFIED.NAME -> lines of every Python function under PY_DIRS."""
    found = {}
    for d in PY_DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, d)):
            dirnames[:] = sorted(n for n in dirnames if n != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, root)
                    with open(path) as f:
                        tree = ast.parse(f.read(), filename=rel)
                    _walk(tree, rel, "", found)
    if not found:
        print(f"function_length: no Python function found under {', '.join(PY_DIRS)}", file=sys.stderr)
        sys.exit(2)
    return found


def _walk(node, rel: str, prefix: str, found: dict) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + child.name
            if not isinstance(child, ast.ClassDef):
                found[f"{rel}:{name}"] = child.end_lineno - child.lineno + 1
            _walk(child, rel, name + ".", found)


def allowed(path: str) -> dict:
    out = {}
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if line:
                where, n = line.rsplit(None, 1)
                out[where] = int(n)
    return out


def main() -> int:
    root = sys.argv[1]
    found = lengths(root)
    found.update(py_lengths(root))
    known = allowed(os.path.join(os.path.dirname(os.path.abspath(__file__)), "long_functions.txt"))
    bad = []
    for where, n in sorted(found.items()):
        if n <= LIMIT:
            continue
        if where not in known:
            bad.append(f"{where}: {n} lines (at most {LIMIT}: split it)")
        elif n > known[where]:
            bad.append(f"{where}: {n} lines, longer than the {known[where]} it may have (long_functions.txt)")
    for where, n in sorted(known.items()):
        if found.get(where, 0) <= LIMIT:
            bad.append(f"{where}: listed in long_functions.txt but now {found.get(where, 0)} lines: drop it from the list")
        elif found[where] < n:
            bad.append(f"{where}: now {found[where]} lines: lower its entry in long_functions.txt from {n}")
    for b in bad:
        print(b)
    print(f"function_length: {sum(1 for n in found.values() if n > LIMIT)} functions over {LIMIT} lines "
          f"({len(known)} listed), {len(found)} functions measured")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
