"""The systemd guest flavour: a cached Debian 12 root image, its boot
initramfs, and the per-run project disk.

    img = sdimage.root_image(kernel, packages=("corosync", "pacemaker"))
    img.path          # cached raw ext4 image (never written by a VM)
    img.manifest      # packages, build time, checksum, libraries in the image

Root image: `mmdebstrap --variant=minbase` of bookworm (+ bookworm-updates)
from the machine's own Debian mirror (kernel.mirror_uri(); the image's own
apt sources name it, so the image stays in the cache, never in the repo),
BASE_PACKAGES plus the caller's packages, the lab kernel's module tree
(depmod'ed in a chroot), fstab, optional units masked, the lab's bootstrap
unit (guest/sd/). Made into an ext4 file system with `mke2fs -d`. Cached
under <cache>/sdroot/<key>/, key = sorted package list, kernel, FORMAT_VERSION
and the bootstrap files. A manifest is written last (a build that died
leaves no manifest: rebuilt); it holds a sha256 of the image's data
extents, checked once per process (a corrupt image is rebuilt).

Each VM boots a qcow2 overlay of it (its own writes, survive restart()).

Boot: a tiny busybox initramfs loads virtio_blk (a module in the cloud
kernel), mounts the disk whose serial is `nvlab-root` and switch_roots to
systemd. The bootstrap unit (nvlab-agent.service) unpacks the project disk
(a tar on a read-only virtio disk with serial `nvlab-proj`, rebuilt for
every lab from `cmake --install` of the build dir, plus guest/sd/setup and
the guest agent) into /, then runs the setup and becomes the agent.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import initramfs as irfs
from . import kernel as kmod
from .util import GUEST_DIR, LabError, atomic_write, build_dir, cache_dir, file_lock, log, run

FORMAT_VERSION = "1"                 # bump when _customize() changes
CODENAME = "bookworm"
BASE_PACKAGES = ("systemd", "systemd-sysv", "udev", "dbus", "iproute2", "kmod", "nvme-cli",
                 "e2fsprogs", "procps", "iputils-ping")
ROOT_SERIAL = "nvlab-root"
PROJ_SERIAL = "nvlab-proj"
ROOT_LABEL = "nvlab-root"
SD_DIR = GUEST_DIR / "sd"
# Units the lab never needs: masked in the image (boot 15.6 s -> 11.7 s
# measured). The serial getty is masked too: its vhangup would break
# anything holding ttyS0 and nobody logs in.
MASKED_UNITS = (
    "e2scrub_reap.service", "nvmf-autoconnect.service", "nvmefc-boot-connections.service",
    "systemd-pstore.service", "modprobe@drm.service", "modprobe@dm_mod.service",
    "modprobe@fuse.service", "modprobe@loop.service", "modprobe@efi_pstore.service",
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
    "fstrim.timer", "man-db.timer", "sys-kernel-debug.mount", "sys-kernel-tracing.mount",
    "dev-hugepages.mount", "sys-fs-fuse-connections.mount", "systemd-firstboot.service",
    "serial-getty@ttyS0.service", "getty@tty1.service", "getty-static.service",
    "systemd-timesyncd.service", "systemd-networkd-wait-online.service",
)
# Services their packages enable at boot that a lab starts itself, once it
# has configured them (Pacemaker's cluster stack, etcd, PostgreSQL): not
# started at boot. At boot each started with the package's default
# configuration only to be stopped and reconfigured, on every host, while
# the lab waited for the boot to finish (systemd-analyze in a cluster
# image, beside another lab: etcd.service 32.5 s, corosync.service 18.6 s
# of a 62 s boot).
# `systemctl start` still starts them.
DISABLED_UNITS = ("corosync.service", "pacemaker.service", "etcd.service", "postgresql.service")
_PKG_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_verified: dict = {}   # image path -> (stat identity) verified in this process


def normalize_packages(packages=()) -> tuple:
    """BASE_PACKAGES plus packages, validated, sorted, without duplicates."""
    if isinstance(packages, str):
        packages = packages.replace(",", " ").split()
    out = set(BASE_PACKAGES)
    for p in packages:
        if not isinstance(p, str) or not _PKG_RE.match(p):
            raise ValueError(f"not a Debian package name: {p!r}")
        out.add(p)
    return tuple(sorted(out))


def _bootstrap_files() -> dict:
    """Files baked into the root image from guest/sd (guest path -> (bytes, mode))."""
    return {
        "usr/lib/nvlab/boot": ((SD_DIR / "boot").read_bytes(), 0o755),
        "etc/systemd/system/nvlab-agent.service": ((SD_DIR / "nvlab-agent.service").read_bytes(), 0o644),
    }


def image_key(pkgs: tuple, k: kmod.Kernel) -> str:
    h = hashlib.sha256()
    for part in [FORMAT_VERSION, CODENAME, k.release, k.version, *pkgs, *MASKED_UNITS, "disabled:", *DISABLED_UNITS]:
        h.update(part.encode() + b"\0")
    for path, (data, mode) in sorted(_bootstrap_files().items()):
        h.update(f"{path}:{mode}:".encode() + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def data_checksum(path: Path, block: int = 64 << 10) -> str:
    """sha256 of the image's content: the size, then offset + bytes of every
    non-zero 64 KiB block. Holes and zero blocks are skipped alike (the
    ext4 image is mostly sparse, and the host file system may report
    written-zero and unwritten extents either way), so only a changed byte
    changes the sum."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(f"size={size}\n".encode())
    zero = bytes(block)
    with open(path, "rb") as f:
        fd = f.fileno()
        off = 0
        while off < size:
            try:
                data_at = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break  # ENXIO: only a hole left
            hole_at = os.lseek(fd, data_at, os.SEEK_HOLE)
            pos = data_at - data_at % block
            f.seek(pos)
            while pos < hole_at:
                chunk = f.read(block)
                if not chunk:
                    break
                if chunk != zero[:len(chunk)]:
                    h.update(pos.to_bytes(8, "big"))
                    h.update(chunk)
                pos += len(chunk)
            off = max(pos, hole_at)
    return h.hexdigest()


@dataclass
class RootImage:
    path: Path
    manifest: dict
    packages: tuple
    key: str
    built: bool          # built by this call (False: taken from the cache)


def _load_manifest(d: Path) -> dict | None:
    try:
        return json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _verify(img: Path, man: dict) -> str | None:
    """None if img matches its manifest, else the reason."""
    try:
        st = img.stat()
    except FileNotFoundError:
        return "image missing"
    ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if _verified.get(str(img)) == ident:
        return None
    if st.st_size != man.get("size"):
        return f"size {st.st_size} != {man.get('size')}"
    t0 = time.monotonic()
    got = data_checksum(img)
    if got != man.get("sha256"):
        return f"checksum mismatch ({got[:12]} != {str(man.get('sha256'))[:12]})"
    log(f"systemd root image verified ({time.monotonic() - t0:.1f}s)")
    _verified[str(img)] = ident
    return None


def root_image(k: kmod.Kernel, packages=(), rebuild: bool = False) -> RootImage:
    """The cached root image for packages (+ BASE_PACKAGES), built if absent,
    partial or corrupt."""
    pkgs = normalize_packages(packages)
    key = image_key(pkgs, k)
    d = cache_dir() / "sdroot" / key
    img = d / "root.img"
    # One lock per image: building one package list does not hold up a lab
    # that uses another, already cached one.
    with file_lock(cache_dir() / "sdroot" / f".{key}.lock", "systemd root image build", timeout_s=1800):
        man = None if rebuild else _load_manifest(d)
        if man is not None:
            why = _verify(img, man)
            if why is None:
                os.utime(d / "manifest.json")
                return RootImage(img, man, pkgs, key, False)
            log(f"systemd root image {d}: {why}: rebuilding")
        elif d.exists():
            log(f"systemd root image {d}: no manifest (partial build): rebuilding")
        man = _build(k, pkgs, key, d)
        _verified[str(img)] = None
        _prune(d.parent, keep=d.name)
        return RootImage(img, man, pkgs, key, True)


def _missing_packages(text: str) -> list:
    pats = (r"Unable to locate package (\S+)", r"Package '([^']+)' has no installation candidate",
            r"Package (\S+) is not available")
    out = []
    for p in pats:
        for m in re.finditer(p, text):
            if m.group(1) not in out:
                out.append(m.group(1))
    return out


def _precheck(pkgs: tuple) -> list:
    """Packages the machine's own apt lists (when it is Debian 12) do not
    know or cannot install; [] when it cannot tell. mmdebstrap finds them
    too, but only after minutes of bootstrapping."""
    try:
        osr = Path("/etc/os-release").read_text()
    except OSError:
        return []
    if f"VERSION_CODENAME={CODENAME}" not in osr or not shutil.which("apt-cache"):
        return []
    cp = subprocess.run(["apt-cache", "policy", *pkgs], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                        text=True, timeout=120)
    if cp.returncode != 0 or not cp.stdout.strip():
        return []
    cand, cur = {}, None
    for line in cp.stdout.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            cur = line[:-1]
            cand[cur] = None
        elif cur and line.strip().startswith("Candidate:"):
            cand[cur] = line.split(":", 1)[1].strip()
    return [p for p in pkgs if cand.get(p) in (None, "(none)")]


def _umount_below(d: Path) -> None:
    """Unmount what a killed mmdebstrap left mounted in its chroot under d."""
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    for m in sorted((m for m in mounts if m.startswith(str(d) + "/")), reverse=True):
        subprocess.run(["umount", "-l", m], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def _build(k: kmod.Kernel, pkgs: tuple, key: str, d: Path) -> dict:
    if not shutil.which("mmdebstrap"):
        raise LabError("mmdebstrap not found (apt-get install mmdebstrap; scripts/setup.sh)")
    if os.geteuid() != 0:
        raise LabError("building the systemd root image needs root (mmdebstrap root mode, chroot depmod)")
    mirror = kmod.mirror_uri()
    missing = _precheck(pkgs)
    if missing:
        raise LabError(f"systemd root image: Debian {CODENAME} has no package {', '.join(missing)} "
                       f"(asked for: {' '.join(pkgs)}; checked with apt-cache policy)")
    _umount_below(d)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    work = d / "build"
    root = work / "root"
    work.mkdir()
    debs = cache_dir() / "sdroot-debs"
    debs.mkdir(parents=True, exist_ok=True)
    if sum(p.stat().st_size for p in debs.glob("*.deb")) > (3 << 30):
        shutil.rmtree(debs)
        debs.mkdir()
    t0 = time.monotonic()
    log(f"building systemd root image {key}: {len(pkgs)} packages ({', '.join(pkgs)}) from {mirror}")
    argv = ["mmdebstrap", "--variant=minbase", "--mode=root", "--components=main",
            f"--include={','.join(pkgs)}",
            "--aptopt=Acquire::Languages \"none\"",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-include=/usr/share/locale/locale.alias",
            # Keep the downloaded .debs: a second image (another package
            # list) downloads only what it adds.
            "--skip=download/empty", "--skip=essential/unlink",
            "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
            f"--setup-hook=sync-in {debs} /var/cache/apt/archives/",
            f"--customize-hook=sync-out /var/cache/apt/archives {debs}",
            CODENAME, str(root),
            f"deb {mirror} {CODENAME} main", f"deb {mirror} {CODENAME}-updates main"]
    cp = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=1800)
    (d / "mmdebstrap.log").write_text(cp.stdout)
    if cp.returncode != 0:
        missing = _missing_packages(cp.stdout)
        shutil.rmtree(work, ignore_errors=True)
        if missing:
            raise LabError(f"systemd root image: Debian {CODENAME} has no package "
                           f"{', '.join(missing)} (asked for: {' '.join(pkgs)}; mirror {mirror})")
        raise LabError(f"mmdebstrap failed (exit {cp.returncode}); log {d / 'mmdebstrap.log'}:\n"
                       + "\n".join(cp.stdout.splitlines()[-25:]))
    t_strap = time.monotonic() - t0
    _customize(root, k)
    libs = sorted({p.name for ld in ("usr/lib/x86_64-linux-gnu", "usr/lib", "lib/x86_64-linux-gnu")
                   if (root / ld).is_dir() for p in (root / ld).iterdir() if ".so" in p.name})
    versions = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
                              stdout=subprocess.PIPE, text=True, timeout=120).stdout.split("\n")
    used = int(run(["du", "-sxm", str(root)], what="du").stdout.split()[0])
    size_mb = max(2048, ((used * 2 + 1024 + 255) // 256) * 256)
    tmp_img = d / "root.img.tmp"
    run(["mke2fs", "-q", "-t", "ext4", "-L", ROOT_LABEL, "-m", "0", "-d", str(root), str(tmp_img),
         f"{size_mb}M"], what="mke2fs -d", timeout_s=900)
    shutil.rmtree(work, ignore_errors=True)
    img = d / "root.img"
    os.replace(tmp_img, img)
    man = {
        "format": FORMAT_VERSION, "key": key, "codename": CODENAME, "packages": list(pkgs),
        "kernel": k.release, "size": img.stat().st_size, "size_mb": size_mb, "used_mb": used,
        "sha256": data_checksum(img), "libs": libs,
        "installed": [v for v in versions if v],
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mmdebstrap_s": round(t_strap, 1), "build_s": round(time.monotonic() - t0, 1),
    }
    atomic_write(d / "manifest.json", json.dumps(man, indent=1).encode())
    log(f"systemd root image {key} built in {man['build_s']}s (mmdebstrap {man['mmdebstrap_s']}s, "
        f"{used} MB used, {size_mb} MB image)")
    return man


def _customize(root: Path, k: kmod.Kernel) -> None:
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    # The lab kernel's modules, with modules.dep (Debian's package has none).
    dst = root / "usr/lib/modules" / k.release
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(k.moddir, dst, symlinks=True,
                    ignore=shutil.ignore_patterns("vmlinuz", "build", "source"))
    run(["chroot", str(root), "depmod", "-a", k.release], what="depmod in the image")
    (root / "etc/fstab").write_text(f"LABEL={ROOT_LABEL} / ext4 rw,noatime,errors=remount-ro 0 0\n")
    # Empty machine-id: systemd makes one per overlay at first boot.
    (root / "etc/machine-id").write_text("")
    (root / "etc/hostname").write_text("nvlab\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
    sysd = root / "etc/systemd/system"
    sysd.mkdir(parents=True, exist_ok=True)
    for u in MASKED_UNITS:
        p = sysd / u
        if p.is_symlink() or p.exists():
            p.unlink()
        p.symlink_to("/dev/null")
    jd = root / "etc/systemd/journald.conf.d"
    jd.mkdir(parents=True, exist_ok=True)
    (jd / "nvlab.conf").write_text("[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n")
    for path, (data, mode) in _bootstrap_files().items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.chmod(p, mode)
    wants = sysd / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for u in DISABLED_UNITS:
        (wants / u).unlink(missing_ok=True)
    link = wants / "nvlab-agent.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/nvlab-agent.service")
    (root / "etc/nvme").mkdir(parents=True, exist_ok=True)
    # No passwords, no login: the lab drives the guest through its agent.
    (root / "root").mkdir(exist_ok=True)


def _prune(base: Path, keep: str, max_items: int = 4, min_age_s: float = 3600) -> None:
    """Keep at most max_items images (by last use), never one used within min_age_s."""
    now = time.time()
    items = []
    for p in base.iterdir():
        if p.is_dir() and p.name != keep:
            m = p / "manifest.json"
            items.append((m.stat().st_mtime if m.exists() else p.stat().st_mtime, p))
    items.sort(reverse=True)
    for mtime, p in items[max_items - 1:]:
        if now - mtime > min_age_s:
            shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------- boot initramfs

def boot_initramfs(k: kmod.Kernel) -> Path:
    """Tiny initramfs (busybox + virtio_blk): mount the root disk, switch_root."""
    cache = cache_dir() / "initramfs"
    closure = irfs.module_closure(k.moddir, ["virtio_blk"])
    init = SD_DIR / "initramfs-init"
    parts = [FORMAT_VERSION, k.release, k.version, irfs.content_hash(init), irfs.file_sig(irfs.BUSYBOX)] + \
            [f"{n}:{irfs.file_sig(p)}" for n, p in closure]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    out = cache / f"sdboot-{key}.cpio"
    if out.exists():
        return out
    a = irfs.Cpio()
    for dname in ("dev", "proc", "sys", "newroot", "bin"):
        a.dir(dname)
    a.chardev("dev/console", 5, 1)
    a.chardev("dev/null", 1, 3, 0o666)
    a.file("bin/busybox", Path(os.path.realpath(irfs.BUSYBOX)).read_bytes(), 0o755)
    for ap in ("sh", "mount", "umount", "insmod", "switch_root", "cat", "sleep", "usleep", "ls", "echo"):
        a.symlink(f"bin/{ap}", "busybox")
    a.file("init", init.read_bytes(), 0o755)
    mods = []
    for _n, path in closure:
        data = path.read_bytes()
        if path.name.endswith(".xz"):
            data = lzma.decompress(data)
        name = path.name.split(".ko", 1)[0] + ".ko"
        a.file(f"modules/{name}", data)
        mods.append(name)
    a.file("modules/order", ("\n".join(mods) + "\n").encode())
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write(out, a.serialize())
    return out


# ---------------------------------------------------------------- project disk

def project_disk(out: Path, image: RootImage, install: bool = True) -> dict:
    """Write the project disk (a tar) to out: `cmake --install` of the build
    dir (DESTDIR), the guest setup script and agent, and the shared libraries
    the installed programs need that the image lacks. install=False leaves
    the project out (the setup script and agent only). Returns a summary."""
    t0 = time.monotonic()
    stage = out.with_name(out.name + ".stage")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    b = build_dir()
    installed = False
    if not install:
        log("project disk without the project (install_project=False)")
    elif (b / "cmake_install.cmake").exists():
        env = dict(os.environ, DESTDIR=str(stage))
        run(["cmake", "--install", str(b)], env=env, what="cmake --install (project disk)", timeout_s=300)
        installed = True
    else:
        log(f"no CMake build at {b}: systemd guests get no nvfence install")
    elfs = []
    for p in sorted(stage.rglob("*")):
        if p.is_file() and not p.is_symlink() and irfs.is_elf(p):
            data = irfs.strip_debug(p)
            p.write_bytes(data)
            elfs.append(p)
    have = set(image.manifest.get("libs", []))
    # The project's own shared libraries (if any) resolve inside the stage.
    own = sorted({str(p.parent) for p in stage.rglob("*.so*")})
    env = {"LD_LIBRARY_PATH": ":".join(own)} if own else None
    libs = {}
    for e in elfs:
        for lib in irfs.ldd_libs(e, env):
            name = os.path.basename(lib)
            if lib.startswith(str(stage)) or name in have or name.startswith("ld-linux"):
                continue
            libs[name] = os.path.realpath(lib)
    agent = irfs.agent_binary()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as t:
        def add_dir(name):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            t.addfile(ti)

        def add_bytes(name, data, mode):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
            import io
            t.addfile(ti, io.BytesIO(data))

        for p in sorted(stage.rglob("*")):
            rel = p.relative_to(stage).as_posix()
            ti = t.gettarinfo(str(p), rel)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            if ti.isreg():
                with open(p, "rb") as f:
                    t.addfile(ti, f)
            else:
                t.addfile(ti)
        add_dir("usr/lib/nvlab")
        add_bytes("usr/lib/nvlab/setup", (SD_DIR / "setup").read_bytes(), 0o755)
        add_bytes("usr/lib/nvlab/nvlab-agent", agent.read_bytes(), 0o755)
        # usleep as in the busybox guests (the lab's shell snippets use it).
        add_dir("usr/lib/nvlab/bin")
        add_bytes("usr/lib/nvlab/bin/usleep",
                  b'#!/bin/sh\nexec sleep "$(awk -v u="${1:-0}" \'BEGIN{printf "%.6f", u/1e6}\')"\n', 0o755)
        if libs:
            add_dir("usr/lib/x86_64-linux-gnu")
            for name, real in sorted(libs.items()):
                add_bytes(f"usr/lib/x86_64-linux-gnu/{name}", Path(real).read_bytes(), 0o644)
            add_bytes("usr/lib/nvlab/ldconfig-needed", b"1\n", 0o644)
    shutil.rmtree(stage, ignore_errors=True)
    return {"installed": installed, "elfs": len(elfs), "libs": sorted(libs),
            "bytes": out.stat().st_size, "seconds": round(time.monotonic() - t0, 2)}


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m nvlab.sdimage",
                                 description="build (or verify) the cached systemd root image")
    ap.add_argument("packages", nargs="*", help="extra Debian packages")
    ap.add_argument("--rebuild", action="store_true")
    a = ap.parse_args(argv)
    k = kmod.fetch_kernel()
    t0 = time.monotonic()
    img = root_image(k, a.packages, rebuild=a.rebuild)
    print(json.dumps({"path": str(img.path), "key": img.key, "built": img.built,
                      "seconds": round(time.monotonic() - t0, 1),
                      "build_s": img.manifest.get("build_s"), "packages": list(img.packages)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
