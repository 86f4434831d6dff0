"""The systemd flavour's root-image cache (issue 12), without booting:

- the package list is validated and keyed (base packages always in);
- a package Debian 12 does not have fails at once with its name;
- a cached image is reused as is; one whose checksum no longer matches
  (corrupt) or that has no manifest (a build that died) is rebuilt. The
  builder is replaced by a small fake here (a real build takes minutes);
  the checksum, manifest and cache logic are the real ones.
- the real cached image (built by the first systemd lab on this machine, or
  here) matches its manifest and holds the kernel's modules.dep;
- the services a lab configures itself (corosync, pacemaker, etcd,
  postgresql) are installed but not started at boot.
"""
import json
import os
import re

import pytest

from nvlab import kernel, sdimage
from nvlab.util import LabError


def test_package_list_is_validated_and_keyed():
    base = sdimage.normalize_packages(())
    assert set(sdimage.BASE_PACKAGES) <= set(base)
    more = sdimage.normalize_packages(["corosync", "pacemaker", "corosync"])
    assert more == tuple(sorted(set(base) | {"corosync", "pacemaker"}))
    assert sdimage.normalize_packages("corosync, pacemaker") == more
    for bad in ("", "Bad Name", "x;rm -rf /", "../etc"):
        with pytest.raises(ValueError):
            sdimage.normalize_packages([bad])
    k = kernel.fetch_kernel()
    assert sdimage.image_key(base, k) != sdimage.image_key(more, k)
    assert sdimage.image_key(more, k) == sdimage.image_key(sdimage.normalize_packages(["pacemaker", "corosync"]), k)


def test_missing_package_is_named(tmp_path, monkeypatch):
    k = kernel.fetch_kernel()          # from the real cache, before redirecting it
    monkeypatch.setenv("NVFENCE_LAB_CACHE", str(tmp_path))
    with pytest.raises(LabError, match="nvfence-no-such-package"):
        sdimage.root_image(k, ["corosync", "nvfence-no-such-package"])
    # mmdebstrap's own wording (when apt-cache cannot tell) is named too.
    assert sdimage._missing_packages("E: Unable to locate package foo-bar\nE: setup failed") == ["foo-bar"]
    assert sdimage._missing_packages("E: Package 'x1' has no installation candidate") == ["x1"]


def test_checksum_sees_a_changed_byte_anywhere(tmp_path):
    p = tmp_path / "img"
    with open(p, "wb") as f:
        f.truncate(64 << 20)
        f.seek(1 << 20)
        f.write(b"a" * 8192)
    c0 = sdimage.data_checksum(p)
    with open(p, "r+b") as f:
        f.seek((1 << 20) + 100)
        f.write(b"b")
    c1 = sdimage.data_checksum(p)
    assert c1 != c0
    with open(p, "r+b") as f:
        f.seek(32 << 20)
        f.write(b"\0" * 4096)   # zeros into a hole: same content, same sum
    assert sdimage.data_checksum(p) == c1
    with open(p, "r+b") as f:
        f.seek((40 << 20) + 3)
        f.write(b"z")           # a byte in a hole: detected
    assert sdimage.data_checksum(p) != c1


def test_cache_reuses_and_rebuilds(tmp_path, monkeypatch):
    k = kernel.fetch_kernel()          # from the real cache, before redirecting it
    monkeypatch.setenv("NVFENCE_LAB_CACHE", str(tmp_path / "cache"))
    builds = []

    def fake_build(k_, pkgs, key, d):
        builds.append(key)
        d.mkdir(parents=True, exist_ok=True)
        img = d / "root.img"
        with open(img, "wb") as f:
            f.truncate(16 << 20)
            f.write(b"root" * 1024)
        man = {"key": key, "packages": list(pkgs), "size": img.stat().st_size,
               "sha256": sdimage.data_checksum(img), "libs": []}
        (d / "manifest.json").write_text(json.dumps(man))
        return man

    monkeypatch.setattr(sdimage, "_build", fake_build)
    monkeypatch.setattr(sdimage, "_verified", {})
    first = sdimage.root_image(k, ["corosync"])
    assert first.built and len(builds) == 1
    again = sdimage.root_image(k, ["corosync"])
    assert not again.built and len(builds) == 1 and again.path == first.path
    # Corrupt: one byte changed (size and name unchanged).
    with open(first.path, "r+b") as f:
        f.seek(10)
        f.write(b"X")
    os.utime(first.path, ns=(1, 1))
    third = sdimage.root_image(k, ["corosync"])
    assert third.built and len(builds) == 2
    # Partial: the manifest is missing (a build that died before the end).
    (first.path.parent / "manifest.json").unlink()
    fourth = sdimage.root_image(k, ["corosync"])
    assert fourth.built and len(builds) == 3
    # Another package list is another image.
    other = sdimage.root_image(k, ["etcd-server"])
    assert other.built and other.key != first.key and len(builds) == 4


def test_real_image_matches_its_manifest():
    k = kernel.fetch_kernel()
    img = sdimage.root_image(k)
    man = img.manifest
    sdimage._verified.clear()
    assert sdimage._verify(img.path, man) is None
    assert man["kernel"] == k.release and set(sdimage.BASE_PACKAGES) <= set(man["packages"])
    print(f"\nMEASURED systemd root image: build {man['build_s']}s (mmdebstrap {man['mmdebstrap_s']}s), "
          f"{man['used_mb']} MB used; {'built now' if img.built else 'from the cache'}")
    r = os.popen(f"debugfs -R 'stat /usr/lib/modules/{k.release}/modules.dep' {img.path} 2>/dev/null").read()
    m = re.search(r"Type: regular.*?\bSize: (\d+)", r, re.S)
    assert m and int(m.group(1)) > 0, r


def _debugfs_stat(image, path) -> str:
    return os.popen(f"debugfs -R 'stat {path}' {image} 2>&1").read()


def test_services_a_lab_configures_are_not_started_at_boot():
    # The PostgreSQL image holds all four (cluster stack, etcd, the
    # database): installed, but not wanted by multi-user.target, so a boot
    # does not start them with their packages' defaults (sdimage.DISABLED_UNITS).
    import nvlab
    img = sdimage.root_image(kernel.fetch_kernel(), nvlab.IMAGE_SETS["postgres"])
    for u in sdimage.DISABLED_UNITS:
        unit = _debugfs_stat(img.path, f"/usr/lib/systemd/system/{u}")
        assert re.search(r"Type: regular", unit), (u, unit)
        link = _debugfs_stat(img.path, f"/etc/systemd/system/multi-user.target.wants/{u}")
        assert "File not found" in link, (u, link)
