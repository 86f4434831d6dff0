"""Host side of the guest agent protocol (see guest/nvlab-agent.c)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .util import LabError, connect_unix

HOW_EXITED, HOW_SIGNALED, HOW_TIMEOUT, HOW_NOSTART = 0, 1, 2, 3
MAX_FRAME = 64 << 20


class CommandFailed(LabError):
    """run(..., check=True) saw a non-zero exit (or a timeout)."""

    def __init__(self, result: "Result"):
        self.result = result
        super().__init__(f"{result.host}: command failed ({result.describe()}): {result.cmd}\n"
                         f"--- stdout ---\n{result.out[-4000:]}\n--- stderr ---\n{result.err[-4000:]}")


@dataclass
class Result:
    """Outcome of one command in a guest.

    rc: exit status; 128+N when killed by signal N; 124 when the lab's
    timeout killed it (timed_out is then True)."""
    host: str
    cmd: str
    rc: int
    out: str
    err: str
    signal: int | None = None
    timed_out: bool = False
    out_truncated: bool = False
    err_truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s"
        if self.signal:
            return f"killed by signal {self.signal}"
        return f"exit {self.rc}"

    def check(self) -> "Result":
        if self.rc != 0:
            raise CommandFailed(self)
        return self


@dataclass
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    frame: tuple | None = None


class AgentConn:
    def __init__(self, sock_path: Path, log_path: Path, name: str):
        self.sock_path = sock_path
        self.name = name
        self._log = open(log_path, "a", buffering=1)
        self._sock = None
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 1
        self._ready = threading.Event()
        self.ready_info: dict = {}
        self.ready_count = 0
        self.errors: list[str] = []
        self._closed = False
        self._reader = None

    def _logline(self, text: str) -> None:
        try:
            self._log.write(f"{time.time():.6f} {text}\n")
        except ValueError:
            pass

    def connect(self, timeout_s: float, alive=lambda: True) -> None:
        s = connect_unix(self.sock_path, timeout_s, alive, f"{self.name}: agent socket")
        self._sock = s
        self._reader = threading.Thread(target=self._read_loop, name=f"nvlab-agent-{self.name}", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------ reading
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _read_loop(self) -> None:
        try:
            while True:
                (length,) = struct.unpack(">I", self._recv_exact(4))
                if length == 0 or length > MAX_FRAME:
                    raise LabError(f"bad frame length {length}")
                payload = self._recv_exact(length)
                self._dispatch(payload)
        except (EOFError, OSError, LabError, struct.error) as e:
            if not self._closed:
                self._logline(f"connection ended: {e!r}")
        finally:
            with self._state_lock:
                self._closed = True
                for p in self._pending.values():
                    p.event.set()
            self._ready.set()

    def _dispatch(self, payload: bytes) -> None:
        kind = payload[:1]
        body = payload[1:]
        if kind == b"Y":
            (n,) = struct.unpack_from(">I", body, 0)
            text = body[4:4 + n].decode("utf-8", "replace")
            info = {}
            for line in text.splitlines():
                k, sep, v = line.partition("=")
                if sep:
                    info[k.strip()] = v.strip()
            self._logline(f"READY {info}")
            self.ready_info = info
            self.ready_count += 1
            self._ready.set()
        elif kind == b"A":
            rid, how, code, flags, dur = struct.unpack_from(">IBiBI", body, 0)
            off = struct.calcsize(">IBiBI")
            (n,) = struct.unpack_from(">I", body, off)
            out = body[off + 4:off + 4 + n]
            off += 4 + n
            (n,) = struct.unpack_from(">I", body, off)
            err = body[off + 4:off + 4 + n]
            with self._state_lock:
                p = self._pending.get(rid)
            if p is None:
                self._logline(f"answer for unknown request {rid}")
                return
            p.frame = (how, code, flags, dur, out, err)
            p.event.set()
        elif kind == b"E":
            (n,) = struct.unpack_from(">I", body, 0)
            text = body[4:4 + n].decode("utf-8", "replace")
            self._logline(f"AGENT ERROR {text}")
            self.errors.append(text)
        else:
            self._logline(f"unknown frame type {kind!r}")

    # ------------------------------------------------------------ API
    def wait_ready(self, timeout_s: float, alive=lambda: True) -> dict:
        deadline = time.monotonic() + timeout_s
        while not self._ready.is_set():
            if not alive():
                raise LabError(f"{self.name}: QEMU exited during boot")
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(f"{self.name}: no READY from the guest agent within {timeout_s:.0f}s")
            self._ready.wait(min(left, 0.2))
        if self._closed and not self.ready_info:
            raise LabError(f"{self.name}: agent connection closed before READY")
        return self.ready_info

    @property
    def closed(self) -> bool:
        return self._closed

    def request(self, cmd: str, env: dict | None, timeout_s: float, grace_s: float,
                host: str) -> Result:
        if self._closed or self._sock is None:
            raise LabError(f"{host}: agent connection is closed (VM killed or exited?)")
        with self._state_lock:
            rid = self._next_id
            self._next_id = (self._next_id % 0xFFFFFFF0) + 1
            pending = _Pending()
            self._pending[rid] = pending
        envs = [f"{k}={v}".encode() for k, v in (env or {}).items()]
        body = struct.pack(">III", rid, max(1, int(timeout_s * 1000)), len(envs))
        for e in envs:
            body += struct.pack(">I", len(e)) + e
        c = cmd.encode()
        body += struct.pack(">I", len(c)) + c
        frame = b"Q" + body
        self._logline(f"Q{rid} timeout={timeout_s}s env={dict(env or {})} cmd={cmd!r}")
        t0 = time.monotonic()
        try:
            with self._send_lock:
                self._sock.sendall(struct.pack(">I", len(frame)) + frame)
            wait_s = timeout_s + grace_s
            if not pending.event.wait(wait_s):
                raise LabError(f"{host}: no answer from the guest agent within {wait_s:.0f}s "
                               f"(VM paused, hung or dead?): {cmd}")
            if pending.frame is None:
                raise LabError(f"{host}: agent connection lost while running: {cmd}")
        except OSError as e:
            raise LabError(f"{host}: cannot send to the guest agent: {e}") from None
        finally:
            with self._state_lock:
                self._pending.pop(rid, None)
        how, code, flags, dur, out, err = pending.frame
        r = Result(host=host, cmd=cmd, rc=0, out=out.decode("utf-8", "replace"),
                   err=err.decode("utf-8", "replace"), out_truncated=bool(flags & 1),
                   err_truncated=bool(flags & 2), duration_s=dur / 1000.0)
        if how == HOW_EXITED:
            r.rc = code
        elif how == HOW_SIGNALED:
            r.signal = code
            r.rc = 128 + code
        elif how == HOW_TIMEOUT:
            r.timed_out = True
            r.rc = 124
        else:
            r.rc = 127
        self._logline(f"A{rid} {r.describe()} in {time.monotonic() - t0:.3f}s "
                      f"out={len(out)}B err={len(err)}B")
        return r

    def close(self) -> None:
        self._closed = True
        if self._sock:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self._sock.close()
            except OSError:
                pass
        if self._reader:
            self._reader.join(timeout=2)
        try:
            self._log.close()
        except OSError:
            pass
