#!/usr/bin/env bash
# Installs, from Debian 12's own packages, exactly what nvfence's build, tests
# and QEMU lab need and is not installed yet. Idempotent: a second run
# installs nothing and touches no apt state.
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ pkg-config
  libnvme-dev libjson-c-dev liburing-dev libspdlog-dev libcli11-dev libgtest-dev
  # fuzzers (libFuzzer runtime of clang-14)
  clang-14 libclang-rt-14-dev
  # lab: QEMU, guest userspace, peers measured side by side
  qemu-system-x86 busybox-static nvme-cli fio xz-utils cpio zstd
  # lab tests
  python3-pytest
  # lab: ext4 on the shared namespace (mke2fs, e2fsck copied into the guest)
  e2fsprogs
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
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
