// SPDX-License-Identifier: MIT
#include "nvfence/control.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "internal/byte_order.hpp"
#include "client/control_socket.hpp"

namespace nvfence {
namespace {
using control_socket::Deadline;
using control_socket::remaining_ms;
using control_socket::unix_address;

constexpr uint8_t kMagic[4] = {'N', 'V', 'F', 'C'};
constexpr uint8_t kKindRequest = 1;
constexpr uint8_t kKindReply = 2;
// The reply's flags (the u16 after registrants, reserved before them).
constexpr uint16_t kFlagCheckOnly = 1;

class Writer {
public:
    void u8(uint8_t v) { b_.push_back(v); }
    void u16(uint16_t v) { put(v); }
    void u32(uint32_t v) { put(v); }
    void u64(uint64_t v) { put(v); }
    void text(const std::string& s) {
        const size_t n = std::min(s.size(), kControlMaxText);
        u16(static_cast<uint16_t>(n));
        for (size_t i = 0; i < n; ++i) {
            const auto c = static_cast<uint8_t>(s[i]);
            b_.push_back((c < 0x20 || c == 0x7f) ? uint8_t{'?'} : c);
        }
    }
    std::vector<uint8_t>& bytes() { return b_; }

private:
    template <class T>
    void put(T v) {
        const size_t at = b_.size();
        b_.resize(at + sizeof(T));
        store_le(b_.data() + at, v);
    }
    std::vector<uint8_t> b_;
};

// Reads little-endian fields; any read past the end latches failure so the
// decoders check once at the end instead of before every field.
class Reader {
public:
    explicit Reader(std::span<const uint8_t> b) : b_(b) {}
    bool ok() const { return ok_; }
    bool done() const { return ok_ && pos_ == b_.size(); }
    uint8_t u8() {
        if (!need(1)) return 0;
        return b_[pos_++];
    }
    uint16_t u16() { return get<uint16_t>(); }
    uint32_t u32() { return get<uint32_t>(); }
    uint64_t u64() { return get<uint64_t>(); }
    bool boolean() {
        uint8_t v = u8();
        if (v > 1) ok_ = false;
        return v == 1;
    }
    std::string text() {
        const uint16_t n = u16();
        if (n > kControlMaxText || !need(n)) {
            ok_ = false;
            return {};
        }
        std::string s;
        s.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            const uint8_t c = b_[pos_ + i];
            if (c < 0x20 || c == 0x7f) ok_ = false;
            s.push_back(static_cast<char>(c));
        }
        pos_ += n;
        return s;
    }
    void fail() { ok_ = false; }

private:
    template <class T>
    T get() {
        if (!need(sizeof(T))) return 0;
        const T v = load_le<T>(b_.data() + pos_);
        pos_ += sizeof(T);
        return v;
    }
    bool need(size_t n) {
        if (!ok_ || b_.size() - pos_ < n) {
            ok_ = false;
            return false;
        }
        return true;
    }
    std::span<const uint8_t> b_;
    size_t pos_ = 0;
    bool ok_ = true;
};

std::error_code protocol_error() { return make_error_code(Errc::protocol); }

void put_header(Writer& w, uint8_t kind, ControlOp op, uint32_t id) {
    for (uint8_t m : kMagic) w.u8(m);
    w.u16(kControlVersion);
    w.u8(kind);
    w.u8(static_cast<uint8_t>(op));
    w.u32(id);
    w.u32(0);  // body length, patched by finish()
}

std::vector<uint8_t> finish(Writer& w) {
    auto& b = w.bytes();
    const auto body = static_cast<uint32_t>(b.size() - kControlHeaderBytes);
    for (int i = 0; i < 4; ++i) b[12 + static_cast<size_t>(i)] = static_cast<uint8_t>(body >> (8 * i));
    return std::move(b);
}

bool resv_type_ok(uint8_t raw) { return raw <= 6; }

// Waits for @p events on @p fd until @p deadline; false on timeout.
Status wait_fd(int fd, short events, Deadline deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, remaining_ms(deadline));
        if (rc > 0) return Ok{};
        if (rc == 0) return make_error_code(Errc::timeout);
        if (errno != EINTR) return errno_error(errno);
    }
}

// Receives one packet of at most kControlMaxMessage bytes; a longer one is
// a protocol error (MSG_TRUNC reports its real length).
Result<std::vector<uint8_t>> recv_message(int fd, Deadline deadline) {
    std::vector<uint8_t> buf(kControlMaxMessage + 1);
    for (;;) {
        if (auto w = wait_fd(fd, POLLIN, deadline); !w) return w.error();
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_TRUNC | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return errno_error(errno);
        }
        if (n == 0) return make_error_code(Errc::protocol);
        if (static_cast<size_t>(n) > kControlMaxMessage) return make_error_code(Errc::protocol);
        buf.resize(static_cast<size_t>(n));
        return buf;
    }
}

Status send_message(int fd, const std::vector<uint8_t>& msg, Deadline deadline) {
    for (;;) {
        const ssize_t n = ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n == static_cast<ssize_t>(msg.size())) return Ok{};
        if (n >= 0) return make_error_code(Errc::protocol);
        if (errno == EINTR) continue;
        if (errno != EAGAIN) return errno_error(errno);
        if (auto w = wait_fd(fd, POLLOUT, deadline); !w) return w.error();
    }
}

}  // namespace

std::string control_socket_path(const std::string& volume) { return "/run/nvfence/" + volume + ".sock"; }

const char* control_op_name(ControlOp op) {
    switch (op) {
    case ControlOp::status: return "status";
    case ControlOp::takeover: return "takeover";
    case ControlOp::handoff: return "handoff";
    case ControlOp::rejoin: return "rejoin";
    }
    return "unknown";
}

bool control_op_valid(uint8_t raw) { return raw >= 1 && raw <= 4; }

const char* agent_state_name(AgentState s) {
    switch (s) {
    case AgentState::starting: return "STARTING";
    case AgentState::standby: return "STANDBY";
    case AgentState::holder: return "HOLDER";
    case AgentState::fenced: return "FENCED";
    case AgentState::stopping: return "STOPPING";
    case AgentState::waiting: return "WAITING";
    case AgentState::watching: return "WATCHING";
    }
    return "UNKNOWN";
}

bool agent_state_valid(uint8_t raw) { return raw <= 6; }

std::vector<uint8_t> encode_request(const ControlRequest& r) {
    Writer w;
    put_header(w, kKindRequest, r.op, r.id);
    w.u64(r.victim);
    w.u32(0);
    w.u32(0);
    return finish(w);
}

std::vector<uint8_t> encode_reply(const ControlReply& r) {
    Writer w;
    put_header(w, kKindReply, r.op, r.id);
    w.u8(r.exit_code);
    w.u8(r.changed ? 1 : 0);
    w.u8(static_cast<uint8_t>(r.state));
    w.u8(static_cast<uint8_t>(r.mode));
    w.u8(static_cast<uint8_t>(r.resv_type));
    w.u8(r.holder_self ? 1 : 0);
    w.u8(r.node);
    w.u8(r.tag);
    w.u64(r.key);
    w.u64(r.holder);
    w.u64(r.previous_holder);
    w.u32(r.generation);
    w.u16(r.registrants);
    w.u16(r.check_only ? kFlagCheckOnly : 0);
    w.u32(r.check_failures);
    w.u32(r.pid);
    w.u64(r.checks);
    w.u64(r.notifications);
    w.u64(r.last_check_age_ms);
    w.u64(r.last_check_unix_ms);
    w.u64(r.fenced_for_ms);
    w.u64(r.uptime_ms);
    w.text(r.volume);
    w.text(r.device);
    w.text(r.message);
    w.text(r.fence_reason);
    w.text(r.last_error);
    return finish(w);
}

Result<ControlHeader> decode_control_header(std::span<const uint8_t> msg) {
    if (msg.size() < kControlHeaderBytes || msg.size() > kControlMaxMessage) return protocol_error();
    if (std::memcmp(msg.data(), kMagic, sizeof kMagic) != 0) return protocol_error();
    Reader r(msg.subspan(4, kControlHeaderBytes - 4));
    ControlHeader h;
    h.version = r.u16();
    h.kind = r.u8();
    const uint8_t op = r.u8();
    h.id = r.u32();
    h.body_len = r.u32();
    if (!r.done()) return protocol_error();
    if (h.kind != kKindRequest && h.kind != kKindReply) return protocol_error();
    if (!control_op_valid(op)) return protocol_error();
    h.op = static_cast<ControlOp>(op);
    if (h.body_len != msg.size() - kControlHeaderBytes) return protocol_error();
    return h;
}

Result<ControlRequest> decode_request(std::span<const uint8_t> msg) {
    auto h = decode_control_header(msg);
    if (!h) return h.error();
    if (h->version != kControlVersion || h->kind != kKindRequest || h->body_len != kRequestBodyBytes)
        return protocol_error();
    Reader r(msg.subspan(kControlHeaderBytes));
    ControlRequest q;
    q.op = h->op;
    q.id = h->id;
    q.victim = r.u64();
    const uint32_t flags = r.u32();
    const uint32_t reserved = r.u32();
    if (!r.done() || flags != 0 || reserved != 0) return protocol_error();
    if (q.victim != 0 && q.op != ControlOp::takeover) return protocol_error();
    return q;
}

Result<ControlReply> decode_reply(std::span<const uint8_t> msg) {
    auto h = decode_control_header(msg);
    if (!h) return h.error();
    if (h->version != kControlVersion || h->kind != kKindReply) return protocol_error();
    Reader r(msg.subspan(kControlHeaderBytes));
    ControlReply p;
    p.op = h->op;
    p.id = h->id;
    p.exit_code = r.u8();
    p.changed = r.boolean();
    const uint8_t state = r.u8();
    const uint8_t mode = r.u8();
    const uint8_t type = r.u8();
    p.holder_self = r.boolean();
    p.node = r.u8();
    p.tag = r.u8();
    p.key = r.u64();
    p.holder = r.u64();
    p.previous_holder = r.u64();
    p.generation = r.u32();
    p.registrants = r.u16();
    const uint16_t flags = r.u16();
    if ((flags & ~kFlagCheckOnly) != 0) r.fail();
    p.check_only = (flags & kFlagCheckOnly) != 0;
    p.check_failures = r.u32();
    p.pid = r.u32();
    p.checks = r.u64();
    p.notifications = r.u64();
    p.last_check_age_ms = r.u64();
    p.last_check_unix_ms = r.u64();
    p.fenced_for_ms = r.u64();
    p.uptime_ms = r.u64();
    p.volume = r.text();
    p.device = r.text();
    p.message = r.text();
    p.fence_reason = r.text();
    p.last_error = r.text();
    if (!r.done()) return protocol_error();
    if (p.exit_code > 6 || !agent_state_valid(state) || !resv_type_ok(mode) || !resv_type_ok(type))
        return protocol_error();
    p.state = static_cast<AgentState>(state);
    p.mode = static_cast<ResvType>(mode);
    p.resv_type = static_cast<ResvType>(type);
    return p;
}

ControlReply control_error_reply(const ControlRequest& req, std::error_code ec,
                                 const std::string& message) {
    ControlReply r;
    r.op = req.op;
    r.id = req.id;
    r.exit_code = static_cast<uint8_t>(exit_code_for(ec));
    if (r.exit_code == 0) r.exit_code = static_cast<uint8_t>(ExitCode::failure);
    r.message = message;
    return r;
}

Result<ControlReply> control_request(const std::string& socket_path, const ControlRequest& req,
                                     uint32_t timeout_ms) {
    if (timeout_ms == 0 || timeout_ms > 600000) return make_error_code(Errc::invalid_argument);
    auto addr = unix_address(socket_path);
    if (!addr) return addr.error();
    const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return errno_error(errno);
    // A non-blocking unix connect fails with EAGAIN while the agent's
    // backlog is full; retry until the deadline rather than block.
    for (;;) {
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) == 0) break;
        if (errno == EINTR) continue;
        if (errno != EAGAIN) return errno_error(errno);
        if (remaining_ms(deadline) == 0) return make_error_code(Errc::timeout);
        ::poll(nullptr, 0, 10);
    }
    if (auto s = send_message(fd.get(), encode_request(req), deadline); !s) return s.error();
    auto msg = recv_message(fd.get(), deadline);
    if (!msg) return msg.error();
    auto reply = decode_reply(*msg);
    if (!reply) return reply.error();
    if (reply->id != req.id || reply->op != req.op) return protocol_error();
    return reply;
}

}  // namespace nvfence
