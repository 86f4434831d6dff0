#!/usr/bin/env bash
# Installs, from Debian 12's own packages, exactly what nvfence's build, tests
# and QEMU lab need and is not installed yet, and mounts tracefs if it is not
# (WriterTest.CompletionsParkedInTaskWorkRideOnTheEnterThatSubmits counts
# io_uring_enter calls with a syscall tracepoint; a freshly booted machine
# has no tracefs mounted). Idempotent: a second run installs and mounts
# nothing and touches no apt state.
set -euo pipefail

mount_tracefs() {
  local t=/sys/kernel/tracing
  if [ -d "$t/events" ] || [ -d /sys/kernel/debug/tracing/events ]; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: tracefs is not mounted; run as root to mount it on $t" >&2
    exit 5
  fi
  mount -t tracefs nodev "$t"
  echo "setup: mounted tracefs on $t"
}

packages=(
  # build
  cmake ninja-build g++ pkg-config ccache
  libnvme-dev libjson-c-dev liburing-dev libspdlog-dev libcli11-dev libgtest-dev
  # fuzzers (libFuzzer runtime of clang-14)
  clang-14 libclang-rt-14-dev
  # lab: QEMU, guest userspace, peers measured side by side
  qemu-system-x86 busybox-static nvme-cli fio xz-utils cpio zstd
  # lab tests
  python3-pytest
  # metrics: nvfenced's Prometheus text parsed by the Prometheus client
  python3-prometheus-client
  # etcd elector: transport, JSON, and a real etcd for its tests
  libcurl4-openssl-dev nlohmann-json3-dev etcd-server etcd-client
  # fence_nvfence: its metadata is checked with xmllint against fence-agents' metadata.rng
  libxml2-utils
  # packaging tests: cpack's dpkg-shlibdeps, dpkg-deb, dpkg-buildflags (hardening); lintian
  # on the packages; man pages rendered by man(1)
  dpkg-dev lintian man-db groff-base bsdextrautils
  # the debian/ source package (dh) and its autopkgtests
  debhelper autopkgtest
  # style: function lengths measured by ctags (function_length)
  universal-ctags
  # libnvfence's ABI: abidw records the baseline (abi/), abidiff checks it (abi_check)
  abigail-tools
  # lab: systemd host guests (Debian root image, qcow2 overlays, debugfs); ext4 in the busybox guests
  mmdebstrap qemu-utils e2fsprogs
  # scripts/test.sh: pgrep (procps) stops the jobs beside the phases on a failure
  procps
  # SQLite VFS: headers, the stock shell (.load test), and SQLite's TCL test harness
  # (testfixture is built from Debian's sqlite3 source package: dpkg-dev, tcl-dev)
  libsqlite3-dev sqlite3 tcl-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  mount_tracefs
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 5
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
mount_tracefs
