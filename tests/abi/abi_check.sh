#!/usr/bin/env bash
# libnvfence's ABI against the recorded baseline (abi/libnvfence.abi, made
# by abidw from a build of the commit that changed it):
#   abi_check.sh LIB BASELINE HEADERS_DIR
# Fails when abidiff finds an incompatible change (a symbol removed, a type
# or signature changed) or cannot compare; a compatible change (symbols
# added) passes and says to record the new baseline. Also checks what the
# library exports: the C API with the version NVFENCE_1.0 and C++ symbols of
# the namespace nvfence only (no std:: instantiation, nothing of the agent).
set -u
lib=${1:?libnvfence.so}; base=${2:?baseline .abi}; hdrs=${3:?public headers dir}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for t in abidiff nm; do
    command -v "$t" >/dev/null || { echo "FAIL: $t missing (apt-get install abigail-tools binutils; scripts/setup.sh)"; exit 1; }
done
[ -e "$base" ] || { echo "FAIL: no baseline $base (cmake --build BUILD --target abi_baseline)"; exit 1; }

abidiff --no-show-locs --headers-dir2 "$hdrs" "$base" "$lib"; rc=$?
# abidiff's exit code is a bit field: 1 error, 2 usage, 4 ABI change,
# 8 incompatible ABI change.
if [ $((rc & 3)) -ne 0 ]; then fail "abidiff could not compare (exit $rc)"
elif [ $((rc & 8)) -ne 0 ]; then fail "incompatible ABI change against $base (exit $rc): keep the ABI, or bump the SONAME and record a new baseline"
elif [ $((rc & 4)) -ne 0 ]; then echo "compatible ABI change (exit $rc): record it with 'cmake --build BUILD --target abi_baseline' and commit abi/libnvfence.abi"
else echo "ABI unchanged against $base"; fi

# The dynamic symbol table: nvf_ functions versioned NVFENCE_1.0, the rest
# nvfence:: C++ symbols (and their vtables, typeinfo and names).
syms=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '{print $3}')
c_api=$(grep -c '^nvf_' <<<"$syms")
grep '^nvf_' <<<"$syms" | grep -v '@@NVFENCE_1\.0$' | sed 's/^/FAIL: C symbol without version NVFENCE_1.0: /' | grep . && fails=$((fails + 1))
other=$(grep -v '^nvf_\|^NVFENCE_1\.0$\|^NVFENCE_1\.0@@' <<<"$syms" | sed 's/@.*//' | c++filt | grep -v '^nvfence::\|^\(vtable\|typeinfo\|typeinfo name\) for nvfence::')
if [ -n "$other" ]; then
    fail "libnvfence exports symbols outside the public API:"
    head -n 20 <<<"$other"
fi
echo "libnvfence exports $c_api C functions and $(($(wc -l <<<"$syms") - c_api)) other symbols"
[ "$fails" -eq 0 ] && echo "abi check passed"
[ "$fails" -eq 0 ]
