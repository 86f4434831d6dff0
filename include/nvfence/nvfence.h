/* SPDX-License-Identifier: MIT */
#ifndef NVFENCE_NVFENCE_H
#define NVFENCE_NVFENCE_H
/**
 * @file nvfence.h
 * The C API of libnvfence (C11; C++ callers may use it too). For storage
 * engines written in C, or in any language with a C FFI. The one binding
 * shipped is Python's: bindings/python/nvfence.py (ctypes, source tree),
 * tested in CI over the testing kit's C face (nvfence/testing.h).
 *
 * Conventions:
 *  - Every name starts with nvf_ (NVF_ for constants). Handles are opaque
 *    pointers, created by nvf_*_open / nvf_*_new and freed by the matching
 *    nvf_*_close / nvf_*_free (NULL is accepted and ignored there).
 *  - A function that can fail returns int: 0 (NVF_OK) or a positive count
 *    on success, a negative error code otherwise. nvf_strerror() gives the
 *    words for any code; nvf_is_fenced() says whether it means the device
 *    refused this host. No C++ exception crosses this API: every entry
 *    point catches everything (out of memory is NVF_ERR_NOMEM).
 *  - Error codes are stable numbers in three ranges:
 *      -1 .. -99          nvfence's own failures (enum nvf_errc below, the
 *                         same numbers as nvfence::Errc in error.hpp),
 *      -0x1000 - status   the device answered with an NVMe status
 *                         (SCT << 8 | SC, 11 bits): nvf_err_nvme_status(),
 *      -0x2000 - errno    the kernel returned an errno: nvf_err_errno().
 *  - Handles are not thread-safe: one thread at a time per handle.
 *  - Options structs are extensible (libnvme's args_size): the first field,
 *    size, is sizeof the struct the caller was compiled with, which the
 *    NVF_*_OPTIONS_INIT initialisers set. New fields are only ever added at
 *    the end. The library reads the fields that fit in size and takes the
 *    defaults for the rest, so a program built against an older header runs
 *    on a newer library; a size smaller than the struct's first version, or
 *    a larger struct whose bytes beyond what this library knows are not
 *    zero, is -NVF_ERRC_INVALID_ARGUMENT. Always start from the initialiser
 *    (a struct zeroed by hand has size 0 and is refused).
 *  - Every nvf_ function has the symbol version NVFENCE_1.0
 *    (nvfence/export.h).
 *  - The device decides: nothing here grants write access by itself. A
 *    writer whose completion was fenced is latched and refuses every later
 *    I/O; a preempted host acquires again only through an explicit new
 *    join/takeover (never automatically).
 *
 * Minimal use (errors elided):
 * @code
 *   nvf_ns *ns; nvf_fence *f; nvf_writer *w; nvf_outcome o;
 *   nvf_fence_options fo = NVF_FENCE_OPTIONS_INIT; fo.node = 2;
 *   nvf_ns_open("/dev/nvme1n1", 0, &ns);
 *   nvf_fence_new(ns, &fo, &f);
 *   nvf_fence_takeover(f, 0, &o);            // preempt-and-abort the holder
 *   nvf_writer_options wo = NVF_WRITER_OPTIONS_INIT;
 *   nvf_key_fields k; nvf_key_decode(o.key, &k); wo.epoch = k.epoch;
 *   nvf_writer_open("/dev/nvme1n1", &wo, &w);
 *   nvf_writer_queue_write(w, lba, buf, len, 1); nvf_writer_submit(w);
 *   nvf_completion c; nvf_writer_reap(w, &c, 1, 1);
 *   if (c.status == NVF_IO_FENCED) { stop serving: another host took over }
 * @endcode
 */

#include <stddef.h>
#include <stdint.h>

#include "nvfence/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this header; nvf_version() gives the library's. */
#define NVF_VERSION_MAJOR 0
/** Minor version of this header. */
#define NVF_VERSION_MINOR 1
/** Patch version of this header. */
#define NVF_VERSION_PATCH 0
/** The version as a string. */
#define NVF_VERSION_STRING "0.1.0"

/** The library's version string, e.g. "0.1.0". */
NVFENCE_API const char *nvf_version(void);
/** The library's version as MAJOR * 10000 + MINOR * 100 + PATCH. */
NVFENCE_API int nvf_version_number(void);

/* ------------------------------------------------------------ errors */

/** Success. */
#define NVF_OK 0

/** nvfence's own failures, returned negated (e.g. -NVF_ERRC_NOT_NVME). */
enum nvf_errc {
    NVF_ERRC_NOT_FOUND = 1,        /**< The path does not exist. */
    NVF_ERRC_NOT_NVME = 2,         /**< Not an NVMe namespace. */
    NVF_ERRC_CONTROLLER_NODE = 3,  /**< A controller node, not a namespace. */
    NVF_ERRC_NO_RESERVATIONS = 4,  /**< The namespace has no reservation support. */
    NVF_ERRC_TYPE_UNSUPPORTED = 5, /**< The namespace lacks this reservation type. */
    NVF_ERRC_INVALID_ARGUMENT = 6, /**< A caller-supplied value is out of range (or NULL). */
    NVF_ERRC_INVALID_KEY = 7,      /**< A key could not be parsed or decoded (foreign). */
    NVF_ERRC_MALFORMED_DATA = 8,   /**< The device returned data that does not parse. */
    NVF_ERRC_NOT_REGISTERED = 9,   /**< This host has no registration. */
    NVF_ERRC_NOT_HOLDER = 10,      /**< This host does not hold the reservation. */
    NVF_ERRC_HELD_BY_OTHER = 11,   /**< Another host holds the reservation. */
    NVF_ERRC_LOST_RACE = 12,       /**< Another host won a concurrent takeover. */
    NVF_ERRC_VERIFY_FAILED = 13,   /**< A Report contradicts what a command claimed. */
    NVF_ERRC_HOST_ID_CONFLICT = 14,/**< Another registrant shares this host's id. */
    NVF_ERRC_HOST_ID_UNKNOWN = 15, /**< This host's identifier could not be read. */
    NVF_ERRC_DEVICE_GONE = 16,     /**< The device disappeared. */
    NVF_ERRC_FENCED = 17,          /**< The device refused I/O: this host is fenced. */
    NVF_ERRC_TIMEOUT = 18,         /**< A bounded wait ran out. */
    NVF_ERRC_QUEUE_FULL = 19,      /**< A bounded queue is full. */
    NVF_ERRC_MISALIGNED = 20,      /**< Buffer, offset or length not aligned. */
    NVF_ERRC_OUT_OF_BOUNDS = 21,   /**< I/O past the end of the namespace. */
    NVF_ERRC_EPOCH_EXHAUSTED = 22, /**< No larger epoch fits in the key. */
    NVF_ERRC_STATE_IO = 23,        /**< The state directory could not be used (a failed call's errno included). */
    NVF_ERRC_REFUSED = 24,         /**< Refused for safety. */
    NVF_ERRC_PROTOCOL = 25,        /**< A malformed control-socket message. */
    NVF_ERRC_EPOCH_OUT_OF_RANGE = 26, /**< An epoch above what this host may use. */
    NVF_ERRC_UNSAFE_STATE_DIR = 27,/**< The state directory is writable by others or not ours. */
    NVF_ERRC_OWN_KEY = 28,         /**< The victim named is this host's own key (or node). */
    NVF_ERRC_PERMISSION_DENIED = 29,/**< The peer may not make this request (control socket). */
    NVF_ERRC_VIEW_LOST = 30,       /**< The agent could not read the device for too long. */
    NVF_ERRC_NOMEM = 90,           /**< Out of memory. */
    NVF_ERRC_INTERNAL = 91,        /**< An unexpected failure inside the library. */
    NVF_ERRC_TRUNCATED = 92        /**< An output buffer was too small; the result is cut short. */
};

/** Base of NVMe status codes: code = -(NVF_ERR_NVME_BASE + status). */
#define NVF_ERR_NVME_BASE 0x1000
/** Base of errno codes: code = -(NVF_ERR_ERRNO_BASE + errno). */
#define NVF_ERR_ERRNO_BASE 0x2000
/** Reservation Conflict (NVMe status 0x83), as an error code. */
#define NVF_ERR_RESERVATION_CONFLICT (-(NVF_ERR_NVME_BASE + 0x83))

/** Words for @p code (any value; 0 is "success"). The pointer stays valid
 *  until the next nvf_strerror() call on the same thread. */
NVFENCE_API const char *nvf_strerror(int code);
/** 1 when @p code means the device refused this host (Reservation
 *  Conflict, EBADE from the block layer, or NVF_ERRC_FENCED), else 0. */
NVFENCE_API int nvf_is_fenced(int code);
/** The NVMe status (SCT << 8 | SC) in @p code, or -1 if it holds none. */
NVFENCE_API int nvf_err_nvme_status(int code);
/** The errno in @p code, or 0 if it holds none. */
NVFENCE_API int nvf_err_errno(int code);
/** The documented exit code of the nvfence tools for @p code: 0 ok, 1 other,
 *  2 usage, 3 conflict / not holder, 4 unsupported, 5 permission, 6 lost race.
 *  Any int is a valid argument: a code outside every range (INT_MIN too)
 *  is 1, and neither nvf_strerror() nor nvf_is_fenced() negates it. */
NVFENCE_API int nvf_exit_code(int code);

/* ------------------------------------------------------------ keys */

/** The fields of one of nvfence's 64-bit reservation keys. */
typedef struct nvf_key_fields {
    uint8_t tag;    /**< Cluster tag, 0..255. */
    uint8_t node;   /**< Node id, 1..255. */
    uint32_t epoch; /**< Epoch (fencing token), 1..2^32-1. */
} nvf_key_fields;

/** Encodes @p f into @p key. -NVF_ERRC_INVALID_ARGUMENT when node or epoch is 0. */
NVFENCE_API int nvf_key_make(const nvf_key_fields *f, uint64_t *key);
/** Decodes @p key into @p f; -NVF_ERRC_INVALID_KEY for a foreign key
 *  (registered by another tool: never decoded). */
NVFENCE_API int nvf_key_decode(uint64_t key, nvf_key_fields *f);
/** Prints @p key as `nf:TAG:NODE:EPOCH` (ours) or `0x...` (foreign) into
 *  @p buf of @p len bytes (32 always suffice); -NVF_ERRC_TRUNCATED if it
 *  did not fit (buf then holds a NUL-terminated prefix). */
NVFENCE_API int nvf_key_format(uint64_t key, char *buf, size_t len);
/** Parses either text form (`nf:T:N:E` or `0x` + 1..16 hex digits) into
 *  @p key; -NVF_ERRC_INVALID_KEY otherwise. */
NVFENCE_API int nvf_key_parse(const char *text, uint64_t *key);

/* ------------------------------------------------------------ namespace */

/** An open NVMe namespace (opaque). */
typedef struct nvf_ns nvf_ns;

/** Reservation types (RTYPE). */
typedef enum nvf_resv_type {
    NVF_RESV_NONE = 0,                    /**< Not held (report only). */
    NVF_RESV_WRITE_EXCLUSIVE = 1,         /**< WE. */
    NVF_RESV_EXCLUSIVE_ACCESS = 2,        /**< EA. */
    NVF_RESV_WRITE_EXCLUSIVE_REG_ONLY = 3,/**< WERO. */
    NVF_RESV_EXCLUSIVE_ACCESS_REG_ONLY = 4,/**< EARO. */
    NVF_RESV_WRITE_EXCLUSIVE_ALL_REGS = 5,/**< WEAR. */
    NVF_RESV_EXCLUSIVE_ACCESS_ALL_REGS = 6 /**< EAAR. */
} nvf_resv_type;

/** Identity and reservation capabilities of a namespace. Strings are
 *  NUL-terminated and cut to fit. */
typedef struct nvf_ns_info {
    char block_path[128];   /**< Block device, e.g. "/dev/nvme1n1". */
    char generic_path[128]; /**< Generic node "/dev/ng1n1" ("" if none). */
    char transport[8];      /**< "pcie", "tcp", "loop", "rdma", "fc" or "". */
    char model[48];         /**< Identify Controller MN. */
    char serial[24];        /**< Identify Controller SN. */
    char firmware[16];      /**< Identify Controller FR. */
    char subnqn[256];       /**< NVM subsystem NQN. */
    char ebs_volume[32];    /**< "vol-..." for an EBS volume, else "". */
    char volume[96];        /**< Stable volume name (EBS id, nguid-, eui- or serial-nNSID). */
    uint32_t nsid;          /**< Namespace id. */
    uint32_t lba_bytes;     /**< Logical block size. */
    uint64_t size_blocks;   /**< Capacity in logical blocks (NSZE). */
    uint16_t cntlid;        /**< Controller id. */
    uint8_t reservations;   /**< 1 when the controller and namespace support reservations. */
    uint8_t looks_shared;   /**< 1 when the volume looks shared (multi-controller, fabrics, EBS). */
    uint8_t resv_types;     /**< Bit (1 << nvf_resv_type) set for each supported type. */
    uint8_t ptpl;           /**< Persist Through Power Loss supported. */
    uint8_t iekey;          /**< Ignore Existing Key as in NVMe 1.3+. */
    uint8_t has_host_id;    /**< 1 when host_id was read. */
    uint8_t host_id[16];    /**< This host's NVMe host identifier. */
} nvf_ns_info;

/** Opens and identifies @p path (a namespace block device, its /dev/ngXnY
 *  node, or a link to one). @p timeout_ms bounds each command (0: the
 *  kernel's default). Errors: -NVF_ERRC_NOT_FOUND, -NVF_ERRC_NOT_NVME (any
 *  other file), -NVF_ERRC_CONTROLLER_NODE, EACCES/EPERM without privileges. */
NVFENCE_API int nvf_ns_open(const char *path, uint32_t timeout_ms, nvf_ns **out);
/** Closes @p ns (NULL: nothing). Close fences and writers made from it first. */
NVFENCE_API void nvf_ns_close(nvf_ns *ns);
/** Copies the identity read at open into @p out. */
NVFENCE_API int nvf_ns_get_info(const nvf_ns *ns, nvf_ns_info *out);
/** 0 when the namespace supports reservations, else -NVF_ERRC_NO_RESERVATIONS
 *  with a sentence for people in @p why (may be NULL; @p len bytes). */
NVFENCE_API int nvf_ns_require_reservations(const nvf_ns *ns, char *why, size_t len);

/* ------------------------------------------------------------ reservation */

/** One registrant of a Reservation Report. */
typedef struct nvf_registrant {
    uint64_t key;          /**< Reservation key. */
    uint8_t host_id[16];   /**< Host id (64-bit ids fill bytes 0..7). */
    uint16_t cntlid;       /**< Controller id (0xffff: dynamic). */
    uint8_t holder;        /**< 1 when it holds the reservation. */
    uint8_t ours;          /**< 1 when key is one of nvfence's keys (fields valid). */
    uint8_t is_self;       /**< 1 when host_id is this host's. */
    nvf_key_fields fields; /**< The decoded key when ours, else zero. */
} nvf_registrant;

/** A Reservation Report; free with nvf_resv_status_free(). */
typedef struct nvf_resv_status {
    uint32_t generation;        /**< GEN. */
    nvf_resv_type type;         /**< RTYPE (NVF_RESV_NONE: not held). */
    uint8_t ptpl;               /**< PTPLS. */
    uint8_t has_holder;         /**< 1 when a registrant holds it. */
    uint64_t holder_key;        /**< The holder's key, 0 if none. */
    size_t count;               /**< Entries in registrants. */
    nvf_registrant *registrants;/**< count entries, owned by this struct. */
} nvf_resv_status;

/** Reads the reservation of @p ns (Report, extended form first). On success
 *  @p out owns an array: call nvf_resv_status_free(). */
NVFENCE_API int nvf_ns_report(nvf_ns *ns, nvf_resv_status *out);
/** Frees what nvf_ns_report() or nvf_fence_verify() allocated in @p st
 *  and zeroes it (NULL: nothing). */
NVFENCE_API void nvf_resv_status_free(nvf_resv_status *st);

/* ------------------------------------------------------------ fence */

/** The ownership protocol for this host on one namespace (opaque). */
typedef struct nvf_fence nvf_fence;

/** Options of nvf_fence_new(); start from NVF_FENCE_OPTIONS_INIT
 *  (extensible: see "Options structs" above). */
typedef struct nvf_fence_options {
    size_t size;           /**< sizeof(nvf_fence_options) as the caller compiled it. */
    uint8_t tag;           /**< Cluster tag of our keys. */
    uint8_t node;          /**< Node id; 0: reuse the one registered. */
    nvf_resv_type type;    /**< Type to acquire (default write exclusive). */
    uint8_t abort;         /**< 1: takeover with preempt-and-abort (default). */
    const char *state_dir; /**< Where the highest epoch is persisted (copied);
                                NULL: epochs come from the device alone. */
} nvf_fence_options;

/** Defaults: tag 0, node 0, write exclusive, preempt-and-abort, no state dir. */
#define NVF_FENCE_OPTIONS_INIT {sizeof(nvf_fence_options), 0, 0, NVF_RESV_WRITE_EXCLUSIVE, 1, NULL}

/** What one fence operation did, verified by a Report afterwards. */
typedef struct nvf_outcome {
    uint8_t changed;          /**< 1 when a command changed state. */
    uint8_t completion_error; /**< 1: the command's completion was an error but the Report shows it done. */
    uint64_t key;             /**< This host's key afterwards (0: none). */
    uint64_t previous_holder; /**< The holder's key before (0: none). */
    uint64_t replaced;        /**< This host's earlier key, replaced (0: none). */
    uint64_t holder_after;    /**< The holder's key afterwards (0: none). */
    uint32_t generation_after;/**< GEN afterwards. */
    size_t removed_count;     /**< How many keys were removed (may exceed 16). */
    uint64_t removed[16];     /**< The first of them. */
} nvf_outcome;

/** A fence for this host on @p ns (which must outlive it). Fails with
 *  -NVF_ERRC_HOST_ID_UNKNOWN when the host id could not be read, and
 *  -NVF_ERRC_NO_RESERVATIONS when the namespace has no reservation support. */
NVFENCE_API int nvf_fence_new(nvf_ns *ns, const nvf_fence_options *opts, nvf_fence **out);
/** Frees @p f (NULL: nothing). Changes nothing on the device. */
NVFENCE_API void nvf_fence_free(nvf_fence *f);
/** Registers with a fresh key (@p epoch 0) or the key of @p epoch; with
 *  @p replace re-keys an existing registration. @p out may be NULL. */
NVFENCE_API int nvf_fence_join(nvf_fence *f, uint32_t epoch, int replace, nvf_outcome *out);
/** Acquires with the registered key (-NVF_ERRC_NOT_REGISTERED, -NVF_ERRC_HELD_BY_OTHER). */
NVFENCE_API int nvf_fence_acquire(nvf_fence *f, nvf_outcome *out);
/** Takes over: registers or re-keys with a fresh epoch and preempts (and
 *  aborts) @p victim, or the holder when @p victim is 0. Naming the victim
 *  makes it a compare-and-swap: -NVF_ERRC_LOST_RACE when another host
 *  holds afterwards. Already holder: success without change. */
NVFENCE_API int nvf_fence_takeover(nvf_fence *f, uint64_t victim, nvf_outcome *out);
/** What nvf_fence_evict_node() does when the victim node has no key
 *  registered. */
typedef enum nvf_evict_absent {
    /** Still a fence: when nobody holds, this host takes the reservation
     *  (nobody holding lets every host write); when a reservation is held,
     *  success without change. fence_nvfence's 'off'. */
    NVF_EVICT_ABSENT_FENCE = 0,
    /** A failed compare: nothing is sent; success without change when this
     *  host holds, -NVF_ERRC_LOST_RACE when another host holds,
     *  -NVF_ERRC_INVALID_KEY when nobody holds. `nvfence preempt
     *  --victim-node`. */
    NVF_EVICT_ABSENT_COMPARE = 1
} nvf_evict_absent;

/** Evicts node @p victim_node (1-255) of this fence's tag: preempts (and
 *  aborts) every key of it, whatever its epoch, with this host's registered
 *  key, and verifies with a Report (a key registered again meanwhile gets
 *  another round, bounded). When the victim held the reservation, or nobody
 *  held, this host re-keys with a fresh epoch and takes it; a third host's
 *  reservation and the other registrants are kept. The one eviction routine
 *  of fence_nvfence's 'off' and `nvfence preempt --victim-node`
 *  (Fence::evict_node). -NVF_ERRC_NOT_REGISTERED when this host is not
 *  registered, -NVF_ERRC_OWN_KEY for its own node, nothing sent either way;
 *  @p absent: an nvf_evict_absent. @p out may be NULL. */
NVFENCE_API int nvf_fence_evict_node(nvf_fence *f, uint8_t victim_node, int absent, nvf_outcome *out);
/** Releases the reservation if this host holds it. */
NVFENCE_API int nvf_fence_release(nvf_fence *f, nvf_outcome *out);
/** Unregisters this host (releasing first if it holds). */
NVFENCE_API int nvf_fence_leave(nvf_fence *f, nvf_outcome *out);
/** Reads the reservation (Report); as nvf_ns_report(). */
NVFENCE_API int nvf_fence_verify(nvf_fence *f, nvf_resv_status *out);

/** Change Persist Through Power Loss state (CPTPL) carried by a Register. */
typedef enum nvf_cptpl {
    NVF_CPTPL_NO_CHANGE = 0, /**< Leave PTPL as it is (the default). */
    NVF_CPTPL_CLEAR = 2,     /**< Reservations are released and registrants cleared on power loss. */
    NVF_CPTPL_SET = 3        /**< Reservations and registrants persist through power loss. */
} nvf_cptpl;

/** CPTPL of every Register @p f sends from now on (join, takeover's
 *  re-key). -NVF_ERRC_INVALID_ARGUMENT for NULL or another value. Whether
 *  the device persists shows in nvf_resv_status.ptpl (PTPLS) and
 *  nvf_ns_info.ptpl (RESCAP); the Linux NVMe target ignores CPTPL. */
NVFENCE_API int nvf_fence_set_cptpl(nvf_fence *f, nvf_cptpl cptpl);

/* ------------------------------------------------------------ writer */

/** io_uring I/O whose every completion is ok, fenced or an error (opaque). */
typedef struct nvf_writer nvf_writer;

/** I/O path of a writer. */
typedef enum nvf_writer_mode {
    NVF_WRITER_AUTO = 0,        /**< Passthrough when /dev/ng exists, else block. */
    NVF_WRITER_BLOCK = 1,       /**< O_DIRECT block device, IORING_OP_WRITE. */
    NVF_WRITER_PASSTHROUGH = 2  /**< NVMe commands through IORING_OP_URING_CMD. */
} nvf_writer_mode;

/** Options of nvf_writer_open(); start from NVF_WRITER_OPTIONS_INIT
 *  (extensible: see "Options structs" above). */
typedef struct nvf_writer_options {
    size_t size;           /**< sizeof(nvf_writer_options) as the caller compiled it. */
    nvf_writer_mode mode;  /**< I/O path. */
    uint32_t queue_depth;  /**< Max I/Os in flight, 1..1024 (default 32). */
    uint32_t timeout_ms;   /**< Bound on waiting for completions (default 30000). */
    uint64_t epoch;        /**< Epoch of the grant this writer writes under. */
} nvf_writer_options;

/** Defaults: automatic mode, depth 32, 30 s, epoch 0. */
#define NVF_WRITER_OPTIONS_INIT {sizeof(nvf_writer_options), NVF_WRITER_AUTO, 32, 30000, 0}

/** The one outcome of a completion. */
typedef enum nvf_io_status {
    NVF_IO_OK = 0,      /**< The device accepted it. */
    NVF_IO_FENCED = 1,  /**< The device refused this host (or the writer is latched). */
    NVF_IO_ERROR = 2    /**< Any other failure; see nvf_completion.error. */
} nvf_io_status;

/** The kind of an I/O. */
typedef enum nvf_io_kind { NVF_IO_WRITE = 0, NVF_IO_READ = 1, NVF_IO_FLUSH = 2 } nvf_io_kind;

/** One completed I/O. */
typedef struct nvf_completion {
    uint64_t user_data;   /**< As given when queued. */
    nvf_io_kind kind;     /**< What it was. */
    nvf_io_status status; /**< Exactly one outcome. */
    int error;            /**< 0 for ok, else an nvf error code. */
    uint32_t bytes;       /**< Bytes transferred when ok. */
} nvf_completion;

/** Opens a writer on @p path (namespace block device or /dev/ng node). */
NVFENCE_API int nvf_writer_open(const char *path, const nvf_writer_options *opts, nvf_writer **out);
/** Waits (bounded) for I/Os in flight, then frees @p w (NULL: nothing).
 *  Aborts the process if I/Os are still in flight when the bound runs out
 *  (the kernel could still write into freed buffers). */
NVFENCE_API void nvf_writer_close(nvf_writer *w);
/** Logical block size in bytes: buffers, offsets and lengths align to it. */
NVFENCE_API uint32_t nvf_writer_block_bytes(const nvf_writer *w);
/** Capacity in blocks. */
NVFENCE_API uint64_t nvf_writer_size_blocks(const nvf_writer *w);
/** Largest single I/O in bytes. */
NVFENCE_API uint32_t nvf_writer_max_io_bytes(const nvf_writer *w);
/** The epoch given at open. */
NVFENCE_API uint64_t nvf_writer_epoch(const nvf_writer *w);
/** 1 once a completion was fenced (the writer is latched). */
NVFENCE_API int nvf_writer_fenced(const nvf_writer *w);
/** I/Os queued or submitted and not yet reaped. */
NVFENCE_API uint32_t nvf_writer_in_flight(const nvf_writer *w);
/** The mode in use (never NVF_WRITER_AUTO). */
NVFENCE_API nvf_writer_mode nvf_writer_get_mode(const nvf_writer *w);
/** Queues a write of @p len bytes of @p buf at block @p lba; @p buf must
 *  stay valid until reaped. Errors (nothing queued): -NVF_ERRC_FENCED
 *  (latched), -NVF_ERRC_INVALID_ARGUMENT, -NVF_ERRC_MISALIGNED,
 *  -NVF_ERRC_OUT_OF_BOUNDS, -NVF_ERRC_QUEUE_FULL. */
NVFENCE_API int nvf_writer_queue_write(nvf_writer *w, uint64_t lba, const void *buf, size_t len, uint64_t user_data);
/** Queues a read into @p buf; same checks. */
NVFENCE_API int nvf_writer_queue_read(nvf_writer *w, uint64_t lba, void *buf, size_t len, uint64_t user_data);
/** Queues a flush of the device's volatile write cache. */
NVFENCE_API int nvf_writer_queue_flush(nvf_writer *w, uint64_t user_data);
/** Submits everything queued; returns how many the kernel took (>= 0). */
NVFENCE_API int nvf_writer_submit(nvf_writer *w);
/** Reaps up to @p n (at most 64 per call) completions into @p out, waiting
 *  (bounded by the writer's timeout) for at least @p min_complete; returns
 *  how many (>= 0), or -NVF_ERRC_TIMEOUT when none arrived.
 *  -NVF_ERRC_INVALID_ARGUMENT when @p min_complete exceeds min(n, 64). */
NVFENCE_API int nvf_writer_reap(nvf_writer *w, nvf_completion *out, size_t n, uint32_t min_complete);

/** 1 once nvf_writer_fenced() and every I/O handed to the kernel before
 *  the latch has completed and been reaped: from then on no write of this
 *  writer can land on the media; 0 before (a write admitted before the
 *  preempt may still complete ok) and while not fenced. Reap until it is 1
 *  before acting on "nothing more of mine will land" (FencedWriter::settled). */
NVFENCE_API int nvf_writer_settled(const nvf_writer *w);
/** A descriptor for an event loop (epoll, poll: POLLIN) that becomes
 *  readable when completions are ready to reap, a fenced completion
 *  included (FencedWriter::event_fd). An eventfd registered with the ring,
 *  made by the first call and owned by @p w: later calls return the same
 *  descriptor; never close it, nvf_writer_close() does. A successful
 *  nvf_writer_reap() or nvf_writer_submit_and_reap() clears it before it
 *  returns and leaves it readable when it filled its array or completions
 *  are left. It may be readable with
 *  nothing to reap (spurious): on readiness, call nvf_writer_reap(w, out,
 *  n, 0) until it returns fewer than n. Returns the descriptor (>= 0), or
 *  -NVF_ERRC_INVALID_ARGUMENT (@p w NULL), or an errno code of eventfd(2)
 *  or io_uring_register(2) (nvf_err_errno()). */
NVFENCE_API int nvf_writer_event_fd(nvf_writer *w);
/** One memory region of nvf_writer_register_buffers(). */
typedef struct nvf_region {
    void *base;  /**< Start of the region. */
    size_t len;  /**< Bytes, 1 .. 1 GiB. */
} nvf_region;
/** Registers @p n regions as the ring's fixed buffers, replacing any
 *  earlier registration; @p n 0 only unregisters. A read or write whose
 *  buffer lies wholly inside one region is then sent as a fixed-buffer I/O
 *  (the kernel does not pin its pages per I/O). Requires
 *  nvf_writer_in_flight() 0, at most 1024 regions
 *  (-NVF_ERRC_INVALID_ARGUMENT, nothing changed); a kernel refusal is its
 *  errno (nvf_err_errno()), with no region registered. The regions must
 *  stay allocated until unregistered or the writer is closed. */
NVFENCE_API int nvf_writer_register_buffers(nvf_writer *w, const nvf_region *regions, size_t n);
/** How many regions are registered (0: none). */
NVFENCE_API uint32_t nvf_writer_fixed_buffers(const nvf_writer *w);
/** nvf_writer_submit() then nvf_writer_reap(), in one system call where
 *  possible; returns how many completions (>= 0) or an error code. A
 *  submission error is returned only when no completion was collected;
 *  otherwise the unsent I/Os stay queued for the next call. Same limits as
 *  nvf_writer_reap(). */
NVFENCE_API int nvf_writer_submit_and_reap(nvf_writer *w, nvf_completion *out, size_t n, uint32_t min_complete);
/** The outcome of a raw io_uring completion result @p res of an I/O of
 *  @p kind that should have moved @p expected_bytes, as a writer in
 *  @p mode reports it, into @p out (user_data 0): block mode: -EBADE is
 *  fenced, another negative value an error with that errno, a count other
 *  than @p expected_bytes an error (EIO); passthrough: 0 ok, a positive
 *  NVMe status fenced when it is Reservation Conflict (0x83), an error
 *  otherwise, -EBADE fenced. Returns NVF_OK, or -NVF_ERRC_INVALID_ARGUMENT
 *  for a NULL @p out, NVF_WRITER_AUTO or an unknown @p kind. */
NVFENCE_API int nvf_classify_completion(nvf_writer_mode mode, nvf_io_kind kind, int32_t res, uint32_t expected_bytes,
                                        nvf_completion *out);

/* ------------------------------------------------------------ agent */
/* A request to the host agent nvfenced over its control socket, as
 * `nvfence status|takeover|handoff|rejoin` sends it: an engine can read its
 * agent's state (HOLDER and the key whose epoch its writer uses) or ask it
 * to take over or hand off. */

/** What to ask the agent (the control protocol's ops). */
typedef enum nvf_agent_op {
    NVF_AGENT_STATUS = 1,   /**< The agent's state; changes nothing; any user who can reach the socket. */
    NVF_AGENT_TAKEOVER = 2, /**< Take the reservation (verified preempt-and-abort); root. */
    NVF_AGENT_HANDOFF = 3,  /**< Stop the writer units, release, stay registered; root. */
    NVF_AGENT_REJOIN = 4    /**< Leave FENCED: register again as a standby with a new epoch; root. */
} nvf_agent_op;

/** The agent's state. */
typedef enum nvf_agent_state {
    NVF_AGENT_STARTING = 0, /**< Not yet registered or resumed. */
    NVF_AGENT_STANDBY = 1,  /**< Registered, not holding. */
    NVF_AGENT_HOLDER = 2,   /**< Registered and holding the reservation. */
    NVF_AGENT_FENCED = 3,   /**< Preempted or lost: writers stopped; waits for rejoin. */
    NVF_AGENT_STOPPING = 4, /**< Clean stop in progress. */
    NVF_AGENT_WAITING = 5,  /**< Check-only watcher: this node's key not seen yet. */
    NVF_AGENT_WATCHING = 6  /**< Check-only watcher: this node's key is registered. */
} nvf_agent_state;

/** The agent's answer; start from NVF_AGENT_REPLY_INIT (size, as for the
 *  options structs: the library fills the fields that fit in size). */
typedef struct nvf_agent_reply {
    size_t size;              /**< sizeof(nvf_agent_reply) as the caller compiled it. */
    int exit_code;            /**< The agent's verdict as nvfence's exit codes: 0 done, 3 conflict, ... */
    int state;                /**< nvf_agent_state after the request. */
    uint8_t changed;          /**< The request changed the device. */
    uint8_t check_only;       /**< The agent is a check-only watcher (role = watch). */
    uint8_t holder_self;      /**< The holder last reported is this host. */
    uint8_t node;             /**< This host's node id. */
    uint64_t key;             /**< This host's key (0: none). */
    uint64_t holder;          /**< The holder's key last reported (0: none). */
    uint64_t previous_holder; /**< Takeover: the holder before (0: none). */
    uint32_t generation;      /**< Generation last reported. */
    uint32_t pid;             /**< The agent's process id. */
    uint64_t last_check_age_ms; /**< Since the agent's last good check (UINT64_MAX: never). */
    char volume[128];         /**< The volume's name (NUL-terminated, cut to fit). */
    char message[512];        /**< What happened, for people (NUL-terminated, cut to fit). */
} nvf_agent_reply;

#define NVF_AGENT_REPLY_INIT {sizeof(nvf_agent_reply), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, {0}, {0}}

/** Sends @p op to the agent of @p target (a volume name, whose socket is
 *  /run/nvfence/<volume>.sock, or an absolute socket path) and waits for its
 *  answer, everything bounded by @p timeout_ms (1..600000). @p victim:
 *  NVF_AGENT_TAKEOVER's key to preempt (0: the holder), 0 otherwise.
 *  Returns 0 when the agent answered: its verdict is then
 *  out->exit_code (0: done; otherwise out->message says why). Else the
 *  transport's failure: -(NVF_ERR_ERRNO_BASE + ENOENT) no agent,
 *  ECONNREFUSED a stale socket, EACCES the socket's permissions;
 *  -NVF_ERRC_TIMEOUT; -NVF_ERRC_PROTOCOL (a reply of another version);
 *  -NVF_ERRC_INVALID_ARGUMENT (NULL, bad op, name or size). */
NVFENCE_API int nvf_agent_request(const char *target, int op, uint64_t victim, uint32_t timeout_ms,
                                  nvf_agent_reply *out);

#ifdef __cplusplus
}
#endif

#endif /* NVFENCE_NVFENCE_H */
