// SPDX-License-Identifier: MIT
// The testing kit (nvfence/testing.hpp): hosts over the reservation model,
// and the library's own FencedWriter (detail::RingWriter) over a model of
// the ring (ModelRing) whose I/Os the model executes as NVMe commands.
#include "nvfence/testing.hpp"

#include <liburing.h>
#include <linux/nvme_ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "writer/ring_writer.hpp"

namespace nvfence::testkit {

namespace {

[[noreturn]] void misuse(const char* what) {
    std::fprintf(stderr, "nvfence testing kit: %s; aborting\n", what);
    std::abort();
}

constexpr uint32_t kSimMaxIoBytes = 128 * 1024;

}  // namespace

class ModelRing;

/// One I/O on its way: first executed by the device, then completed.
struct Event {
    uint64_t at = 0;
    uint64_t order = 0;
    bool executed = false;  // false: the device has yet to execute it
    ModelRing* ring = nullptr;
    size_t host = 0;
    uint64_t user_data = 0;
    Command cmd;
    uint8_t* buf = nullptr;
    IoKind kind = IoKind::write;
    IoPlan plan;
    int32_t res = 0;  // once executed: what the host will see
};

struct SimCluster::Impl {
    SimOptions opts;
    FakeTarget target;
    std::vector<std::unique_ptr<SimHost>> hosts;
    uint64_t now = 0;
    uint64_t seq = 0;
    uint64_t order = 0;
    uint64_t landed = 0;
    uint64_t refused = 0;
    std::map<uint64_t, std::vector<uint8_t>> media;  // written blocks only
    // Volatile write cache: each block written since the last Flush, with
    // what the Flush before made durable (nullopt: never written).
    std::map<uint64_t, std::optional<std::vector<uint8_t>>> unflushed;
    bool powered = true;
    uint64_t power_countdown = 0;  // commands until the power fails; 0: no loss planned
    uint64_t power_seed = 0;
    std::vector<uint8_t> zeros;
    std::vector<Event> events;
    std::function<IoPlan(const SimIo&)>* plan = nullptr;

    void submit_io(ModelRing* ring, size_t host, const io_uring_sqe& sqe);
    void run_due();
    bool next_at(uint64_t& at) const;
    void advance_to(uint64_t t);
    void forget(ModelRing* ring);
    void fail_power();

private:
    void run(Event e);
    int32_t execute(Event& e);
    int32_t result_of(const Event& e, const Result<uint32_t>& r) const;
    void transfer(const Event& e);
    bool decode(const io_uring_sqe& sqe, Event& e) const;
};

/// The ring seam of detail::RingWriter (src/writer/ring_writer.hpp) over
/// the cluster: what the writer puts in an SQE is what the model executes.
class ModelRing {
public:
    ModelRing() = default;
    ModelRing(const ModelRing&) = delete;
    ModelRing& operator=(const ModelRing&) = delete;
    ~ModelRing() {
        if (c_) c_->forget(this);
    }
    void attach(SimCluster::Impl& c, size_t host) {
        c_ = &c;
        host_ = host;
    }

    int init(unsigned entries, unsigned flags) {
        entries_ = entries;
        stride_ = (flags & IORING_SETUP_SQE128) ? 2 : 1;
        sq_.assign(size_t{entries} * stride_, io_uring_sqe{});
        head_ = tail_ = 0;
        return 0;
    }
    bool ext_arg() const { return true; }
    io_uring_sqe* get_sqe() {
        if (tail_ - head_ >= entries_) return nullptr;
        io_uring_sqe* s = &sq_[(tail_ % entries_) * stride_];
        std::memset(s, 0, sizeof(io_uring_sqe) * stride_);
        ++tail_;
        return s;
    }
    int submit() {
        const unsigned n = tail_ - head_;
        for (; head_ != tail_; ++head_) c_->submit_io(this, host_, sq_[(head_ % entries_) * stride_]);
        c_->run_due();
        return static_cast<int>(n);
    }
    unsigned sq_ready() { return tail_ - head_; }
    unsigned peek_batch(io_uring_cqe** cqes, unsigned n) {
        const unsigned k = static_cast<unsigned>(std::min<size_t>(n, cq_.size()));
        for (unsigned i = 0; i < k; ++i) cqes[i] = &cq_[i];
        return k;
    }
    bool cq_parked() { return false; }
    int get_events() { return 0; }
    void cq_advance(unsigned n) {
        for (unsigned i = 0; i < n && !cq_.empty(); ++i) cq_.pop_front();
    }
    // Advances the simulated clock to each next event until @p n
    // completions are here, or by @p ts at most (then -ETIME).
    int wait(unsigned n, __kernel_timespec* ts) {
        const uint64_t budget = ts ? uint64_t(ts->tv_sec) * 1'000'000 + uint64_t(ts->tv_nsec) / 1000 : ~uint64_t{0} / 2;
        const uint64_t limit = c_->now + budget;
        for (size_t rounds = 0; cq_.size() < n; ++rounds) {
            uint64_t at = 0;
            if (!c_->next_at(at) || at > limit) {
                c_->advance_to(limit);
                return cq_.size() >= n ? 0 : -ETIME;
            }
            c_->advance_to(at);
        }
        return 0;
    }
    int submit_and_wait(unsigned n, __kernel_timespec* ts) {
        submit();
        return wait(n, ts);
    }
    int register_file(int) { return 0; }
    int register_ring_fd() { return 0; }
    int register_buffers(const iovec*, unsigned) { return 0; }
    int unregister_buffers() { return 0; }
    // As io_uring does: from now on every completion posted signals @p fd.
    int register_eventfd(int fd) {
        event_fd_ = fd;
        return 0;
    }

    // The simulated clock delivers a completion to this host.
    void post(uint64_t user_data, int32_t res) {
        io_uring_cqe c{};
        c.user_data = user_data;
        c.res = res;
        cq_.push_back(c);
        detail::signal_eventfd(event_fd_);
    }

private:
    SimCluster::Impl* c_ = nullptr;
    size_t host_ = 0;
    unsigned entries_ = 0, stride_ = 1, head_ = 0, tail_ = 0;
    std::vector<io_uring_sqe> sq_;
    std::deque<io_uring_cqe> cq_;
    int event_fd_ = -1;  // owned by the writer, which outlives its ring
};

// ---- the device side

bool SimCluster::Impl::decode(const io_uring_sqe& sqe, Event& e) const {
    const uint32_t bs = opts.block_bytes;
    switch (sqe.opcode) {
    case IORING_OP_URING_CMD: {
        nvme_uring_cmd k;
        std::memcpy(&k, reinterpret_cast<const unsigned char*>(&sqe) + offsetof(io_uring_sqe, cmd), sizeof k);
        e.cmd.opcode = k.opcode;
        e.cmd.nsid = k.nsid;
        e.cmd.cdw = {k.cdw10, k.cdw11, k.cdw12, k.cdw13, k.cdw14, k.cdw15};
        e.cmd.data_len = k.data_len;
        e.cmd.host_to_device = k.opcode == opcode::kWrite;
        e.buf = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(k.addr));
        e.kind = k.opcode == opcode::kWrite ? IoKind::write : k.opcode == opcode::kRead ? IoKind::read : IoKind::flush;
        return true;
    }
    case IORING_OP_WRITE:
    case IORING_OP_WRITE_FIXED:
    case IORING_OP_READ:
    case IORING_OP_READ_FIXED: {
        const bool w = sqe.opcode == IORING_OP_WRITE || sqe.opcode == IORING_OP_WRITE_FIXED;
        e.cmd = encode_rw(w, target.nsid, sqe.off / bs, sqe.len / bs, sqe.len);
        e.buf = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(sqe.addr));
        e.kind = w ? IoKind::write : IoKind::read;
        return true;
    }
    case IORING_OP_FSYNC:
        e.cmd = encode_flush(target.nsid);
        e.kind = IoKind::flush;
        return true;
    default: return false;
    }
}

void SimCluster::Impl::submit_io(ModelRing* ring, size_t host, const io_uring_sqe& sqe) {
    Event e;
    e.ring = ring;
    e.host = host;
    e.user_data = sqe.user_data;
    e.order = order++;
    e.at = now;
    // A NOP (an I/O cancelled after the latch) completes in the kernel.
    if (sqe.opcode == IORING_OP_NOP) {
        e.executed = true;
        events.push_back(e);
        return;
    }
    if (!decode(sqe, e)) {
        e.executed = true;
        e.res = -EINVAL;
        events.push_back(e);
        return;
    }
    SimIo io;
    io.host = host;
    io.kind = e.kind;
    io.seq = seq++;
    if (e.kind != IoKind::flush) {
        io.lba = uint64_t{e.cmd.cdw[0]} | (uint64_t{e.cmd.cdw[1]} << 32);
        io.blocks = (e.cmd.cdw[2] & 0xffffu) + 1;
    }
    if (plan && *plan) e.plan = (*plan)(io);
    e.at = now + e.plan.start_us;
    events.push_back(e);
}

bool SimCluster::Impl::next_at(uint64_t& at) const {
    if (events.empty()) return false;
    at = std::min_element(events.begin(), events.end(), [](const Event& a, const Event& b) {
             return a.at != b.at ? a.at < b.at : a.order < b.order;
         })->at;
    return true;
}

void SimCluster::Impl::run_due() {
    for (;;) {
        auto it = std::min_element(events.begin(), events.end(), [](const Event& a, const Event& b) {
            return a.at != b.at ? a.at < b.at : a.order < b.order;
        });
        if (it == events.end() || it->at > now) return;
        Event e = *it;
        events.erase(it);
        run(std::move(e));
    }
}

void SimCluster::Impl::advance_to(uint64_t t) {
    for (uint64_t at = 0; next_at(at) && at <= t;) {
        now = std::max(now, at);
        run_due();
    }
    now = std::max(now, t);
}

void SimCluster::Impl::run(Event e) {
    if (e.executed) {
        if (e.ring) e.ring->post(e.user_data, e.res);
        return;
    }
    e.res = execute(e);
    e.executed = true;
    e.order = order++;
    e.at = now + (e.plan.lose ? opts.lost_after_us : e.plan.complete_us);
    if (e.plan.lose) e.res = -EIO;
    events.push_back(e);
}

int32_t SimCluster::Impl::execute(Event& e) {
    if (!powered) return -EIO;
    auto r = target.submit(hosts[e.host]->id(), static_cast<uint16_t>(e.host + 1), e.cmd, {});
    if (r) transfer(e);
    if (r && e.kind == IoKind::flush) unflushed.clear();
    if (e.kind == IoKind::write) ++(r ? landed : refused);
    if (power_countdown > 0 && --power_countdown == 0) fail_power();
    return result_of(e, r);
}

// Each block the cache held keeps its newest content or falls back to its
// durable one, as the seed picks (splitmix64 of seed and block).
void SimCluster::Impl::fail_power() {
    for (auto& [lba, durable] : unflushed) {
        uint64_t z = power_seed + lba * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        if (z & 1) continue;  // kept
        if (durable) media[lba] = std::move(*durable);
        else media.erase(lba);
    }
    unflushed.clear();
    powered = false;
    power_countdown = 0;
}

// What the completion carries, as the kernel reports it in each mode.
int32_t SimCluster::Impl::result_of(const Event& e, const Result<uint32_t>& r) const {
    const bool passthru = opts.mode != WriterMode::block;
    if (r) return passthru || e.kind == IoKind::flush ? 0 : static_cast<int32_t>(e.cmd.data_len);
    if (r.error().category() != nvme_category()) return -EIO;
    const int status = r.error().value() & 0x7ff;
    if (passthru) return status;
    return status == static_cast<int>(NvmeStatus::reservation_conflict) ? -EBADE : -EIO;
}

void SimCluster::Impl::transfer(const Event& e) {
    if (e.kind == IoKind::flush || !e.buf) return;
    const uint32_t bs = opts.block_bytes;
    const uint64_t lba = uint64_t{e.cmd.cdw[0]} | (uint64_t{e.cmd.cdw[1]} << 32);
    const uint32_t n = e.cmd.data_len / bs;
    for (uint32_t i = 0; i < n; ++i) {
        uint8_t* p = e.buf + size_t{i} * bs;
        if (e.kind == IoKind::write) {
            if (!unflushed.contains(lba + i)) {
                auto it = media.find(lba + i);
                unflushed[lba + i] = it == media.end() ? std::nullopt : std::optional(it->second);
            }
            media[lba + i].assign(p, p + bs);
        } else {
            auto it = media.find(lba + i);
            if (it == media.end()) std::memset(p, 0, bs);
            else std::memcpy(p, it->second.data(), bs);
        }
    }
}

void SimCluster::Impl::forget(ModelRing* ring) {
    std::erase_if(events, [ring](const Event& e) { return e.ring == ring; });
}

// ---- SimHost

struct SimHost::Port final : Passthru {
    SimCluster::Impl* c = nullptr;
    size_t index = 0;
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override {
        if (cmd.data_len > 0 && !cmd.host_to_device && data.size() < cmd.data_len)
            misuse("a device-to-host buffer shorter than the command's data_len");
        c->run_due();
        if (!c->powered) return std::make_error_code(std::errc::io_error);
        return c->target.submit(c->hosts[index]->id(), static_cast<uint16_t>(index + 1), cmd, data);
    }
};

SimHost::SimHost(SimCluster& c, size_t index)
    : cluster_(c), index_(index), id_(make_host(static_cast<uint8_t>(index + 1))), port_(std::make_unique<Port>()) {
    port_->c = &c.impl();
    port_->index = index;
    resv_ = std::make_unique<Reservations>(*port_, c.impl().target.nsid);
    FenceOptions fo;
    fo.tag = 1;
    fo.node = static_cast<uint8_t>(index + 1);
    fence_ = std::make_unique<Fence>(*resv_, id_, fo, nullptr);
}

SimHost::~SimHost() = default;

Passthru& SimHost::passthru() { return *port_; }
Reservations& SimHost::reservations() { return *resv_; }
uint32_t SimHost::nsid() const { return cluster_.impl().target.nsid; }
Fence SimHost::fence(const FenceOptions& opts, const EpochStore* store) { return Fence(*resv_, id_, opts, store); }
Result<Outcome> SimHost::takeover() { return fence_->takeover(std::nullopt); }

Result<std::unique_ptr<FencedWriter>> SimHost::open_writer(const WriterOptions& opts) {
    if (opts.queue_depth < 1 || opts.queue_depth > 1024 || opts.timeout_ms == 0)
        return make_error_code(Errc::invalid_argument);
    const SimOptions& so = cluster_.options();
    detail::WriterTarget t;
    t.mode = so.mode == WriterMode::block ? WriterMode::block : WriterMode::passthrough;
    t.block_bytes = so.block_bytes;
    t.size_blocks = so.size_blocks;
    t.nsid = nsid();
    t.max_io_bytes = kSimMaxIoBytes;
    auto w = std::make_unique<detail::RingWriter<ModelRing>>(std::move(t), opts);
    w->ring().attach(cluster_.impl(), index_);
    if (auto st = w->init(); !st) return st.error();
    return std::unique_ptr<FencedWriter>(std::move(w));
}

// ---- SimCluster

SimCluster::SimCluster(const SimOptions& opts) : impl_(std::make_unique<Impl>()) {
    if (opts.hosts == 0 || opts.hosts > 64) misuse("SimOptions::hosts must be 1..64");
    if (opts.block_bytes != 512 && opts.block_bytes != 4096) misuse("SimOptions::block_bytes must be 512 or 4096");
    if (opts.size_blocks == 0) misuse("SimOptions::size_blocks must not be 0");
    impl_->opts = opts;
    impl_->target.deviations = NvmetDeviations::all();
    impl_->zeros.assign(opts.block_bytes, 0);
    impl_->plan = &plan;
    for (size_t i = 0; i < opts.hosts; ++i) impl_->hosts.emplace_back(new SimHost(*this, i));
}

SimCluster::~SimCluster() = default;

size_t SimCluster::size() const { return impl_->hosts.size(); }
SimHost& SimCluster::host(size_t i) {
    if (i >= impl_->hosts.size()) misuse("SimCluster::host: no such host");
    return *impl_->hosts[i];
}
FakeTarget& SimCluster::target() { return impl_->target; }
const SimOptions& SimCluster::options() const { return impl_->opts; }
uint64_t SimCluster::now_us() const { return impl_->now; }
void SimCluster::advance(uint64_t us) { impl_->advance_to(impl_->now + us); }

void SimCluster::run_all() {
    // Each event runs once, an unexecuted one twice (execute, complete).
    for (uint64_t at = 0; impl_->next_at(at);) impl_->advance_to(at);
}

void SimCluster::restart_target() {
    Impl& c = *impl_;
    for (Event& e : c.events) {
        if (e.executed) continue;
        e.executed = true;
        e.res = -EIO;
        e.at = c.now;
    }
    FakeTarget& t = c.target;
    if (!t.ptpl) {
        t.regs.clear();
        t.type = ResvType::none;
        t.holder.reset();
        t.generation = 0;
        t.notify_mask.clear();
        t.notices.clear();
        t.notice_count.clear();
    }
    c.run_due();
}

void SimCluster::power_loss_after(uint64_t commands, uint64_t seed) {
    Impl& c = *impl_;
    if (!c.powered) misuse("SimCluster::power_loss_after: the power is already off");
    c.power_seed = seed;
    c.power_countdown = commands;
    if (commands == 0) c.fail_power();
}

void SimCluster::power_on() {
    Impl& c = *impl_;
    if (c.powered) misuse("SimCluster::power_on: the power is on");
    c.powered = true;
    restart_target();
}

bool SimCluster::powered() const { return impl_->powered; }

std::span<const uint8_t> SimCluster::block(uint64_t lba) const {
    if (lba >= impl_->opts.size_blocks) return {};
    auto it = impl_->media.find(lba);
    if (it == impl_->media.end()) return impl_->zeros;
    return it->second;
}
uint64_t SimCluster::writes_landed() const { return impl_->landed; }
uint64_t SimCluster::writes_refused() const { return impl_->refused; }

}  // namespace nvfence::testkit
