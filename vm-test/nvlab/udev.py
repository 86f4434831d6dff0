"""Debian 12's real systemd-udevd and udevadm in lab guests (issue 6 tests).

    from nvlab import udev
    with udev.UdevLab(hosts=1, topology="fabric") as lab:
        a = lab.hosts[0]
        udev.start(a)                       # systemd-udevd --daemon, trigger, settle
        udev.properties(a, a.dev)           # {"NVFENCE_VOLUME_ID": "vol-...", ...}

udev is not installed on the machine (and need not be): Debian 12's `udev`
package is `apt-get download`ed into the lab cache (with any library package
it depends on that the machine lacks, or has in another version than it
demands), unpacked with `dpkg-deb -x` and cached under
`<cache>/udev/<version>/`; a cached copy is used without any network access.
The package list is the machine's own apt state when the machine is Debian
12 and knows the package; otherwise a private apt configuration under
`<cache>/apt-bookworm/` (bookworm and bookworm-updates from the machine's
mirror, like nvlab.kernel does for trixie) is used. Nothing here writes to
the machine's apt or dpkg state.

The guest gets one more initramfs member (content-keyed, cached, ~3 MB):
udevadm (systemd-udevd is a link to it, as in the package), the libraries
`ldd` lists for it that the base member lacks, /etc/udev/udev.conf, Debian's
50-udev-default.rules and 60-persistent-storage.rules, and the project's
udev/70-nvfence.rules.in and udev/nvfenced@.service.in configured the way
udev/CMakeLists.txt configures them, for the guest's layout (binaries in
/usr/local/bin, configuration in /etc). Only UdevLab boots it: other labs
are unchanged, and udevd runs only once a test calls start().
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import warnings
from pathlib import Path

from . import initramfs as irfs
from . import kernel as kmod
from .lab import Lab
from .util import REPO_DIR, LabError, atomic_write, cache_dir, file_lock, log, run

PACKAGE = "udev"
CODENAME = "bookworm"                     # Debian 12
SUITES = (CODENAME, f"{CODENAME}-updates")
FORMAT_VERSION = "1"                      # bump when the member's layout changes
# Configuration of the project's templates for the guest (udev/CMakeLists.txt
# substitutes the same names at configure time).
GUEST_VARS = {
    "NVFENCE_BINDIR": "/" + irfs.GUEST_BIN,      # where the lab puts <build>/bin/*
    "NVFENCE_SYSCONFDIR": "/etc",
    "NVFENCE_SBINDIR": "/" + irfs.GUEST_BIN,     # nvfenced too (sbin when installed)
    "NVFENCE_DOCDIR": "/usr/share/doc/nvfence",
}
TEMPLATES = {  # source in the repository -> path in the guest
    "udev/70-nvfence.rules.in": "usr/lib/udev/rules.d/70-nvfence.rules",
    "udev/nvfenced@.service.in": "usr/lib/systemd/system/nvfenced@.service",
}
# Debian's own rules shipped next to ours: the stock defaults and the
# /dev/disk/by-id links a real host has (proof that udev processed a device).
PACKAGE_RULES = ("50-udev-default.rules", "60-persistent-storage.rules")
UDEVD = "/lib/systemd/systemd-udevd"
UNIT_PATH = "/" + TEMPLATES["udev/nvfenced@.service.in"]
RULES_PATH = "/" + TEMPLATES["udev/70-nvfence.rules.in"]


# ---------------------------------------------------------------- templates

def configure(template: Path, values: dict = GUEST_VARS) -> bytes:
    """CMake's configure_file(... @ONLY) for @VAR@ names; LabError on an unknown one."""
    text = template.read_text()
    unknown = sorted(set(re.findall(r"@([A-Za-z_][A-Za-z0-9_]*)@", text)) - set(values))
    if unknown:
        raise LabError(f"{template}: no guest value for {', '.join('@' + u + '@' for u in unknown)} "
                       f"(add it to nvlab.udev.GUEST_VARS)")
    return re.sub(r"@([A-Za-z_][A-Za-z0-9_]*)@", lambda m: values[m.group(1)], text).encode()


# ---------------------------------------------------------------- fetch

def _os_codename() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return ""


class _Apt:
    """apt-get/apt-cache with either the machine's own configuration
    (read-only use: cache queries and `download` into our directory) or a
    private one for Debian 12 (kmod.PrivateApt with other suites)."""

    def __init__(self, private: kmod.PrivateApt | None):
        self.private = private

    def _opts(self):
        if self.private:
            return self.private.opts()
        # `apt-get download` as root drops to the _apt user, which may not be
        # able to write our directory: download as root.
        return ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []

    def candidate(self, name: str) -> str | None:
        cp = subprocess.run(["apt-cache", *self._opts(), "policy", name], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=120)
        m = re.search(r"^\s*Candidate:\s*(\S+)", cp.stdout, re.M)
        return m.group(1) if m and m.group(1) != "(none)" else None

    def download(self, spec: str, where: Path) -> None:
        run(["apt-get", "-q", *self._opts(), "download", spec], cwd=where, timeout_s=600,
            what=f"apt-get download {spec}")

    def describe(self) -> str:
        return (f"private apt configuration {self.private.base} ({' '.join(SUITES)})" if self.private
                else "the machine's apt configuration")


def _private_apt() -> kmod.PrivateApt:
    apt = kmod.PrivateApt(cache_dir() / "apt-bookworm")
    apt.setup(kmod.mirror_uri(), os.environ.get("NVFENCE_LAB_APT_TRUSTED") == "1")
    # PrivateApt.setup writes nvlab.sources for the kernel's suites: ours differ.
    text = apt.sources.read_text()
    text = re.sub(r"^Suites:.*$", "Suites: " + " ".join(SUITES), text, flags=re.M)
    apt.sources.write_text(text)
    pattern = f"*_dists_{CODENAME}_main_binary-amd64_Packages*"
    if not list(apt.lists.glob(pattern)):
        log(f"apt-get update (private config, {' '.join(SUITES)} from the machine's mirror)")
        cp = apt.get("update")
        if not list(apt.lists.glob(pattern)):
            raise LabError(f"apt-get update ({apt.sources}) gave no {CODENAME} package list:\n"
                           + (cp.stdout + cp.stderr)[-3000:])
    return apt


def _apt_choices():
    """The machine's apt (when it is Debian 12), then the private one."""
    if _os_codename() == CODENAME:
        yield lambda: _Apt(None)
    yield lambda: _Apt(_private_apt())


def _installed_version(name: str) -> str | None:
    cp = subprocess.run(["dpkg-query", "-W", "-f=${Status}\t${Version}", name], stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True)
    if cp.returncode != 0 or "\t" not in cp.stdout:
        return None
    status, version = cp.stdout.split("\t", 1)
    return version if status.endswith(" installed") else None


def _satisfied(installed: str, op: str | None, version: str | None) -> bool:
    if not op:
        return True
    dop = {"=": "eq", ">=": "ge", "<=": "le", ">>": "gt", "<<": "lt", ">": "ge", "<": "le"}[op]
    return subprocess.run(["dpkg", "--compare-versions", installed, dop, version]).returncode == 0


def _depends(field: str):
    """[(name, op, version)] of a Depends field (first alternative of each)."""
    out = []
    for item in field.split(","):
        item = item.split("|")[0].strip()
        m = re.match(r"^([a-z0-9][a-z0-9+.-]*)(?::\w+)?\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?", item)
        if m:
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


def _deb_field(deb: Path, field: str) -> str:
    return run(["dpkg-deb", "-f", str(deb), field], what="dpkg-deb -f").stdout.strip()


def _current_file() -> Path:
    return cache_dir() / "udev" / "current.json"


def cached_root() -> tuple[Path, str] | None:
    try:
        d = json.loads(_current_file().read_text())
        root = Path(d["root"])
    except (OSError, ValueError, KeyError):
        return None
    if not (root / ".complete").exists() or not (root / "bin" / "udevadm").is_file():
        return None
    return root, d["version"]


def _download(apt: _Apt, version: str) -> list:
    """The udev .deb and, recursively, the library packages it needs that the
    machine lacks (or has in another version than demanded), in the cache.
    Other dependencies (adduser...) are not needed to run udevd in a guest."""
    log(f"fetching {PACKAGE} {version} with {apt.describe()}")
    debs_dir = cache_dir() / "debs"
    debs_dir.mkdir(parents=True, exist_ok=True)

    def get(name: str, ver: str) -> Path:
        pattern = f"{name}_{ver.split(':', 1)[-1]}_*.deb"
        have = sorted(debs_dir.glob(pattern))
        if not have:
            try:
                apt.download(f"{name}={ver}", debs_dir)
            except LabError as e:
                raise LabError(f"cannot fetch Debian 12's {name} {ver} (needed by the udev lab tests) "
                               f"with {apt.describe()}:\n{e}") from None
            have = sorted(debs_dir.glob(pattern))
        if not have:
            raise LabError(f"apt-get download {name}={ver} produced no {pattern} in {debs_dir}")
        return have[0]

    debs, todo, seen = [], [(PACKAGE, version)], set()
    while todo:
        name, ver = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        deb = get(name, ver)
        debs.append(deb)
        deps = _deb_field(deb, "Pre-Depends") + "," + _deb_field(deb, "Depends")
        for dep, op, dver in _depends(deps):
            if not dep.startswith("lib") or dep in seen:
                continue
            inst = _installed_version(dep)
            if inst and _satisfied(inst, op, dver):
                continue
            want = dver if op == "=" else apt.candidate(dep)
            if not want:
                raise LabError(f"{name} needs {dep}, which is neither installed nor known to {apt.describe()}")
            todo.append((dep, want))
    return debs


def fetch() -> tuple[Path, str]:
    """(unpacked tree, version) of Debian 12's udev, downloading only when not cached."""
    got = cached_root()
    if got:
        return got
    with file_lock(cache_dir() / "udev.lock", "udev fetch"):
        got = cached_root()
        if got:
            return got
        for tool in ("apt-get", "apt-cache", "dpkg-deb", "dpkg-query"):
            if not shutil.which(tool):
                raise LabError(f"{tool} is needed to fetch Debian 12's udev package for the lab")
        errors = [] if _os_codename() == CODENAME else [f"this machine is not Debian 12 ({_os_codename() or 'unknown'})"]
        for make in _apt_choices():
            try:
                apt = make()
                version = apt.candidate(PACKAGE)
                if not version:
                    raise LabError(f"{apt.describe()} knows no '{PACKAGE}' package (no `apt-get update` yet?)")
                debs = _download(apt, version)
                break
            except LabError as e:
                errors.append(str(e))
        else:
            raise LabError(f"cannot fetch Debian 12's {PACKAGE} package for the udev lab tests:\n  - "
                           + "\n  - ".join(errors))
        root = cache_dir() / "udev" / version
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for deb in debs:
            run(["dpkg-deb", "-x", str(deb), str(tmp)], what="dpkg-deb -x")
        if not (tmp / "bin" / "udevadm").is_file():
            raise LabError(f"{debs[0].name}: no bin/udevadm in the package")
        (tmp / ".complete").write_text("\n".join(d.name for d in debs) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
        atomic_write(_current_file(), json.dumps({"root": str(root), "version": version,
                                                  "debs": [d.name for d in debs]}, indent=1).encode())
        log(f"udev {version}: {', '.join(d.name for d in debs)} unpacked in {root}")
        return root, version


# ---------------------------------------------------------------- member

def _guest(path: str) -> str:
    """Where a package path lands in the guest: like Cpio.host_path, through
    the machine's merged-/usr links (bin -> usr/bin, lib -> usr/lib), which
    the base member replicates."""
    parts = path.strip("/").split("/")
    top = "/" + parts[0]
    if parts[0] in ("bin", "lib", "lib64") and os.path.islink(top):
        parts[0] = os.path.normpath(os.path.join("/", os.readlink(top))).strip("/")
    return "/".join(parts)


def _lib_dirs(root: Path) -> list:
    return [str(d) for d in (root / "lib/x86_64-linux-gnu", root / "usr/lib/x86_64-linux-gnu",
                             root / "usr/lib/x86_64-linux-gnu/systemd") if d.is_dir()]


def member() -> Path:
    """The cached cpio member with udev for the guest (built when its inputs change)."""
    root, version = fetch()
    udevadm = root / "bin" / "udevadm"
    base_libs = {lib for e in irfs.TOOLS for lib in irfs.ldd_libs(e)}
    libs = sorted(set(irfs.ldd_libs(udevadm, env={"LD_LIBRARY_PATH": ":".join(_lib_dirs(root))})) - base_libs)
    templates = {REPO_DIR / src: dst for src, dst in TEMPLATES.items() if (REPO_DIR / src).exists()}
    if not any(dst.endswith(".rules") for dst in templates.values()):
        raise LabError(f"{REPO_DIR / 'udev/70-nvfence.rules.in'} is missing")
    rendered = {dst: configure(src) for src, dst in templates.items()}
    key_parts = [FORMAT_VERSION, version, irfs.content_hash(udevadm), json.dumps(GUEST_VARS, sort_keys=True)] + \
                [irfs.file_sig(x) for x in libs] + \
                [f"{dst}:{hashlib.sha256(data).hexdigest()}" for dst, data in sorted(rendered.items())] + \
                [f"{r}:{irfs.content_hash(root / 'lib/udev/rules.d' / r)}" for r in PACKAGE_RULES]
    key = hashlib.sha256("\n".join(key_parts).encode()).hexdigest()[:20]
    cache = cache_dir() / "initramfs"
    out = cache / f"udev-{key}.cpio"
    if out.exists():
        return out
    log(f"building initramfs udev member (udev {version}, {len(libs)} libraries)")
    a = irfs.Cpio()
    a.file(_guest("/bin/udevadm"), udevadm.read_bytes(), 0o755)
    a.symlink(_guest(UDEVD), "/bin/udevadm")
    a.dir("etc/udev/rules.d")
    a.file("etc/udev/udev.conf", (root / "etc/udev/udev.conf").read_bytes())
    for r in PACKAGE_RULES:
        a.file(_guest(f"/lib/udev/rules.d/{r}"), (root / "lib/udev/rules.d" / r).read_bytes())
    for dst, data in rendered.items():
        a.file(dst, data)
    a.file("etc/nvfence/.keep", b"")
    for lib in libs:
        if lib.startswith(str(root) + "/"):
            a.file(_guest(lib[len(str(root)):]), Path(lib).read_bytes(), 0o755)
        else:
            a.host_path(lib)
    a.file("etc/nvlab-udev", f"{PACKAGE} {version}\n".encode())
    data = a.serialize()
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write(out, data)
    log(f"udev member {out.name}: {len(data) >> 10} KiB")
    return out


class UdevLab(Lab):
    """A Lab whose guests also carry Debian 12's udev (not started at boot)."""

    def prepare(self) -> None:
        super().prepare()
        self.initramfs = irfs.with_members(self.initramfs, [member()])


# ---------------------------------------------------------------- in the guest

def running(host) -> bool:
    return host.run("pgrep -x systemd-udevd >/dev/null", timeout_s=30).rc == 0


# Pings of a starting udevd before it counts as not started.
PING_TRIES = 10


def start(host, trigger: bool = True, timeout_s: int = 60) -> None:
    """Start systemd-udevd in host's guest (if not running), then (trigger)
    `udevadm trigger --action=add` and `udevadm settle`, like a booting host."""
    # The ping can meet a daemon that has just forked and answers with a
    # closed connection ("Failed to wait for daemon to reply: Broken pipe",
    # CI of ac324f0): asked again, a bounded number of times, it answers.
    script = (
        "set -e; mkdir -p /run/udev; "
        "if ! pgrep -x systemd-udevd >/dev/null; then "
        f"  {UDEVD} --daemon </dev/null >>/run/nvlab/udevd.log 2>&1; fi; "
        f"i=0; until udevadm control --ping --timeout={timeout_s}; do "
        f"  i=$((i + 1)); [ $i -lt {PING_TRIES} ] || exit 1; sleep 0.5; done")
    r = host.run(script, timeout_s=timeout_s + 30)
    if r.rc != 0:
        raise LabError(f"{host.name}: systemd-udevd did not start: {r}\n"
                       + host.run("cat /run/nvlab/udevd.log; dmesg | grep -i udev | tail -20").out)
    if trigger:
        trigger_settle(host, timeout_s=timeout_s)


def stop(host, timeout_s: int = 30) -> None:
    """Stop udevd (its links stay: as after `systemctl stop systemd-udevd`)."""
    host.run(f"udevadm control --exit --timeout={timeout_s} 2>/dev/null; true", timeout_s=timeout_s + 30)
    host.wait_for("! pgrep -x systemd-udevd >/dev/null", timeout_s=timeout_s).check()


def trigger_settle(host, args: str = "--action=add", timeout_s: int = 60) -> None:
    r = host.run(f"udevadm trigger {args}", timeout_s=timeout_s + 30)
    if r.rc != 0:
        raise LabError(f"{host.name}: udevadm trigger {args} failed: {r}\n{_udevd_log(host)}")
    settle(host, timeout_s=timeout_s)


# What udevadm prints when udevd closed its control connection before the
# reply: seen once in CI (2026-12-03, "Failed to wait for daemon to reply:
# Broken pipe", 0.3 s into a settle, two labs beside it). The events stay
# queued, so asking again answers the same question; a timeout (rc 1 with
# nothing of this) is not retried.
_CONTROL_DROPPED = ("Broken pipe", "Connection reset", "Failed to wait for daemon to reply")
SETTLE_ATTEMPTS = 3


def settle(host, timeout_s: int = 60) -> None:
    """`udevadm settle`: every queued event handled. A control connection
    udevd dropped is asked again (at most SETTLE_ATTEMPTS times)."""
    for attempt in range(1, SETTLE_ATTEMPTS + 1):
        r = host.run(f"udevadm settle --timeout={timeout_s}", timeout_s=timeout_s + 30)
        if r.rc == 0:
            return
        dropped = any(m in r.err for m in _CONTROL_DROPPED)
        if not dropped or attempt == SETTLE_ATTEMPTS:
            raise LabError(f"{host.name}: udevadm settle failed (attempt {attempt}): {r}\n{_udevd_log(host)}")
        # Shown in pytest's warnings summary of a passing run, so that a
        # retried drop is counted, never silent.
        warnings.warn(f"{host.name}: udevd dropped settle's control connection ({r.err.strip()}); "
                      f"settling again\n{_udevd_log(host)}", stacklevel=2)


def _udevd_log(host) -> str:
    """udevd's own words for a failure message: its stderr and kmsg lines."""
    r = host.run("echo '--- udevd.log'; tail -n 40 /run/nvlab/udevd.log; "
                 "echo '--- dmesg (udev)'; dmesg | grep -i udev | tail -n 40; "
                 "echo '--- processes'; ps | grep -i udev", timeout_s=30)
    return r.out + r.err


def properties(host, dev: str) -> dict:
    """udev's properties of dev (`udevadm info --query=property`)."""
    r = host.run(f"udevadm info --query=property --name={shlex.quote(dev)}", timeout_s=30, check=True)
    return dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)


def unit_exec_start(host, instance: str) -> str:
    """ExecStart= of the guest's configured nvfenced@.service for instance
    (%i and %I expanded; instance names here need no unescaping)."""
    r = host.run(f"sed -n 's/^ExecStart=//p' {UNIT_PATH}", timeout_s=30, check=True)
    cmd = r.out.strip()
    if not cmd:
        raise LabError(f"{host.name}: no ExecStart= in {UNIT_PATH}")
    return cmd.replace("%i", instance).replace("%I", instance)
