"""Shared helpers: paths, errors, locking, subprocess wrappers."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

VM_TEST_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = VM_TEST_DIR.parent
GUEST_DIR = VM_TEST_DIR / "guest"


def cache_dir() -> Path:
    """Where downloads and build products live (outside the work tree)."""
    return Path(os.environ.get("NVFENCE_LAB_CACHE", "/var/cache/nvfence-lab"))


def build_dir() -> Path:
    """The project's CMake build directory (binaries are taken from <build>/bin)."""
    env = os.environ.get("NVFENCE_BUILD_DIR")
    return Path(env) if env else REPO_DIR / "build"


class LabError(RuntimeError):
    """The lab could not be prepared, booted or driven."""


class NotSupported(LabError):
    """The operation does not exist in this topology (e.g. pause in 'loop')."""


def log(msg: str) -> None:
    if os.environ.get("NVFENCE_LAB_QUIET") != "1":
        print(f"[nvlab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def file_lock(path: Path, what: str, timeout_s: float = 900.0):
    """Exclusive advisory lock (other lab processes preparing the same cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(f"timed out after {timeout_s:.0f}s waiting for lock {path} ({what})")
                if not announced:
                    log(f"waiting for another process holding {path} ({what})")
                    announced = True
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def run(argv, *, cwd=None, env=None, timeout_s=600.0, what=None) -> subprocess.CompletedProcess:
    """Run a host command, capture its output, raise LabError on failure."""
    try:
        cp = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            timeout=timeout_s, text=True)
    except FileNotFoundError as e:
        raise LabError(f"{what or argv[0]}: command not found: {e.filename}") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"{what or argv[0]}: timed out after {timeout_s:.0f}s: {' '.join(map(str, argv))}") from None
    if cp.returncode != 0:
        raise LabError(f"{what or argv[0]} failed (exit {cp.returncode}): {' '.join(map(str, argv))}\n"
                       f"{cp.stdout[-4000:]}{cp.stderr[-4000:]}")
    return cp


def sha256_bytes(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def connect_unix(path, timeout_s: float, alive, what: str) -> socket.socket:
    """Connect to the unix socket QEMU listens on at path, retrying (bounded
    by timeout_s) until it exists; LabError if QEMU exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(path))
            return s
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
            if not alive():
                raise LabError(f"{what}: QEMU exited before it was ready")
            if time.monotonic() > deadline:
                raise LabError(f"{what} {path} not ready after {timeout_s:.0f}s")
            time.sleep(0.02)
