// SPDX-License-Identifier: MIT
// The testing kit's C face (nvfence/testing.h): a SimCluster behind an
// opaque handle, and the C API's own fence and writer handles
// (src/capi/handles.hpp) over its hosts, freed by libnvfence.
#include "nvfence/testing.h"

#include <memory>
#include <new>
#include <string>

#include "capi/codes.hpp"
#include "capi/handles.hpp"
#include "nvfence/testing.hpp"

using namespace nvfence;

struct nvf_sim_cluster {
    testkit::SimCluster c;
    explicit nvf_sim_cluster(const testkit::SimOptions& o) : c(o) {}
};

namespace {

using capi::guarded;

// The volume name of a simulated cluster's epoch files (a state directory).
constexpr const char* kSimVolume = "nvfence-sim";

}  // namespace

extern "C" {

int nvf_sim_cluster_new(unsigned hosts, nvf_sim_cluster** out) {
    if (!out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nullptr;
    if (hosts == 0 || hosts > 64) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        testkit::SimOptions o;
        o.hosts = hosts;
        *out = new nvf_sim_cluster(o);
        return NVF_OK;
    });
}

void nvf_sim_cluster_free(nvf_sim_cluster* c) { delete c; }

unsigned nvf_sim_cluster_size(const nvf_sim_cluster* c) {
    return c ? static_cast<unsigned>(c->c.size()) : 0;
}

uint64_t nvf_sim_cluster_now_us(const nvf_sim_cluster* c) { return c ? c->c.now_us() : 0; }

int nvf_sim_cluster_advance(nvf_sim_cluster* c, uint64_t us) {
    if (!c) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        c->c.advance(us);
        return NVF_OK;
    });
}

uint64_t nvf_sim_cluster_writes_landed(const nvf_sim_cluster* c) { return c ? c->c.writes_landed() : 0; }

uint64_t nvf_sim_cluster_writes_refused(const nvf_sim_cluster* c) { return c ? c->c.writes_refused() : 0; }

int nvf_sim_host_fence(nvf_sim_cluster* c, unsigned host, const nvf_fence_options* opts, nvf_fence** out) {
    if (!c || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nullptr;
    if (host >= c->c.size()) return -NVF_ERRC_INVALID_ARGUMENT;
    FenceOptions fo;
    const char* state_dir = nullptr;
    if (int rc = capi::fence_options(opts, fo, state_dir); rc != NVF_OK) return rc;
    return guarded([&] {
        testkit::SimHost& h = c->c.host(host);
        *out = new nvf_fence(nullptr, h.passthru(), h.nsid(), h.id(), fo, state_dir, kSimVolume);
        return NVF_OK;
    });
}

int nvf_sim_host_writer_open(nvf_sim_cluster* c, unsigned host, const nvf_writer_options* opts, nvf_writer** out) {
    if (!c || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nullptr;
    if (host >= c->c.size()) return -NVF_ERRC_INVALID_ARGUMENT;
    WriterOptions wo;
    if (int rc = capi::writer_options(opts, wo); rc != NVF_OK) return rc;
    return guarded([&] {
        auto w = c->c.host(host).open_writer(wo);
        if (!w) return capi::to_code(w.error());
        *out = new nvf_writer{std::move(*w)};
        return NVF_OK;
    });
}

}  // extern "C"
