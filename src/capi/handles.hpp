// SPDX-License-Identifier: MIT
#pragma once
// The C API's namespace and fence handles (nvf_ns, nvf_fence of
// nvfence/nvfence.h) and the reading of its options structs: internal to
// libnvfence and the testing kit's C face (nvfence/testing.h), which builds
// fences over a simulated host's Passthru. Both are compiled from this one
// definition in the same build; libnvfence's nvf_fence_free() frees either.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "capi/writer_handle.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/nvfence.h"
#include "nvfence/reservation.hpp"

struct nvf_ns {
    std::unique_ptr<nvfence::Namespace> ns;
};

struct nvf_fence {
    nvf_ns* ns;                  // the device's namespace; NULL for a simulated host
    nvfence::HostId self;        // this host's id (a Report's is_self)
    nvfence::Reservations resv;  // over ns's Passthru or the simulated host's
    std::optional<nvfence::EpochStore> store;
    nvfence::Fence fence;
    nvf_fence(nvf_ns* n, nvfence::Passthru& pt, uint32_t nsid, nvfence::HostId id, const nvfence::FenceOptions& fo,
              const char* state_dir, const std::string& volume)
        : ns(n),
          self(id),
          resv(pt, nsid),
          store(state_dir ? std::optional<nvfence::EpochStore>(std::in_place, state_dir, volume) : std::nullopt),
          fence(resv, id, fo, store ? &*store : nullptr) {}
};

namespace nvfence::capi {

// The size of each options struct's first version: the end of its last
// field then. Fields added later go after it; these numbers never change.
inline constexpr size_t kFenceOptionsV1 = offsetof(nvf_fence_options, state_dir) + sizeof(const char*);
inline constexpr size_t kWriterOptionsV1 = offsetof(nvf_writer_options, epoch) + sizeof(uint64_t);

// Reads a caller's options struct of the size it states (nvfence.h,
// "Options structs"): into @p out, which holds the defaults, go the fields
// that fit in opts->size; a caller's struct larger than this library's must
// be zero beyond it (fields this library does not know). NULL: the defaults.
template <class T>
int read_options(const T* opts, size_t first_size, T& out) noexcept {
    if (!opts) return NVF_OK;
    const size_t n = opts->size;
    if (n < first_size) return -NVF_ERRC_INVALID_ARGUMENT;
    const auto* bytes = reinterpret_cast<const unsigned char*>(opts);
    for (size_t i = sizeof(T); i < n; ++i)
        if (bytes[i] != 0) return -NVF_ERRC_INVALID_ARGUMENT;
    std::memcpy(&out, opts, std::min(n, sizeof(T)));
    out.size = sizeof(T);
    return NVF_OK;
}

// nvf_fence_new's options as FenceOptions (and the state directory, NULL
// for none): NVF_OK or -NVF_ERRC_INVALID_ARGUMENT.
inline int fence_options(const nvf_fence_options* opts, FenceOptions& fo, const char*& state_dir) noexcept {
    nvf_fence_options o = NVF_FENCE_OPTIONS_INIT;
    if (int rc = read_options(opts, kFenceOptionsV1, o); rc != NVF_OK) return rc;
    if (o.type < NVF_RESV_WRITE_EXCLUSIVE || o.type > NVF_RESV_EXCLUSIVE_ACCESS_ALL_REGS)
        return -NVF_ERRC_INVALID_ARGUMENT;
    fo.tag = o.tag;
    fo.node = o.node;
    fo.type = static_cast<ResvType>(o.type);
    fo.abort = o.abort != 0;
    state_dir = o.state_dir;
    return NVF_OK;
}

// nvf_writer_open's options as WriterOptions: NVF_OK or -NVF_ERRC_INVALID_ARGUMENT.
inline int writer_options(const nvf_writer_options* opts, WriterOptions& wo) noexcept {
    nvf_writer_options o = NVF_WRITER_OPTIONS_INIT;
    if (int rc = read_options(opts, kWriterOptionsV1, o); rc != NVF_OK) return rc;
    if (o.mode < NVF_WRITER_AUTO || o.mode > NVF_WRITER_PASSTHROUGH) return -NVF_ERRC_INVALID_ARGUMENT;
    wo.mode = static_cast<WriterMode>(o.mode);
    wo.queue_depth = o.queue_depth;
    wo.timeout_ms = o.timeout_ms;
    wo.epoch = o.epoch;
    return NVF_OK;
}

/// Runs f, turning any exception into an error code: nothing is thrown
/// across the C API (libnvfence's functions and the kit's C face).
template <class F>
int guarded(F&& f) noexcept {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return -NVF_ERRC_NOMEM;
    } catch (...) {
        return -NVF_ERRC_INTERNAL;
    }
}

}  // namespace nvfence::capi
