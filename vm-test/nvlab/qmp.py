"""Minimal QMP client over a unix socket; every byte exchanged is logged."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

from .util import LabError, connect_unix


class QMP:
    def __init__(self, sock_path: Path, log_path: Path, name: str):
        self.sock_path = sock_path
        self.name = name
        self._log = open(log_path, "a", buffering=1)
        self._sock = None
        self._buf = b""
        self._lock = threading.Lock()
        self._next_id = 1
        self.events = []

    def _logline(self, direction: str, text: str) -> None:
        self._log.write(f"{time.time():.6f} {direction} {text.rstrip()}\n")

    def connect(self, timeout_s: float, alive=lambda: True) -> None:
        deadline = time.monotonic() + timeout_s
        s = connect_unix(self.sock_path, timeout_s, alive, f"{self.name}: QMP socket")
        self._sock = s
        greeting = self._read_msg(deadline)
        if "QMP" not in greeting:
            raise LabError(f"{self.name}: unexpected QMP greeting {greeting}")
        self.execute("qmp_capabilities", timeout_s=max(1.0, deadline - time.monotonic()))

    def _read_msg(self, deadline: float) -> dict:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(f"{self.name}: QMP timed out")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                raise LabError(f"{self.name}: QMP timed out") from None
            except OSError as e:
                raise LabError(f"{self.name}: QMP connection error: {e}") from None
            if not chunk:
                raise LabError(f"{self.name}: QMP connection closed (QEMU gone?)")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        text = line.decode("utf-8", "replace")
        self._logline("<-", text)
        return json.loads(text)

    def execute(self, cmd: str, args: dict | None = None, timeout_s: float = 10.0):
        """Run a QMP command; return its 'return' value, raise LabError on 'error'."""
        if self._sock is None:
            raise LabError(f"{self.name}: QMP not connected")
        with self._lock:
            mid = f"nvlab-{self._next_id}"
            self._next_id += 1
            msg = {"execute": cmd, "id": mid}
            if args:
                msg["arguments"] = args
            text = json.dumps(msg)
            self._logline("->", text)
            try:
                self._sock.sendall(text.encode() + b"\n")
            except OSError as e:
                raise LabError(f"{self.name}: QMP send failed: {e}") from None
            deadline = time.monotonic() + timeout_s
            while True:
                resp = self._read_msg(deadline)
                if "event" in resp:
                    self.events.append(resp)
                    continue
                if resp.get("id") != mid:
                    continue
                if "error" in resp:
                    raise LabError(f"{self.name}: QMP {cmd} failed: {resp['error'].get('desc', resp['error'])}")
                return resp.get("return")

    def drain_events(self, timeout_s: float = 2.0) -> list:
        """Reads what is left on the socket (e.g. after QEMU exited) until it
        closes or @p timeout_s passes; returns every event seen so far."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._sock is not None:
                try:
                    resp = self._read_msg(deadline)
                except LabError:
                    break
                if "event" in resp:
                    self.events.append(resp)
        return self.events

    def close(self) -> None:
        if self._sock:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        try:
            self._log.close()
        except OSError:
            pass
