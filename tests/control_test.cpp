// SPDX-License-Identifier: MIT
// Unit tests of the control protocol (control.hpp): exact wire layout,
// round trips, strict decoding, bounded sizes, a deterministic mutation
// fuzz, and the unix socket client/server with its timeouts and limits.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "fake_passthru.hpp"
#include "nvfence/control.hpp"
#include "agent/control_server.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/nvfence.h"

namespace nvfence::test {
namespace {

ControlReply full_reply() {
    ControlReply r;
    r.op = ControlOp::takeover;
    r.id = 0xdeadbeef;
    r.exit_code = 6;
    r.changed = true;
    r.state = AgentState::fenced;
    r.mode = ResvType::write_exclusive_reg_only;
    r.resv_type = ResvType::write_exclusive;
    r.holder_self = true;
    r.node = 255;
    r.tag = 7;
    r.key = *make_key({7, 255, 0xffffffffu});
    r.holder = 0x0123456789abcdefull;
    r.previous_holder = UINT64_MAX;
    r.generation = 0xfffffffeu;
    r.registrants = 65535;
    r.check_failures = 12;
    r.pid = 4242;
    r.checks = 1ull << 40;
    r.notifications = 3;
    r.last_check_age_ms = 17;
    r.last_check_unix_ms = 1700000000000;
    r.fenced_for_ms = kControlNever;
    r.uptime_ms = 99;
    r.volume = "vol-0123456789abcdef0";
    r.device = "/dev/nvme1n1";
    r.message = "lost the takeover race: nf:7:2:9 holds now";
    r.fence_reason = "preempted";
    r.last_error = "";
    return r;
}

TEST(ControlCodecTest, RequestWireLayoutIsExact) {
    ControlRequest q;
    q.op = ControlOp::takeover;
    q.id = 0x01020304;
    q.victim = 0x1122334455667788ull;
    const auto b = encode_request(q);
    const std::vector<uint8_t> want = {'N', 'V', 'F', 'C', 1, 0, 1, 2, 4, 3, 2, 1, 16, 0, 0, 0,
                                       0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(b, want);
    auto d = decode_request(b);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, q);
}

TEST(ControlCodecTest, EveryRequestRoundTrips) {
    for (auto op : {ControlOp::status, ControlOp::takeover, ControlOp::handoff, ControlOp::rejoin}) {
        ControlRequest q;
        q.op = op;
        q.id = static_cast<uint32_t>(op) * 1000;
        auto d = decode_request(encode_request(q));
        ASSERT_TRUE(d.ok()) << control_op_name(op);
        EXPECT_EQ(*d, q);
    }
}

TEST(ControlCodecTest, ReplyRoundTripsWithEveryField) {
    const ControlReply r = full_reply();
    const auto b = encode_reply(r);
    EXPECT_EQ(b.size(), kControlHeaderBytes + kReplyFixedBytes + 5 * 2 + r.volume.size() + r.device.size() +
                            r.message.size() + r.fence_reason.size());
    auto d = decode_reply(b);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, r);
    ControlReply empty;
    auto e = decode_reply(encode_reply(empty));
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(*e, empty);
}

TEST(ControlCodecTest, EncodingBoundsAndCleansStrings) {
    ControlReply r = full_reply();
    r.volume = std::string(5000, 'v');
    r.device = std::string(5000, 'd');
    r.message = std::string(5000, 'm');
    r.fence_reason = std::string(5000, 'f');
    r.last_error = "a\nb\x7f" + std::string(1, '\0') + "c";
    const auto b = encode_reply(r);
    EXPECT_LE(b.size(), kControlMaxMessage);
    auto d = decode_reply(b);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->volume.size(), kControlMaxText);
    EXPECT_EQ(d->message, std::string(kControlMaxText, 'm'));
    EXPECT_EQ(d->last_error, "a?b??c");
}

TEST(ControlCodecTest, StrictDecodingRejectsMalformedRequests) {
    ControlRequest q;
    q.op = ControlOp::status;
    const auto good = encode_request(q);
    ASSERT_TRUE(decode_request(good).ok());
    auto mutated = [&](size_t at, uint8_t v) {
        auto b = good;
        b[at] = v;
        return b;
    };
    EXPECT_FALSE(decode_request({}).ok());
    EXPECT_FALSE(decode_request(std::span<const uint8_t>(good.data(), 15)).ok());
    EXPECT_FALSE(decode_request(std::span<const uint8_t>(good.data(), good.size() - 1)).ok());
    EXPECT_FALSE(decode_request(mutated(0, 'X')).ok()) << "magic";
    EXPECT_FALSE(decode_request(mutated(4, 2)).ok()) << "version";
    EXPECT_FALSE(decode_request(mutated(6, 2)).ok()) << "a reply is not a request";
    EXPECT_FALSE(decode_request(mutated(6, 3)).ok()) << "kind";
    EXPECT_FALSE(decode_request(mutated(7, 0)).ok()) << "op 0";
    EXPECT_FALSE(decode_request(mutated(7, 5)).ok()) << "op 5";
    EXPECT_FALSE(decode_request(mutated(12, 17)).ok()) << "length";
    EXPECT_FALSE(decode_request(mutated(16, 1)).ok()) << "victim on a status request";
    EXPECT_FALSE(decode_request(mutated(24, 1)).ok()) << "flags";
    EXPECT_FALSE(decode_request(mutated(28, 1)).ok()) << "reserved";
    auto longer = good;
    longer.push_back(0);
    EXPECT_FALSE(decode_request(longer).ok()) << "trailing byte";
    std::vector<uint8_t> huge(kControlMaxMessage + 1);
    std::copy(good.begin(), good.end(), huge.begin());
    EXPECT_FALSE(decode_request(huge).ok()) << "over the size bound";
    EXPECT_EQ(decode_request(mutated(0, 'X')).error(), Errc::protocol);
}

TEST(ControlCodecTest, StrictDecodingRejectsMalformedReplies) {
    const auto good = encode_reply(full_reply());
    ASSERT_TRUE(decode_reply(good).ok());
    const size_t f = kControlHeaderBytes;
    auto mutated = [&](size_t at, uint8_t v) {
        auto b = good;
        b[at] = v;
        return b;
    };
    EXPECT_FALSE(decode_reply(mutated(6, 1)).ok()) << "a request is not a reply";
    EXPECT_FALSE(decode_reply(mutated(f + 0, 7)).ok()) << "exit code";
    EXPECT_FALSE(decode_reply(mutated(f + 1, 2)).ok()) << "boolean";
    EXPECT_FALSE(decode_reply(mutated(f + 2, 7)).ok()) << "state";
    EXPECT_FALSE(decode_reply(mutated(f + 3, 7)).ok()) << "mode";
    EXPECT_FALSE(decode_reply(mutated(f + 4, 7)).ok()) << "type";
    EXPECT_FALSE(decode_reply(mutated(f + 5, 2)).ok()) << "holder_self";
    EXPECT_FALSE(decode_reply(mutated(f + 38, 2)).ok()) << "a flag not defined";
    EXPECT_FALSE(decode_reply(mutated(f + 39, 1)).ok()) << "a flag not defined";
    EXPECT_FALSE(decode_reply(mutated(f + kReplyFixedBytes + 2, '\n')).ok()) << "control character";
    auto over = good;
    over[f + kReplyFixedBytes] = 0xff;  // volume length 0x..ff > what follows
    EXPECT_FALSE(decode_reply(over).ok());
    auto cut = good;
    cut.pop_back();
    cut[12] = static_cast<uint8_t>(cut.size() - kControlHeaderBytes);
    EXPECT_FALSE(decode_reply(cut).ok()) << "string cut short";
}

// Issue 27: a check-only watcher says so in the reply's flags (bit 0 of
// the u16 that was reserved); a normal agent's reply is byte for byte the
// version 1 reply it always was (that u16 stays 0).
TEST(ControlCodecTest, CheckOnlyFlagRoundTripsAndNormalRepliesAreUnchanged) {
    ControlReply r = full_reply();
    r.check_only = false;
    const auto normal = encode_reply(r);
    EXPECT_EQ(normal[kControlHeaderBytes + 38], 0);
    EXPECT_EQ(normal[kControlHeaderBytes + 39], 0);
    EXPECT_FALSE(decode_reply(normal)->check_only);
    r.check_only = true;
    r.state = AgentState::watching;
    const auto watcher = encode_reply(r);
    EXPECT_EQ(watcher.size(), normal.size());
    EXPECT_EQ(watcher[kControlHeaderBytes + 38], 1);
    auto d = decode_reply(watcher);
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d->check_only);
    EXPECT_EQ(d->state, AgentState::watching);
    EXPECT_EQ(*d, r);
}

TEST(ControlCodecTest, HeaderOfAnotherVersionStillDecodes) {
    ControlRequest q;
    q.op = ControlOp::rejoin;
    q.id = 5;
    auto b = encode_request(q);
    b[4] = 9;
    auto h = decode_control_header(b);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->version, 9);
    EXPECT_EQ(h->op, ControlOp::rejoin);
    EXPECT_EQ(h->id, 5u);
    EXPECT_FALSE(decode_request(b).ok());
}

// A deterministic fuzz: random mutations of valid messages and random bytes
// never crash, never decode into something that does not re-encode to the
// same bytes.
TEST(ControlCodecTest, MutationsNeverBreakTheRoundTrip) {
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    auto next = [&] {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return seed;
    };
    const std::vector<std::vector<uint8_t>> corpus = {encode_request(ControlRequest{}), encode_reply(full_reply()),
                                                      encode_reply(ControlReply{})};
    int decoded = 0;
    for (int i = 0; i < 50000; ++i) {
        std::vector<uint8_t> b = corpus[next() % corpus.size()];
        const int edits = 1 + static_cast<int>(next() % 4);
        for (int e = 0; e < edits; ++e) {
            switch (next() % 4) {
            case 0:
                if (!b.empty()) b[next() % b.size()] = static_cast<uint8_t>(next());
                break;
            case 1:
                if (!b.empty()) b.resize(next() % b.size());
                break;
            case 2: b.push_back(static_cast<uint8_t>(next())); break;
            case 3:
                if (b.size() > 16) b[12 + next() % 4] = static_cast<uint8_t>(next());
                break;
            }
        }
        if (auto q = decode_request(b)) {
            ++decoded;
            EXPECT_EQ(encode_request(*q), b);
        }
        if (auto r = decode_reply(b)) {
            ++decoded;
            EXPECT_EQ(encode_reply(*r), b);
        }
    }
    EXPECT_GT(decoded, 0);
}

TEST(ControlCodecTest, ErrorRepliesCarryTheExitCode) {
    ControlRequest q;
    q.op = ControlOp::takeover;
    q.id = 3;
    auto r = control_error_reply(q, make_error_code(Errc::lost_race), "lost");
    EXPECT_EQ(r.exit_code, 6);
    EXPECT_EQ(r.op, ControlOp::takeover);
    EXPECT_EQ(r.id, 3u);
    EXPECT_EQ(control_error_reply(q, make_error_code(Errc::not_holder), "").exit_code, 3);
    EXPECT_EQ(control_error_reply(q, make_error_code(Errc::no_reservations), "").exit_code, 4);
    EXPECT_EQ(control_error_reply(q, errno_error(EACCES), "").exit_code, 5);
    EXPECT_EQ(control_error_reply(q, make_error_code(Errc::protocol), "").exit_code, 1);
}

TEST(ControlCodecTest, NamesOfStatesAndOps) {
    EXPECT_STREQ(agent_state_name(AgentState::fenced), "FENCED");
    EXPECT_STREQ(agent_state_name(AgentState::holder), "HOLDER");
    EXPECT_STREQ(agent_state_name(AgentState::standby), "STANDBY");
    EXPECT_STREQ(control_op_name(ControlOp::handoff), "handoff");
    EXPECT_STREQ(agent_state_name(AgentState::waiting), "WAITING");
    EXPECT_STREQ(agent_state_name(AgentState::watching), "WATCHING");
    EXPECT_TRUE(agent_state_valid(6));
    EXPECT_FALSE(agent_state_valid(7));
    EXPECT_FALSE(control_op_valid(0));
}

// ---- socket ------------------------------------------------------------------

class ControlSocketTest : public ::testing::Test {
protected:
    std::string path() const { return dir.path() + "/agent.sock"; }
    Fd listen_ok(uint32_t mode = 0600) {
        ControlListenOptions o;
        o.path = path();
        o.mode = mode;
        auto l = control_listen(o);
        EXPECT_TRUE(l.ok()) << (l.ok() ? "" : l.error().message());
        return l.ok() ? std::move(*l) : Fd();
    }
    // Serves until @p n connections were handled or 5 s passed.
    std::thread serve(int fd, uint32_t n, ControlHandler h = {}) {
        if (!h) {
            h = [](const ControlRequest& q, const ControlPeer& p) {
                ControlReply r;
                r.state = AgentState::holder;
                r.message = "peer uid " + std::to_string(p.uid) + " pid " + std::to_string(p.pid);
                r.key = q.victim;
                return r;
            };
        }
        return std::thread([fd, n, h] {
            ControlServer server(fd, 500, 16);
            uint32_t done = 0;
            std::vector<pollfd> fds;
            const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (done < n && std::chrono::steady_clock::now() < end) {
                fds.clear();
                server.poll_fds(fds);
                if (::poll(fds.data(), fds.size(), 50) < 0) continue;
                const auto s = server.serve(h);
                done += s.answered + s.dropped;
            }
        });
    }
    static Fd raw_client(const std::string& path) {
        Fd c(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Fd();
        return c;
    }
    TempDir dir;
};

TEST_F(ControlSocketTest, RequestAndReplyOverTheSocket) {
    Fd l = listen_ok();
    auto th = serve(l.get(), 1);
    ControlRequest q;
    q.op = ControlOp::takeover;
    q.id = 42;
    q.victim = 0xabc;
    auto r = control_request(path(), q, 3000);
    th.join();
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->id, 42u);
    EXPECT_EQ(r->op, ControlOp::takeover);
    EXPECT_EQ(r->state, AgentState::holder);
    EXPECT_EQ(r->key, 0xabcu);
    EXPECT_EQ(r->message, "peer uid " + std::to_string(::getuid()) + " pid " + std::to_string(::getpid()));
}

// Issue 13, defect 8: a non-root peer may read the status only; every other
// request is refused with exit code 5 before it reaches the handler.
TEST_F(ControlSocketTest, OnlyRootMayChangeTheReservationOrTheAgent) {
    EXPECT_TRUE(control_op_allowed(ControlOp::status, 1000));
    EXPECT_FALSE(control_op_allowed(ControlOp::takeover, 1000));
    EXPECT_FALSE(control_op_allowed(ControlOp::handoff, 1000));
    EXPECT_FALSE(control_op_allowed(ControlOp::rejoin, 1000));
    EXPECT_FALSE(control_op_allowed(ControlOp::takeover, ControlPeer{}.uid)) << "unknown peer is not root";
    EXPECT_TRUE(control_op_allowed(ControlOp::takeover, 0));
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    Fd l = listen_ok(0666);
    std::atomic<int> handled{0};
    auto th = serve(l.get(), 4, [&](const ControlRequest&, const ControlPeer&) {
        ++handled;
        ControlReply r;
        r.state = AgentState::holder;
        return r;
    });
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const pid_t kid = ::fork();
    ASSERT_GE(kid, 0);
    if (kid == 0) {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(90);
        uint8_t codes[4] = {99, 99, 99, 99};
        const ControlOp ops[4] = {ControlOp::status, ControlOp::takeover, ControlOp::handoff, ControlOp::rejoin};
        for (int i = 0; i < 4; ++i) {
            ControlRequest q;
            q.op = ops[i];
            auto r = control_request(path(), q, 3000);
            codes[i] = r ? r->exit_code : 98;
        }
        (void)!::write(pipefd[1], codes, sizeof codes);
        ::_exit(0);
    }
    ::close(pipefd[1]);
    uint8_t codes[4] = {};
    ASSERT_EQ(::read(pipefd[0], codes, sizeof codes), 4);
    ::close(pipefd[0]);
    int status = 0;
    ::waitpid(kid, &status, 0);
    th.join();
    EXPECT_EQ(codes[0], 0) << "status is allowed";
    EXPECT_EQ(codes[1], 5);
    EXPECT_EQ(codes[2], 5);
    EXPECT_EQ(codes[3], 5);
    EXPECT_EQ(handled.load(), 1) << "refused requests never reach the agent";
}

TEST_F(ControlSocketTest, SocketIsPrivateByDefaultAndReplacesAStaleOne) {
    { Fd first = listen_ok(); }  // a crashed agent leaves its socket file
    Fd l = listen_ok();
    struct stat st;
    ASSERT_EQ(::lstat(path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    l.reset();
    Fd grp = listen_ok(0660);
    ASSERT_EQ(::lstat(path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(ControlSocketTest, RefusesToReplaceAnythingButASocket) {
    dir.write("agent.sock", "not a socket");
    ControlListenOptions o;
    o.path = path();
    auto l = control_listen(o);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.error(), errno_error(EEXIST));
    o.path = "/" + std::string(200, 'x');
    EXPECT_EQ(control_listen(o).error(), Errc::invalid_argument);
}

TEST_F(ControlSocketTest, NoAgentAndBadArguments) {
    ControlRequest q;
    auto r = control_request(path(), q, 1000);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), errno_error(ENOENT));
    EXPECT_EQ(control_request(path(), q, 0).error(), Errc::invalid_argument);
    EXPECT_EQ(control_request("", q, 100).error(), Errc::invalid_argument);
    { Fd stale = listen_ok(); }
    EXPECT_EQ(control_request(path(), q, 1000).error(), errno_error(ECONNREFUSED));
}

TEST_F(ControlSocketTest, ClientTimesOutWhenTheAgentDoesNotAnswer) {
    Fd l = listen_ok();  // listening, never serving: a hung agent
    ControlRequest q;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = control_request(path(), q, 200);
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), Errc::timeout);
    EXPECT_GE(took, std::chrono::milliseconds(190));
    EXPECT_LT(took, std::chrono::milliseconds(2000));
}

// Issue 24 item 10: a client that connects and sends nothing (any
// socket_group member can) costs the server nothing: the next client is
// answered at once, and the silent one is closed at its deadline.
TEST_F(ControlSocketTest, ASilentClientDoesNotDelayTheNextOneAndIsClosedAtItsDeadline) {
    Fd l = listen_ok();
    ControlServer server(l.get(), 200, 16);
    std::vector<Fd> silent;
    for (int i = 0; i < 4; ++i) {
        silent.push_back(raw_client(path()));
        ASSERT_TRUE(silent.back());
    }
    int calls = 0;
    ControlHandler h = [&](const ControlRequest&, const ControlPeer&) {
        ++calls;
        return ControlReply{};
    };
    auto t0 = std::chrono::steady_clock::now();
    auto st = server.serve(h);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50)) << "never waits on a client";
    EXPECT_EQ(st.answered, 0u);
    EXPECT_EQ(server.clients(), 4u);
    EXPECT_GT(server.next_deadline_ms(), 0);
    EXPECT_LE(server.next_deadline_ms(), 200);
    Fd asker = raw_client(path());
    const auto msg = encode_request(ControlRequest{});
    ASSERT_EQ(::send(asker.get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
    t0 = std::chrono::steady_clock::now();
    st = server.serve(h);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
    EXPECT_EQ(st.answered, 1u) << "answered beside four silent clients";
    EXPECT_EQ(calls, 1);
    std::vector<uint8_t> buf(kControlMaxMessage);
    ASSERT_GT(::recv(asker.get(), buf.data(), buf.size(), MSG_DONTWAIT), 0) << "the reply is there already";
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    st = server.serve(h);
    EXPECT_EQ(st.dropped, 4u) << "the silent ones, past their deadline";
    EXPECT_EQ(server.clients(), 0u);
    EXPECT_EQ(server.next_deadline_ms(), -1);
    for (auto& s : silent) EXPECT_EQ(::recv(s.get(), buf.data(), buf.size(), MSG_DONTWAIT), 0) << "closed without a reply";
}

TEST_F(ControlSocketTest, AClientThatNeverReadsItsReplyCostsNothing) {
    Fd l = listen_ok();
    ControlServer server(l.get(), 200, 16);
    std::vector<Fd> clients;
    const auto msg = encode_request(ControlRequest{});
    ControlHandler h = [](const ControlRequest&, const ControlPeer&) {
        ControlReply r;
        r.message = std::string(3000, 'm');  // a large reply
        return r;
    };
    // Clients that send and never read: each reply goes into its socket's
    // buffer, none is waited for.
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t answered = 0;
    for (int i = 0; i < 32; ++i) {
        clients.push_back(raw_client(path()));
        ASSERT_TRUE(clients.back());
        ASSERT_EQ(::send(clients.back().get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
        answered += server.serve(h).answered;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
    EXPECT_EQ(answered, 32u);
    EXPECT_EQ(server.clients(), 0u);
}

TEST_F(ControlSocketTest, OversizedAndHungUpPeersAreDroppedWithoutAReply) {
    Fd l = listen_ok();
    ControlServer server(l.get(), 500, 16);
    ControlHandler h = [](const ControlRequest&, const ControlPeer&) {
        ADD_FAILURE() << "no valid request was sent";
        return ControlReply{};
    };
    Fd big = raw_client(path());
    std::vector<uint8_t> huge(kControlMaxMessage + 100, 'N');
    ASSERT_EQ(::send(big.get(), huge.data(), huge.size(), 0), static_cast<ssize_t>(huge.size()));
    Fd gone = raw_client(path());
    ASSERT_TRUE(gone);
    gone.reset();
    auto st = server.serve(h);
    EXPECT_EQ(st.dropped, 2u);
    EXPECT_EQ(st.answered, 0u);
    uint8_t buf[64];
    EXPECT_EQ(::recv(big.get(), buf, sizeof buf, MSG_DONTWAIT), 0) << "closed without a reply";
}

TEST_F(ControlSocketTest, MalformedAndOtherVersionRequestsGetAnErrorReply) {
    Fd l = listen_ok();
    ControlRequest q;
    q.op = ControlOp::status;
    q.id = 9;
    auto b = encode_request(q);
    b[4] = 2;  // version 2
    Fd c = raw_client(path());
    ASSERT_EQ(::send(c.get(), b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
    ControlServer server(l.get(), 500, 16);
    auto s = server.serve([](const ControlRequest&, const ControlPeer&) {
        ADD_FAILURE() << "not for this version";
        return ControlReply{};
    });
    EXPECT_EQ(s.answered, 1u);
    std::vector<uint8_t> buf(kControlMaxMessage);
    const ssize_t n = ::recv(c.get(), buf.data(), buf.size(), 0);
    ASSERT_GT(n, 0);
    auto r = decode_reply(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1);
    EXPECT_EQ(r->id, 9u);
    EXPECT_NE(r->message.find("protocol version 2 is not supported: this agent speaks version 1"),
              std::string::npos)
        << r->message;
}

TEST_F(ControlSocketTest, AtMostMaxClientsAreKeptANewOneClosesTheOldest) {
    Fd l = listen_ok();
    ControlServer server(l.get(), 5000, 4);
    std::vector<Fd> clients;
    for (int i = 0; i < 6; ++i) {
        clients.push_back(raw_client(path()));
        ASSERT_TRUE(clients.back());
    }
    int calls = 0;
    ControlHandler h = [&](const ControlRequest&, const ControlPeer&) {
        ++calls;
        return ControlReply{};
    };
    auto s = server.serve(h);
    EXPECT_EQ(server.clients(), 4u) << "at most max_clients accepted per call";
    EXPECT_EQ(s.dropped, 0u);
    s = server.serve(h);
    EXPECT_EQ(server.clients(), 4u);
    EXPECT_EQ(s.dropped, 2u) << "the two oldest made room";
    uint8_t buf[64];
    EXPECT_EQ(::recv(clients[0].get(), buf, sizeof buf, MSG_DONTWAIT), 0) << "the oldest was closed";
    EXPECT_EQ(::recv(clients[1].get(), buf, sizeof buf, MSG_DONTWAIT), 0);
    EXPECT_EQ(::recv(clients[2].get(), buf, sizeof buf, MSG_DONTWAIT), -1) << "still open, nothing to read";
    // The newest are still served.
    const auto msg = encode_request(ControlRequest{});
    ASSERT_EQ(::send(clients[5].get(), msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
    s = server.serve(h);
    EXPECT_EQ(s.answered, 1u);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(server.clients(), 3u);
    s = server.serve(h);
    EXPECT_EQ(s.answered + s.dropped, 0u) << "nothing ready: returns at once";
}

// ---- the C API's agent call ------------------------------------------------------

// nvf_agent_request is the control client (control_request) for C callers:
// the request goes out as the CLI sends it and the reply's fields arrive.
TEST_F(ControlSocketTest, TheCApiAsksTheAgentAndGetsItsAnswer) {
    Fd l = listen_ok();
    ControlRequest seen;
    auto th = serve(l.get(), 1, [&](const ControlRequest& q, const ControlPeer&) {
        seen = q;
        ControlReply r;
        r.exit_code = 0;
        r.changed = true;
        r.state = AgentState::holder;
        r.check_only = false;
        r.holder_self = true;
        r.node = 2;
        r.key = 0xf500000200000009ull;
        r.holder = r.key;
        r.previous_holder = 0xf500000100000007ull;
        r.generation = 41;
        r.pid = 4242;
        r.last_check_age_ms = 17;
        r.volume = "vol-0abc";
        r.message = std::string(600, 'm');  // longer than the C struct's buffer
        return r;
    });
    nvf_agent_reply rep = NVF_AGENT_REPLY_INIT;
    const int rc = nvf_agent_request(path().c_str(), NVF_AGENT_TAKEOVER, 0xf500000100000007ull, 3000, &rep);
    th.join();
    ASSERT_EQ(rc, 0) << nvf_strerror(rc);
    EXPECT_EQ(seen.op, ControlOp::takeover);
    EXPECT_EQ(seen.victim, 0xf500000100000007ull);
    EXPECT_EQ(rep.size, sizeof rep);
    EXPECT_EQ(rep.exit_code, 0);
    EXPECT_EQ(rep.state, NVF_AGENT_HOLDER);
    EXPECT_EQ(rep.changed, 1);
    EXPECT_EQ(rep.check_only, 0);
    EXPECT_EQ(rep.holder_self, 1);
    EXPECT_EQ(rep.node, 2);
    EXPECT_EQ(rep.key, 0xf500000200000009ull);
    EXPECT_EQ(rep.holder, rep.key);
    EXPECT_EQ(rep.previous_holder, 0xf500000100000007ull);
    EXPECT_EQ(rep.generation, 41u);
    EXPECT_EQ(rep.pid, 4242u);
    EXPECT_EQ(rep.last_check_age_ms, 17u);
    EXPECT_STREQ(rep.volume, "vol-0abc");
    EXPECT_EQ(std::strlen(rep.message), sizeof rep.message - 1) << "cut to fit, NUL-terminated";
}

TEST_F(ControlSocketTest, TheCApiPassesTheAgentsRefusalAsItsExitCode) {
    Fd l = listen_ok();
    auto th = serve(l.get(), 1, [](const ControlRequest& q, const ControlPeer&) {
        return control_error_reply(q, make_error_code(Errc::not_holder), "this host does not hold it");
    });
    nvf_agent_reply rep = NVF_AGENT_REPLY_INIT;
    const int rc = nvf_agent_request(path().c_str(), NVF_AGENT_HANDOFF, 0, 3000, &rep);
    th.join();
    ASSERT_EQ(rc, 0) << "the agent answered";
    EXPECT_EQ(rep.exit_code, static_cast<int>(exit_code_for(make_error_code(Errc::not_holder))));
    EXPECT_NE(rep.exit_code, 0);
    EXPECT_STREQ(rep.message, "this host does not hold it");
}

TEST_F(ControlSocketTest, TheCApiRefusesBadArgumentsAndNamesAMissingAgent) {
    nvf_agent_reply rep = NVF_AGENT_REPLY_INIT;
    const int inval = -NVF_ERRC_INVALID_ARGUMENT;
    EXPECT_EQ(nvf_agent_request(nullptr, NVF_AGENT_STATUS, 0, 1000, &rep), inval);
    EXPECT_EQ(nvf_agent_request(path().c_str(), NVF_AGENT_STATUS, 0, 1000, nullptr), inval);
    EXPECT_EQ(nvf_agent_request(path().c_str(), 0, 0, 1000, &rep), inval);
    EXPECT_EQ(nvf_agent_request(path().c_str(), 5, 0, 1000, &rep), inval);
    EXPECT_EQ(nvf_agent_request(path().c_str(), -1, 0, 1000, &rep), inval);
    EXPECT_EQ(nvf_agent_request(path().c_str(), NVF_AGENT_STATUS, 7, 1000, &rep), inval) << "a victim only for takeover";
    EXPECT_EQ(nvf_agent_request(path().c_str(), NVF_AGENT_STATUS, 0, 0, &rep), inval) << "an unbounded wait";
    EXPECT_EQ(nvf_agent_request(path().c_str(), NVF_AGENT_STATUS, 0, 600001, &rep), inval);
    for (const char* bad : {"", "a/b", "..", "."})
        EXPECT_EQ(nvf_agent_request(bad, NVF_AGENT_STATUS, 0, 1000, &rep), inval) << bad;
    nvf_agent_reply zeroed{};
    EXPECT_EQ(nvf_agent_request(path().c_str(), NVF_AGENT_STATUS, 0, 1000, &zeroed), inval) << "size 0";
    // Nobody listens: the connect's errno, with words that say so.
    const int rc = nvf_agent_request(path().c_str(), NVF_AGENT_STATUS, 0, 1000, &rep);
    EXPECT_EQ(nvf_err_errno(rc), ENOENT) << nvf_strerror(rc);
    EXPECT_EQ(nvf_agent_request("no-such-volume-for-this-test", NVF_AGENT_STATUS, 0, 1000, &rep),
              -(NVF_ERR_ERRNO_BASE + ENOENT));
}

}  // namespace
}  // namespace nvfence::test
