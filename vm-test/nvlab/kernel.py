"""Fetch the lab's guest kernel (Debian trixie-backports cloud kernel).

Runs apt with a private configuration (own sources list, lists, status and
cache directories under the lab cache) so the machine's apt state is never
touched, resolves the `linux-image-cloud-amd64` meta package of
trixie-backports to the concrete kernel packages, downloads them and unpacks
them with `dpkg -x`.  The mirror URI is taken at run time from the machine's
own apt sources.  Runnable as a command:

    /usr/bin/python3 -m nvlab.kernel [--refresh]
"""

from __future__ import annotations

import argparse
import glob
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .util import LabError, atomic_write, cache_dir, file_lock, log, run

SUITES = ("trixie", "trixie-backports")
META = "linux-image-cloud-amd64"
META_SUITE = "trixie-backports"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIN_VERSION = (6, 13)
# Config options the lab relies on: name -> accepted values
REQUIRED_CONFIG = {
    "CONFIG_BLK_DEV_NVME": "y",
    "CONFIG_NVME_TARGET": "ym",
    "CONFIG_NVME_TARGET_LOOP": "ym",
    "CONFIG_NVME_TARGET_TCP": "ym",
    "CONFIG_NVME_TCP": "ym",
    "CONFIG_NVME_FABRICS": "ym",
    "CONFIG_CONFIGFS_FS": "ym",
    "CONFIG_VIRTIO_CONSOLE": "y",
    "CONFIG_VIRTIO_PCI": "y",
    "CONFIG_VIRTIO_NET": "ym",
    "CONFIG_DEVTMPFS": "y",
    "CONFIG_BLK_DEV_INITRD": "y",
    "CONFIG_RD_GZIP": "y",
}


@dataclass
class Kernel:
    release: str          # e.g. 7.3.4+deb13-cloud-amd64 (uname -r)
    version: str          # Debian package version, e.g. 7.3.4-1~bpo13+1
    root: Path            # dpkg -x tree
    vmlinuz: Path
    moddir: Path          # .../lib/modules/<release>
    config: Path
    packages: list

    def to_json(self) -> dict:
        return {"release": self.release, "version": self.version, "root": str(self.root),
                "vmlinuz": str(self.vmlinuz), "moddir": str(self.moddir),
                "config": str(self.config), "packages": self.packages}

    @classmethod
    def from_json(cls, d: dict) -> "Kernel":
        return cls(d["release"], d["version"], Path(d["root"]), Path(d["vmlinuz"]),
                   Path(d["moddir"]), Path(d["config"]), list(d["packages"]))


# ---------------------------------------------------------------- apt sources

def _parse_deb822(text: str):
    """Yield dicts (lower-case keys) of the stanzas of a deb822 file."""
    stanza, key = {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if stanza:
                yield stanza
            stanza, key = {}, None
            continue
        if line[0] in " \t" and key:
            stanza[key] += " " + line.strip()
            continue
        if ":" in line:
            key, _, val = line.partition(":")
            key = key.strip().lower()
            stanza[key] = val.strip()
    if stanza:
        yield stanza


def _candidate_uris():
    """(uri, suites) pairs of plain deb entries from the machine's apt sources."""
    out = []
    for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        try:
            text = Path(f).read_text()
        except OSError:
            continue
        for st in _parse_deb822(text):
            if "deb" not in st.get("types", "").split():
                continue
            if st.get("enabled", "yes").lower() == "no":
                continue
            for uri in st.get("uris", "").split():
                out.append((uri, st.get("suites", "").split()))
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for f in files:
        try:
            lines = Path(f).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line.startswith("deb "):
                continue
            words = line.split()[1:]
            if words and words[0].startswith("["):
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = words[1:]
            if len(words) >= 2:
                out.append((words[0], [words[1]]))
    return out


def mirror_uri() -> str:
    """The Debian archive URI the machine already uses (never hard-coded)."""
    env = os.environ.get("NVFENCE_LAB_MIRROR")
    if env:
        return env.rstrip("/")
    for uri, suites in _candidate_uris():
        # The main archive, not the security archive or a third-party repository.
        if any(s.endswith("-security") for s in suites) or "security" in uri:
            continue
        if not any(re.fullmatch(r"(buster|bullseye|bookworm|trixie|forky|sid|stable|testing|unstable|oldstable)"
                                r"(-updates|-backports)?", s) for s in suites):
            continue
        return uri.rstrip("/")
    raise LabError("cannot find a Debian archive URI in /etc/apt/sources.list.d/*.sources "
                   "or /etc/apt/sources.list (set NVFENCE_LAB_MIRROR to override)")


# ---------------------------------------------------------------- private apt

class PrivateApt:
    def __init__(self, base: Path):
        self.base = base
        self.lists = base / "lists"
        self.cache = base / "cache"
        self.state = base / "state"
        self.etc = base / "etc"
        self.status = base / "status"
        self.sources = self.etc / "nvlab.sources"
        self.empty = self.etc / "empty.d"

    def setup(self, uri: str, trusted: bool) -> None:
        for d in (self.lists / "partial", self.cache / "archives" / "partial", self.state,
                  self.empty, self.base / "log"):
            d.mkdir(parents=True, exist_ok=True)
        if not self.status.exists():
            self.status.write_text("")
        opt = "Trusted: yes" if trusted else f"Signed-By: {KEYRING}"
        text = (f"Types: deb\nURIs: {uri}\nSuites: {' '.join(SUITES)}\n"
                f"Components: main\nArchitectures: amd64\n{opt}\n")
        if not self.sources.exists() or self.sources.read_text() != text:
            self.sources.write_text(text)

    def opts(self):
        o = {
            "Dir::Etc::sourcelist": self.sources,
            "Dir::Etc::sourceparts": self.empty,
            "Dir::Etc::preferences": self.etc / "preferences",
            "Dir::Etc::preferencesparts": self.empty,
            "Dir::State": self.state,
            "Dir::State::Lists": self.lists,
            "Dir::State::status": self.status,
            "Dir::Cache": self.cache,
            "Dir::Log": self.base / "log",
            "APT::Architecture": "amd64",
            "APT::Architectures": "amd64",
            "Acquire::Languages": "none",
            "APT::Sandbox::User": "root",
        }
        argv = []
        for k, v in o.items():
            argv += ["-o", f"{k}={v}"]
        return argv

    def get(self, *args, cwd=None, timeout_s=600.0):
        return run(["apt-get", "-q", *self.opts(), *args], cwd=cwd, timeout_s=timeout_s,
                   what="apt-get " + args[0])

    def cache_cmd(self, *args):
        return run(["apt-cache", *self.opts(), *args], what="apt-cache " + args[0])

    def show(self, spec: str) -> dict:
        text = self.cache_cmd("show", spec).stdout
        first = next(iter(_parse_deb822(text)), None)
        if not first:
            raise LabError(f"apt-cache show {spec}: no record")
        return first


def _depends(rec: dict):
    """[(name, version-or-None)] of the Depends field (first alternative only)."""
    out = []
    for item in rec.get("depends", "").split(","):
        item = item.split("|")[0].strip()
        m = re.match(r"^([a-z0-9][a-z0-9+.-]*)(?::\w+)?\s*(?:\(\s*=\s*([^)\s]+)\s*\))?", item)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _release_tuple(release: str):
    m = re.match(r"^(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# ---------------------------------------------------------------- checks

def modinfo(path: Path) -> dict:
    """Fields of a kernel module's .modinfo section (.ko or .ko.xz), no kmod needed."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        data = lzma.decompress(data)
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise LabError(f"{path}: not a 64-bit ELF module")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = secs[shstrndx][4]
    fields = {}
    for s in secs:
        end = data.index(b"\0", stroff + s[0])
        if data[stroff + s[0]:end] == b".modinfo":
            for item in data[s[4]:s[4] + s[5]].split(b"\0"):
                if b"=" in item:
                    k, _, v = item.decode("utf-8", "replace").partition("=")
                    fields.setdefault(k, []).append(v)
    return fields


def find_module(moddir: Path, name: str) -> Path | None:
    alts = {name, name.replace("-", "_"), name.replace("_", "-")}
    for root, _dirs, files in os.walk(moddir / "kernel"):
        for f in files:
            base = f.split(".ko", 1)[0]
            if base in alts and ".ko" in f:
                return Path(root) / f
    return None


def check_kernel(k: Kernel) -> None:
    """Refuse kernels that cannot give the lab reservations."""
    if _release_tuple(k.release) < MIN_VERSION:
        raise LabError(f"kernel {k.release} is older than {MIN_VERSION[0]}.{MIN_VERSION[1]}: "
                       "nvmet has no reservation support before Linux 6.13")
    if not k.vmlinuz.is_file():
        raise LabError(f"kernel {k.release}: no vmlinuz at {k.vmlinuz}")
    cfg = {}
    for line in k.config.read_text().splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            key, _, val = line.partition("=")
            cfg[key] = val
    for key, ok in REQUIRED_CONFIG.items():
        if cfg.get(key, "n") not in ok:
            raise LabError(f"kernel {k.release}: {key}={cfg.get(key, 'not set')} (the lab needs {ok})")
    nvmet = find_module(k.moddir, "nvmet")
    if cfg["CONFIG_NVME_TARGET"] == "m":
        if not nvmet:
            raise LabError(f"kernel {k.release}: nvmet module missing")
        data = nvmet.read_bytes()
        if nvmet.name.endswith(".xz"):
            data = lzma.decompress(data)
        if b"resv_enable" not in data:
            raise LabError(f"kernel {k.release}: nvmet has no 'resv_enable' attribute "
                           "(no NVMe reservation support in this nvmet)")


# ---------------------------------------------------------------- fetch

def _current_file() -> Path:
    return cache_dir() / "kernel" / "current.json"


def cached_kernel() -> Kernel | None:
    f = _current_file()
    if not f.exists():
        return None
    try:
        k = Kernel.from_json(json.loads(f.read_text()))
    except (ValueError, KeyError):
        return None
    if not (k.vmlinuz.is_file() and k.config.is_file() and (k.root / ".complete").exists()):
        return None
    return k


def fetch_kernel(refresh: bool = False) -> Kernel:
    """Return the lab kernel, downloading it only when not cached (or refresh)."""
    if not refresh:
        k = cached_kernel()
        if k:
            check_kernel(k)
            return k
    with file_lock(cache_dir() / "kernel.lock", "kernel fetch"):
        if not refresh:
            k = cached_kernel()
            if k:
                check_kernel(k)
                return k
        k = _fetch(refresh)
        check_kernel(k)
        atomic_write(_current_file(), json.dumps(k.to_json(), indent=1).encode())
        return k


def _fetch(refresh: bool) -> Kernel:
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise LabError("apt-get and dpkg are needed to fetch the lab kernel")
    uri = mirror_uri()
    trusted = os.environ.get("NVFENCE_LAB_APT_TRUSTED") == "1"
    apt = PrivateApt(cache_dir() / "apt")
    apt.setup(uri, trusted)
    log(f"apt-get update (private config, {' '.join(SUITES)} from the machine's mirror"
        f"{', UNVERIFIED: NVFENCE_LAB_APT_TRUSTED=1' if trusted else ''})")
    try:
        cp = apt.get("update")
    except LabError as e:
        msg = str(e)
        if "NO_PUBKEY" in msg or "not signed" in msg or "signature" in msg.lower():
            raise LabError(f"{msg}\nThe trixie Release files could not be verified with {KEYRING}. "
                           "Update the debian-archive-keyring package, or, as a last resort, "
                           "set NVFENCE_LAB_APT_TRUSTED=1 to skip verification.") from None
        raise
    for suite in SUITES:
        if not list(apt.lists.glob(f"*_dists_{suite}_main_binary-amd64_Packages*")):
            raise LabError(f"apt-get update gave no package list for {suite} (signature problem? "
                           f"the trixie keys must be in {KEYRING}; last resort: "
                           "NVFENCE_LAB_APT_TRUSTED=1):\n" + cp.stdout + cp.stderr)

    # Meta package version in trixie-backports.
    madison = apt.cache_cmd("madison", META).stdout
    version = None
    for line in madison.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and parts[0] == META and f" {META_SUITE}/" in f" {parts[2]}":
            version = parts[1]
            break
    if not version:
        raise LabError(f"{META} not found in {META_SUITE}:\n{madison}")
    meta = apt.show(f"{META}={version}")
    image = next((n for n, _v in _depends(meta) if n.startswith("linux-image-") and n != META), None)
    if not image:
        raise LabError(f"{META} {version}: no linux-image-<abi> dependency in {meta.get('depends')}")
    release = image[len("linux-image-"):]
    img = apt.show(f"{image}={version}")
    deps = dict(_depends(img))
    packages = []
    for kind in ("binary", "modules", "base"):
        name = f"linux-{kind}-{release}"
        if name in deps:
            packages.append(name)
    if "linux-binary-" + release not in packages:
        # Older layout: linux-image-<abi> carries vmlinuz and modules itself.
        packages = [image]
    log(f"kernel {release} ({version}): packages {', '.join(packages)}")

    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    wanted = []
    for p in packages:
        fname_ver = version.replace(":", "%3a")
        pattern = f"{p}_{fname_ver}_*.deb"
        have = sorted(debs.glob(pattern))
        if have:
            wanted.append(have[0])
            continue
        log(f"apt-get download {p}={version}")
        apt.get("download", f"{p}={version}", cwd=debs)
        have = sorted(debs.glob(pattern))
        if not have:
            raise LabError(f"apt-get download {p}={version} produced no {pattern} in {debs}")
        wanted.append(have[0])

    root = cache_dir() / "kernel" / release
    if not (root / ".complete").exists() or refresh:
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for deb in wanted:
            run(["dpkg", "-x", str(deb), str(tmp)], what="dpkg -x")
        (tmp / ".complete").write_text(version + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    return _locate(root, release, version, packages)


def _locate(root: Path, release: str, version: str, packages) -> Kernel:
    moddir = None
    for cand in (root / "usr/lib/modules" / release, root / "lib/modules" / release):
        if cand.is_dir():
            moddir = cand
            break
    if not moddir:
        raise LabError(f"no modules directory for {release} under {root}")
    vmlinuz = next((p for p in (moddir / "vmlinuz", root / "boot" / f"vmlinuz-{release}") if p.is_file()), None)
    config = next((p for p in (moddir / "config", root / "boot" / f"config-{release}") if p.is_file()), None)
    if not vmlinuz or not config:
        raise LabError(f"kernel {release}: vmlinuz or config missing under {root}")
    return Kernel(release, version, root, vmlinuz, moddir, config, list(packages))


def pvh_vmlinux(k: Kernel) -> Path | None:
    """The uncompressed ELF vmlinux of k, for QEMU's PVH direct boot.

    Booting the ELF skips SeaBIOS's linuxboot ROM and the in-guest
    decompression of the bzImage (about 0.5-1 s under TCG). Extracted once
    from the bzImage payload (boot protocol payload_offset/length) and cached;
    None when that is not possible (then the bzImage is booted)."""
    if os.environ.get("NVFENCE_LAB_PVH", "1") == "0":
        return None
    out = k.root / "vmlinux.pvh"
    if out.is_file():
        return out
    if "CONFIG_PVH=y" not in k.config.read_text():
        return None
    data = k.vmlinuz.read_bytes()
    try:
        if data[0x202:0x206] != b"HdrS":
            return None
        setup_sects = data[0x1F1] or 4
        off, length = struct.unpack_from("<II", data, 0x248)
        start = (setup_sects + 1) * 512 + off
        payload = data[start:start + length]
        if payload[:4] == b"\x28\xb5\x2f\xfd":
            if not shutil.which("zstd"):
                return None
            # Kbuild appends the uncompressed size (4 bytes) after the frame.
            cp = subprocess.run(["zstd", "-dc"], input=payload[:-4], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, timeout=120)
            raw = cp.stdout if cp.returncode == 0 else b""
        elif payload[:2] == b"\x1f\x8b":
            import zlib
            raw = zlib.decompressobj(wbits=31).decompress(payload)
        elif payload[:6] == b"\xfd7zXZ\x00":
            raw = lzma.LZMADecompressor().decompress(payload)
        else:
            return None
    except (IndexError, struct.error, OSError, lzma.LZMAError, subprocess.SubprocessError, ValueError):
        return None
    if raw[:4] != b"\x7fELF":
        return None
    atomic_write(out, raw)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="nvlab.kernel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--refresh", action="store_true",
                    help="re-resolve the meta package even if a kernel is cached")
    args = ap.parse_args(argv)
    try:
        k = fetch_kernel(refresh=args.refresh)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(k.to_json(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
