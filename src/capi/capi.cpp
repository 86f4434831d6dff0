// SPDX-License-Identifier: MIT
// The C API (nvfence/nvfence.h): thin noexcept wrappers over the public C++
// headers. Every entry point catches everything, so no exception crosses
// into C; std::error_code maps to one int in three ranges.
#include "nvfence/nvfence.h"

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "capi/codes.hpp"
#include "capi/handles.hpp"
#include "internal/invariant.hpp"
#include "nvfence/control.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/reservation.hpp"
#include "nvfence/writer.hpp"

using namespace nvfence;

static_assert(static_cast<int>(Errc::not_found) == NVF_ERRC_NOT_FOUND);
static_assert(static_cast<int>(Errc::fenced) == NVF_ERRC_FENCED);
static_assert(static_cast<int>(Errc::protocol) == NVF_ERRC_PROTOCOL);
static_assert(static_cast<int>(Errc::own_key) == NVF_ERRC_OWN_KEY);
static_assert(static_cast<int>(Errc::view_lost) == NVF_ERRC_VIEW_LOST);
static_assert(static_cast<int>(ResvType::exclusive_access_all_regs) == NVF_RESV_EXCLUSIVE_ACCESS_ALL_REGS);
static_assert(static_cast<int>(IoStatus::io_error) == NVF_IO_ERROR);
static_assert(static_cast<int>(ControlOp::status) == NVF_AGENT_STATUS);
static_assert(static_cast<int>(ControlOp::takeover) == NVF_AGENT_TAKEOVER);
static_assert(static_cast<int>(ControlOp::handoff) == NVF_AGENT_HANDOFF);
static_assert(static_cast<int>(ControlOp::rejoin) == NVF_AGENT_REJOIN);
static_assert(static_cast<int>(AgentState::watching) == NVF_AGENT_WATCHING);
static_assert(static_cast<int>(IoKind::flush) == NVF_IO_FLUSH);
static_assert(static_cast<int>(WriterMode::passthrough) == NVF_WRITER_PASSTHROUGH);

namespace {

using capi::from_code;
using capi::to_code;

using capi::guarded;

void copy_str(char* dst, size_t cap, const std::string& s) noexcept {
    NVF_INVARIANT(dst != nullptr && cap > 0);  // the entry points refuse NULL and 0 first
    const size_t n = std::min(cap - 1, s.size());
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

nvf_key_fields to_c(const KeyFields& k) noexcept { return {k.tag, k.node, k.epoch}; }

void fill_status(const ReservationStatus& st, const std::optional<HostId>& self, nvf_resv_status* out) {
    out->generation = st.generation;
    out->type = static_cast<nvf_resv_type>(st.type);
    out->ptpl = st.ptpl;
    const Registrant* h = st.holder();
    out->has_holder = h != nullptr;
    out->holder_key = h ? h->key : 0;
    out->count = st.registrants.size();
    out->registrants = nullptr;
    if (st.registrants.empty()) return;
    auto* regs = static_cast<nvf_registrant*>(std::calloc(st.registrants.size(), sizeof(nvf_registrant)));
    if (!regs) throw std::bad_alloc();
    for (size_t i = 0; i < st.registrants.size(); ++i) {
        const Registrant& r = st.registrants[i];
        nvf_registrant& c = regs[i];
        c.key = r.key;
        std::memcpy(c.host_id, r.host_id.data(), sizeof c.host_id);
        c.cntlid = r.cntlid;
        c.holder = r.holder;
        c.is_self = self && *self == r.host_id;
        if (auto k = decode_key(r.key)) {
            c.ours = 1;
            c.fields = to_c(*k);
        }
    }
    out->registrants = regs;
}

void fill_outcome(const Outcome& o, nvf_outcome* out) noexcept {
    if (!out) return;
    *out = nvf_outcome{};
    out->changed = o.changed;
    out->completion_error = o.completion_error.has_value();
    out->key = o.key;
    out->previous_holder = o.previous_holder.value_or(0);
    out->replaced = o.replaced.value_or(0);
    const Registrant* h = o.after.holder();
    out->holder_after = h ? h->key : 0;
    out->generation_after = o.after.generation;
    out->removed_count = o.removed.size();
    const size_t n = std::min(o.removed.size(), sizeof out->removed / sizeof out->removed[0]);
    std::copy_n(o.removed.begin(), n, out->removed);
}

int fence_op(nvf_fence* f, nvf_outcome* out, Result<Outcome> (*op)(Fence&, void*), void* arg) noexcept {
    if (!f) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        auto r = op(f->fence, arg);
        if (!r) return to_code(r.error());
        fill_outcome(*r, out);
        return NVF_OK;
    });
}

// The size of nvf_agent_reply's first version (see capi::kFenceOptionsV1).
constexpr size_t kAgentReplyV1 = offsetof(nvf_agent_reply, message) + sizeof(nvf_agent_reply::message);

void fill_agent_reply(const ControlReply& r, nvf_agent_reply* out) noexcept {
    // nvf_agent_request refused a reply older than version 1: the fields
    // written below all lie within the caller's struct.
    NVF_INVARIANT(out != nullptr && out->size >= kAgentReplyV1);
    nvf_agent_reply a = NVF_AGENT_REPLY_INIT;
    a.exit_code = r.exit_code;
    a.state = static_cast<int>(r.state);
    a.changed = r.changed ? 1 : 0;
    a.check_only = r.check_only ? 1 : 0;
    a.holder_self = r.holder_self ? 1 : 0;
    a.node = r.node;
    a.key = r.key;
    a.holder = r.holder;
    a.previous_holder = r.previous_holder;
    a.generation = r.generation;
    a.pid = r.pid;
    a.last_check_age_ms = r.last_check_age_ms;
    copy_str(a.volume, sizeof a.volume, r.volume);
    copy_str(a.message, sizeof a.message, r.message);
    const size_t n = out->size;
    std::memcpy(out, &a, std::min(n, sizeof a));
    out->size = n;
}

// A volume name becomes a file name under /run/nvfence: no '/', no "." or "..".
bool volume_name_ok(const std::string& v) noexcept {
    return !v.empty() && v != "." && v != ".." && v.find('/') == std::string::npos && v.size() <= 100;
}

}  // namespace

// One nvf_completion from a Completion (nvf_writer_reap and the calls after it).
namespace {
void completion_to_c(const Completion& c, nvf_completion& out) {
    out.user_data = c.user_data;
    out.kind = static_cast<nvf_io_kind>(c.kind);
    out.status = static_cast<nvf_io_status>(c.status);
    out.error = to_code(c.error);
    out.bytes = c.bytes;
}
}  // namespace

extern "C" {

const char* nvf_version(void) { return NVF_VERSION_STRING; }

int nvf_version_number(void) { return NVF_VERSION_MAJOR * 10000 + NVF_VERSION_MINOR * 100 + NVF_VERSION_PATCH; }

const char* nvf_strerror(int code) {
    static thread_local char buf[192];
    if (code == 0) return "success";
    if (code > 0) return "not an error (a count)";
    switch (code == INT_MIN ? 0 : -code) {  // INT_MIN has no negation: unknown, below
    case NVF_ERRC_NOMEM: return "out of memory";
    case NVF_ERRC_INTERNAL: return "unexpected failure inside libnvfence";
    case NVF_ERRC_TRUNCATED: return "output buffer too small";
    default: break;
    }
    try {
        const std::error_code ec = from_code(code);
        if (!ec) {
            std::snprintf(buf, sizeof buf, "unknown nvfence error code %d", code);
            return buf;
        }
        copy_str(buf, sizeof buf, ec.message());
    } catch (...) {
        std::snprintf(buf, sizeof buf, "nvfence error code %d", code);
    }
    return buf;
}

int nvf_is_fenced(int code) { return is_fenced(from_code(code)) ? 1 : 0; }

int nvf_err_nvme_status(int code) {
    const std::error_code ec = from_code(code);
    return ec && ec.category() == nvme_category() ? ec.value() : -1;
}

int nvf_err_errno(int code) {
    const std::error_code ec = from_code(code);
    return ec && ec.category() == std::system_category() ? ec.value() : 0;
}

int nvf_exit_code(int code) {
    if (code >= 0) return 0;
    const std::error_code ec = from_code(code);
    if (!ec) return static_cast<int>(ExitCode::failure);
    return static_cast<int>(exit_code_for(ec));
}

int nvf_key_make(const nvf_key_fields* f, uint64_t* key) {
    if (!f || !key) return -NVF_ERRC_INVALID_ARGUMENT;
    auto r = make_key(KeyFields{f->tag, f->node, f->epoch});
    if (!r) return to_code(r.error());
    *key = *r;
    return NVF_OK;
}

int nvf_key_decode(uint64_t key, nvf_key_fields* f) {
    if (!f) return -NVF_ERRC_INVALID_ARGUMENT;
    auto k = decode_key(key);
    if (!k) return -NVF_ERRC_INVALID_KEY;
    *f = to_c(*k);
    return NVF_OK;
}

int nvf_key_format(uint64_t key, char* buf, size_t len) {
    if (!buf || len == 0) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        const std::string s = format_key(key);
        copy_str(buf, len, s);
        return s.size() < len ? NVF_OK : -NVF_ERRC_TRUNCATED;
    });
}

int nvf_key_parse(const char* text, uint64_t* key) {
    if (!text || !key) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        auto r = parse_key(text);
        if (!r) return to_code(r.error());
        *key = *r;
        return NVF_OK;
    });
}

int nvf_ns_open(const char* path, uint32_t timeout_ms, nvf_ns** out) {
    if (!path || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nullptr;
    return guarded([&] {
        OpenOptions o;
        o.timeout_ms = timeout_ms;
        auto r = Namespace::open(path, o);
        if (!r) return to_code(r.error());
        *out = new nvf_ns{std::move(*r)};
        return NVF_OK;
    });
}

void nvf_ns_close(nvf_ns* ns) { delete ns; }

int nvf_ns_get_info(const nvf_ns* ns, nvf_ns_info* out) {
    if (!ns || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        const NamespaceInfo& i = ns->ns->info();
        *out = nvf_ns_info{};
        copy_str(out->block_path, sizeof out->block_path, i.paths.block);
        copy_str(out->generic_path, sizeof out->generic_path, i.paths.generic);
        copy_str(out->transport, sizeof out->transport, i.paths.transport);
        copy_str(out->model, sizeof out->model, i.ctrl.model);
        copy_str(out->serial, sizeof out->serial, i.ctrl.serial);
        copy_str(out->firmware, sizeof out->firmware, i.ctrl.firmware);
        copy_str(out->subnqn, sizeof out->subnqn, i.ctrl.subnqn);
        copy_str(out->ebs_volume, sizeof out->ebs_volume, i.ebs_volume.value_or(""));
        copy_str(out->volume, sizeof out->volume, i.volume);
        out->nsid = i.nsid;
        out->lba_bytes = i.ns.lba_bytes;
        out->size_blocks = i.ns.size_blocks;
        out->cntlid = i.ctrl.cntlid;
        out->reservations = i.reservations();
        out->looks_shared = i.looks_shared();
        uint8_t types = 0;
        for (int t = 1; t <= 6; ++t)
            if (i.ns.rescap.supports(static_cast<ResvType>(t))) types = static_cast<uint8_t>(types | (1u << t));
        out->resv_types = types;
        out->ptpl = i.ns.rescap.ptpl;
        out->iekey = i.ns.rescap.iekey;
        if (i.host_id) {
            out->has_host_id = 1;
            std::memcpy(out->host_id, i.host_id->data(), sizeof out->host_id);
        }
        return NVF_OK;
    });
}

int nvf_ns_require_reservations(const nvf_ns* ns, char* why, size_t len) {
    if (!ns) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        std::string text;
        Status s = ns->ns->require_reservations(&text);
        if (why && len > 0) copy_str(why, len, s ? std::string() : text);
        return s ? NVF_OK : to_code(s.error());
    });
}

int nvf_ns_report(nvf_ns* ns, nvf_resv_status* out) {
    if (!ns || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nvf_resv_status{};
    return guarded([&] {
        Reservations resv(ns->ns->passthru(), ns->ns->info().nsid);
        auto st = resv.report();
        if (!st) return to_code(st.error());
        fill_status(*st, ns->ns->info().host_id, out);
        return NVF_OK;
    });
}

void nvf_resv_status_free(nvf_resv_status* st) {
    if (!st) return;
    std::free(st->registrants);
    *st = nvf_resv_status{};
}

int nvf_fence_new(nvf_ns* ns, const nvf_fence_options* opts, nvf_fence** out) {
    if (!ns || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nullptr;
    FenceOptions fo;
    const char* state_dir = nullptr;
    if (int rc = capi::fence_options(opts, fo, state_dir); rc != NVF_OK) return rc;
    return guarded([&] {
        if (Status s = ns->ns->require_reservations(); !s) return to_code(s.error());
        if (!ns->ns->info().host_id) return -NVF_ERRC_HOST_ID_UNKNOWN;
        const NamespaceInfo& i = ns->ns->info();
        *out = new nvf_fence(ns, ns->ns->passthru(), i.nsid, *i.host_id, fo, state_dir, i.volume);
        return NVF_OK;
    });
}

void nvf_fence_free(nvf_fence* f) { delete f; }

int nvf_fence_join(nvf_fence* f, uint32_t epoch, int replace, nvf_outcome* out) {
    struct A { uint32_t epoch; bool replace; } a{epoch, replace != 0};
    return fence_op(f, out, [](Fence& fe, void* p) {
        auto* x = static_cast<A*>(p);
        return fe.join(x->epoch ? std::optional<uint32_t>(x->epoch) : std::nullopt, x->replace);
    }, &a);
}

int nvf_fence_acquire(nvf_fence* f, nvf_outcome* out) {
    return fence_op(f, out, [](Fence& fe, void*) { return fe.acquire(); }, nullptr);
}

int nvf_fence_takeover(nvf_fence* f, uint64_t victim, nvf_outcome* out) {
    return fence_op(f, out, [](Fence& fe, void* p) {
        const uint64_t v = *static_cast<uint64_t*>(p);
        return fe.takeover(v ? std::optional<uint64_t>(v) : std::nullopt);
    }, &victim);
}

int nvf_fence_evict_node(nvf_fence* f, uint8_t victim_node, int absent, nvf_outcome* out) {
    if (victim_node == 0) return -NVF_ERRC_INVALID_ARGUMENT;
    if (absent != NVF_EVICT_ABSENT_FENCE && absent != NVF_EVICT_ABSENT_COMPARE) return -NVF_ERRC_INVALID_ARGUMENT;
    struct A { uint8_t node; EvictAbsent absent; } a{victim_node, absent == NVF_EVICT_ABSENT_COMPARE
                                                                      ? EvictAbsent::compare : EvictAbsent::fence};
    return fence_op(f, out, [](Fence& fe, void* p) {
        auto* x = static_cast<A*>(p);
        return fe.evict_node(x->node, x->absent);
    }, &a);
}

int nvf_fence_release(nvf_fence* f, nvf_outcome* out) {
    return fence_op(f, out, [](Fence& fe, void*) { return fe.release(); }, nullptr);
}

int nvf_fence_leave(nvf_fence* f, nvf_outcome* out) {
    return fence_op(f, out, [](Fence& fe, void*) { return fe.leave(); }, nullptr);
}

int nvf_fence_set_cptpl(nvf_fence* f, nvf_cptpl cptpl) {
    if (!f) return -NVF_ERRC_INVALID_ARGUMENT;
    switch (cptpl) {
    case NVF_CPTPL_NO_CHANGE: f->fence.set_cptpl(Cptpl::no_change); return NVF_OK;
    case NVF_CPTPL_CLEAR: f->fence.set_cptpl(Cptpl::clear); return NVF_OK;
    case NVF_CPTPL_SET: f->fence.set_cptpl(Cptpl::set); return NVF_OK;
    }
    return -NVF_ERRC_INVALID_ARGUMENT;
}

int nvf_fence_verify(nvf_fence* f, nvf_resv_status* out) {
    if (!f || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nvf_resv_status{};
    return guarded([&] {
        auto st = f->fence.verify();
        if (!st) return to_code(st.error());
        fill_status(*st, f->self, out);
        return NVF_OK;
    });
}

int nvf_writer_open(const char* path, const nvf_writer_options* opts, nvf_writer** out) {
    if (!path || !out) return -NVF_ERRC_INVALID_ARGUMENT;
    *out = nullptr;
    WriterOptions wo;
    if (int rc = capi::writer_options(opts, wo); rc != NVF_OK) return rc;
    return guarded([&] {
        auto r = FencedWriter::open(path, wo);
        if (!r) return to_code(r.error());
        *out = new nvf_writer{std::move(*r)};
        return NVF_OK;
    });
}

void nvf_writer_close(nvf_writer* w) { delete w; }

uint32_t nvf_writer_block_bytes(const nvf_writer* w) { return w ? w->w->block_bytes() : 0; }
uint64_t nvf_writer_size_blocks(const nvf_writer* w) { return w ? w->w->size_blocks() : 0; }
uint32_t nvf_writer_max_io_bytes(const nvf_writer* w) { return w ? w->w->max_io_bytes() : 0; }
uint64_t nvf_writer_epoch(const nvf_writer* w) { return w ? w->w->epoch() : 0; }
int nvf_writer_fenced(const nvf_writer* w) { return w && w->w->fenced() ? 1 : 0; }
uint32_t nvf_writer_in_flight(const nvf_writer* w) { return w ? w->w->in_flight() : 0; }
nvf_writer_mode nvf_writer_get_mode(const nvf_writer* w) {
    return w ? static_cast<nvf_writer_mode>(w->w->mode()) : NVF_WRITER_AUTO;
}

int nvf_writer_queue_write(nvf_writer* w, uint64_t lba, const void* buf, size_t len, uint64_t user_data) {
    if (!w || (!buf && len)) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        return to_code(w->w->queue_write(lba, {static_cast<const uint8_t*>(buf), len}, user_data).error());
    });
}

int nvf_writer_queue_read(nvf_writer* w, uint64_t lba, void* buf, size_t len, uint64_t user_data) {
    if (!w || (!buf && len)) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        return to_code(w->w->queue_read(lba, {static_cast<uint8_t*>(buf), len}, user_data).error());
    });
}

int nvf_writer_queue_flush(nvf_writer* w, uint64_t user_data) {
    if (!w) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] { return to_code(w->w->queue_flush(user_data).error()); });
}

int nvf_writer_submit(nvf_writer* w) {
    if (!w) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        auto r = w->w->submit();
        if (!r) return to_code(r.error());
        return static_cast<int>(std::min<uint32_t>(*r, 0x7fffffff));
    });
}

int nvf_writer_reap(nvf_writer* w, nvf_completion* out, size_t n, uint32_t min_complete) {
    if (!w || (!out && n)) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        Completion tmp[64];
        const size_t take = std::min<size_t>(n, 64);
        if (min_complete > take) return -NVF_ERRC_INVALID_ARGUMENT;
        auto r = w->w->reap({tmp, take}, min_complete);
        if (!r) return to_code(r.error());
        // reap() fills at most the span it was given: the caller's array holds n >= take.
        NVF_INVARIANT(*r <= take);
        for (size_t i = 0; i < *r; ++i) completion_to_c(tmp[i], out[i]);
        return static_cast<int>(*r);
    });
}

int nvf_writer_settled(const nvf_writer* w) { return w && w->w->settled() ? 1 : 0; }
uint32_t nvf_writer_fixed_buffers(const nvf_writer* w) { return w ? w->w->fixed_buffers() : 0; }

int nvf_writer_event_fd(nvf_writer* w) {
    if (!w) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        auto r = w->w->event_fd();
        if (!r) return to_code(r.error());
        return *r;
    });
}

int nvf_writer_register_buffers(nvf_writer* w, const nvf_region* regions, size_t n) {
    if (!w || (!regions && n) || n > 1024) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        std::vector<std::span<uint8_t>> v;
        v.reserve(n);
        for (size_t i = 0; i < n; ++i) v.emplace_back(static_cast<uint8_t*>(regions[i].base), regions[i].len);
        return to_code(w->w->register_buffers(v).error());
    });
}

int nvf_writer_submit_and_reap(nvf_writer* w, nvf_completion* out, size_t n, uint32_t min_complete) {
    if (!w || (!out && n)) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        Completion tmp[64];
        const size_t take = std::min<size_t>(n, 64);
        if (min_complete > take) return -NVF_ERRC_INVALID_ARGUMENT;
        auto r = w->w->submit_and_reap({tmp, take}, min_complete);
        if (!r) return to_code(r.error());
        NVF_INVARIANT(*r <= take);
        for (size_t i = 0; i < *r; ++i) completion_to_c(tmp[i], out[i]);
        return static_cast<int>(*r);
    });
}

int nvf_classify_completion(nvf_writer_mode mode, nvf_io_kind kind, int32_t res, uint32_t expected_bytes,
                            nvf_completion* out) {
    if (!out || (mode != NVF_WRITER_BLOCK && mode != NVF_WRITER_PASSTHROUGH)) return -NVF_ERRC_INVALID_ARGUMENT;
    if (kind != NVF_IO_WRITE && kind != NVF_IO_READ && kind != NVF_IO_FLUSH) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        completion_to_c(classify_completion(static_cast<WriterMode>(mode), static_cast<IoKind>(kind), res,
                                            expected_bytes),
                        *out);
        return NVF_OK;
    });
}

// ---------------------------------------------------------------- agent

int nvf_agent_request(const char* target, int op, uint64_t victim, uint32_t timeout_ms, nvf_agent_reply* out) {
    if (!target || !out || out->size < kAgentReplyV1) return -NVF_ERRC_INVALID_ARGUMENT;
    if (op < 0 || op > 255 || !control_op_valid(static_cast<uint8_t>(op))) return -NVF_ERRC_INVALID_ARGUMENT;
    if (victim != 0 && op != NVF_AGENT_TAKEOVER) return -NVF_ERRC_INVALID_ARGUMENT;
    return guarded([&] {
        const std::string t(target);
        if (t.empty() || (t.front() != '/' && !volume_name_ok(t))) return -NVF_ERRC_INVALID_ARGUMENT;
        ControlRequest req;
        req.op = static_cast<ControlOp>(op);
        req.id = 1;
        req.victim = victim;
        auto r = control_request(t.front() == '/' ? t : control_socket_path(t), req, timeout_ms);
        if (!r) return to_code(r.error());
        fill_agent_reply(*r, out);
        return NVF_OK;
    });
}

}  // extern "C"
