// SPDX-License-Identifier: MIT
#pragma once
/// @file control_server.hpp
/// The server side of the agent's control socket (nvfence/control.hpp has
/// the protocol and the client): nvfenced's alone, so it is in the static
/// library nvfence_control_server, not in libnvfence, and this header is
/// never installed.

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nvfence/control.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Who is on the other end of a control connection (SO_PEERCRED).
struct ControlPeer {
    int32_t pid = -1;   ///< Peer process id (-1: unknown).
    uint32_t uid = UINT32_MAX;  ///< Peer user id (UINT32_MAX: unknown, never root).
    uint32_t gid = UINT32_MAX;  ///< Peer group id.
};

/// True when a peer of user id @p uid may make request @p op: anybody who
/// can reach the socket may read `status`; every request that changes the
/// reservation or the agent's state needs uid 0.
bool control_op_allowed(ControlOp op, uint32_t uid);

/// Answers one decoded request.
using ControlHandler = std::function<ControlReply(const ControlRequest&, const ControlPeer&)>;

/// Where and how to listen.
struct ControlListenOptions {
    std::string path;        ///< Socket path (at most 107 bytes).
    uint32_t mode = 0600;    ///< Permission bits of the socket file.
    int64_t gid = -1;        ///< Group of the socket file (-1: unchanged).
    int backlog = 8;         ///< Pending connections queued by the kernel, 1..64.
};

/// Creates a non-blocking listening SOCK_SEQPACKET socket at opts.path with
/// opts.mode (and group). A previous socket file at the path is replaced;
/// any other kind of file there is refused (EEXIST). The caller must hold
/// the lock that makes it the only agent for this path.
Result<Fd> control_listen(const ControlListenOptions& opts);

/// What one ControlServer::serve() did.
struct ControlServeStats {
    uint32_t answered = 0;  ///< Requests answered (replies handed to the socket).
    uint32_t dropped = 0;   ///< Connections closed without a reply: silent past their deadline,
                            ///< oversized, hung up, or the oldest when the table was full.
    std::error_code accept_error;  ///< accept() failed with more than "nothing pending" (e.g. EMFILE).
};

/// The server side of the control socket, which never waits on a client:
/// every connection is non-blocking and kept in a bounded table until it
/// has sent its request and taken its reply, or until its deadline
/// (timeout_ms after it was accepted). A client that connects and sends
/// nothing, or never reads, costs the caller's loop nothing: serve() only
/// does what the sockets allow at once. At most max_clients connections
/// are kept; a new one beyond that closes the oldest. Malformed requests
/// get an error reply; every request is checked with control_op_allowed()
/// against the peer's SO_PEERCRED uid before the handler sees it (a refused
/// one gets Errc::permission_denied, exit code 5).
class ControlServer {
public:
    /// Serves @p listen_fd (non-blocking, from control_listen()).
    /// @p timeout_ms: 1..60000; @p max_clients: 1..256.
    ControlServer(int listen_fd, uint32_t timeout_ms, size_t max_clients);
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    /// Appends what to poll: the listener (POLLIN), then every connection
    /// (POLLIN while its request is awaited, POLLOUT while its reply waits).
    void poll_fds(std::vector<pollfd>& out) const;
    /// Milliseconds until the earliest connection deadline (-1: none).
    int next_deadline_ms() const;
    /// Accepts what is pending (at most max_clients per call), answers every
    /// complete request with @p handler, sends what the sockets take and
    /// closes connections past their deadline. Never waits.
    ControlServeStats serve(const ControlHandler& handler);
    /// Connections kept now.
    size_t clients() const { return conns_.size(); }

private:
    struct Conn;
    void accept_pending(ControlServeStats& st);
    void step(Conn& c, const ControlHandler& handler, ControlServeStats& st);
    int listen_fd_;
    std::chrono::milliseconds timeout_;
    size_t max_clients_;
    std::vector<std::unique_ptr<Conn>> conns_;
    std::vector<uint8_t> buf_;  ///< One request, plus one byte to see an oversized one.
};

}  // namespace nvfence
