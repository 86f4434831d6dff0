"""nvlab: the nvfence QEMU lab (see vm-test/README.md).

Names are loaded lazily so that `python3 -m nvlab.kernel` runs the kernel
module without importing it twice.
"""

import importlib

_EXPORTS = {
    "Lab": "lab", "Host": "lab", "Target": "lab", "Background": "lab",
    "NQN": "lab", "DISK_SERIAL": "lab", "EBS_MODEL": "lab", "TOPOLOGIES": "lab",
    "FLAVOURS": "lab", "CUT_PATHS": "lab", "CLUSTER_PREFIX": "lab", "CLUSTER_PACKAGES": "lab", "IMAGE_SETS": "lab", "ClusterHub": "lab",
    "Result": "agent", "CommandFailed": "agent",
    "LabError": "util", "NotSupported": "util",
}


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'nvlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def prepare(refresh: bool = False):
    """Fetch the guest kernel and build the initramfs (both cached)."""
    from . import initramfs, kernel
    k = kernel.fetch_kernel(refresh=refresh)
    img = initramfs.build(k)
    return k, img


__all__ = sorted(_EXPORTS) + ["prepare"]
