"""The lab: QEMU VMs sharing one reservation-capable NVMe namespace.

    with Lab(hosts=2, topology="fabric") as lab:
        a, b = lab.hosts
        a.run("nvme resv-register $NVFENCE_DEV --nrkey=0x1 --rrega=0", check=True)

Topologies
  fabric  one target VM (nvmet over nvmet-tcp, backing disk = QEMU NVMe) and
          one VM per host, each linked to the target by its own QEMU
          `-netdev stream` unix-socket link. Hosts can be paused, resumed,
          killed and cut off from the target one by one.
  loop    one VM: nvmet on nvme-loop, one fabrics connection per host
          identity (own hostnqn/hostid, own /dev/nvmeXnY). Fast; no
          pause/kill/cut (they raise NotSupported).
  plain   one VM per host on QEMU's own emulated NVMe namespace (shared
          image), which has no reservation support.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path

from . import initramfs as irfs
from . import kernel as kmod
from . import sdimage
from .agent import AgentConn, CommandFailed, Result
from .qmp import QMP
from .util import LabError, NotSupported, log, run

TOPOLOGIES = ("fabric", "loop", "plain")
FLAVOURS = ("busybox", "systemd")
CUT_PATHS = ("storage", "cluster")
# Cluster network: host i (0-based) is 169.254.100.<i+1>/24 on its second NIC.
CLUSTER_PREFIX = "169.254.100."
# The one package list of the cluster labs (Pacemaker, etcd) and of the .deb
# install test (libnvfence's runtime Depends beyond the base image): every
# systemd test that needs more than the base image uses it, so CI builds one
# extra root image, not three.
CLUSTER_PACKAGES = ("corosync", "pacemaker", "pacemaker-cli-utils", "etcd-server", "etcd-client",
                    "liburing2", "libspdlog1.10", "libfmt9")
# Every Debian root image a lab test boots, by name: `vm-test/lab images`
# builds them all (scripts/test.sh runs it beside the compiler), and a lab
# names its image from here, so the list cannot miss one (test
# vm_systemd_image checks every systemd Lab in the tests names a set).
# base: systemd units and the watcher; cluster: etcd and Pacemaker;
# postgres: the cluster's plus the database's (postgresql-15 with its
# contrib, resource-agents' Filesystem agent, psmisc's fuser); deb-install:
# the cluster's plus what a developer needs to build against libnvfence-dev
# and the Depends of debian/tests (autopkgtest, run in that guest).
IMAGE_SETS = {
    "base": (),
    "cluster": CLUSTER_PACKAGES,
    "postgres": CLUSTER_PACKAGES + ("resource-agents", "postgresql-15", "psmisc"),
    "deb-install": CLUSTER_PACKAGES + ("g++", "make", "cmake", "pkg-config", "liburing-dev",
                                       "build-essential", "ninja-build", "libxml2-utils", "man-db"),
}


def _check_prebuilt(packages) -> None:
    """With NVFENCE_LAB_PREBUILT=1 (scripts/test.sh's lab phase, after
    `vm-test/lab images`), a root image outside IMAGE_SETS is an error: it
    would be built inside a lab test, on the test's clock, unseen by the
    image step."""
    if os.environ.get("NVFENCE_LAB_PREBUILT") != "1":
        return
    want = sdimage.normalize_packages(packages)
    if all(sdimage.normalize_packages(p) != want for p in IMAGE_SETS.values()):
        raise LabError(f"root image with packages {' '.join(want)} is not in nvlab IMAGE_SETS: "
                       "add it there so that `vm-test/lab images` builds it before the lab tests")


# Host names: up to 16 identities (EBS's multi-attach limit) in the loop
# topology, one VM each; the fabric and plain topologies, one VM per host,
# stop at FABRIC_MAX_HOSTS (16 TCG VMs on one machine would be silly).
HOST_NAMES = "abcdefghijklmnop"
FABRIC_MAX_HOSTS = 8
# x86's COMMAND_LINE_SIZE: a longer -append is cut or refused.
CMDLINE_MAX = 2048
NQN = "nqn.2024-01.org.nvfence.lab:vol0"
DISK_SERIAL = "vol0123456789abcdef0"
EBS_MODEL = "Amazon Elastic Block Store"
VOLUME_SIZE = 256 << 20
AGENT_PORT = "org.nvfence.agent"
# Kernel command line. mitigations=off matters under TCG (no page-table
# isolation: every syscall would otherwise switch page tables); the rest
# trims boot time a little.
# no_timer_check: on a busy host a TCG guest can be too slow for the kernel's
# IO-APIC timer check, which then panics ("IO-APIC + timer doesn't work!").
BASE_CMDLINE = ("console=ttyS0 panic=-1 nvme_core.multipath=N mitigations=off no_timer_check "
                "rcupdate.rcu_expedited=1 cryptomgr.notests 8250.nr_uarts=1 "
                "i8042.noaux i8042.nokbd")
# Extra nvme connect options: reconnect quickly after a heal/resume.
DEFAULT_CONNECT_OPTS = "reconnect_delay=1"
SOCK_PATH_MAX = 107

# Labs alive in this process, torn down at exit whatever happens.
_live_labs: "weakref.WeakSet[Lab]" = weakref.WeakSet()
# When a test harness defers run-dir removal (conftest), closed labs' run
# dirs are appended here as (run_dir, failures_seen when the lab started)
# instead of being removed; the harness counts failed tests in failures_seen
# and keeps a run dir if any test failed while its lab was up.
deferred_cleanup = False
pending_run_dirs: list = []
failures_seen = 0


# NVLAB_TRACE=<seconds>: every guest command that took that long or longer
# is printed to stderr with its seconds (where a lab test's time goes).
_TRACE_S = float(os.environ.get("NVLAB_TRACE", "0") or 0)


def _trace(host: str, secs: float, cmd: str) -> None:
    if _TRACE_S and secs >= _TRACE_S:
        print(f"nvlab-trace {secs:7.1f} s {host}: {' '.join(cmd.split())[:160]}", file=sys.stderr, flush=True)


def _atexit():
    for lab in list(_live_labs):
        try:
            lab.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(_atexit)


def _mac(link: int, side: int) -> str:
    return f"52:54:00:4e:{link:02x}:{side:02x}"


def _cluster_mac(index: int) -> str:
    return f"52:54:00:4c:00:{index:02x}"


class VM:
    """One QEMU process with its QMP and agent sockets and logs."""

    def __init__(self, lab: "Lab", name: str, role: str, cmdline: str, devices: list):
        self.lab = lab
        self.name = name
        self.role = role
        self.cmdline = cmdline
        self.devices = list(devices)
        rd = lab.run_dir
        self.console_log = rd / f"{name}.console.log"
        self.qemu_log = rd / f"{name}.qemu.log"
        self.qmp_sock = rd / f"{name}.qmp"
        self.agent_sock = rd / f"{name}.agent"
        for p in (self.qmp_sock, self.agent_sock):
            if len(str(p)) > SOCK_PATH_MAX:
                raise LabError(f"unix socket path too long ({len(str(p))} > {SOCK_PATH_MAX}): {p}; "
                               "use a shorter run dir (NVFENCE_LAB_RUN_DIR)")
        # role "sdhost": a host of the systemd flavour (Debian root disk:
        # its own qcow2 overlay of the cached image, plus the project disk).
        self.flavour = "systemd" if role == "sdhost" else "busybox"
        initrd = lab.sd_initrd if self.flavour == "systemd" else lab.initramfs.path
        append = f"{BASE_CMDLINE} {cmdline}".strip()
        if len(append) >= CMDLINE_MAX:
            raise LabError(f"{name}: kernel command line is {len(append)} bytes, the limit is {CMDLINE_MAX - 1}")
        self.argv = [
            lab.qemu, "-name", name, "-machine", "q35", "-accel", "tcg", "-m", str(lab.memory_mb),
            "-smp", str(lab.smp), "-nographic", "-nodefaults", "-no-user-config", "-no-reboot",
            "-kernel", str(lab.kernel_image), "-initrd", str(initrd),
            "-append", append,
            "-serial", f"file:{self.console_log}",
            "-qmp", f"unix:{self.qmp_sock},server=on,wait=off",
            "-device", "virtio-serial-pci,id=vser0",
            "-chardev", f"socket,id=ag,path={self.agent_sock},server=on,wait=off",
            "-device", f"virtserialport,bus=vser0.0,chardev=ag,name={AGENT_PORT}",
        ]
        if self.flavour == "systemd":
            self.argv += [
                "-drive", f"file={rd / (name + '.root.qcow2')},if=none,id=root,format=qcow2,cache=unsafe",
                "-device", f"virtio-blk-pci,drive=root,serial={sdimage.ROOT_SERIAL}",
                "-drive", f"file={lab.project_disk},if=none,id=proj,format=raw,readonly=on",
                "-device", f"virtio-blk-pci,drive=proj,serial={sdimage.PROJ_SERIAL}",
            ]
        else:
            self.argv += [
                "-drive", f"file={lab.initramfs.tools_disk},if=none,id=tools,format=raw,readonly=on",
                "-device", f"virtio-blk-pci,drive=tools,serial={irfs.TOOLS_DISK_SERIAL}",
            ]
        self.argv += devices
        self.proc: subprocess.Popen | None = None
        self.qmp = QMP(self.qmp_sock, rd / f"{name}.qmp.log", name)
        self.agent = AgentConn(self.agent_sock, rd / f"{name}.agent.log", name)
        self.ready: dict = {}
        self.paused = False
        self.killed = False
        self.started_at = 0.0
        self.ready_at = 0.0

    def start(self) -> None:
        (self.lab.run_dir / f"{self.name}.cmdline").write_text(shlex.join(self.argv) + "\n")
        prefix = []
        if shutil.which("setpriv"):
            # The VM dies with this process even on SIGKILL (no stray qemu).
            prefix = ["setpriv", "--pdeathsig", "KILL", "--"]
        self.started_at = time.monotonic()
        with open(self.qemu_log, "wb") as qlog:
            self.proc = subprocess.Popen(prefix + self.argv, stdin=subprocess.DEVNULL,
                                         stdout=qlog, stderr=subprocess.STDOUT,
                                         close_fds=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def connect(self, timeout_s: float) -> None:
        try:
            self.qmp.connect(timeout_s, self.alive)
            self.agent.connect(timeout_s, self.alive)
        except LabError as e:
            raise LabError(f"{e}\n{self.diagnostics()}") from None

    def wait_ready(self, deadline: float) -> dict:
        try:
            info = self.agent.wait_ready(max(0.0, deadline - time.monotonic()), self.alive)
        except LabError as e:
            raise LabError(f"{e}\n{self.diagnostics()}") from None
        self.ready_at = time.monotonic()
        if info.get("status") != "ok":
            raise LabError(f"{self.name}: guest setup failed: {info.get('error', info)}\n{self.diagnostics()}")
        self.ready = info
        return info

    def tail(self, path: Path, lines: int = 40) -> str:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return "(none)"
        return "\n".join(text.replace("\r", "").splitlines()[-lines:])

    def diagnostics(self) -> str:
        state = "running" if self.alive() else f"exited ({self.proc.returncode if self.proc else 'not started'})"
        return (f"--- {self.name}: qemu {state}; run dir {self.lab.run_dir}\n"
                f"--- {self.qemu_log.name} (tail)\n{self.tail(self.qemu_log, 15)}\n"
                f"--- {self.console_log.name} (tail)\n{self.tail(self.console_log)}")

    def kill(self) -> None:
        self.killed = True
        self.agent.close()
        self.qmp.close()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                raise LabError(f"{self.name}: QEMU (pid {self.proc.pid}) survived SIGKILL for 10s") from None

    def stop(self) -> None:
        """Graceful-ish teardown: close sockets, SIGTERM, then SIGKILL."""
        self.agent.close()
        self.qmp.close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()

    def reap(self, timeout_s: float = 5.0) -> None:
        if not self.proc:
            return
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Background:
    """A process started in a guest by Host.spawn (own session, output to a file)."""

    def __init__(self, host: "Host", pid: int, log_path: str, cmd: str):
        self.host, self.pid, self.log_path, self.cmd = host, pid, log_path, cmd

    def alive(self) -> bool:
        return self.host.run(f"kill -0 {self.pid} 2>/dev/null && "
                             f"! grep -q '^State:.*Z' /proc/{self.pid}/status", timeout_s=20).rc == 0

    def signal(self, sig: str = "TERM") -> None:
        self.host.run(f"kill -{sig} -{self.pid} 2>/dev/null || kill -{sig} {self.pid}", timeout_s=20)

    def wait(self, timeout_s: float = 60) -> bool:
        """Wait (bounded) until the process has exited; return True if it did."""
        r = self.host.wait_for(f"! kill -0 {self.pid} 2>/dev/null || grep -q '^State:.*Z' /proc/{self.pid}/status",
                               timeout_s=timeout_s)
        return r.rc == 0

    def output(self) -> str:
        return self.host.run(f"cat {self.log_path}", timeout_s=30).out


class Host:
    """A shell on one lab host (one VM, or one identity of the loop VM)."""

    def __init__(self, lab: "Lab", name: str, vm: VM, env: dict, info: dict, own_vm: bool):
        self.lab = lab
        self.name = name
        self.vm = vm
        self.env = dict(env)
        self.info = dict(info)
        self._own_vm = own_vm
        self.dev: str | None = info.get("dev")
        self.ng: str | None = info.get("ng") or (
            "/dev/ng" + self.dev[len("/dev/nvme"):] if self.dev and self.dev.startswith("/dev/nvme") else None)
        self.ctrl: str | None = info.get("ctrl")
        self.hostnqn: str | None = info.get("hostnqn")
        self.hostid: str | None = info.get("hostid")
        self._bg = 0
        self.is_cut = False                 # the storage link is cut
        self.cut_paths: set = set()         # subset of CUT_PATHS currently cut
        self.cluster_ip: str | None = info.get("cluster_ip")

    def __repr__(self) -> str:
        return f"<nvlab.Host {self.name} {self.lab.topology} {self.flavour} dev={self.dev}>"

    @property
    def flavour(self) -> str:
        """'busybox' (initramfs, the agent is PID 1) or 'systemd' (Debian root disk)."""
        return self.vm.flavour

    # ------------------------------------------------------------ commands
    def run(self, cmd: str, timeout_s: float = 60, check: bool = False, env: dict | None = None) -> Result:
        """Run `sh -c cmd` in the guest; return Result(rc, out, err, ...).

        The command's process group is killed after timeout_s (rc 124,
        timed_out True). check=True raises CommandFailed on rc != 0."""
        if self.vm.killed:
            raise LabError(f"{self.name}: the VM was killed")
        e = dict(self.env)
        if env:
            e.update({k: str(v) for k, v in env.items()})
        t0 = time.monotonic()
        r = self.vm.agent.request(cmd, e, timeout_s, self.lab.answer_grace_s, self.name)
        _trace(self.name, time.monotonic() - t0, cmd)
        if check and r.rc != 0:
            raise CommandFailed(r)
        return r

    def wait_for(self, cmd: str, timeout_s: float = 60, interval_s: float = 0.1) -> Result:
        """Re-run cmd in the guest until it succeeds (rc 0) or timeout_s passes.

        Returns the last attempt's Result (rc != 0 when it never succeeded)."""
        iv = max(10_000, int(interval_s * 1e6))
        script = (
            f"o=$(mktemp) e=$(mktemp); end=$(( $(cut -d. -f1 /proc/uptime) + {int(timeout_s + 0.999)} )); "
            f"while :; do ( {cmd} ) >$o 2>$e && {{ rc=0; break; }}; rc=$?; "
            f"[ $(cut -d. -f1 /proc/uptime) -ge $end ] && break; usleep {iv}; done; "
            f"cat $o; cat $e >&2; rm -f $o $e; exit $rc")
        r = self.run(script, timeout_s=timeout_s + 15)
        r.cmd = cmd
        return r

    def spawn(self, cmd: str, log_path: str | None = None) -> Background:
        """Start cmd in the background (own session); output goes to log_path."""
        self._bg += 1
        log_path = log_path or f"/tmp/bg-{self.name}-{self._bg}.log"
        r = self.run(f"setsid sh -c {shlex.quote(cmd)} > {shlex.quote(log_path)} 2>&1 < /dev/null & echo $!",
                     timeout_s=20, check=True)
        return Background(self, int(r.out.strip()), log_path, cmd)

    def put(self, src, dest: str, mode: int = 0o644, timeout_s: float = 120) -> None:
        """Copy a file into the guest: src is a host path or bytes; dest is the
        guest path (parent directories are created; an existing file is
        replaced). Sent through the agent in base64 chunks."""
        data = src if isinstance(src, (bytes, bytearray)) else Path(src).read_bytes()
        import base64
        q = shlex.quote(dest)
        tmp = shlex.quote(f"{dest}.nvlab-part")
        self.run(f"mkdir -p \"$(dirname {q})\" && : > {tmp}", timeout_s=timeout_s, check=True)
        chunk = 72 << 10   # 96 KiB of base64: one argv string is capped at 128 KiB
        for off in range(0, len(data), chunk):
            b64 = base64.b64encode(data[off:off + chunk]).decode()
            self.run(f"printf %s {b64} | base64 -d >> {tmp}", timeout_s=timeout_s, check=True)
        r = self.run(f"chmod {mode:o} {tmp} && mv -f {tmp} {q} && wc -c < {q}", timeout_s=timeout_s, check=True)
        if int(r.out.strip() or -1) != len(data):
            raise LabError(f"{self.name}: put {dest}: {r.out.strip()} bytes in the guest, {len(data)} sent")

    def journal(self, unit: str | None = None, lines: int | None = None, args: str = "",
                timeout_s: float = 60) -> str:
        """The systemd journal of this boot (systemd flavour): of unit if
        given (journalctl -u), the last `lines` lines if given; `args` are
        extra journalctl options (e.g. "-o cat", "--since=-1min")."""
        if self.flavour != "systemd":
            raise NotSupported(f"{self.name}: no journal in the busybox flavour (flavour='systemd')")
        cmd = "journalctl -b --no-pager -q -o short-monotonic"
        if unit:
            cmd += f" -u {shlex.quote(unit)}"
        if lines:
            cmd += f" -n {int(lines)}"
        if args:
            cmd += f" {args}"
        return self.run(cmd, timeout_s=timeout_s, check=True).out

    def refresh_dev(self, timeout_s: float = 60) -> str:
        """Wait (bounded) until this host's controller shows its namespace
        again (after the target disabled/re-enabled it), asking the
        controller to rescan meanwhile, and update dev/ng and $NVFENCE_DEV
        (the block device may come back under another name)."""
        if not self.ctrl:
            raise NotSupported(f"{self.name}: no fabrics controller to rescan ({self.lab.topology})")
        c = f"/sys/class/nvme/{self.ctrl}"
        script = (
            f"end=$(( $(cut -d. -f1 /proc/uptime) + {int(timeout_s + 0.999)} )); "
            f"while :; do for n in {c}/nvme*n*; do b=${{n##*/}}; "
            f"[ -e \"$n\" ] && [ -b /dev/$b ] && {{ echo $b; exit 0; }}; done; "
            f"[ $(cut -d. -f1 /proc/uptime) -ge $end ] && exit 1; "
            f"echo 1 > {c}/rescan_controller 2>/dev/null; usleep 500000; done")
        r = self.run(script, timeout_s=timeout_s + 15)
        if r.rc != 0 or not r.out.strip():
            raise LabError(f"{self.name}: no namespace on {self.ctrl} within {timeout_s:.0f}s: {r}")
        name = r.out.strip().splitlines()[0]
        self.dev = f"/dev/{name}"
        self.ng = "/dev/ng" + name[len("nvme"):]
        self.env["NVFENCE_DEV"] = self.dev
        self.env["NVFENCE_NG"] = self.ng
        return self.dev

    # ------------------------------------------------------------ VM control
    def _need_own_vm(self, what: str) -> None:
        if not self._own_vm:
            raise NotSupported(f"{what} is not supported in the '{self.lab.topology}' topology "
                               "(all host identities share one VM); use topology='fabric'")

    def pause(self) -> None:
        """Freeze this host's VM (QMP stop): its clock and I/O stop too. On
        the cluster network, frames to it are dropped while it is frozen, as a
        switch drops frames to a frozen NIC; the other hosts keep talking."""
        self._need_own_vm("pause")
        # A stopped guest stops reading its hub socket; once that fills,
        # QEMU's hub blocks and stalls the segment for every host.
        if self.lab.hub:
            self.lab.hub.set_port(self.lab.hosts.index(self), False)
        self.vm.qmp.execute("stop")
        self.vm.paused = True

    def resume(self) -> None:
        self._need_own_vm("resume")
        self.vm.qmp.execute("cont")
        self.vm.paused = False
        if self.lab.hub:
            self.lab.hub.set_port(self.lab.hosts.index(self), True)

    def kill(self) -> None:
        """Kill this host's VM (SIGKILL to QEMU), like pulling the power."""
        self._need_own_vm("kill")
        self.vm.kill()

    def _paths(self, what: str, paths) -> list:
        self._need_own_vm(what)
        if self.lab.topology != "fabric":
            raise NotSupported(f"{what} needs a network link: topology '{self.lab.topology}' has none")
        out = []
        for p in paths or ("storage",):
            for q in (CUT_PATHS if p in ("both", "all") else (p,)):
                if q not in CUT_PATHS:
                    raise ValueError(f"{what}: unknown path {q!r} (one of {CUT_PATHS + ('both',)})")
                if q == "cluster" and not self.lab.cluster_net:
                    raise NotSupported(f"{what} cluster: this lab has no cluster network (cluster_net=True)")
                if q not in out:
                    out.append(q)
        return out

    def _set_links(self, paths, up: bool) -> None:
        for p in paths:
            self.vm.qmp.execute("set_link", {"name": "nic0" if p == "storage" else "cnic", "up": up})
            (self.cut_paths.discard if up else self.cut_paths.add)(p)
        self.is_cut = "storage" in self.cut_paths

    def cut(self, *paths: str) -> None:
        """Take links of this host down (QMP set_link; the guest loses carrier,
        frames are dropped both ways): "storage" (its link to the target; the
        default, so cut() is the storage cut), "cluster" (its cluster NIC),
        or "both". cut("cluster") leaves NVMe I/O working."""
        self._set_links(self._paths("cut", paths), False)

    def heal(self, *paths: str) -> None:
        """Bring links back up: same paths as cut(); heal() heals storage."""
        self._set_links(self._paths("heal", paths), True)

    def restart(self, timeout_s: float | None = None) -> None:
        """Power-cycle this host: kill its VM if it still runs (like pulling
        the power), boot the same VM again (same host id, link and disks) and
        wait until its guest is ready. Everything in the guest's RAM (/tmp,
        /var/lib, /run) is gone, as after a real reboot."""
        self._need_own_vm("restart")
        old = self.vm
        if not old.killed:
            old.kill()
        for p in (old.qmp_sock, old.agent_sock):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        vm = VM(self.lab, old.name, old.role, old.cmdline, old.devices)
        self.lab.vms[self.lab.vms.index(old)] = vm
        vm.start()
        vm.connect(30)
        vm.wait_ready(time.monotonic() + (timeout_s or self.lab.boot_timeout_s))
        self.vm = vm
        self.info = dict(vm.ready)
        self.env = {"NVFENCE_HOST": self.name}
        self.dev = self.info.get("dev")
        self.ng = self.info.get("ng") or (
            "/dev/ng" + self.dev[len("/dev/nvme"):] if self.dev and self.dev.startswith("/dev/nvme") else None)
        self.ctrl = self.info.get("ctrl")
        self.is_cut = False
        self.cut_paths = set()
        self.cluster_ip = self.info.get("cluster_ip")
        if not self.dev:
            raise LabError(f"{self.name}: the guest reported no device after restart ({self.info})\n"
                           f"{vm.diagnostics()}")

    def qmp(self, cmd: str, **args):
        """Raw QMP command on this host's VM."""
        self._need_own_vm("qmp")
        return self.vm.qmp.execute(cmd, args or None)

    @property
    def alive(self) -> bool:
        return not self.vm.killed and self.vm.alive()

    @property
    def paused(self) -> bool:
        return self.vm.paused


class Target(Host):
    """The nvmet side: the target VM (fabric) or the loop VM (loop)."""

    subsys = f"/sys/kernel/config/nvmet/subsystems/{NQN}"

    @property
    def ns_path(self) -> str:
        return f"{self.subsys}/namespaces/1"

    def ns_disable(self) -> None:
        """Disable the exported namespace (hosts see it go away)."""
        self.run(f"echo 0 > {self.ns_path}/enable", check=True, timeout_s=30)

    def ns_disable_begin(self) -> Background:
        """Start disabling the namespace without waiting for it. nvmet's
        disable waits until every request that holds the namespace has
        completed, and a write whose data a paused host has not sent yet (an
        R2T outstanding on NVMe/TCP) holds it until that host runs again:
        a caller that pauses a host disables with this, resumes the host,
        then waits on the returned job."""
        return self.spawn(f"echo 0 > {self.ns_path}/enable && echo DISABLED")

    def ns_enable(self, wait_hosts: bool = True, timeout_s: float = 60) -> None:
        """Re-enable the namespace; by default wait until every running,
        unpaused host sees it again (see Host.refresh_dev: its device name
        may change, $NVFENCE_DEV follows)."""
        self.run(f"echo 1 > {self.ns_path}/enable", check=True, timeout_s=30)
        if wait_hosts:
            for h in self.lab.hosts:
                if h.ctrl and h.alive and not h.paused and not h.is_cut:
                    h.refresh_dev(timeout_s)

    def ns_enabled(self) -> bool:
        return self.run(f"cat {self.ns_path}/enable", check=True).out.strip() == "1"

    def set_resv_enable(self, on: bool, wait_hosts: bool = True) -> None:
        """Switch reservation support of the namespace (disables it meanwhile)."""
        self.run(f"echo 0 > {self.ns_path}/enable && echo {1 if on else 0} > {self.ns_path}/resv_enable",
                 check=True, timeout_s=30)
        self.ns_enable(wait_hosts=wait_hosts)



def _check_lab_args(hosts, topology, flavour, packages, cluster_net, install_project, volume_mib, smp,
                    watchdog, hostids):
    """Lab()'s arguments checked together (ValueError naming the wrong one);
    returns cluster_net resolved (default: on for systemd hosts)."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {TOPOLOGIES}, not {topology!r}")
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {FLAVOURS}, not {flavour!r}")
    if flavour == "systemd" and topology != "fabric":
        raise ValueError("flavour='systemd' needs topology='fabric' (one VM per host)")
    if packages and flavour != "systemd":
        raise ValueError("packages= is for flavour='systemd' (the busybox guests have none)")
    if cluster_net is None:
        cluster_net = flavour == "systemd"
    if cluster_net and topology != "fabric":
        raise ValueError("cluster_net needs topology='fabric' (one VM per host)")
    if not install_project and flavour != "systemd":
        raise ValueError("install_project=False is for flavour='systemd' (busybox guests run <build>/bin)")
    if not 16 <= int(volume_mib) <= 65536:
        raise ValueError(f"volume_mib must be 16..65536, not {volume_mib!r}")
    if not 1 <= int(smp) <= (os.cpu_count() or 1):
        raise ValueError(f"smp must be 1..{os.cpu_count()} (this machine's CPUs), not {smp!r}")
    if watchdog and topology != "fabric":
        raise ValueError("watchdog=True needs topology='fabric' (one VM per host)")
    max_hosts = len(HOST_NAMES) if topology == "loop" else FABRIC_MAX_HOSTS
    if not 1 <= hosts <= max_hosts:
        raise ValueError(f"hosts must be 1..{max_hosts} for topology '{topology}'"
                         + (" (more host identities: topology='loop', up to 16)" if topology != "loop" else ""))
    unknown = set(hostids or {}) - set(HOST_NAMES[:hosts])
    if unknown:
        raise ValueError(f"hostids for unknown hosts {sorted(unknown)}")
    for hid in (hostids or {}).values():
        uuid.UUID(hid)  # ValueError if not a UUID
    return cluster_net

class Lab:
    """N hosts sharing one NVMe namespace. Use as a context manager."""

    def __init__(self, hosts: int = 2, topology: str = "fabric", ebs: bool = True,
                 run_dir: str | os.PathLike | None = None, memory_mb: int = 512,
                 boot_timeout_s: float = 180, connect_opts: str = DEFAULT_CONNECT_OPTS,
                 extra_cmdline: str = "", answer_grace_s: float = 30,
                 hostids: dict | None = None, flavour: str = "busybox", packages=(),
                 cluster_net: bool | None = None, install_project: bool = True, volume_mib: int = VOLUME_SIZE >> 20,
                 smp: int = 1, watchdog: bool = False):
        # install_project=False (systemd flavour): the per-run project disk
        # carries only the lab's own setup and agent, no `cmake --install` of
        # the build; for tests that install the project themselves (the .deb).
        # volume_mib: size of the shared namespace (a sparse file on the host).
        # smp: vCPUs of each VM (QEMU's multi-threaded TCG). 1 for every test:
        # this machine has 2 cores and runs two labs at once; more only for
        # figures where the guest's own parallelism is what is measured.
        # watchdog: each host VM gets an Intel 6300ESB watchdog (the guest
        # kernel's i6300esb driver, /dev/watchdog0) whose expiry resets the
        # guest; with -no-reboot the VM then exits (code 0).
        cluster_net = _check_lab_args(hosts, topology, flavour, packages, cluster_net, install_project,
                                      volume_mib, smp, watchdog, hostids)
        self.flavour = flavour
        self.packages = sdimage.normalize_packages(packages) if flavour == "systemd" else ()
        self.cluster_net = bool(cluster_net)
        self.install_project = bool(install_project)
        self.volume_bytes = int(volume_mib) << 20
        self.smp = int(smp)
        self.watchdog = bool(watchdog)
        self.n_hosts = hosts
        self.topology = topology
        self.ebs = ebs
        self.memory_mb = memory_mb
        self.boot_timeout_s = boot_timeout_s
        self.connect_opts = connect_opts
        self.extra_cmdline = extra_cmdline
        self.answer_grace_s = answer_grace_s
        self.hostids = dict(hostids or {})
        self._failures_at_start = failures_seen
        self._explicit_run_dir = run_dir is not None
        self._run_dir_arg = run_dir
        self._init_run_state()

    def _init_run_state(self) -> None:
        """What start() fills in: nothing yet."""
        self.sd_image: sdimage.RootImage | None = None
        self.sd_initrd: Path | None = None
        self.project_disk: Path | None = None
        self.project_info: dict = {}
        self.hub: ClusterHub | None = None
        self.run_dir: Path | None = None
        self.vms: list[VM] = []
        self.hosts: list[Host] = []
        self._target: Target | None = None
        self.boot_s: float | None = None
        self.kernel: kmod.Kernel | None = None
        self.initramfs: irfs.Initramfs | None = None
        self.kernel_image: Path | None = None
        self.qemu = shutil.which("qemu-system-x86_64") or "qemu-system-x86_64"
        self.failed = False
        self._closed = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Lab":
        try:
            self.start()
        except BaseException:
            self.failed = True
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.failed = True
        self.close()

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"no host {name!r} in this lab (hosts: {[h.name for h in self.hosts]})")

    @property
    def target(self) -> Target:
        if self._target is None:
            raise NotSupported(f"topology '{self.topology}' has no nvmet target")
        return self._target

    def prepare(self) -> None:
        if not shutil.which(self.qemu):
            raise LabError("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
        self.kernel = kmod.fetch_kernel()
        self.initramfs = irfs.build(self.kernel)
        self.kernel_image = kmod.pvh_vmlinux(self.kernel) or self.kernel.vmlinuz
        if self.flavour == "systemd":
            if not shutil.which("qemu-img"):
                raise LabError("qemu-img not found (apt-get install qemu-utils)")
            _check_prebuilt(self.packages)
            self.sd_image = sdimage.root_image(self.kernel, self.packages)
            self.sd_initrd = sdimage.boot_initramfs(self.kernel)

    def start(self) -> None:
        t0 = time.monotonic()
        self.prepare()
        t_prep = time.monotonic()
        self._make_run_dir()
        vol = self.run_dir / "vol.img"
        with open(vol, "wb") as f:
            f.truncate(self.volume_bytes)
        cache = "none" if _o_direct_ok(vol) else "writeback"
        drive = f"file={vol},if=none,id=d0,format=raw,cache={cache}"
        common = f"nvlab.nqn={NQN} nvlab.ebs={1 if self.ebs else 0} {self.extra_cmdline}"
        names = HOST_NAMES[:self.n_hosts]
        ids = {n: self.hostids.get(n) or str(uuid.uuid4()) for n in names}
        (self.run_dir / "lab.txt").write_text(
            f"topology={self.topology}\nhosts={self.n_hosts}\nebs={self.ebs}\n"
            + "".join(f"hostid.{n}={ids[n]}\n" for n in names))
        log(f"starting {self.topology} lab, {self.n_hosts} {self.flavour} host(s), run dir {self.run_dir}")
        if self.flavour == "systemd":
            self._systemd_disks(names)
        if self.cluster_net:
            self.hub = ClusterHub(self, self.n_hosts)
            self.hub.start()
        if self.topology == "fabric":
            self._start_fabric(drive, common, names, ids)
        elif self.topology == "loop":
            self._start_loop(drive, common, names, ids)
        else:
            self._start_plain(drive, common, names)
        deadline = time.monotonic() + self.boot_timeout_s
        for vm in self.vms:
            vm.wait_ready(deadline)
        self.boot_s = time.monotonic() - t_prep
        self._make_hosts(names)
        log(f"{self.topology} lab ready in {self.boot_s:.1f}s (prepare {t_prep - t0:.1f}s): "
            + ", ".join(f"{h.name}={h.dev}" for h in self.hosts))

    def _make_run_dir(self) -> None:
        if self._explicit_run_dir:
            self.run_dir = Path(self._run_dir_arg).resolve()
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:
            base = os.environ.get("NVFENCE_LAB_RUN_DIR", "/tmp")
            Path(base).mkdir(parents=True, exist_ok=True)
            self.run_dir = Path(tempfile.mkdtemp(prefix=f"nvlab-{self.topology}-", dir=base))
        _live_labs.add(self)

    def _systemd_disks(self, names) -> None:
        """The project disk and one qcow2 overlay of the root image per host."""
        self.project_disk = self.run_dir / "project.tar"
        self.project_info = sdimage.project_disk(self.project_disk, self.sd_image,
                                                 install=self.install_project)
        for n in names:
            run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(self.sd_image.path), "-F", "raw",
                 str(self.run_dir / f"{n}.root.qcow2")], what="qemu-img create (overlay)")

    def _copts(self) -> str:
        return f"nvlab.copts={self.connect_opts.replace(',', ';')}" if self.connect_opts else ""

    def _start_fabric(self, drive: str, common: str, names, ids: dict) -> None:
        tdev = ["-drive", drive, "-device", f"nvme,serial={DISK_SERIAL},drive=d0"]
        for i in range(self.n_hosts):
            tdev += ["-netdev", f"stream,id=n{i},server=on,addr.type=unix,"
                                f"addr.path={self.run_dir}/link{i}.sock",
                     "-device", f"virtio-net-pci,netdev=n{i},id=nic{i},mac={_mac(i, 1)},romfile="]
        target = VM(self, "target", "target",
                    f"nvlab.role=target nvlab.name=target nvlab.links={self.n_hosts} {common}", tdev)
        self.vms.append(target)
        target.start()
        # QMP answers only once every netdev is set up: the link sockets
        # are listening before any host VM tries to connect to them.
        target.connect(30)
        for i in range(self.n_hosts):
            if not (self.run_dir / f"link{i}.sock").exists():
                raise LabError(f"target: link socket link{i}.sock missing\n{target.diagnostics()}")
        for i, n in enumerate(names):
            vm = self._fabric_host_vm(i, n, ids[n], common, names)
            self.vms.append(vm)
            vm.start()
        for vm in self.vms[1:]:
            vm.connect(30)

    def _fabric_host_vm(self, i: int, n: str, hostid: str, common: str, names) -> "VM":
        hdev = ["-netdev", f"stream,id=n0,server=off,addr.type=unix,addr.path={self.run_dir}/link{i}.sock",
                "-device", f"virtio-net-pci,netdev=n0,id=nic0,mac={_mac(i, 2)},romfile="]
        extra = ""
        if self.cluster_net:
            chosts = ",".join(f"{m}:{CLUSTER_PREFIX}{j + 1}" for j, m in enumerate(names))
            hdev += ["-netdev", f"stream,id=c0,server=off,addr.type=unix,"
                                f"addr.path={self.hub.sock(i)}",
                     "-device", f"virtio-net-pci,netdev=c0,id=cnic,mac={_cluster_mac(i + 1)},romfile="]
            extra = f"nvlab.cip={CLUSTER_PREFIX}{i + 1} nvlab.cidx={i + 1} nvlab.chosts={chosts}"
        if self.watchdog:
            hdev += ["-device", "i6300esb", "-action", "watchdog=reset"]
        role = "host"
        if self.flavour == "systemd":
            role = "sdhost"
            extra += f" systemd.hostname={n} net.ifnames=0"
        return VM(self, n, role, f"nvlab.role=host nvlab.name={n} nvlab.link={i} "
                                 f"nvlab.hostid={hostid} {self._copts()} {common} {extra}".strip(), hdev)

    def _start_loop(self, drive: str, common: str, names, ids: dict) -> None:
        idlist = ",".join(f"{n}:{ids[n]}" for n in names)
        vm = VM(self, "loop", "loop", f"nvlab.role=loop nvlab.name=loop nvlab.ids={idlist} {self._copts()} {common}",
                ["-drive", drive, "-device", f"nvme,serial={DISK_SERIAL},drive=d0"])
        self.vms.append(vm)
        vm.start()
        vm.connect(30)

    def _start_plain(self, drive: str, common: str, names) -> None:
        """Every host VM on the same image (no reservations anywhere)."""
        for n in names:
            vm = VM(self, n, "plain", f"nvlab.role=plain nvlab.name={n} {common}",
                    ["-drive", drive + ",file.locking=off", "-device",
                     f"nvme,serial={DISK_SERIAL},drive=d0,share-rw=on"])
            self.vms.append(vm)
            vm.start()
        for vm in self.vms:
            vm.connect(30)

    def _make_hosts(self, names) -> None:
        if self.topology == "fabric":
            self._target = Target(self, "target", self.vms[0], {"NVFENCE_HOST": "target"},
                                  self.vms[0].ready, own_vm=True)
            for vm in self.vms[1:]:
                self.hosts.append(Host(self, vm.name, vm, {"NVFENCE_HOST": vm.name}, vm.ready, own_vm=True))
        elif self.topology == "loop":
            vm = self.vms[0]
            self._target = Target(self, "target", vm, {"NVFENCE_HOST": "target"}, vm.ready, own_vm=False)
            for n in names:
                info = {k[len(f"host.{n}."):]: v for k, v in vm.ready.items() if k.startswith(f"host.{n}.")}
                env = {"NVFENCE_HOST": n, "NVFENCE_DEV": info.get("dev", ""), "NVFENCE_NG": info.get("ng", ""),
                       "NVFENCE_CTRL": info.get("ctrl", ""), "NVFENCE_HOSTNQN": info.get("hostnqn", ""),
                       "NVFENCE_HOSTID": info.get("hostid", ""), "NVFENCE_ROLE": "host"}
                self.hosts.append(Host(self, n, vm, env, info, own_vm=False))
        else:
            for vm in self.vms:
                self.hosts.append(Host(self, vm.name, vm, {"NVFENCE_HOST": vm.name}, vm.ready, own_vm=True))
        for h in self.hosts:
            if not h.dev:
                raise LabError(f"{h.name}: the guest reported no device ({h.info})\n{h.vm.diagnostics()}")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for vm in self.vms:
            try:
                vm.stop()
            except Exception:  # noqa: BLE001
                pass
        for vm in self.vms:
            try:
                vm.reap()
            except Exception:  # noqa: BLE001
                pass
        if self.hub:
            self.hub.stop()
        _live_labs.discard(self)
        if self.run_dir is None:
            return
        keep = self._explicit_run_dir or os.environ.get("NVFENCE_LAB_KEEP") == "1"
        if self.failed:
            print(f"nvlab: run dir kept: {self.run_dir}", file=sys.stderr, flush=True)
        elif keep:
            pass
        elif deferred_cleanup:
            pending_run_dirs.append((self.run_dir, self._failures_at_start))
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # ------------------------------------------------------------ helpers
    def media_digest(self) -> str:
        """sha256 of the whole shared namespace, read from the file QEMU
        stores it in (the media itself: what the target wrote, with no
        guest, cache or network between). The target's nvmet submits to its
        namespace directly and QEMU writes that file with O_DIRECT (or
        through this host's page cache, which a read sees): an acknowledged
        write is in the file. A guest's `dd | sha256sum` of 512 MiB took
        26 s under TCG; this takes about one."""
        if self.run_dir is None:
            raise LabError("media_digest: the lab is not started")
        h = hashlib.sha256()
        with open(self.run_dir / "vol.img", "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()

    def run_all(self, cmd: str, timeout_s: float = 60, check: bool = False) -> list:
        """Run cmd on every host concurrently; results in host order."""
        results: list = [None] * len(self.hosts)
        errors: list = [None] * len(self.hosts)

        def one(i, h):
            try:
                results[i] = h.run(cmd, timeout_s=timeout_s, check=check)
            except Exception as e:  # noqa: BLE001
                errors[i] = e
        threads = [threading.Thread(target=one, args=(i, h)) for i, h in enumerate(self.hosts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in errors:
            if e:
                raise e
        return results


class ClusterHub:
    """The cluster network: one QEMU process with no guest (-machine none)
    whose network hub joins one `-netdev stream` unix socket per host (an L2
    hub: every frame goes to every other port). Debian 12's QEMU has no vde
    backend, and this keeps the cluster segment independent of the target
    VM: pausing or killing the target leaves the cluster network up."""

    def __init__(self, lab: "Lab", ports: int):
        self.lab = lab
        self.ports = ports
        rd = lab.run_dir
        self.log_path = rd / "hub.qemu.log"
        self.qmp = QMP(rd / "hub.qmp", rd / "hub.qmp.log", "hub")
        self.argv = [lab.qemu, "-name", "hub", "-machine", "none", "-nodefaults", "-no-user-config",
                     "-display", "none", "-qmp", f"unix:{rd / 'hub.qmp'},server=on,wait=off"]
        for i in range(ports):
            self.argv += ["-netdev", f"stream,id=p{i},server=on,addr.type=unix,addr.path={self.sock(i)}",
                          "-netdev", f"hubport,id=hp{i},hubid=0,netdev=p{i}"]
        self.proc: subprocess.Popen | None = None
        self.port_up: dict = {}

    def sock(self, i: int) -> Path:
        return self.lab.run_dir / f"cnet{i}.sock"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def set_port(self, i: int, up: bool) -> None:
        """Deliver frames to port i (up) or drop them (down)."""
        self.qmp.execute("set_link", {"name": f"p{i}", "up": up})
        self.port_up[i] = up

    def describe(self) -> str:
        """Each port's state as set through set_port (down while its host is
        frozen), then QEMU's own view of the hub."""
        lines = [f"port {i} (host {HOST_NAMES[i]}): {'up' if self.port_up.get(i, True) else 'DOWN'}"
                 for i in range(self.ports)]
        try:
            lines.append(self.qmp.execute("human-monitor-command", {"command-line": "info network"}))
        except Exception as e:  # noqa: BLE001 - diagnostics only
            lines.append(f"(hub query failed: {e})")
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        (self.lab.run_dir / "hub.cmdline").write_text(shlex.join(self.argv) + "\n")
        prefix = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        with open(self.log_path, "wb") as qlog:
            self.proc = subprocess.Popen(prefix + self.argv, stdin=subprocess.DEVNULL, stdout=qlog,
                                         stderr=subprocess.STDOUT, close_fds=True)
        try:
            # The QMP greeting comes after every netdev listens.
            self.qmp.connect(30, self.alive)
        except LabError as e:
            raise LabError(f"cluster hub: {e}\n{self.log_path.read_text(errors='replace')[-2000:]}") from None
        # QMP answers from its own I/O thread, possibly before the main
        # thread has created every netdev (seen at load 30): wait, bounded.
        deadline = time.monotonic() + 30
        for i in range(self.ports):
            while not self.sock(i).exists():
                if time.monotonic() > deadline or not self.alive():
                    raise LabError(f"cluster hub: socket {self.sock(i)} missing after 30 s")
                time.sleep(0.05)

    def stop(self) -> None:
        self.qmp.close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _o_direct_ok(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        os.close(fd)
        return True
    except OSError:
        return False
