// SPDX-License-Identifier: MIT
// The structured journal record of a state change (src/agent/journal.hpp):
// its fields bit for bit, journald's native encoding, a datagram sent to a
// socket, and the fields of a real transition of the Agent.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "agent/journal.hpp"
#include "agent_sim.hpp"

namespace nvfence::test {
namespace {

// A state change of volume @p volume's agent on node @p node.
AgentEvent state_event(EventLevel level, AgentState from, AgentState to, std::string text, std::string volume,
                       uint8_t node) {
    AgentEvent e;
    e.kind = AgentEventKind::state_changed;
    e.level = level;
    e.from = from;
    e.to = to;
    e.text = std::move(text);
    e.volume = std::move(volume);
    e.node = node;
    return e;
}

AgentEvent fenced_event() {
    AgentEvent e = state_event(EventLevel::error, AgentState::holder, AgentState::fenced,
                               "preempted: registration nf:7:1:41 was removed", "vol-0123456789abcdef0", 1);
    e.key = *make_key({7, 1, 41});
    ReservationStatus st;
    st.generation = 9;
    st.type = ResvType::write_exclusive;
    st.registrants.push_back(Registrant{2, true, *make_key({7, 2, 42}), make_host(2)});
    e.report = st;
    return e;
}

TEST(JournalTest, StateChangeFieldsBitForBit) {
    const std::vector<JournalField> want = {
        {"MESSAGE", "HOLDER -> FENCED (volume vol-0123456789abcdef0, key nf:7:1:41): preempted: registration "
                    "nf:7:1:41 was removed"},
        {"MESSAGE_ID", "141b46bd04fc49cbb86407733568ca59"},
        {"PRIORITY", "3"},
        {"SYSLOG_IDENTIFIER", "nvfenced"},
        {"NVFENCE_VOLUME", "vol-0123456789abcdef0"},
        {"NVFENCE_STATE", "FENCED"},
        {"NVFENCE_PREVIOUS_STATE", "HOLDER"},
        {"NVFENCE_KEY", "nf:7:1:41"},
        {"NVFENCE_EPOCH", "41"},
        {"NVFENCE_NODE", "1"},
        {"NVFENCE_REASON", "preempted: registration nf:7:1:41 was removed"},
        {"NVFENCE_GENERATION", "9"},
        {"NVFENCE_HOLDER", "nf:7:2:42"},
    };
    EXPECT_EQ(state_change_fields(fenced_event()), want);
}

TEST(JournalTest, NoKeyNoReportAndAForeignKey) {
    AgentEvent e = state_event(EventLevel::info, AgentState::starting, AgentState::waiting,
                               "node 3's key is not registered", "v", 3);
    const std::vector<JournalField> want = {
        {"MESSAGE", "STARTING -> WAITING (volume v, key none): node 3's key is not registered"},
        {"MESSAGE_ID", "141b46bd04fc49cbb86407733568ca59"},
        {"PRIORITY", "6"},
        {"SYSLOG_IDENTIFIER", "nvfenced"},
        {"NVFENCE_VOLUME", "v"},
        {"NVFENCE_STATE", "WAITING"},
        {"NVFENCE_PREVIOUS_STATE", "STARTING"},
        {"NVFENCE_KEY", "none"},
        {"NVFENCE_EPOCH", "0"},
        {"NVFENCE_NODE", "3"},
        {"NVFENCE_REASON", "node 3's key is not registered"},
    };
    EXPECT_EQ(state_change_fields(e), want);
    e.key = 0x1234;  // not one of ours: shown as hex, no epoch
    const auto f = state_change_fields(e);
    EXPECT_EQ(f[7], (JournalField{"NVFENCE_KEY", "0x0000000000001234"}));
    EXPECT_EQ(f[8], (JournalField{"NVFENCE_EPOCH", "0"}));
    e.level = EventLevel::warning;
    EXPECT_EQ(state_change_fields(e)[2].second, "4");
}

TEST(JournalTest, NativeProtocolEncodesNewlinesWithTheirLength) {
    const std::string d = journal_datagram({{"A", "1"}, {"MESSAGE", "two\nlines"}, {"B", ""}});
    const std::string want = std::string("A=1\nMESSAGE\n") + std::string("\x09\0\0\0\0\0\0\0", 8) + "two\nlines\nB=\n";
    EXPECT_EQ(d, want);
}

TEST(JournalDeathTest, AFieldNameJournaldWouldRefuseIsABrokenInvariant) {
    EXPECT_DEATH(journal_datagram({{"lower", "x"}}), "");
    EXPECT_DEATH(journal_datagram({{"_TRUSTED", "x"}}), "");
}

TEST(JournalTest, TheDatagramReachesTheSocket) {
    TempDir tmp;
    const std::string path = tmp.path() + "/journal.sock";
    const int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(s, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_TRUE(journald_present(path));
    const std::string d = journal_datagram(state_change_fields(fenced_event()));
    EXPECT_TRUE(journal_send(d, path));
    std::string got(4096, '\0');
    const ssize_t n = ::recv(s, got.data(), got.size(), MSG_DONTWAIT);
    ASSERT_GT(n, 0);
    got.resize(static_cast<size_t>(n));
    EXPECT_EQ(got, d);
    ::close(s);
    EXPECT_FALSE(journal_send(d, tmp.path() + "/none.sock"));
}

TEST(JournalTest, TheAgentsTransitionsCarryVolumeKeyAndNode) {
    TempDir tmp;
    FakeTarget t;
    ManualClock clock;
    AgentOptions o;
    o.tag = 7;
    o.node = 1;
    o.role = StartRole::acquire;
    o.volume = "vol-test";
    SimHost h(t, clock, 1, o, tmp.path());
    h.start_ok();
    ASSERT_EQ(h.agent->state(), AgentState::holder);
    const AgentEvent* last = nullptr;
    for (const auto& e : h.hooks->events)
        if (e.kind == AgentEventKind::state_changed) last = &e;
    ASSERT_NE(last, nullptr);
    const auto f = state_change_fields(*last);
    EXPECT_EQ(f[4], (JournalField{"NVFENCE_VOLUME", "vol-test"}));
    EXPECT_EQ(f[5], (JournalField{"NVFENCE_STATE", "HOLDER"}));
    EXPECT_EQ(f[7], (JournalField{"NVFENCE_KEY", format_key(h.agent->key())}));
    EXPECT_EQ(f[8], (JournalField{"NVFENCE_EPOCH", std::to_string(decode_key(h.agent->key())->epoch)}));
    EXPECT_EQ(f[9], (JournalField{"NVFENCE_NODE", "1"}));
}

}  // namespace
}  // namespace nvfence::test
