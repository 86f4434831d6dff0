#!/usr/bin/env bash
# The bash completion of nvfence loads in a plain bash and completes
# subcommands, type names and options.
#   completion_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
fails=0
# complete WORDS...: prints the completions of the last word
complete_words() {
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _nvfence; echo "${COMPREPLY[*]}"' \
        _ "$src/completion/nvfence.bash" "$@"
}
expect() {  # expect "WANTED WORDS" WORDS...
    local want=$1; shift
    local got; got=$(complete_words "$@" 2>&1)
    if [ "$got" != "$want" ]; then echo "FAIL: '$*' completes to '$got', want '$want'"; fails=$((fails + 1)); fi
}
bash -c 'source "$1" && complete -p nvfence' _ "$src/completion/nvfence.bash" | grep -q -- '-F _nvfence nvfence' \
    || { echo "FAIL: completion does not register _nvfence"; fails=$((fails + 1)); }
expect "acquire" nvfence acq
expect "preempt" nvfence pre
expect "write-exclusive write-exclusive-registrants-only write-exclusive-all-registrants" nvfence acquire /dev/x --type write-ex
expect "--victim --victim-node" nvfence preempt /dev/x --vi
expect "--force" nvfence clear /dev/x --fo
expect "--version" nvfence --ver
echo "completion: $fails failures"
[ "$fails" -eq 0 ]
