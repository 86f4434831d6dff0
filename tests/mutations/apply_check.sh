#!/bin/sh
# Every mutation patch here must still apply to the tree it was written
# for: a patch whose context has moved is a check that can no longer run
# (run.sh and sim_run.sh would skip it as "does not apply").
# Usage: apply_check.sh SOURCE_DIR
set -u
cd "$1" || exit 2
rc=0
for p in tests/mutations/*.patch; do
    if ! out=$(git apply --check "$p" 2>&1); then
        echo "$p: does not apply to this tree; bring its context up to date:"
        echo "$out" | sed 's/^/    /'
        rc=1
    fi
done
[ "$rc" = 0 ] && echo "all $(ls tests/mutations/*.patch | wc -l) mutation patches apply"
exit $rc
