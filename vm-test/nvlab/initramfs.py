"""Build the lab's initramfs (cpio newc, gzip) and the guest agent.

Contents: busybox-static (+ applet symlinks), nvme-cli, fio, the kernel
modules the roles need (decompressed, with their dependencies, in load
order), the project's binaries from <build>/bin, every shared library `ldd`
lists for any of those ELF files (and the dynamic loader), the guest agent
and /init.

The archive is made of two concatenated cpio members (the kernel unpacks
both): a base member (kernel modules, tools, agent, init) and a project
member (<build>/bin and its libraries), each cached under a key derived
from its inputs, so rebuilding the project only redoes the small member.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import kernel as kmod
from .util import GUEST_DIR, LabError, atomic_write, build_dir, cache_dir, file_lock, log, run

MODULES = ["configfs", "nvmet", "nvme-loop", "nvme-fabrics", "nvme-tcp", "nvmet-tcp",
           "virtio_net", "failover", "net_failover", "virtio_blk"]
# e2fsprogs' mke2fs and e2fsck (busybox has neither ext4 nor a checker): the
# write-path tests put ext4 on the shared namespace. Called by full path.
TOOLS = ["/usr/sbin/nvme", "/usr/sbin/mke2fs", "/usr/sbin/e2fsck"]
TOOL_FILES = ["/etc/mke2fs.conf"]
# Big tools (fio pulls ~85 MB of libraries: ceph, gluster, rdma...) live on a
# read-only "tools disk" (an uncompressed cpio on a virtio-blk device) and are
# unpacked into the guest's / on first use by a wrapper, so they cost no boot time.
LAZY_TOOLS = ["/usr/bin/fio"]
TOOLS_DISK_SERIAL = "nvlab-tools"
BUSYBOX = "/bin/busybox"
GUEST_BIN = "usr/local/bin"          # project binaries go here (on PATH)
FORMAT_VERSION = "6"                 # bump when the layout logic changes


# ---------------------------------------------------------------- cpio

class Cpio:
    """A deterministic in-memory cpio (newc) archive builder."""

    def __init__(self):
        self.entries = {}  # path -> (mode, data: bytes | None, hostpath | None, rdev)

    def _parents(self, path: str):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = (stat.S_IFDIR | 0o755, None, None, 0)

    def dir(self, path: str, mode: int = 0o755):
        path = path.strip("/")
        self._parents(path)
        cur = self.entries.get(path)
        if cur is None or not stat.S_ISLNK(cur[0]):
            self.entries[path] = (stat.S_IFDIR | mode, None, None, 0)

    def file(self, path: str, data: bytes | None = None, mode: int = 0o644, hostpath=None):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = (stat.S_IFREG | mode, data, hostpath, 0)

    def symlink(self, path: str, target: str):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = (stat.S_IFLNK | 0o777, target.encode(), None, 0)

    def chardev(self, path: str, major: int, minor: int, mode: int = 0o600):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = (stat.S_IFCHR | mode, None, None, (major, minor))

    def host_path(self, path: str):
        """Add a host file at the same path, replicating symlinks on the way
        (e.g. /lib -> usr/lib on merged-/usr systems) so the guest sees the
        same names the host's ldd/ld.so resolved."""
        path = os.path.normpath(path)
        seen = 0
        while True:
            seen += 1
            if seen > 40:
                raise LabError(f"symlink loop at {path}")
            parts = path.strip("/").split("/")
            redirected = False
            for i in range(1, len(parts) + 1):
                cur = "/" + "/".join(parts[:i])
                if os.path.islink(cur):
                    target = os.readlink(cur)
                    self.symlink(cur, target)
                    base = os.path.dirname(cur)
                    newcur = os.path.normpath(os.path.join(base, target))
                    path = os.path.normpath(newcur + "/" + "/".join(parts[i:])) if i < len(parts) else newcur
                    redirected = True
                    break
            if not redirected:
                break
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            self.dir(path)
        else:
            self.file(path, mode=stat.S_IMODE(st.st_mode), hostpath=path)

    def serialize(self) -> bytes:
        out = io.BytesIO()
        ino = 1

        def hdr(name: bytes, mode: int, size: int, rdev=(0, 0), nlink=1):
            nonlocal ino
            fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
            ino += 1
            out.write(b"070701" + b"".join(b"%08X" % f for f in fields))
            out.write(name + b"\0")
            out.write(b"\0" * ((4 - (110 + len(name) + 1) % 4) % 4))

        for path in sorted(self.entries):
            mode, data, hostpath, rdev = self.entries[path]
            name = path.encode()
            if stat.S_ISREG(mode):
                if data is None:
                    with open(hostpath, "rb") as f:
                        data = f.read()
                hdr(name, mode, len(data))
                out.write(data)
                out.write(b"\0" * ((4 - len(data) % 4) % 4))
            elif stat.S_ISLNK(mode):
                hdr(name, mode, len(data))
                out.write(data)
                out.write(b"\0" * ((4 - len(data) % 4) % 4))
            elif stat.S_ISCHR(mode):
                hdr(name, mode, 0, rdev)
            else:
                hdr(name, mode, 0, nlink=2)
        hdr(b"TRAILER!!!", 0, 0)
        data = out.getvalue()
        return data + b"\0" * ((512 - len(data) % 512) % 512)


# ---------------------------------------------------------------- helpers

def is_elf(path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def ldd_libs(path, env=None) -> list:
    """Absolute paths of the shared libraries (and loader) `ldd` lists for path.

    env: extra environment for ldd (e.g. LD_LIBRARY_PATH to prefer libraries
    unpacked from a package over the host's)."""
    cp = subprocess.run(["ldd", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, timeout=60, env={**os.environ, **env} if env else None)
    if "not a dynamic executable" in cp.stdout or "statically linked" in cp.stdout:
        return []
    if cp.returncode != 0:
        raise LabError(f"ldd {path} failed:\n{cp.stdout}")
    libs = []
    for line in cp.stdout.splitlines():
        line = line.strip()
        if "not found" in line:
            raise LabError(f"ldd {path}: {line}")
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"^(/\S+)", line)
        if m:
            libs.append(m.group(1))
    return libs


def file_sig(path) -> str:
    """Identity of a host input file for cache keys: path, size, mtime."""
    st = os.stat(path)
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def content_hash(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def module_closure(moddir: Path, names) -> list:
    """[(module name, source path)] for names and their dependencies, in load order.

    Dependencies come from modules.dep when the kernel tree has one, otherwise
    from each module's .modinfo "depends=" field (Debian's linux-modules
    package ships no modules.dep: depmod generates it at install time)."""
    index = {}
    for root, _dirs, files in os.walk(moddir / "kernel"):
        for f in files:
            if ".ko" in f:
                base = f.split(".ko", 1)[0]
                index[base.replace("-", "_")] = Path(root) / f
    depfile = moddir / "modules.dep"
    deps_of = {}
    if depfile.exists():
        for line in depfile.read_text().splitlines():
            mod, _, rest = line.partition(":")
            key = Path(mod).name.split(".ko", 1)[0].replace("-", "_")
            deps_of[key] = [Path(d).name.split(".ko", 1)[0].replace("-", "_") for d in rest.split()]

    order = []

    def visit(name, stack=()):
        key = name.replace("-", "_")
        if key in (k for k, _ in order):
            return
        if key in stack:
            raise LabError(f"module dependency cycle: {' -> '.join(stack + (key,))}")
        path = index.get(key)
        if not path:
            raise LabError(f"kernel module {name} not found under {moddir} (built in? check config)")
        if key in deps_of:
            deps = deps_of[key]
        else:
            deps = [d for v in kmod.modinfo(path).get("depends", []) for d in v.split(",") if d]
        for d in deps:
            visit(d, stack + (key,))
        if key not in (k for k, _ in order):
            order.append((key, path))

    for n in names:
        visit(n)
    return order


def agent_binary() -> Path:
    """Compile guest/nvlab-agent.c with `cc -static -O2`, cached by source hash."""
    src = GUEST_DIR / "nvlab-agent.c"
    cc = shutil.which("cc")
    if not cc:
        raise LabError("no C compiler (cc) to build the guest agent")
    ccver = subprocess.run([cc, "--version"], stdout=subprocess.PIPE, text=True).stdout.splitlines()[0]
    key = hashlib.sha256(src.read_bytes() + ccver.encode()).hexdigest()[:16]
    out = cache_dir() / "agent" / key / "nvlab-agent"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name("nvlab-agent.tmp")
    run([cc, "-static", "-O2", "-Wall", "-Wextra", "-o", str(tmp), str(src)], what="cc nvlab-agent")
    os.replace(tmp, out)
    log(f"built guest agent {out}")
    return out


def project_binaries() -> list:
    d = build_dir() / "bin"
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir()
                  if p.is_file() and os.access(p, os.X_OK) and not p.name.startswith("."))


# ---------------------------------------------------------------- members

def _gz(data: bytes) -> bytes:
    # Uncompressed on purpose: under TCG the kernel inflates a gzip initramfs
    # at ~10 MB/s, while copying an uncompressed one is several times faster.
    return data


def _base_member(k: kmod.Kernel, cache: Path) -> Path:
    agent = agent_binary()
    init = GUEST_DIR / "init"
    closure = module_closure(k.moddir, MODULES)
    for t in TOOLS + [BUSYBOX]:
        if not Path(t).exists():
            raise LabError(f"{t} is missing (install busybox-static, nvme-cli, e2fsprogs and fio)")
    elfs = TOOLS
    libs = sorted({lib for e in elfs for lib in ldd_libs(e)})
    unpack = GUEST_DIR / "nvlab-unpack-tools"
    pgrep = GUEST_DIR / "pgrep"
    key_parts = [FORMAT_VERSION, k.release, k.version, content_hash(agent), content_hash(init),
                 content_hash(unpack), content_hash(pgrep), file_sig(BUSYBOX)] + LAZY_TOOLS + [file_sig(t) for t in TOOLS] + [file_sig(f) for f in TOOL_FILES if Path(f).exists()] + [file_sig(x) for x in libs] + \
                [f"{n}:{file_sig(p)}" for n, p in closure]
    key = hashlib.sha256("\n".join(key_parts).encode()).hexdigest()[:20]
    out = cache / f"base-{key}.cpio"
    if out.exists():
        return out
    log(f"building initramfs base member ({len(closure)} modules, {len(libs)} libraries)")
    a = Cpio()
    for d in ("dev", "proc", "sys", "run", "tmp", "root", "mnt", "etc/nvme", "var/tmp"):
        a.dir(d)
    a.dir("tmp", 0o1777)
    a.chardev("dev/console", 5, 1)
    a.chardev("dev/null", 1, 3, 0o666)
    a.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    a.file("etc/group", b"root:x:0:\n")
    a.file("etc/hostname", b"nvlab\n")
    a.file("init", init.read_bytes(), 0o755)
    a.file("sbin/nvlab-agent", agent.read_bytes(), 0o755)
    # busybox: the binary and one symlink per applet (in /bin, on PATH)
    a.host_path(BUSYBOX)
    bb = os.path.realpath(BUSYBOX)
    applets = subprocess.run([BUSYBOX, "--list"], stdout=subprocess.PIPE, text=True,
                             check=True).stdout.split()
    bb_guest = "/" + bb.strip("/")
    for ap in applets:
        if ap in ("busybox",):
            continue
        if f"bin/{ap}" not in a.entries and f"usr/bin/{ap}" not in a.entries:
            a.symlink(f"usr/bin/{ap}" if bb.startswith("/usr/") else f"bin/{ap}", bb_guest)
    for t in TOOLS:
        a.host_path(t)
    for f in TOOL_FILES:
        if Path(f).exists():
            a.host_path(f)
    for lib in libs:
        a.host_path(lib)
    a.file("sbin/nvlab-unpack-tools", unpack.read_bytes(), 0o755)
    # pgrep/pkill (not in Debian's busybox-static): a small sh implementation
    if not any(f"{d}/{n}" in a.entries for d in ("bin", "usr/bin") for n in ("pgrep", "pkill")):
        a.file("usr/bin/pgrep", pgrep.read_bytes(), 0o755)
        a.symlink("usr/bin/pkill", "pgrep")
    for t in LAZY_TOOLS:
        a.host_path(os.path.dirname(t))
        real = os.path.realpath(t)
        a.file(real, (f"#!/bin/sh\n# nvlab: {t} and its libraries are unpacked from the tools disk on first use\n"
                      f"[ -z \"$NVLAB_LAZY_{Path(t).name.upper()}\" ] || {{ echo \"nvlab: {t} missing from the tools disk\" >&2; exit 127; }}\n"
                      f"export NVLAB_LAZY_{Path(t).name.upper()}=1\n"
                      f"/sbin/nvlab-unpack-tools || exit 127\n"
                      f"exec {real} \"$@\"\n").encode(), 0o755)
    # kernel modules, decompressed, flat in /usr/lib/modules/nvlab + load order
    for _name, path in closure:
        data = path.read_bytes()
        if path.name.endswith(".xz"):
            data = lzma.decompress(data)
        a.file(f"usr/lib/modules/nvlab/{path.name.split('.ko', 1)[0]}.ko", data)
    # deps: "<module>:<file.ko>" lines, dependencies first, for /init's modload;
    # each module is listed under both spellings (dashes and underscores).
    deps_lines = []
    for n in MODULES:
        files = [f"{path.name.split('.ko', 1)[0]}.ko" for _name, path in module_closure(k.moddir, [n])]
        for spelling in sorted({n, n.replace("-", "_"), n.replace("_", "-")}):
            deps_lines += [f"{spelling}:{f}" for f in files]
    a.file("usr/lib/modules/nvlab/deps", ("\n".join(deps_lines) + "\n").encode())
    a.file("etc/nvlab-kernel", f"{k.release} {k.version}\n".encode())
    data = _gz(a.serialize())
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write(out, data)
    return out


def strip_debug(path: Path) -> bytes:
    """The binary without debug sections (symbols kept); as-is if that fails."""
    data = path.read_bytes()
    if os.environ.get("NVFENCE_LAB_STRIP", "1") == "0" or not is_elf(path) or not shutil.which("objcopy"):
        return data
    tmp = Path(f"/tmp/.nvlab-strip-{os.getpid()}-{path.name}")
    try:
        cp = subprocess.run(["objcopy", "--strip-debug", str(path), str(tmp)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        return tmp.read_bytes() if cp.returncode == 0 else data
    finally:
        tmp.unlink(missing_ok=True)


def _project_member(cache: Path, base_libs: set) -> Path | None:
    bins = project_binaries()
    if not bins:
        return None
    elfs = [b for b in bins if is_elf(b)]
    libs = sorted({lib for e in elfs for lib in ldd_libs(e)} - base_libs)
    key_parts = [FORMAT_VERSION, os.environ.get("NVFENCE_LAB_STRIP", "1")] + \
                [f"{b.name}:{content_hash(b)}" for b in bins] + [file_sig(x) for x in libs]
    key = hashlib.sha256("\n".join(key_parts).encode()).hexdigest()[:20]
    out = cache / f"project-{key}.cpio"
    if out.exists():
        return out
    log(f"building initramfs project member ({len(bins)} binaries from {build_dir() / 'bin'})")
    a = Cpio()
    for b in bins:
        # Debug info stripped by default (NVFENCE_LAB_STRIP=0 keeps it): a
        # debug build is ~10x bigger and the initramfs is copied at every boot.
        a.file(f"{GUEST_BIN}/{b.name}", strip_debug(b), 0o755)
    build = build_dir().resolve()
    for lib in libs:
        if Path(lib).resolve().is_relative_to(build):
            # The build's own libraries (libnvfence.so.N): the RUNPATH names
            # their build path, which the guest may hide (its /tmp is a
            # tmpfs, and CI clones under /tmp), so they also go where the
            # loader looks by default, beside the C library.
            a.file(f"{_default_lib_dir(base_libs)}/{Path(lib).name}", Path(lib).resolve().read_bytes(), 0o755)
        a.host_path(lib)
    data = _gz(a.serialize())
    atomic_write(out, data)
    return out


def _default_lib_dir(base_libs: set) -> str:
    """The directory of the C library ldd resolved (a default search path
    of the loader), without the leading slash."""
    for lib in base_libs:
        if Path(lib).name == "libc.so.6":
            return str(Path(lib).parent).strip("/")
    raise LabError("ldd found no libc.so.6 for the guest's tools")


def _tools_disk(cache: Path, base_libs: set) -> Path:
    """Uncompressed cpio of LAZY_TOOLS and the libraries the base lacks."""
    libs = sorted({lib for e in LAZY_TOOLS for lib in ldd_libs(e)} - base_libs)
    key_parts = [FORMAT_VERSION] + [file_sig(t) for t in LAZY_TOOLS] + [file_sig(x) for x in libs]
    key = hashlib.sha256("\n".join(key_parts).encode()).hexdigest()[:20]
    out = cache / f"tools-{key}.cpio"
    if out.exists():
        return out
    log(f"building tools disk ({', '.join(LAZY_TOOLS)} + {len(libs)} libraries)")
    a = Cpio()
    for t in LAZY_TOOLS:
        a.host_path(t)
    for lib in libs:
        a.host_path(lib)
    atomic_write(out, a.serialize())
    return out


@dataclass
class Initramfs:
    path: Path
    kernel: kmod.Kernel
    project_binaries: list
    tools_disk: Path


def build(k: kmod.Kernel | None = None, project: bool = True) -> Initramfs:
    """Return an initramfs for kernel k (building only what changed).
    project=False: the base member and the tools disk only (what can be
    built before the project is: `vm-test/lab images` beside the compiler,
    which must not read binaries the compiler is still writing)."""
    k = k or kmod.fetch_kernel()
    cache = cache_dir() / "initramfs"
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache_dir() / "initramfs.lock", "initramfs build"):
        base = _base_member(k, cache)
        base_libs = {lib for e in TOOLS for lib in ldd_libs(e)}
        proj = _project_member(cache, base_libs) if project else None
        if proj:
            # Two concatenated cpio archives: the kernel unpacks both.
            out = cache / f"{base.stem}+{proj.stem}.img"
            if not out.exists():
                atomic_write(out, base.read_bytes() + proj.read_bytes())
        else:
            out = base
        tools = _tools_disk(cache, base_libs)
        for used in (base, proj, out, tools):
            if used and used.exists():
                os.utime(used)
        _prune(cache, keep={base.name, proj.name if proj else "", out.name, tools.name})
    return Initramfs(out, k, [b.name for b in project_binaries()], tools)


def with_members(ir: Initramfs, members: list) -> Initramfs:
    """ir with more cpio members appended (e.g. nvlab.udev's), as a cached image
    next to ir's, named by ir's image and the members (which are content-keyed:
    their names change with their content). Labs that do not ask for extra
    members keep booting ir unchanged."""
    cache = cache_dir() / "initramfs"
    out = cache / f"{ir.path.stem}+{'+'.join(m.stem for m in members)}.img"
    with file_lock(cache_dir() / "initramfs.lock", "initramfs build"):
        if not out.exists():
            atomic_write(out, ir.path.read_bytes() + b"".join(m.read_bytes() for m in members))
        for used in [out, *members]:
            os.utime(used)
    return Initramfs(out, ir.kernel, ir.project_binaries, ir.tools_disk)


def _prune(cache: Path, keep: set, max_items: int = 12, min_age_s: float = 3600) -> None:
    """Keep the cache bounded: drop the oldest files beyond max_items, but only
    ones untouched for min_age_s (another lab may be about to boot them)."""
    import time
    now = time.time()
    items = sorted((p for p in cache.iterdir() if p.is_file() and p.name not in keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for p in items[max_items:]:
        try:
            if now - p.stat().st_mtime > min_age_s:
                p.unlink()
        except OSError:
            pass
