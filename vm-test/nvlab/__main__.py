"""Command line of the nvfence QEMU lab.

    vm-test/lab prepare                      fetch the kernel, build the initramfs
    vm-test/lab smoke [-t fabric] [-n 2]     boot a lab, show each host's device
    vm-test/lab run [-t ..] [-n ..] [-H a] -- CMD    run CMD on hosts, print output
    vm-test/lab shell [-t ..] [-n ..]        boot a lab and type commands
    vm-test/lab boot-time [-t ..] [-n ..] [-r 3]     measure lab start (median)
    vm-test/lab sd-image [-p PKGS] [--rebuild]       build/verify the systemd root image
    vm-test/lab images                       kernel, initramfs and every root image the tests boot
    (every lab command takes -f systemd [-p PKG,PKG] for systemd host VMs)

(`vm-test/lab` is `/usr/bin/python3 -m nvlab` with vm-test on sys.path.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from . import Lab, LabError, prepare


def _lab_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topology", choices=("fabric", "loop", "plain"), default="fabric")
    p.add_argument("-n", "--hosts", type=int, default=2)
    p.add_argument("--no-ebs", action="store_true", help="nvmet's default identity instead of EBS")
    p.add_argument("--run-dir", help="keep the lab's files here (default: a temp dir under /tmp)")
    p.add_argument("-m", "--memory", type=int, default=512, help="MiB per VM")
    p.add_argument("-f", "--flavour", choices=("busybox", "systemd"), default="busybox",
                   help="host guests: busybox initramfs (default) or Debian with systemd")
    p.add_argument("-p", "--packages", default="", help="systemd flavour: extra Debian packages (comma list)")


def _make_lab(a) -> Lab:
    return Lab(hosts=a.hosts, topology=a.topology, ebs=not a.no_ebs, run_dir=a.run_dir,
               memory_mb=a.memory, flavour=a.flavour,
               packages=a.packages.replace(",", " ").split() if a.packages else ())


def cmd_prepare(a) -> int:
    k, img = prepare(refresh=a.refresh)
    print(f"kernel     {k.release} ({k.version}) from {', '.join(k.packages)}")
    print(f"vmlinuz    {k.vmlinuz}")
    print(f"initramfs  {img.path}")
    print(f"tools disk {img.tools_disk}")
    print(f"project    {', '.join(img.project_binaries) or '(no binaries in the build dir)'}")
    return 0


def _show(r, prefix: str) -> None:
    for line in r.out.splitlines():
        print(f"{prefix}{line}")
    for line in r.err.splitlines():
        print(f"{prefix}! {line}")
    if r.rc != 0:
        print(f"{prefix}[{r.describe()}]")


def cmd_smoke(a) -> int:
    with _make_lab(a) as lab:
        print(f"{lab.topology} lab with {len(lab.hosts)} host(s) up in {lab.boot_s:.1f}s, run dir {lab.run_dir}")
        print(f"kernel {lab.kernel.release}")
        for h in lab.hosts:
            r = h.run("echo NVFENCE_DEV=$NVFENCE_DEV; nvme id-ctrl $NVFENCE_DEV | grep -E '^(mn|sn) '; "
                      "nvme resv-report $NVFENCE_DEV --eds -o json | head -5", timeout_s=60)
            _show(r, f"{h.name}: ")
    return 0


def cmd_run(a) -> int:
    if not a.command:
        print("error: no command (use: run [options] -- CMD)", file=sys.stderr)
        return 2
    cmd = " ".join(a.command) if len(a.command) > 1 else a.command[0]
    rc = 0
    with _make_lab(a) as lab:
        hosts = [lab.host(n) for n in a.host] if a.host else lab.hosts
        for h in hosts:
            r = h.run(cmd, timeout_s=a.timeout)
            _show(r, f"{h.name}: ")
            rc = rc or r.rc
    return rc


def cmd_shell(a) -> int:
    with _make_lab(a) as lab:
        names = [h.name for h in lab.hosts]
        cur = lab.hosts[0]
        print(f"{lab.topology} lab up in {lab.boot_s:.1f}s; run dir {lab.run_dir}")
        print(f"hosts: {', '.join(f'{h.name}={h.dev}' for h in lab.hosts)}"
              + ("; target" if lab.topology != "plain" else ""))
        print("type a command for the current host; ':a' switches host, ':target', "
              "':pause' ':resume' ':cut' ':heal' ':kill', ':quit'")
        while True:
            try:
                line = input(f"{cur.name}> ")
            except EOFError:
                print()
                break
            line = line.strip()
            if not line:
                continue
            if line.startswith(":"):
                word = line[1:]
                try:
                    if word in ("q", "quit", "exit"):
                        break
                    if word in names:
                        cur = lab.host(word)
                    elif word == "target":
                        cur = lab.target
                    elif word.split()[0] in ("pause", "resume", "cut", "heal", "kill"):
                        getattr(cur, word.split()[0])(*word.split()[1:])
                    else:
                        print(f"unknown: {line}")
                except LabError as e:
                    print(f"error: {e}")
                continue
            try:
                _show(cur.run(line, timeout_s=a.timeout), "")
            except LabError as e:
                print(f"error: {e}")
    return 0


def cmd_boot_time(a) -> int:
    times = []
    for i in range(a.repeat):
        t0 = time.monotonic()
        with _make_lab(a) as lab:
            ready = time.monotonic() - t0
            r = lab.hosts[0].run("nvme resv-report $NVFENCE_DEV --eds -o json >/dev/null"
                                 if lab.topology != "plain" else "test -b $NVFENCE_DEV")
            if lab.topology != "plain" and r.rc != 0:
                raise LabError(f"report after boot failed: {r}")
        times.append(ready)
        print(f"run {i + 1}: {a.topology} x{a.hosts} {a.flavour}: ready in {ready:.1f}s "
              f"(boot {lab.boot_s:.1f}s)", flush=True)
    print(f"median {statistics.median(times):.1f}s over {len(times)} runs "
          f"(min {min(times):.1f}s, max {max(times):.1f}s)")
    return 0


def cmd_sd_image(a) -> int:
    from . import kernel, sdimage
    k = kernel.fetch_kernel()
    t0 = time.monotonic()
    img = sdimage.root_image(k, a.packages.replace(",", " ").split(), rebuild=a.rebuild)
    print(f"image      {img.path} ({'built' if img.built else 'cached'}, key {img.key}) "
          f"in {time.monotonic() - t0:.1f}s")
    print(f"packages   {' '.join(img.packages)}")
    m = img.manifest
    print(f"built      {m.get('built_at')} in {m.get('build_s')}s (mmdebstrap {m.get('mmdebstrap_s')}s), "
          f"{m.get('used_mb')} MB used, {m.get('size_mb')} MB file system")
    return 0


def cmd_images(a) -> int:
    """Everything the lab tests boot, built or verified once: the kernel, the
    busybox initramfs's base member and tools disk, the systemd boot
    initramfs and each root image of IMAGE_SETS, one after the other (they
    share the .deb cache). Reads nothing of the build directory, so it can
    run while the compiler writes it."""
    from . import IMAGE_SETS, initramfs, kernel, sdimage
    t0 = time.monotonic()
    k = kernel.fetch_kernel()
    ir = initramfs.build(k, project=False)
    sdimage.boot_initramfs(k)
    print(f"kernel     {k.release}, initramfs {ir.path.name} (without the project's binaries: "
          f"each lab adds them): {time.monotonic() - t0:.1f}s", flush=True)
    for name, pkgs in IMAGE_SETS.items():
        t1 = time.monotonic()
        img = sdimage.root_image(k, pkgs)
        print(f"image      {name:12} {img.key} {'built' if img.built else 'cached'} "
              f"in {time.monotonic() - t1:.1f}s", flush=True)
    print(f"all lab images ready in {time.monotonic() - t0:.1f}s")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="nvlab", description="nvfence QEMU lab",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="fetch the guest kernel and build the initramfs")
    p.add_argument("--refresh", action="store_true", help="re-resolve the kernel from the archive")
    p.set_defaults(fn=cmd_prepare)
    p = sub.add_parser("smoke", help="boot a lab and show each host's device")
    _lab_args(p)
    p.set_defaults(fn=cmd_smoke)
    p = sub.add_parser("run", help="boot a lab and run a command on its hosts")
    _lab_args(p)
    p.add_argument("-H", "--host", action="append", help="host name (repeatable; default all)")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("shell", help="boot a lab and type commands")
    _lab_args(p)
    p.add_argument("--timeout", type=float, default=120)
    p.set_defaults(fn=cmd_shell)
    p = sub.add_parser("boot-time", help="measure how long a lab takes to start")
    _lab_args(p)
    p.add_argument("-r", "--repeat", type=int, default=3)
    p.set_defaults(fn=cmd_boot_time)
    p = sub.add_parser("sd-image", help="build (or verify) the cached systemd root image")
    p.add_argument("-p", "--packages", default="", help="extra Debian packages (comma list)")
    p.add_argument("--rebuild", action="store_true")
    p.set_defaults(fn=cmd_sd_image)
    p = sub.add_parser("images", help="build (or verify) everything the lab tests boot")
    p.set_defaults(fn=cmd_images)
    a = ap.parse_args(argv)
    if getattr(a, "command", None) and a.command[:1] == ["--"]:
        a.command = a.command[1:]
    try:
        return a.fn(a)
    except LabError as e:
        print(f"nvlab: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nvlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
