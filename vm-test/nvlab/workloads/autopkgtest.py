"""debian/tests (autopkgtest) run in a lab guest against the packages
installed there: the guest has no network and no apt lists, so
autopkgtest's own runner (which installs each test's Depends through apt)
cannot run; this one follows the same control file and refuses what it
cannot honour:

- every test's Depends must already be installed (`@` is the source's
  binary packages); a missing one fails the test, naming it;
- Restrictions: allow-stderr (without it, any stderr output fails the test,
  as autopkgtest does); needs-internet is met by what the caller copied in
  (fence-agents' schema: NVFENCE_METADATA_RNG); any other restriction
  fails the test;
- each test runs from the source tree's root with AUTOPKGTEST_TMP set to a
  fresh directory, as autopkgtest does.
"""
import re
import shlex
from dataclasses import dataclass, field

HONOURED = {"allow-stderr", "needs-internet"}


@dataclass
class TestStanza:
    names: list
    depends: list = field(default_factory=list)      # each: alternatives (names)
    restrictions: set = field(default_factory=set)


def parse_control(text: str, binaries) -> list:
    """debian/tests/control's stanzas (deb822: blank-line separated,
    continuation lines indented, `#` comments)."""
    stanzas, cur, last = [], {}, None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                stanzas.append(cur)
            cur, last = {}, None
        elif line[0] in " \t":
            assert last, f"continuation line without a field: {line!r}"
            cur[last] += " " + line.strip()
        else:
            key, _, value = line.partition(":")
            last = key.strip().lower()
            cur[last] = value.strip()
    out = []
    for s in stanzas:
        assert "tests" in s, f"a stanza without Tests: {s} (Test-Command is not used here)"
        deps = []
        for d in filter(None, (x.strip() for x in s.get("depends", "").split(","))):
            alts = [re.sub(r"\s*[(\[<].*$", "", a.strip()) for a in d.split("|")]
            if alts == ["@"]:
                deps.extend([b] for b in binaries)
            else:
                deps.append(alts)
        out.append(TestStanza(s["tests"].replace(",", " ").split(), deps,
                              set(s.get("restrictions", "").replace(",", " ").split())))
    return out


def installed(host) -> set:
    """Installed packages (and what they provide) in the guest."""
    have = set()
    r = host.run("dpkg-query -W -f='${db:Status-Abbrev}|${Package}|${Provides}\\n'", timeout_s=60, check=True)
    for line in r.out.splitlines():
        status, pkg, provides = (line.split("|") + ["", ""])[:3]
        if status.strip() == "ii":
            have.add(pkg.split(":")[0])
            have.update(p.strip().split()[0] for p in provides.split(",") if p.strip())
    return have


@dataclass
class Outcome:
    name: str
    rc: int
    out: str
    err: str
    problems: list

    @property
    def passed(self) -> bool:
        return self.rc == 0 and not self.problems


def run_test(host, src: str, stanza: TestStanza, name: str, env: dict, timeout_s: float = 1800) -> Outcome:
    """One test of @p stanza, as autopkgtest would run it; @p src is the
    source tree's root in the guest."""
    have = installed(host)
    problems = [f"Depends not installed: {' | '.join(alts)}" for alts in stanza.depends
                if not any(a in have for a in alts)]
    problems += [f"restriction {r!r} is not honoured by this runner" for r in sorted(stanza.restrictions - HONOURED)]
    if problems:
        return Outcome(name, -1, "", "", problems)
    tmp = f"/tmp/autopkgtest-{name}"
    exports = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items())
    r = host.run(f"rm -rf {tmp} && mkdir -p {tmp} && cd {shlex.quote(src)} && "
                 f"env AUTOPKGTEST_TMP={tmp} {exports} sh debian/tests/{name}", timeout_s=timeout_s)
    if r.err.strip() and "allow-stderr" not in stanza.restrictions:
        problems.append("wrote to stderr without allow-stderr")
    return Outcome(name, r.rc, r.out, r.err, problems)
