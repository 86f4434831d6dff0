// SPDX-License-Identifier: MIT
#include "nvfence/control.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"
#include "internal/byte_order.hpp"

namespace nvfence {
namespace {

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

using Deadline = std::chrono::steady_clock::time_point;

int remaining_ms(Deadline d) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        d - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    return static_cast<int>(std::min<int64_t>(left.count(), 600000));
}

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

Result<sockaddr_un> unix_address(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof a.sun_path) return make_error_code(Errc::invalid_argument);
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    return a;
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

Result<Fd> control_listen(const ControlListenOptions& opts) {
    auto addr = unix_address(opts.path);
    if (!addr) return addr.error();
    if (opts.backlog < 1 || opts.backlog > 64 || (opts.mode & ~0777u) != 0)
        return make_error_code(Errc::invalid_argument);
    struct stat st;
    if (::lstat(opts.path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) return errno_error(EEXIST);
        if (::unlink(opts.path.c_str()) != 0) return errno_error(errno);
    }
    Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return errno_error(errno);
    // Bind under a umask that leaves only the owner in, so the socket is
    // never reachable with wider permissions than configured, even briefly.
    const mode_t old = ::umask(0177);
    const int rc = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr);
    const int err = errno;
    ::umask(old);
    if (rc != 0) return errno_error(err);
    // Change the inode just bound, never what a path names later: an O_PATH
    // descriptor that does not follow symlinks, checked to be this socket.
    // (fchmod on the socket descriptor itself changes the sockfs inode, not
    // the file in the directory.)
    Fd node(::open(opts.path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!node) return errno_error(errno);
    struct stat bound {};
    if (::fstat(node.get(), &bound) != 0) return errno_error(errno);
    if (!S_ISSOCK(bound.st_mode)) return errno_error(EEXIST);
    if (opts.gid >= 0 &&
        ::fchownat(node.get(), "", static_cast<uid_t>(-1), static_cast<gid_t>(opts.gid), AT_EMPTY_PATH) != 0)
        return errno_error(errno);
    const std::string via = "/proc/self/fd/" + std::to_string(node.get());
    if (::chmod(via.c_str(), static_cast<mode_t>(opts.mode)) != 0) return errno_error(errno);
    if (::listen(fd.get(), opts.backlog) != 0) return errno_error(errno);
    return fd;
}

bool control_op_allowed(ControlOp op, uint32_t uid) { return op == ControlOp::status || uid == 0; }

namespace {
// The reply to the request @p msg of @p peer: the handler's, or an error
// reply for a malformed, other-version or not-allowed request.
ControlReply answer(const std::vector<uint8_t>& msg, const ControlPeer& peer, const ControlHandler& handler) {
    auto req = decode_request(msg);
    if (req && !control_op_allowed(req->op, peer.uid))
        return control_error_reply(*req, make_error_code(Errc::permission_denied),
                                   std::string("'") + control_op_name(req->op) + "' needs root (uid " +
                                       std::to_string(peer.uid) + " may read the status only): run it as root");
    if (req) {
        ControlReply reply = handler(*req, peer);
        reply.op = req->op;
        reply.id = req->id;
        return reply;
    }
    ControlRequest echo;
    auto h = decode_control_header(msg);
    if (h) {
        echo.op = h->op;
        echo.id = h->id;
    }
    std::string why = "malformed request";
    if (h && h->version != kControlVersion)
        why = "protocol version " + std::to_string(h->version) +
              " is not supported: this agent speaks version " + std::to_string(kControlVersion);
    return control_error_reply(echo, make_error_code(Errc::protocol), why);
}

bool would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }
}  // namespace

struct ControlServer::Conn {
    Fd fd;
    Deadline deadline;
    ControlPeer peer;
    std::vector<uint8_t> reply;  ///< Empty while the request is awaited.
    bool closed = false;
};

ControlServer::ControlServer(int listen_fd, uint32_t timeout_ms, size_t max_clients)
    : listen_fd_(listen_fd), timeout_(timeout_ms), max_clients_(max_clients), buf_(kControlMaxMessage + 1) {
    NVF_INVARIANT(timeout_ms >= 1 && timeout_ms <= 60000);
    NVF_INVARIANT(max_clients >= 1 && max_clients <= 256);
    conns_.reserve(max_clients);
}

ControlServer::~ControlServer() = default;

void ControlServer::poll_fds(std::vector<pollfd>& out) const {
    out.push_back(pollfd{listen_fd_, POLLIN, 0});
    for (const auto& c : conns_)
        out.push_back(pollfd{c->fd.get(), static_cast<short>(c->reply.empty() ? POLLIN : POLLOUT), 0});
}

int ControlServer::next_deadline_ms() const {
    if (conns_.empty()) return -1;
    const auto first = std::min_element(conns_.begin(), conns_.end(), [](const auto& a, const auto& b) {
        return a->deadline < b->deadline;
    });
    return remaining_ms((*first)->deadline);
}

void ControlServer::accept_pending(ControlServeStats& st) {
    for (size_t n = 0; n < max_clients_; ++n) {
        Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) st.accept_error = errno_error(errno);
            return;
        }
        if (conns_.size() >= max_clients_) {
            conns_.erase(conns_.begin());  // the oldest: a full table never locks new clients out
            ++st.dropped;
        }
        auto c = std::make_unique<Conn>();
        c->fd = std::move(fd);
        c->deadline = std::chrono::steady_clock::now() + timeout_;
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(c->fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
            c->peer.pid = cred.pid;
            c->peer.uid = cred.uid;
            c->peer.gid = cred.gid;
        }
        conns_.push_back(std::move(c));
    }
}

// Does for @p c what its socket allows now: read the request and answer
// it, send the reply; or closes it (done, broken or past its deadline).
void ControlServer::step(Conn& c, const ControlHandler& handler, ControlServeStats& st) {
    NVF_INVARIANT(!c.closed);
    if (std::chrono::steady_clock::now() >= c.deadline) {
        c.closed = true;
        ++st.dropped;
        return;
    }
    if (c.reply.empty()) {
        const ssize_t n = ::recv(c.fd.get(), buf_.data(), buf_.size(), MSG_TRUNC | MSG_DONTWAIT);
        if (n < 0 && would_block(errno)) return;  // nothing yet: costs nothing
        if (n <= 0 || static_cast<size_t>(n) > kControlMaxMessage) {
            c.closed = true;  // hung up, failed, or oversized: dropped without a reply
            ++st.dropped;
            return;
        }
        const std::vector<uint8_t> msg(buf_.begin(), buf_.begin() + n);
        c.reply = encode_reply(answer(msg, c.peer, handler));
        NVF_INVARIANT(!c.reply.empty() && c.reply.size() <= kControlMaxMessage);
        // The handler may have taken a while (a takeover waits for the
        // device): the reply gets its own bound.
        c.deadline = std::chrono::steady_clock::now() + timeout_;
    }
    const ssize_t n = ::send(c.fd.get(), c.reply.data(), c.reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && would_block(errno)) return;  // when the socket takes it
    c.closed = true;
    if (n == static_cast<ssize_t>(c.reply.size())) ++st.answered;
    else ++st.dropped;
}

ControlServeStats ControlServer::serve(const ControlHandler& handler) {
    ControlServeStats st;
    accept_pending(st);
    for (auto& c : conns_) step(*c, handler, st);
    std::erase_if(conns_, [](const auto& c) { return c->closed; });
    NVF_INVARIANT(conns_.size() <= max_clients_);
    return st;
}

}  // namespace nvfence
