# Sourced by the elector's CLI tests: check WANT_RC WANT_TEXT ARGS... runs
# "$bin" ARGS, counts a failure in $fails when the exit code or the message
# is not the one wanted.
check() {
    want="$1"; text="$2"; shift 2
    out=$("$bin" "$@" 2>&1); rc=$?
    if [ "$rc" != "$want" ]; then echo "FAIL: $* -> rc $rc, want $want: $out"; fails=$((fails+1)); return; fi
    case "$out" in *"$text"*) ;; *) echo "FAIL: $* -> no '$text' in: $out"; fails=$((fails+1)); return ;; esac
    echo "ok: $* -> $rc"
}
