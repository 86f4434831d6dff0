# SPDX-License-Identifier: MIT
"""nvfence for Python: ctypes over libnvfence's C API (nvfence/nvfence.h).

Pure Python, no compiled code: it loads libnvfence.so.0 (or the path in
the environment variable NVFENCE_LIB, or the path given to load()) and
calls the C functions. The simulated cluster (SimCluster) loads the
testing kit's C face (nvfence/testing.h), libnvfence_testing_ffi.so of a
build tree: the path in NVFENCE_TESTING_LIB, or the one given, or the
file of that name beside the libnvfence loaded.

A failing call raises Error (its code, and nvf_strerror()'s words);
FencedError, a subclass, when nvf_is_fenced() says the device refused this
host. A writer's completion that was fenced raises FencedError from
Writer.write(); Writer.reap() returns it as a Completion whose status is
IO_FENCED. Handles are closed by close() or a with block; a simulated
cluster closes its fences and writers before itself.
"""
import collections
import ctypes
import os

__all__ = [
    "Error", "FencedError", "load", "version", "strerror", "is_fenced", "key_make", "key_decode",
    "key_format", "key_parse", "Namespace", "Fence", "Writer", "SimCluster", "Completion", "Outcome",
    "ReservationStatus", "Registrant", "KeyFields",
]

RESV_WRITE_EXCLUSIVE = 1
WRITER_AUTO, WRITER_BLOCK, WRITER_PASSTHROUGH = 0, 1, 2
IO_OK, IO_FENCED, IO_ERROR = 0, 1, 2
IO_WRITE, IO_READ, IO_FLUSH = 0, 1, 2
_ERRC_FENCED, _ERRC_INTERNAL = 17, 91  # enum nvf_errc

_u8, _u16, _u32, _u64, _int, _size = (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64,
                                      ctypes.c_int, ctypes.c_size_t)


class _KeyFields(ctypes.Structure):
    _fields_ = [("tag", _u8), ("node", _u8), ("epoch", _u32)]


class _Registrant(ctypes.Structure):
    _fields_ = [("key", _u64), ("host_id", _u8 * 16), ("cntlid", _u16), ("holder", _u8), ("ours", _u8),
                ("is_self", _u8), ("fields", _KeyFields)]


class _ResvStatus(ctypes.Structure):
    _fields_ = [("generation", _u32), ("type", _int), ("ptpl", _u8), ("has_holder", _u8), ("holder_key", _u64),
                ("count", _size), ("registrants", ctypes.POINTER(_Registrant))]


class _FenceOptions(ctypes.Structure):
    _fields_ = [("size", _size), ("tag", _u8), ("node", _u8), ("type", _int), ("abort", _u8),
                ("state_dir", ctypes.c_char_p)]


class _Outcome(ctypes.Structure):
    _fields_ = [("changed", _u8), ("completion_error", _u8), ("key", _u64), ("previous_holder", _u64),
                ("replaced", _u64), ("holder_after", _u64), ("generation_after", _u32), ("removed_count", _size),
                ("removed", _u64 * 16)]


class _WriterOptions(ctypes.Structure):
    _fields_ = [("size", _size), ("mode", _int), ("queue_depth", _u32), ("timeout_ms", _u32), ("epoch", _u64)]


class _Completion(ctypes.Structure):
    _fields_ = [("user_data", _u64), ("kind", _int), ("status", _int), ("error", _int), ("bytes", _u32)]


class _NsInfo(ctypes.Structure):
    _fields_ = [("block_path", ctypes.c_char * 128), ("generic_path", ctypes.c_char * 128),
                ("transport", ctypes.c_char * 8), ("model", ctypes.c_char * 48), ("serial", ctypes.c_char * 24),
                ("firmware", ctypes.c_char * 16), ("subnqn", ctypes.c_char * 256),
                ("ebs_volume", ctypes.c_char * 32), ("volume", ctypes.c_char * 96), ("nsid", _u32),
                ("lba_bytes", _u32), ("size_blocks", _u64), ("cntlid", _u16), ("reservations", _u8),
                ("looks_shared", _u8), ("resv_types", _u8), ("ptpl", _u8), ("iekey", _u8), ("has_host_id", _u8),
                ("host_id", _u8 * 16)]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
# name: (restype, argtypes) of the C API functions used here.
_PROTOS = {
    "nvf_version": (ctypes.c_char_p, []),
    "nvf_strerror": (ctypes.c_char_p, [_int]),
    "nvf_is_fenced": (_int, [_int]),
    "nvf_key_make": (_int, [ctypes.POINTER(_KeyFields), ctypes.POINTER(_u64)]),
    "nvf_key_decode": (_int, [_u64, ctypes.POINTER(_KeyFields)]),
    "nvf_key_format": (_int, [_u64, ctypes.c_char_p, _size]),
    "nvf_key_parse": (_int, [ctypes.c_char_p, ctypes.POINTER(_u64)]),
    "nvf_ns_open": (_int, [ctypes.c_char_p, _u32, _PP]),
    "nvf_ns_close": (None, [_P]),
    "nvf_ns_get_info": (_int, [_P, ctypes.POINTER(_NsInfo)]),
    "nvf_ns_report": (_int, [_P, ctypes.POINTER(_ResvStatus)]),
    "nvf_resv_status_free": (None, [ctypes.POINTER(_ResvStatus)]),
    "nvf_fence_new": (_int, [_P, ctypes.POINTER(_FenceOptions), _PP]),
    "nvf_fence_free": (None, [_P]),
    "nvf_fence_join": (_int, [_P, _u32, _int, ctypes.POINTER(_Outcome)]),
    "nvf_fence_acquire": (_int, [_P, ctypes.POINTER(_Outcome)]),
    "nvf_fence_takeover": (_int, [_P, _u64, ctypes.POINTER(_Outcome)]),
    "nvf_fence_release": (_int, [_P, ctypes.POINTER(_Outcome)]),
    "nvf_fence_leave": (_int, [_P, ctypes.POINTER(_Outcome)]),
    "nvf_fence_verify": (_int, [_P, ctypes.POINTER(_ResvStatus)]),
    "nvf_writer_open": (_int, [ctypes.c_char_p, ctypes.POINTER(_WriterOptions), _PP]),
    "nvf_writer_close": (None, [_P]),
    "nvf_writer_block_bytes": (_u32, [_P]),
    "nvf_writer_size_blocks": (_u64, [_P]),
    "nvf_writer_epoch": (_u64, [_P]),
    "nvf_writer_fenced": (_int, [_P]),
    "nvf_writer_settled": (_int, [_P]),
    "nvf_writer_in_flight": (_u32, [_P]),
    "nvf_writer_queue_write": (_int, [_P, _u64, _P, _size, _u64]),
    "nvf_writer_queue_read": (_int, [_P, _u64, _P, _size, _u64]),
    "nvf_writer_queue_flush": (_int, [_P, _u64]),
    "nvf_writer_submit": (_int, [_P]),
    "nvf_writer_reap": (_int, [_P, ctypes.POINTER(_Completion), _size, _u32]),
}
_SIM_PROTOS = {
    "nvf_sim_cluster_new": (_int, [ctypes.c_uint, _PP]),
    "nvf_sim_cluster_free": (None, [_P]),
    "nvf_sim_cluster_size": (ctypes.c_uint, [_P]),
    "nvf_sim_cluster_now_us": (_u64, [_P]),
    "nvf_sim_cluster_advance": (_int, [_P, _u64]),
    "nvf_sim_cluster_writes_landed": (_u64, [_P]),
    "nvf_sim_cluster_writes_refused": (_u64, [_P]),
    "nvf_sim_host_fence": (_int, [_P, ctypes.c_uint, ctypes.POINTER(_FenceOptions), _PP]),
    "nvf_sim_host_writer_open": (_int, [_P, ctypes.c_uint, ctypes.POINTER(_WriterOptions), _PP]),
}

_lib = None
_sim = None


def _bind(dll, protos):
    for name, (res, args) in protos.items():
        fn = getattr(dll, name)
        fn.restype, fn.argtypes = res, args
    return dll


def load(path=None):
    """Loads libnvfence (once): @p path, else $NVFENCE_LIB, else libnvfence.so.0."""
    global _lib
    if _lib is None or path is not None:
        path = path or os.environ.get("NVFENCE_LIB") or "libnvfence.so.0"
        _lib = _bind(ctypes.CDLL(path), _PROTOS)
    return _lib


def _load_sim(path=None):
    global _sim
    lib = load()
    if _sim is None or path is not None:
        path = path or os.environ.get("NVFENCE_TESTING_LIB")
        if not path:
            here = os.path.dirname(lib._name) if os.sep in lib._name else ""
            path = os.path.join(here, "libnvfence_testing_ffi.so") if here else "libnvfence_testing_ffi.so"
        _sim = _bind(ctypes.CDLL(path), _SIM_PROTOS)
    return _sim


# ---------------------------------------------------------------- errors


class Error(Exception):
    """A failed nvfence call: code (negative, as the C API's) and message."""

    def __init__(self, code, what=""):
        self.code = code
        self.message = strerror(code)
        super().__init__(f"{what}: {self.message} ({code})" if what else f"{self.message} ({code})")


class FencedError(Error):
    """The device refused this host (nvf_is_fenced()): another host took over."""


def _error(code, what=""):
    return FencedError(code, what) if is_fenced(code) else Error(code, what)


def _check(rc, what=""):
    if rc < 0:
        raise _error(rc, what)
    return rc


def version():
    """The library's version string."""
    return load().nvf_version().decode()


def strerror(code):
    """nvf_strerror(): words for any code."""
    return load().nvf_strerror(code).decode(errors="replace")


def is_fenced(code):
    """True when @p code means the device refused this host."""
    return load().nvf_is_fenced(code) == 1


# ---------------------------------------------------------------- keys

KeyFields = collections.namedtuple("KeyFields", "tag node epoch")


def key_make(tag, node, epoch):
    """The 64-bit key of (tag, node, epoch)."""
    key = _u64()
    _check(load().nvf_key_make(ctypes.byref(_KeyFields(tag, node, epoch)), ctypes.byref(key)), "key_make")
    return key.value


def key_decode(key):
    """KeyFields of one of nvfence's keys; Error (INVALID_KEY) for a foreign key."""
    f = _KeyFields()
    _check(load().nvf_key_decode(key, ctypes.byref(f)), "key_decode")
    return KeyFields(f.tag, f.node, f.epoch)


def key_format(key):
    """`nf:TAG:NODE:EPOCH`, or `0x...` for a foreign key."""
    buf = ctypes.create_string_buffer(32)
    _check(load().nvf_key_format(key, buf, len(buf)), "key_format")
    return buf.value.decode()


def key_parse(text):
    """The key of either text form."""
    key = _u64()
    _check(load().nvf_key_parse(text.encode(), ctypes.byref(key)), "key_parse")
    return key.value


# ---------------------------------------------------------------- results

Registrant = collections.namedtuple("Registrant", "key host_id cntlid holder ours is_self fields")
ReservationStatus = collections.namedtuple("ReservationStatus",
                                           "generation type ptpl holder_key registrants")
Outcome = collections.namedtuple("Outcome", "changed key previous_holder replaced holder_after "
                                            "generation_after removed")
Completion = collections.namedtuple("Completion", "user_data kind status error bytes")


def _status(call, handle, what):
    st = _ResvStatus()
    _check(call(handle, ctypes.byref(st)), what)
    try:
        regs = []
        for i in range(st.count):
            r = st.registrants[i]
            fields = KeyFields(r.fields.tag, r.fields.node, r.fields.epoch) if r.ours else None
            regs.append(Registrant(r.key, bytes(r.host_id), r.cntlid, bool(r.holder), bool(r.ours),
                                   bool(r.is_self), fields))
        return ReservationStatus(st.generation, st.type, st.ptpl, st.holder_key if st.has_holder else None, regs)
    finally:
        load().nvf_resv_status_free(ctypes.byref(st))


def _outcome(o):
    n = min(o.removed_count, 16)
    return Outcome(bool(o.changed), o.key, o.previous_holder, o.replaced, o.holder_after, o.generation_after,
                   list(o.removed[:n]))


# ---------------------------------------------------------------- handles


class _Handle:
    _free = None

    def __init__(self, ptr):
        self._ptr = ptr

    def _h(self):
        if not self._ptr:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self):
        """Frees the handle (again: nothing)."""
        if self._ptr:
            getattr(load(), self._free)(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Namespace(_Handle):
    """An open NVMe namespace (nvf_ns_open)."""
    _free = "nvf_ns_close"

    def __init__(self, path, timeout_ms=0):
        p = ctypes.c_void_p()
        _check(load().nvf_ns_open(os.fsencode(path), timeout_ms, ctypes.byref(p)), f"open {path}")
        super().__init__(p)

    def info(self):
        """The identity read at open, as a dict."""
        i = _NsInfo()
        _check(load().nvf_ns_get_info(self._h(), ctypes.byref(i)), "info")
        out = {}
        for name, _ in _NsInfo._fields_:
            v = getattr(i, name)
            out[name] = v.decode(errors="replace") if isinstance(v, bytes) else v if isinstance(v, int) else bytes(v)
        return out

    def report(self):
        """The reservation (Reservation Report) as a ReservationStatus."""
        return _status(load().nvf_ns_report, self._h(), "report")

    def fence(self, tag=0, node=0, state_dir=None, abort=True):
        """A Fence of this host on the namespace (which must outlive it)."""
        p = ctypes.c_void_p()
        o = _fence_options(tag, node, state_dir, abort)
        _check(load().nvf_fence_new(self._h(), ctypes.byref(o), ctypes.byref(p)), "fence")
        return Fence(p, self)


def _fence_options(tag, node, state_dir, abort):
    return _FenceOptions(ctypes.sizeof(_FenceOptions), tag, node, RESV_WRITE_EXCLUSIVE, 1 if abort else 0,
                         os.fsencode(state_dir) if state_dir else None)


def _writer_options(epoch, queue_depth, timeout_ms, mode):
    return _WriterOptions(ctypes.sizeof(_WriterOptions), mode, queue_depth, timeout_ms, epoch)


class Fence(_Handle):
    """The ownership protocol for this host on one namespace (nvf_fence)."""
    _free = "nvf_fence_free"

    def __init__(self, ptr, owner):
        super().__init__(ptr)
        self._owner = owner  # the namespace or cluster outlives the fence

    def _op(self, name, *args):
        o = _Outcome()
        _check(getattr(load(), name)(self._h(), *args, ctypes.byref(o)), name[4:])
        return _outcome(o)

    def join(self, epoch=0, replace=False):
        return self._op("nvf_fence_join", epoch, 1 if replace else 0)

    def acquire(self):
        return self._op("nvf_fence_acquire")

    def takeover(self, victim=0):
        """Preempts (and aborts) @p victim, or the holder: the failover."""
        return self._op("nvf_fence_takeover", victim)

    def release(self):
        return self._op("nvf_fence_release")

    def leave(self):
        return self._op("nvf_fence_leave")

    def verify(self):
        """The reservation (a Report) as a ReservationStatus."""
        return _status(load().nvf_fence_verify, self._h(), "verify")

    report = verify


class Writer(_Handle):
    """io_uring I/O whose every completion is ok, fenced or an error (nvf_writer)."""
    _free = "nvf_writer_close"

    def __init__(self, ptr, owner=None):
        super().__init__(ptr)
        self._owner = owner
        self._buffers = {}  # user_data -> buffer the kernel may still use
        self._next = 1

    @classmethod
    def open(cls, path, epoch=0, queue_depth=32, timeout_ms=30000, mode=WRITER_AUTO):
        """A writer on a device (nvf_writer_open)."""
        p = ctypes.c_void_p()
        o = _writer_options(epoch, queue_depth, timeout_ms, mode)
        _check(load().nvf_writer_open(os.fsencode(path), ctypes.byref(o), ctypes.byref(p)), f"writer {path}")
        return cls(p)

    def close(self):
        super().close()
        self._buffers.clear()

    @property
    def block_bytes(self):
        return load().nvf_writer_block_bytes(self._h())

    @property
    def epoch(self):
        return load().nvf_writer_epoch(self._h())

    @property
    def fenced(self):
        return load().nvf_writer_fenced(self._h()) == 1

    @property
    def settled(self):
        """True once fenced and nothing of this writer can land any more."""
        return load().nvf_writer_settled(self._h()) == 1

    @property
    def in_flight(self):
        return load().nvf_writer_in_flight(self._h())

    def _aligned(self, size):
        bs = self.block_bytes
        raw = ctypes.create_string_buffer(size + bs)
        off = (-ctypes.addressof(raw)) % bs
        return raw, ctypes.addressof(raw) + off

    def queue_write(self, lba, data, user_data=None):
        """Queues a write of @p data (whole blocks) at block @p lba; returns its user_data."""
        raw, addr = self._aligned(len(data))
        ctypes.memmove(addr, bytes(data), len(data))
        ud = self._take(user_data)
        _check(load().nvf_writer_queue_write(self._h(), lba, addr, len(data), ud), "queue_write")
        self._buffers[ud] = raw
        return ud

    def queue_flush(self, user_data=None):
        ud = self._take(user_data)
        _check(load().nvf_writer_queue_flush(self._h(), ud), "queue_flush")
        return ud

    def _take(self, user_data):
        if user_data is None:
            user_data, self._next = self._next, self._next + 1
        return user_data

    def submit(self):
        return _check(load().nvf_writer_submit(self._h()), "submit")

    def reap(self, n=64, min_complete=1):
        """Up to @p n completions (waiting, bounded, for @p min_complete)."""
        arr = (_Completion * n)()
        got = _check(load().nvf_writer_reap(self._h(), arr, n, min_complete), "reap")
        out = []
        for c in arr[:got]:
            self._buffers.pop(c.user_data, None)
            out.append(Completion(c.user_data, c.kind, c.status, c.error, c.bytes))
        return out

    def write(self, lba, data):
        """Writes @p data at @p lba and waits for its completion: the
        Completion when ok; FencedError when the device refused this host
        (or the writer is latched), Error for any other failure."""
        ud = self.queue_write(lba, data)
        self.submit()
        while True:
            for c in self.reap(64, 1):
                if c.user_data != ud:
                    continue
                if c.status == IO_OK:
                    return c
                code = c.error
                if c.status == IO_FENCED and not is_fenced(code):
                    code = -_ERRC_FENCED  # latched: refused without asking the device
                raise _error(code if code < 0 else -_ERRC_INTERNAL, "write")


class SimCluster:
    """The testing kit's simulated cluster (nvfence/testing.h): @p hosts
    hosts sharing one simulated namespace. fence() and writer() give the
    same Fence and Writer as on a device, over host @p host's commands."""

    def __init__(self, hosts=2, testing_lib=None):
        self._sim = _load_sim(testing_lib)
        p = ctypes.c_void_p()
        _check(self._sim.nvf_sim_cluster_new(hosts, ctypes.byref(p)), "sim cluster")
        self._ptr = p
        self._children = []

    def _h(self):
        if not self._ptr:
            raise ValueError("SimCluster is closed")
        return self._ptr

    def fence(self, host, tag=1, node=None, state_dir=None, abort=True):
        """A Fence of host @p host (node: host + 1 unless given)."""
        p = ctypes.c_void_p()
        o = _fence_options(tag, host + 1 if node is None else node, state_dir, abort)
        _check(self._sim.nvf_sim_host_fence(self._h(), host, ctypes.byref(o), ctypes.byref(p)), "sim fence")
        f = Fence(p, self)
        self._children.append(f)
        return f

    def writer(self, host, epoch=0, queue_depth=32, timeout_ms=30000):
        """A Writer of host @p host over the kit's model of the ring."""
        p = ctypes.c_void_p()
        o = _writer_options(epoch, queue_depth, timeout_ms, WRITER_AUTO)
        _check(self._sim.nvf_sim_host_writer_open(self._h(), host, ctypes.byref(o), ctypes.byref(p)),
               "sim writer")
        w = Writer(p, self)
        self._children.append(w)
        return w

    @property
    def size(self):
        return self._sim.nvf_sim_cluster_size(self._h())

    @property
    def now_us(self):
        return self._sim.nvf_sim_cluster_now_us(self._h())

    def advance(self, us):
        _check(self._sim.nvf_sim_cluster_advance(self._h(), us), "advance")

    @property
    def writes_landed(self):
        return self._sim.nvf_sim_cluster_writes_landed(self._h())

    @property
    def writes_refused(self):
        return self._sim.nvf_sim_cluster_writes_refused(self._h())

    def close(self):
        """Closes its writers and fences, then frees the cluster."""
        for c in reversed(self._children):
            c.close()
        self._children.clear()
        if self._ptr:
            self._sim.nvf_sim_cluster_free(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
