# bash completion for nvfence(8)
_nvfence() {
    # Plain COMP_WORDS: works with or without the bash-completion package.
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local -a words=("${COMP_WORDS[@]}")
    local cword=$COMP_CWORD

    local cmds="info report register unregister acquire preempt release clear write read notifications status takeover handoff rejoin udev-probe"
    local common="--json --tag --state-dir --help"
    local types="write-exclusive exclusive-access write-exclusive-registrants-only exclusive-access-registrants-only write-exclusive-all-registrants exclusive-access-all-registrants we ea wero earo wear eaar exclusive shared"

    case $prev in
        --type) COMPREPLY=($(compgen -W "$types" -- "$cur")); return ;;
        --state-dir|--config-dir|--run-dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --tag|--node|--epoch|--victim|--victim-node|--lba|--blocks|--wait-s|--max|--initial-bytes|--timeout-ms) return ;;
    esac

    local cmd="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in -*) ;; *) cmd=${words[i]}; break ;; esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "$cmds --help --version" -- "$cur"))
        return
    fi

    local opts="$common"
    case $cmd in
        report) opts+=" --initial-bytes" ;;
        register) opts+=" --node --epoch --replace --ptpl" ;;
        acquire) opts+=" --type" ;;
        preempt) opts+=" --node --victim --victim-node --holder --foreign --no-abort --type" ;;
        clear) opts+=" --force" ;;
        write|read) opts+=" --lba --blocks --wait-s --passthrough" ;;
        notifications) opts+=" --max" ;;
        status|takeover|handoff|rejoin) opts="--json --socket --timeout-ms --help"
            [[ $cmd == takeover ]] && opts+=" --victim"
            [[ $cmd == status ]] && opts+=" --all --config-dir --run-dir"
            if [[ $cur != -* ]]; then
                local vols=$(cd /run/nvfence 2>/dev/null && ls *.sock 2>/dev/null | sed 's/\.sock$//')
                COMPREPLY=($(compgen -W "$vols" -- "$cur")); return
            fi ;;
        udev-probe) opts="--help" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        # The namespace: /dev/nvmeXnY, /dev/ngXnY or a link to one.
        COMPREPLY=($(compgen -W "$(ls /dev/nvme*n* /dev/ng*n* /dev/nvfence/* 2>/dev/null)" -- "$cur"))
    fi
}
complete -F _nvfence nvfence
