/* SPDX-License-Identifier: MIT */
#ifndef NVFENCE_TESTING_H
#define NVFENCE_TESTING_H
/**
 * @file testing.h
 * The testing kit's C face (C11; nvfence/testing.hpp is the kit): a
 * simulated cluster of hosts sharing one simulated namespace, whose fences
 * and writers are the C API's own handles (nvfence/nvfence.h). An engine's
 * failover test in C, or in a language that calls C (the Python binding in
 * bindings/python uses it through ctypes), drives them with the same
 * nvf_fence_* and nvf_writer_* calls as on a device, and frees them with
 * nvf_fence_free() and nvf_writer_close().
 *
 * In the kit's static archive libnvfence_testing.a (-lnvfence_testing
 * beside -lnvfence; the kit is C++: link with a C++ compiler), and in the
 * build tree's lib/libnvfence_testing_ffi.so, a module for dlopen() that
 * exports these functions alone (ctypes loads it).
 *
 * Conventions are nvfence.h's: 0 or a negative code (nvf_strerror()), no
 * C++ exception crosses. A cluster and everything made from it is used by
 * one thread; close its writers and free its fences before the cluster.
 * Simulated time: every I/O executes and completes at once (the kit's
 * default plan); a writer waiting for completions advances the clock.
 */

#include <stddef.h>
#include <stdint.h>

#include "nvfence/export.h"
#include "nvfence/nvfence.h"

#ifdef __cplusplus
extern "C" {
#endif

/** N simulated hosts sharing one simulated namespace (opaque). */
typedef struct nvf_sim_cluster nvf_sim_cluster;

/** A cluster of @p hosts (1..64) hosts, 4096-byte blocks, 65536 blocks,
 *  passthrough writers (SimCluster). -NVF_ERRC_INVALID_ARGUMENT for
 *  another number of hosts or a NULL @p out. */
NVFENCE_API int nvf_sim_cluster_new(unsigned hosts, nvf_sim_cluster **out);
/** Frees @p c (NULL: nothing). Its fences and writers must be gone. */
NVFENCE_API void nvf_sim_cluster_free(nvf_sim_cluster *c);
/** Number of hosts of @p c (0 for NULL). */
NVFENCE_API unsigned nvf_sim_cluster_size(const nvf_sim_cluster *c);
/** The simulated clock, microseconds since @p c was built (0 for NULL). */
NVFENCE_API uint64_t nvf_sim_cluster_now_us(const nvf_sim_cluster *c);
/** Moves the clock @p us forward, executing and completing every I/O that
 *  falls due (SimCluster::advance). */
NVFENCE_API int nvf_sim_cluster_advance(nvf_sim_cluster *c, uint64_t us);
/** Writes the device executed and accepted, over all hosts (0 for NULL). */
NVFENCE_API uint64_t nvf_sim_cluster_writes_landed(const nvf_sim_cluster *c);
/** Writes the device refused (Reservation Conflict), over all hosts. */
NVFENCE_API uint64_t nvf_sim_cluster_writes_refused(const nvf_sim_cluster *c);

/** A fence of host @p host (0-based) over its reservation commands
 *  (SimHost::fence), as nvf_fence_new() makes one on a device: the same
 *  options (node 0: reuse the one registered; the host's node is
 *  @p host + 1 in SimHost::takeover()), a state directory included. Free
 *  it with nvf_fence_free() before the cluster.
 *  -NVF_ERRC_INVALID_ARGUMENT for a host out of range or bad options. */
NVFENCE_API int nvf_sim_host_fence(nvf_sim_cluster *c, unsigned host, const nvf_fence_options *opts,
                                   nvf_fence **out);
/** A writer of host @p host over the kit's model of the ring
 *  (SimHost::open_writer): the library's own FencedWriter, so every
 *  nvf_writer_* call works on it; the mode is the cluster's (passthrough),
 *  the options' mode is ignored. Close it with nvf_writer_close() before
 *  the cluster. */
NVFENCE_API int nvf_sim_host_writer_open(nvf_sim_cluster *c, unsigned host, const nvf_writer_options *opts,
                                         nvf_writer **out);

#ifdef __cplusplus
}
#endif

#endif /* NVFENCE_TESTING_H */
