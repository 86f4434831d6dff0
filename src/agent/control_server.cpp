// SPDX-License-Identifier: MIT
// The server side of the agent's control socket (control_server.hpp); the
// protocol's encoding and decoding are libnvfence's (nvfence/control.hpp).
#include "agent/control_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>

#include "client/control_socket.hpp"
#include "internal/invariant.hpp"
#include "nvfence/error.hpp"

namespace nvfence {

namespace {
using control_socket::Deadline;
using control_socket::remaining_ms;
using control_socket::unix_address;
}  // namespace

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
