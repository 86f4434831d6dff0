"""bash completion (completion/nvfence.bash, installed for nvfence) offers
every command `$NVFENCE --help` lists and every option of each command's
--help (-h aside), and nothing else.

The completion function is run by bash itself, with COMP_WORDS and
COMP_CWORD set as bash sets them for `nvfence <TAB>` and
`nvfence COMMAND --<TAB>`. Run by CTest (doc_completion, label unit)."""
import os
import subprocess

import pytest

import nvfence_help_test as nh

SCRIPT = os.path.join(nh.ROOT, "completion", "nvfence.bash")
# Commands whose completion lacks options their --help has; the fix is in
# completion/nvfence.bash (not docs text): strict, so the fix must remove it.
KNOWN_GAPS: dict = {}  # sub -> why its options are not all offered (none now)


def complete(*words: str) -> set:
    """What the completion offers for the command line words (the last one
    being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in ("nvfence",) + words)
    script = (f"source '{SCRIPT}'; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _nvfence; "
              'printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    return {w for w in r.stdout.split("\n") if w}


def long_options(sub=None) -> set:
    return {n for o in nh.options(sub) for n in o.names if n.startswith("--")}


def test_the_commands_and_top_level_options():
    want = set(nh.SUBS) | long_options()
    assert complete("") == want


@pytest.mark.parametrize("sub", [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[s]))
                                 if s in KNOWN_GAPS else s for s in sorted(nh.SUBS)])
def test_every_option_of_a_command(sub):
    got, want = complete(sub, "--"), long_options(sub)
    assert got == want, f"nvfence {sub} --<TAB>: missing {sorted(want - got)}, extra {sorted(got - want)}"


VALUE_GAPS: set = set()  # (sub, option) whose value the completion does not know (none now)
VALUE_OPTIONS = sorted({(sub, o.name) for sub in nh.SUBS for o in nh.options(sub)
                        if o.takes_value and (o.range or o.name == "--victim")})


@pytest.mark.parametrize("sub,opt", [
    pytest.param(s, o, marks=pytest.mark.xfail(strict=True, reason=f"completion/nvfence.bash does not know {o}: "
                                                                  "it offers options and device names as its value"))
    if (s, o) in VALUE_GAPS else (s, o) for s, o in VALUE_OPTIONS])
def test_no_completion_after_an_option_that_takes_a_number_or_key(sub, opt):
    """After --node, --lba... the completion offers nothing (not devices)."""
    # "--" as what is typed: a completion that does not know the option
    # offers the command's options (and devices for anything else).
    assert complete(sub, opt, "--") == set(), (sub, opt)
