"""The Debian packages in a systemd guest (issues 17 and 27): `cpack -G DEB`
of the build directory gives libnvfence0, libnvfence-dev and nvfence (the
packages' prefix is /usr whatever the build's, see
cmake/NvfencePackage.cmake), installed with `dpkg -i` in a systemd host VM
whose project disk carries no install of the project
(Lab(install_project=False)): everything nvfence in the guest comes from
the packages.

- The root image has the packages' Depends that are not nvfence's own and
  nothing else of the project (no network in the guest: dpkg must find
  every Depends satisfied), plus a C and C++ toolchain, cmake and
  pkg-config to build consumers.
- libnvfence0 and libnvfence-dev alone (not the nvfence package): a C11
  program builds with `pkg-config --cflags --libs nvfence` and a CMake
  project with find_package(nvfence) (examples/c, examples/cmake-consumer),
  both run against the installed library (ld.so.cache, no
  LD_LIBRARY_PATH).
- debian/tests (autopkgtest), run in the guest against the installed
  packages by nvlab.workloads.autopkgtest (Depends must be installed,
  Restrictions honoured): build-consumers with libnvfence0 and
  libnvfence-dev alone, installed-tools once nvfence is installed (with
  the host's cached copy of fence-agents' schema: the guest has no
  network).
- dpkg -i nvfence: the rule lands in /usr/lib/udev/rules.d and the unit in
  /usr/lib/systemd/system; the postinst reloads udev and triggers the NVMe
  block devices, so /dev/nvfence/<volume> appears without us; systemd
  knows nvfenced@.service from /usr/lib/systemd/system (postinst's
  daemon-reload); the library resolves through ld.so.cache (libnvfence0's
  ldconfig trigger).
- With /etc/nvfence/<volume>.conf, the udev rule starts
  nvfenced@<volume>.service for the shared namespace (nobody runs systemctl
  start), it becomes active through READY=1 and `nvfence status` answers as
  holder; the device reports the same holder key.
- dpkg -r nvfence: prerm stops the agent cleanly (it releases the
  reservation), the package's files are gone, udev and systemd no longer
  know the rule, the unit or the /dev/nvfence link; the library stays
  until libnvfence-dev and libnvfence0 are removed too.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import nvlab
from nvlab.util import REPO_DIR, build_dir
from nvlab.workloads import autopkgtest

VOL = "vol-0123456789abcdef0"
UNIT = f"nvfenced@{VOL}.service"
WAIT_S = 90          # bound for udev/systemd to act on an event under a loaded TCG host
# The packages' Depends not in the base systemd image (dpkg-shlibdeps of
# libnvfence, nvfence, nvfenced and fence_nvfence; libnvme1, libc6,
# libstdc++6 and libgcc-s1 are in the base image already).
DEB_DEPS = ["liburing2", "libspdlog1.10", "libfmt9"]
assert set(DEB_DEPS) <= set(nvlab.CLUSTER_PACKAGES)
# What a developer has to build against libnvfence-dev: compilers, cmake,
# pkg-config, and liburing-dev (libnvfence-dev's Depends: nvfence.pc
# requires liburing).
DEV_PACKAGES = ["g++", "make", "cmake", "pkg-config", "liburing-dev"]
# debian/tests' Depends beyond those (autopkgtest's runner would install
# them with apt; the guest has no network, so the image carries them).
ADT_PACKAGES = ["build-essential", "ninja-build", "libxml2-utils", "man-db"]
assert set(nvlab.IMAGE_SETS["deb-install"]) == set(nvlab.CLUSTER_PACKAGES) | set(DEV_PACKAGES) | set(ADT_PACKAGES)
PACKAGES = ("libnvfence0", "libnvfence-dev", "nvfence")
# The source tree in the guest, as far as debian/tests use it.
SRC = "/root/src"
SRC_DIRS = ("debian/tests", "examples/c", "examples/cmake-consumer", "examples/testing")
SRC_FILES = ("tests/fence_nvfence_metadata.sh", "tests/fence_nvfence/metadata.xml")


@pytest.fixture(scope="module")
def debs():
    """cpack -G DEB in the build directory, into a temporary directory:
    {package name: path}."""
    b = build_dir()
    if not (b / "CPackConfig.cmake").exists():
        pytest.fail(f"no CMake build with CPack at {b} (set NVFENCE_BUILD_DIR)")
    out = Path(tempfile.mkdtemp(prefix="nvfence-deb-"))
    try:
        # One cpack at a time in a build tree: scripts/test.sh runs the
        # Debian source package test (which runs cpack too) beside the lab.
        r = subprocess.run(["flock", "-w", "900", str(b / ".cpack.lock"), "cpack", "-G", "DEB", "-B", str(out)],
                           cwd=b, capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        found = {deb_field(d, "Package"): d for d in sorted(out.glob("*.deb"))}
        assert set(found) == set(PACKAGES), (found, r.stdout[-2000:])
        yield found
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def lab(debs):
    with nvlab.Lab(hosts=1, flavour="systemd", packages=list(nvlab.IMAGE_SETS["deb-install"]),
                   install_project=False, cluster_net=False, boot_timeout_s=480) as lab:
        yield lab


@pytest.fixture(scope="module")
def adt():
    """debian/tests/control's stanzas, by test name; every script in
    debian/tests is named by exactly one."""
    text = (REPO_DIR / "debian/tests/control").read_text()
    by_name = {n: st for st in autopkgtest.parse_control(text, PACKAGES) for n in st.names}
    scripts = {f.name for f in (REPO_DIR / "debian/tests").iterdir() if f.name != "control"}
    assert set(by_name) == scripts, (sorted(by_name), sorted(scripts))
    return by_name


def put_source(host):
    for d in SRC_DIRS:
        for f in sorted((REPO_DIR / d).iterdir()):
            if f.is_file():
                host.put(f, f"{SRC}/{d}/{f.name}", mode=0o755 if os.access(f, os.X_OK) else 0o644)
    for f in SRC_FILES:
        host.put(REPO_DIR / f, f"{SRC}/{f}", mode=0o755 if os.access(REPO_DIR / f, os.X_OK) else 0o644)


def adt_run(host, adt, name, env=None):
    """One autopkgtest of debian/tests, as autopkgtest runs it; it must pass
    and say so."""
    out = autopkgtest.run_test(host, SRC, adt[name], name, env or {})
    print(f"\nautopkgtest {name}: rc {out.rc}\n{out.out.strip()[-1500:]}\n{out.err.strip()[-1500:]}")
    assert out.passed and f"{name}: ok" in out.out, (out.problems, out.rc, out.out[-3000:], out.err[-3000:])
    return out


def deb_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True,
                          check=True).stdout.strip()


def show(host, *props):
    r = host.run(f"systemctl show {UNIT} " + " ".join(f"-p {p}" for p in props), timeout_s=30, check=True)
    return dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)


def holders(host):
    rep = json.loads(host.run("nvme resv-report $NVFENCE_DEV --eds -o json", check=True).out)
    return [r["rkey"] for r in rep.get("regctlext", []) if r["rcsts"] & 1]


def test_dev_packages_alone_build_consumers(lab, debs, adt):
    """libnvfence0 + libnvfence-dev, without the nvfence package: the
    autopkgtest build-consumers (pkg-config and find_package(nvfence)
    consumers, the testing kit's example) builds and runs."""
    (a,) = lab.hosts
    assert lab.project_info["installed"] is False, lab.project_info
    # Nothing of the project in the guest before dpkg.
    r = a.run("command -v nvfence nvfenced fence_nvfence; ls /usr/local/lib/systemd/system /usr/local/lib/udev/rules.d "
              "/usr/lib/udev/rules.d/70-nvfence.rules /usr/lib/systemd/system/nvfenced@.service 2>/dev/null; "
              "pkg-config --exists nvfence && echo pc; ldconfig -p | grep libnvfence")
    assert r.out.strip() == "", r.out
    # Every Depends of the three packages is satisfied by the image and the
    # packages themselves (dpkg -i would refuse otherwise).
    have = autopkgtest.installed(a) | set(PACKAGES)
    for name, deb in debs.items():
        depends = deb_field(deb, "Depends")
        missing = [d.strip().split()[0] for d in depends.split(",") if d.strip() and d.strip().split()[0] not in have]
        assert not missing, f"{name}: Depends ({depends}) not in the image: {missing}"
        a.put(deb, f"/root/{deb.name}")
    # The lab's images leave man pages out (mmdebstrap's path-exclude, kept
    # in /etc/dpkg/dpkg.cfg.d for every later dpkg -i); a Debian system
    # installs them, and installed-tools checks they are there.
    a.run("grep -l 'path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg.d/* | "
          "xargs -r sed -i '/path-exclude=\\/usr\\/share\\/man/d'", timeout_s=60, check=True)
    assert a.run("grep -rq 'path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg.d").rc != 0
    lib, dev = debs["libnvfence0"].name, debs["libnvfence-dev"].name
    r = a.run(f"cd /root && dpkg -i {lib} {dev}", timeout_s=300)
    assert r.rc == 0, (r.out, r.err)
    print(f"\n{r.out.strip()}")
    assert a.run("dpkg-query -W -f='${Status}' nvfence").out.find("install ok installed") < 0
    flags = a.run("pkg-config --cflags --libs nvfence", check=True).out.strip()
    assert "-lnvfence" in flags, flags
    # The runner refuses a test whose Depends are not installed (the nvfence
    # package is not, yet): it can fail.
    refused = autopkgtest.run_test(a, SRC, adt["installed-tools"], "installed-tools", {})
    assert not refused.passed and any("nvfence" in p for p in refused.problems), refused
    put_source(a)
    # TCG on a loaded host: the C++ builds take minutes. One compiler at a
    # time: ninja's default (cores + 2) runs three in the guest's 512 MiB,
    # which then thrashes (hung-task warnings, no progress in 15 minutes).
    adt_run(a, adt, "build-consumers", {"CMAKE_BUILD_PARALLEL_LEVEL": "1"})
    tmp = "/tmp/autopkgtest-build-consumers"
    # The C example found the library through ld.so.cache (Debian 12's
    # merged /usr names /lib/<triplet>), no LD_LIBRARY_PATH.
    ldd = a.run(f"ldd {tmp}/c-example", check=True).out
    assert re.search(r"libnvfence\.so\.0 => (/usr)?/lib/[a-z0-9_]+-linux-gnu/libnvfence\.so\.0", ldd), ldd
    # find_package(nvfence) from /usr/lib/<triplet>/cmake; C++20 carried by
    # the target (the consumer sets no standard).
    assert a.run(f"grep -rq 'std=.*++20' {tmp}/consumer").rc == 0
    nvf_dir = a.run(f"sed -n 's/^nvfence_DIR:PATH=//p' {tmp}/consumer/CMakeCache.txt", check=True).out.strip()
    assert re.fullmatch(r"/usr/lib/[a-z0-9_]+-linux-gnu/cmake/nvfence", nvf_dir), nvf_dir
    # The testing kit's example, built by the same consumer against nvfence::testing.
    kit = a.run(f"{tmp}/consumer/nvfence-kit-failover", timeout_s=300)
    assert kit.rc == 0, (kit.out[-2000:], kit.err[-2000:])
    print(f"pkg-config: {flags}\ncmake consumer: {nvf_dir}\nkit: {kit.out.strip()[-300:]}")


def test_install_from_package(lab, debs):
    (a,) = lab.hosts
    deb = debs["nvfence"]
    depends = deb_field(deb, "Depends")
    r = a.run(f"dpkg -i /root/{deb.name}", timeout_s=300)
    assert r.rc == 0, (r.out, r.err)
    print(f"\n{deb.name}: Depends: {depends}\n{r.out.strip()}")
    files = a.run("dpkg -L nvfence", check=True).out.split()
    for f in ("/usr/lib/udev/rules.d/70-nvfence.rules", "/usr/lib/systemd/system/nvfenced@.service",
              "/usr/bin/nvfence", "/usr/sbin/nvfenced", "/usr/sbin/fence_nvfence"):
        assert f in files, (f, files)
    assert not [f for f in files if f.startswith("/usr/local")], files
    # The library through ld.so.cache (libnvfence0's ldconfig trigger).
    assert "libnvfence.so." in a.run("ldconfig -p", check=True).out
    r = a.run("nvfence --version")
    assert r.rc == 0, (r.out, r.err)
    # systemd reads the template from the package (postinst daemon-reload)...
    st = show(a, "FragmentPath", "LoadState", "ExecStart", "ConditionPathExists")
    # (Debian 12's systemd names its unit directory /lib/systemd/system,
    # which is /usr/lib/systemd/system on its merged /usr.)
    frag = a.run(f"readlink -f {st['FragmentPath']}", check=True).out.strip()
    assert st["LoadState"] == "loaded" and frag == "/usr/lib/systemd/system/nvfenced@.service", (st, frag)
    assert "/usr/sbin/nvfenced" in st["ExecStart"], st
    # ...and udev runs its rule (postinst reload + trigger): the namespace
    # got its /dev/nvfence link and the probe's properties without us.
    r = a.wait_for(f"test -L /dev/nvfence/{VOL}", timeout_s=WAIT_S)
    assert r.rc == 0, a.run("udevadm info --query=property $NVFENCE_DEV; ls -l /dev/nvfence").out
    props = a.run("udevadm info --query=property $NVFENCE_DEV", check=True).out
    assert f"NVFENCE_VOLUME_ID={VOL}" in props and "NVFENCE_RESERVATIONS=1" in props, props
    assert a.run(f"systemctl is-active {UNIT}").out.strip() == "inactive", "started without a configuration"


def test_udev_starts_unit_from_package(lab):
    (a,) = lab.hosts
    a.put(b"node_id = 1\nrole = acquire\ninterval_ms = 500\n", f"/etc/nvfence/{VOL}.conf")
    # The namespace comes and goes as udev sees it: the package's rule
    # wants the unit (SYSTEMD_WANTS), systemd starts it.
    a.run("udevadm trigger --action=remove --settle $NVFENCE_DEV && "
          "udevadm trigger --action=add --settle $NVFENCE_DEV", timeout_s=WAIT_S, check=True)
    r = a.wait_for(f"systemctl is-active --quiet {UNIT}", timeout_s=WAIT_S)
    assert r.rc == 0, (a.run("udevadm info --query=property $NVFENCE_DEV").out, a.journal(UNIT, lines=30))
    wanted_by = [u.strip('"') for u in show(a, "WantedBy")["WantedBy"].split()]
    assert any(u.endswith(".device") for u in wanted_by), wanted_by
    st = show(a, "Type", "ActiveState", "SubState", "MainPID")
    assert st["Type"] == "notify" and st["ActiveState"] == "active" and st["SubState"] == "running", st
    r = a.wait_for(f"nvfence status {VOL} --json | grep -q '\"state\":\"HOLDER\"'", timeout_s=WAIT_S)
    assert r.rc == 0, (a.run(f"nvfence status {VOL}").out, a.journal(UNIT, lines=30))
    s = json.loads(a.run(f"nvfence status {VOL} --json", check=True).out.strip().splitlines()[-1])
    assert s["state"] == "HOLDER" and [int(s["key"], 16)] == holders(a), (s, holders(a))
    print(f"\nnvfence status: {s['state']} key {s['key']} (unit MainPID {st['MainPID']})")


def test_autopkgtest_installed_tools(lab, adt):
    """The autopkgtest installed-tools against the installed nvfence
    package; its needs-internet (fence-agents' schema through apt) is met
    by the host's cached copy of that schema."""
    (a,) = lab.hosts
    r = subprocess.run(["sh", str(REPO_DIR / "tests/fence_nvfence_metadata.sh"), str(build_dir() / "bin/fence_nvfence"),
                        str(REPO_DIR / "tests/fence_nvfence/metadata.xml")],
                       cwd=REPO_DIR, capture_output=True, text=True, timeout=600)
    m = re.search(r"^schema: (\S+)", r.stdout, re.M)
    assert r.returncode == 0 and m, (r.stdout[-2000:], r.stderr[-2000:])
    a.put(m.group(1), "/root/fence-agents-metadata.rng")
    adt_run(a, adt, "installed-tools", {"NVFENCE_METADATA_RNG": "/root/fence-agents-metadata.rng"})


def test_remove_stops_agent_and_cleans_up(lab):
    (a,) = lab.hosts
    pid = int(show(a, "MainPID")["MainPID"])
    assert pid > 0
    r = a.run("dpkg -r nvfence", timeout_s=300)
    assert r.rc == 0, (r.out, r.err)
    # prerm stopped the agent: its process is gone and the stop was clean
    # (a clean stop releases the reservation: nobody holds).
    assert a.wait_for(f"! kill -0 {pid}", timeout_s=WAIT_S).rc == 0, "nvfenced still runs after dpkg -r"
    assert a.run("pgrep -x nvfenced").rc != 0
    assert a.run(f"systemctl is-active {UNIT}").out.strip() in ("inactive", "unknown")
    log = a.journal(UNIT)
    assert re.search(rf"Stopped .*{re.escape(VOL)}|{re.escape(UNIT)}: Deactivated successfully", log), log[-2000:]
    assert not re.search(r"Failed with result|status=\d*/?(ABRT|KILL)", log), log[-2000:]
    assert holders(a) == []
    # The package's files are gone, and so is what udev and systemd had from them.
    r = a.run("dpkg-query -W -f='${Status}' nvfence")
    assert "install ok installed" not in r.out, r.out
    for f in ("/usr/lib/udev/rules.d/70-nvfence.rules", "/usr/lib/systemd/system/nvfenced@.service",
              "/usr/bin/nvfence", "/usr/sbin/nvfenced"):
        assert a.run(f"test -e {f}").rc != 0, f"{f} left after dpkg -r"
    assert show(a, "LoadState")["LoadState"] == "not-found"
    r = a.wait_for(f"test ! -e /dev/nvfence/{VOL}", timeout_s=WAIT_S)
    assert r.rc == 0, a.run("ls -l /dev/nvfence; udevadm info --query=property $NVFENCE_DEV").out
    props = a.run("udevadm info --query=property $NVFENCE_DEV", check=True).out
    assert "NVFENCE_" not in props, props
    # The library stays with libnvfence0, and goes with it.
    assert "libnvfence.so." in a.run("ldconfig -p", check=True).out
    r = a.run("dpkg -r libnvfence-dev libnvfence0", timeout_s=300)
    assert r.rc == 0, (r.out, r.err)
    assert "libnvfence.so." not in a.run("ldconfig -p", check=True).out
    assert a.run("ls /usr/lib/*/libnvfence* /usr/include/nvfence /usr/lib/*/pkgconfig/nvfence.pc 2>/dev/null").out == ""
