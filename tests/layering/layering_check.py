#!/usr/bin/python3
"""The layering of the source tree and of libnvfence (issue 26).

Layers, lowest first; a file may include its own layer and the ones below,
never one above (docs/LAYOUT.md):

    internal < device < fence < writer < client < capi < testing < agent < elector < tools

 - src/<layer>/ holds each layer's sources and internal headers, included as
   "<layer>/name.hpp" (the include root is src/);
 - include/nvfence/ holds only the public engine API (PUBLIC below gives each
   header its layer); a public header includes only public headers, since
   it is installed alone;
 - tools/ is the top: it may include anything.

Modes:
  layering_check.py sources SOURCE_DIR
      the include graph of src/, include/nvfence/ and tools/.
  layering_check.py library LIB "LINK_LIBRARIES" ARCHIVE...
      the built engine library: its link (CMake's LINK_LIBRARIES of the
      target and the ELF NEEDED entries) names no agent, elector, curl or
      spdlog, and it defines no symbol that the internal static libraries
      (ARCHIVE...: the agent's and the elector's) define.
Exit 0: no violation; 1: violations (each printed); 2: usage.
"""
import os
import re
import subprocess
import sys

LAYERS = ["internal", "device", "fence", "writer", "client", "capi", "testing", "sqlite", "agent", "elector", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Layers that may use only some of the layers below them. The client of the
# agent's control socket is thin (as sanlock's client library): the wire
# format and a socket, over the device layer's errors and types, never the
# fence protocol or the writer.
ONLY_BELOW = {"client": {"internal", "device", "client"}}

# include/nvfence/: the public engine API, each header with its layer.
PUBLIC = {
    "error.hpp": "device", "result.hpp": "device", "fd.hpp": "device", "key.hpp": "device",
    "command.hpp": "device", "passthru.hpp": "device", "namespace.hpp": "device",
    "reservation.hpp": "device", "report.hpp": "device", "stamp.hpp": "device",
    "state_file.hpp": "fence", "epoch_store.hpp": "fence", "fence.hpp": "fence",
    "writer.hpp": "writer",
    "control.hpp": "client",
    "nvfence.h": "capi",
    "sqlite.h": "sqlite",
    "testing.hpp": "testing", "testing_model.hpp": "testing", "testing.h": "testing",
    "export.h": "device",
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_EXT = (".cpp", ".hpp", ".h", ".c", ".cc")


def layer_of_include(name, errors, where):
    """The layer an #include names, or None (system or a file beside the includer)."""
    first, _, rest = name.partition("/")
    if first == "nvfence" and rest:
        if rest in PUBLIC:
            return PUBLIC[rest]
        errors.append(f"{where}: includes <{name}>, which is not a public header (include/nvfence/)")
        return None
    if first in RANK and rest and first != "tools":
        return first
    return None


def check_file(path, layer, src, errors, public):
    rel = os.path.relpath(path, src)
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            quoted, name = m.group(1) == '"', m.group(2)
            where = f"{rel}:{lineno}"
            target = layer_of_include(name, errors, where)
            if public and quoted and not name.startswith("nvfence/"):
                errors.append(f"{where}: public header includes \"{name}\": installed headers include only nvfence/ headers")
                continue
            if target is None:
                continue
            if public and target == "internal":
                errors.append(f"{where}: public header includes internal \"{name}\"")
            elif RANK[target] > RANK[layer]:
                errors.append(f"{where}: layer {layer} includes \"{name}\" of the higher layer {target}")
            elif layer in ONLY_BELOW and target not in ONLY_BELOW[layer]:
                errors.append(f"{where}: layer {layer} includes \"{name}\" of layer {target}; it may use only "
                              + ", ".join(sorted(ONLY_BELOW[layer])))


def check_sources(src):
    errors = []
    pub_dir = os.path.join(src, "include", "nvfence")
    present = sorted(f for f in os.listdir(pub_dir) if f.endswith(SOURCE_EXT))
    for f in present:
        if f not in PUBLIC:
            errors.append(f"include/nvfence/{f}: installed, but not a public header of any layer "
                          "(move it to src/<layer>/ or add it to PUBLIC in tests/layering/layering_check.py)")
            continue
        check_file(os.path.join(pub_dir, f), PUBLIC[f], src, errors, public=True)
    for f in PUBLIC:
        if f not in present:
            errors.append(f"include/nvfence/{f}: listed in PUBLIC but missing")
    checked = len(present)
    src_dir = os.path.join(src, "src")
    for entry in sorted(os.listdir(src_dir)):
        full = os.path.join(src_dir, entry)
        if not os.path.isdir(full):
            errors.append(f"src/{entry}: outside every layer folder (src/<layer>/)")
            continue
        if entry not in RANK or entry == "tools":
            errors.append(f"src/{entry}/: not a layer ({', '.join(LAYERS[:-1])})")
            continue
        for root, _, files in os.walk(full):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    check_file(os.path.join(root, f), entry, src, errors, public=False)
                    checked += 1
    for root, _, files in os.walk(os.path.join(src, "tools")):
        for f in sorted(files):
            if f.endswith(SOURCE_EXT):
                check_file(os.path.join(root, f), "tools", src, errors, public=False)
                checked += 1
    return checked, errors


FORBIDDEN_LINK = re.compile(r"nvfence_agent|nvfence_elector|curl|spdlog", re.I)


def defined_symbols(path, dynamic):
    args = ["nm", "--defined-only", "-g"] + (["-D"] if dynamic else []) + [path]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            syms[parts[2]] = parts[1]
    return syms


def check_library(lib, link_libraries, archives):
    errors = []
    for item in link_libraries.replace(";", " ").replace(",", " ").split():
        if FORBIDDEN_LINK.search(item):
            errors.append(f"libnvfence links {item} (CMake LINK_LIBRARIES)")
    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    for n in needed:
        if FORBIDDEN_LINK.search(n) or n.startswith("libfmt"):
            errors.append(f"libnvfence NEEDED {n}")
    exported = defined_symbols(lib, dynamic=True)
    strong = {}
    for a in archives:
        for sym, kind in defined_symbols(a, dynamic=False).items():
            # Weak definitions (inline functions, template instantiations)
            # may be in both; a strong one in both is the agent's own code.
            if kind in "TDBR":
                strong[sym] = os.path.basename(a)
    both = sorted(s for s in exported if s in strong)
    for s in both[:20]:
        errors.append(f"libnvfence defines {s}, code of {strong[s]}")
    if len(both) > 20:
        errors.append(f"... and {len(both) - 20} more symbols of the internal libraries")
    print(f"libnvfence: NEEDED {' '.join(needed)}; {len(exported)} dynamic symbols; "
          f"{len(strong)} strong symbols in {len(archives)} internal archives, {len(both)} shared")
    return errors


def main(argv):
    if len(argv) >= 2 and argv[0] == "sources":
        checked, errors = check_sources(argv[1])
        print(f"layering: {checked} files checked")
    elif len(argv) >= 3 and argv[0] == "library":
        errors = check_library(argv[1], argv[2], argv[3:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors:
        print("LAYERING VIOLATION:", e)
    print("layering: ok" if not errors else f"layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
