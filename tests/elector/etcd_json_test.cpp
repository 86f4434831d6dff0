// SPDX-License-Identifier: MIT
// The etcd v3 JSON gateway parsers on replies captured from etcd 3.4.23 (and
// the 3.5 error shape), with the quirks: int64 as strings, omitted zero
// fields, error bodies, stream lines.
#include <gtest/gtest.h>

#include "nvfence/error.hpp"
#include "elector/etcd_json.hpp"

using namespace nvfence;
using namespace nvfence::etcd;

namespace {

const char* kHeader =
    R"("header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"2","raft_term":"2"})";

std::string with_header(const std::string& rest) { return std::string("{") + kHeader + (rest.empty() ? "" : ",") + rest + "}"; }

}  // namespace

TEST(EtcdJson, Base64RoundTripsAndRejectsJunk) {
    for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", "nvfence/vol1", std::string("\0\xff\x10", 3)}) {
        auto d = base64_decode(base64_encode(s));
        ASSERT_TRUE(d);
        EXPECT_EQ(*d, s);
    }
    EXPECT_EQ(base64_encode("nvfence/vol1"), "bnZmZW5jZS92b2wx");
    EXPECT_EQ(*base64_decode("bm9kZTE="), "node1");
    EXPECT_EQ(*base64_decode("bm9kZTE"), "node1");  // padding optional
    EXPECT_FALSE(base64_decode("bm9k ZTE="));
    EXPECT_FALSE(base64_decode("b"));
    EXPECT_FALSE(base64_decode("bm9kZTF="));  // non-zero leftover bits
    EXPECT_FALSE(base64_decode("bm9kZTE=="));
}

TEST(EtcdJson, LeaseGrantWithStringInts) {
    auto g = parse_lease_grant(with_header(R"("ID":"4111120352481180677","TTL":"2")"));
    ASSERT_TRUE(g) << g.error().message();
    EXPECT_EQ(g->id, 4111120352481180677);
    EXPECT_EQ(g->ttl_s, 2);
    EXPECT_EQ(g->reply.header.cluster_id, 15118495548433857066u);
    EXPECT_EQ(g->reply.header.revision, 2);
    // Numbers instead of strings are taken too.
    auto n = parse_lease_grant(R"({"ID":7,"TTL":5})");
    ASSERT_TRUE(n);
    EXPECT_EQ(n->id, 7);
    EXPECT_EQ(n->reply.header.cluster_id, 0u);
}

TEST(EtcdJson, LeaseGrantMissingOrBadFields) {
    EXPECT_EQ(parse_lease_grant(with_header(R"("TTL":"2")")).error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant(with_header(R"("ID":"12")")).error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant(with_header(R"("ID":"x12","TTL":"2")")).error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant(with_header(R"("ID":"99999999999999999999","TTL":"2")")).error(),
              make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant(R"({"header":"nope","ID":"1","TTL":"2"})").error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant("").error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant("[1]").error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_lease_grant("{\"ID\":").error(), make_error_code(Errc::malformed_data));
}

TEST(EtcdJson, ErrorBodiesOf34And35AndStreams) {
    // 3.4.23, HTTP 500:
    const std::string e34 =
        R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":2})";
    auto e = parse_error(e34);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, 2);
    EXPECT_EQ(e->message, "etcdserver: requested lease not found");
    EXPECT_EQ(classify_error(*e), make_error_code(ElectorErrc::lease_expired));
    EXPECT_EQ(parse_txn(e34).error(), make_error_code(ElectorErrc::lease_expired));
    // 3.5.16:
    auto e35 = parse_error(R"({"code":2,"message":"election: no leader"})");
    ASSERT_TRUE(e35);
    EXPECT_EQ(classify_error(*e35), make_error_code(ElectorErrc::no_leader));
    EXPECT_EQ(parse_leader(R"({"code":2,"message":"election: no leader"})").error(),
              make_error_code(ElectorErrc::no_leader));
    // A stream's error line:
    const std::string line =
        R"({"error":{"grpc_code":5,"http_code":404,"message":"etcdserver: requested lease not found","http_status":"Not Found"}})";
    EXPECT_EQ(parse_keepalive(line).error(), make_error_code(ElectorErrc::lease_expired));
    // Anything else is a server error; a normal reply is no error.
    EXPECT_EQ(parse_range(R"({"code":3,"message":"invalid character"})").error(),
              make_error_code(ElectorErrc::server_error));
    EXPECT_FALSE(parse_error(with_header("")));
    EXPECT_FALSE(parse_error("not json"));
}

TEST(EtcdJson, KeepaliveLineAndExpiredLease) {
    auto k = parse_keepalive(std::string(R"({"result":)") + with_header(R"("ID":"4111120352481180681","TTL":"5")") + "}");
    ASSERT_TRUE(k) << k.error().message();
    EXPECT_EQ(k->id, 4111120352481180681);
    EXPECT_EQ(k->ttl_s, 5);
    // An expired lease: TTL omitted (zero).
    auto gone = parse_keepalive(std::string(R"({"result":)") + with_header(R"("ID":"123")") + "}");
    ASSERT_TRUE(gone);
    EXPECT_EQ(gone->ttl_s, 0);
    // Not a stream line.
    EXPECT_EQ(parse_keepalive(with_header(R"("ID":"1","TTL":"5")")).error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_keepalive(R"({"result":{"ID":"-4","TTL":"5"}})").error(), make_error_code(Errc::malformed_data));
}

TEST(EtcdJson, WatchLinesOfACreateADeleteAndACompaction) {
    // Captured from etcd 3.4.23's /v3/watch.
    auto created = parse_watch(std::string(R"({"result":)") + with_header(R"("created":true)") + "}");
    ASSERT_TRUE(created) << created.error().message();
    EXPECT_TRUE(created->created);
    EXPECT_FALSE(created->canceled);
    EXPECT_TRUE(created->events.empty());
    auto put = parse_watch(std::string(R"({"result":)") +
                           with_header(R"("events":[{"kv":{"key":"bnZmZW5jZS94L2FiYw==","create_revision":"2","mod_revision":"2","version":"1","value":"dg=="}}])") +
                           "}");
    ASSERT_TRUE(put);
    ASSERT_EQ(put->events.size(), 1u);
    EXPECT_FALSE(put->events[0].deleted);  // PUT: type omitted
    EXPECT_EQ(put->events[0].kv.key, "nvfence/x/abc");
    auto del = parse_watch(std::string(R"({"result":)") +
                           with_header(R"("events":[{"type":"DELETE","kv":{"key":"bnZmZW5jZS94L2FiYw==","mod_revision":"3"}}])") +
                           "}");
    ASSERT_TRUE(del);
    ASSERT_EQ(del->events.size(), 1u);
    EXPECT_TRUE(del->events[0].deleted);
    EXPECT_EQ(del->events[0].kv.mod_revision, 3);
    auto compacted = parse_watch(
        R"({"result":{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","raft_term":"2"},"canceled":true,"compact_revision":"3"}})");
    ASSERT_TRUE(compacted);
    EXPECT_TRUE(compacted->canceled);
    EXPECT_EQ(compacted->compact_revision, 3);
    // Errors and junk.
    EXPECT_EQ(parse_watch(R"({"error":{"grpc_code":5,"http_code":404,"message":"etcdserver: requested lease not found"}})").error(),
              make_error_code(ElectorErrc::lease_expired));
    EXPECT_EQ(parse_watch(with_header(R"("created":true)")).error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_watch(R"({"result":{"events":[{"type":"MOVE"}]}})").error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_watch(R"({"result":{"events":{}}})").error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_watch(R"({"result":{"created":"yes"}})").error(), make_error_code(Errc::malformed_data));
}

TEST(EtcdJson, LeaderAndObserve) {
    const std::string kv =
        R"("kv":{"key":"bnZmZW5jZS92b2wxLzM5MGRhMjJkY2U4NGZjMDk=","create_revision":"2","mod_revision":"2","version":"1","value":"bm9kZTE=","lease":"4111120352481180681"})";
    Header h;
    auto l = parse_leader(with_header(kv), &h);
    ASSERT_TRUE(l) << l.error().message();
    EXPECT_EQ(l->key, "nvfence/vol1/390da22dce84fc09");
    EXPECT_EQ(l->value, "node1");
    EXPECT_EQ(l->revision, 2);
    EXPECT_EQ(h.cluster_id, 15118495548433857066u);
    auto o = parse_observe(std::string(R"({"result":)") + with_header(kv) + "}");
    ASSERT_TRUE(o);
    EXPECT_TRUE(o->same_leadership(*l));
    // A reply without kv: nobody leads.
    EXPECT_EQ(parse_leader(with_header("")).error(), make_error_code(ElectorErrc::no_leader));
    // A kv without create_revision is not a leader key.
    EXPECT_EQ(parse_leader(with_header(R"("kv":{"key":"eA=="})")).error(), make_error_code(Errc::malformed_data));
}

TEST(EtcdJson, TxnSucceededOmittedWhenFalse) {
    auto ok = parse_txn(with_header(R"("succeeded":true,"responses":[{"response_put":{"header":{"revision":"3"}}}])"));
    ASSERT_TRUE(ok) << ok.error().message();
    EXPECT_TRUE(ok->succeeded);
    EXPECT_TRUE(ok->ranges.empty());
    auto failed = parse_txn(with_header(
        R"("responses":[{"response_range":{"header":{"revision":"3"},"kvs":[{"key":"bnZmZW5jZS1lcG9jaC92b2wx","create_revision":"3","mod_revision":"3","version":"1","value":"MQ=="}],"count":"1"}},{"response_range":{"header":{"revision":"3"}}}])"));
    ASSERT_TRUE(failed) << failed.error().message();
    EXPECT_FALSE(failed->succeeded);
    ASSERT_EQ(failed->ranges.size(), 2u);
    ASSERT_EQ(failed->ranges[0].kvs.size(), 1u);
    EXPECT_EQ(failed->ranges[0].kvs[0].value, "1");
    EXPECT_EQ(failed->ranges[0].kvs[0].create_revision, 3);
    EXPECT_TRUE(failed->ranges[1].kvs.empty());
    EXPECT_EQ(parse_txn(with_header(R"("succeeded":"yes")")).error(), make_error_code(Errc::malformed_data));
    EXPECT_EQ(parse_txn(with_header(R"("responses":{})")).error(), make_error_code(Errc::malformed_data));
}

TEST(EtcdJson, CounterValue) {
    auto c = parse_counter("41 1234");
    ASSERT_TRUE(c);
    EXPECT_EQ(c->epoch, 41u);
    EXPECT_EQ(c->leader_rev, 1234);
    EXPECT_EQ(format_counter(*c), "41 1234");
    for (const char* bad : {"", "41", "41 ", " 41 1", "0 5", "5 0", "041 5", "4294967296 5", "1 2 3", "1  2", "-1 2", "1 x"})
        EXPECT_FALSE(parse_counter(bad)) << bad;
    EXPECT_TRUE(parse_counter("4294967295 9223372036854775807"));
}

TEST(EtcdJson, RequestsCarryInt64AsStringsAndBase64) {
    EXPECT_EQ(grant_request(5), R"({"TTL":"5"})");
    EXPECT_EQ(lease_request(42), R"({"ID":"42"})");
    EXPECT_EQ(name_request("nvfence/vol1"), R"({"name":"bnZmZW5jZS92b2wx"})");
    // The candidacy, the leader lookup and the watch a campaign is made of,
    // byte for byte (nlohmann orders keys alphabetically).
    EXPECT_EQ(candidacy_txn_request("nvfence/vol1/7", 7, "node1"),
              R"({"compare":[{"create_revision":"0","key":"bnZmZW5jZS92b2wxLzc=","result":"EQUAL","target":"CREATE"}],)"
              R"("failure":[{"request_range":{"key":"bnZmZW5jZS92b2wxLzc="}}],)"
              R"("success":[{"request_put":{"key":"bnZmZW5jZS92b2wxLzc=","lease":"7","value":"bm9kZTE="}}]})");
    // range_end "nvfence/vol10": the prefix "nvfence/vol1/" with '/' + 1.
    EXPECT_EQ(first_created_request("nvfence/vol1/"),
              R"({"key":"bnZmZW5jZS92b2wxLw==","limit":"64","range_end":"bnZmZW5jZS92b2wxMA==","sort_order":"ASCEND","sort_target":"CREATE"})");
    EXPECT_EQ(*base64_decode("bnZmZW5jZS92b2wxMA=="), "nvfence/vol10");
    EXPECT_EQ(leader_and_counter_request("nvfence/vol1/", "nvfence/vol1.epoch"),
              R"({"success":[{"request_range":{"key":"bnZmZW5jZS92b2wxLw==","limit":"64","range_end":"bnZmZW5jZS92b2wxMA==","sort_order":"ASCEND","sort_target":"CREATE"}},)"
              R"({"request_range":{"key":"bnZmZW5jZS92b2wxLmVwb2No"}}]})");
    EXPECT_EQ(*base64_decode("bnZmZW5jZS92b2wxLmVwb2No"), "nvfence/vol1.epoch");
    EXPECT_EQ(watch_request("nvfence/vol1/7", 12),
              R"({"create_request":{"key":"bnZmZW5jZS92b2wxLzc=","start_revision":"12"}})");
    LeaderInfo l;
    l.key = "nvfence/vol1/7";
    l.revision = 9;
    l.lease = 7;
    const std::string t = token_txn_request("nvfence/vol1.epoch", l, 0, {3, 9});
    EXPECT_NE(t.find(R"("create_revision":"9")"), std::string::npos);
    EXPECT_NE(t.find(R"("mod_revision":"0")"), std::string::npos);
    EXPECT_NE(t.find(base64_encode("3 9")), std::string::npos);
}

// The token transaction writes a counter guarded by the leadership it names:
// a value for another leadership, or token 0, is the elector's bug.
TEST(EtcdJsonDeathTest, TokenForAnotherLeadershipAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    LeaderInfo l;
    l.key = "nvfence/vol1/7";
    l.revision = 9;
    l.lease = 7;
    EXPECT_DEATH((void)token_txn_request("nvfence/vol1.epoch", l, 0, {3, 8}), "broken invariant");
    EXPECT_DEATH((void)token_txn_request("nvfence/vol1.epoch", l, 0, {0, 9}), "broken invariant");
}

// A hostile or broken etcd: a line nested 100,000 levels deep (200 KB, under
// the 1 MiB bound) on the keepalive, watch and observe streams and in a
// plain reply. A recursive parser overflows the stack on it (SIGSEGV, seen
// at -O2); it must be refused as malformed data without recursion.
TEST(EtcdJson, DeeplyNestedRepliesAreRefusedWithoutRecursion) {
    const size_t levels = 100000;
    const std::string arrays = std::string(levels, '[') + std::string(levels, ']');
    const std::string objects = [&] {
        std::string s;
        for (size_t i = 0; i < levels; ++i) s += "{\"a\":";
        s += "1";
        s += std::string(levels, '}');
        return s;
    }();
    ASSERT_LE(objects.size(), kMaxReplyBytes);
    for (const std::string& inner : {arrays, objects}) {
        const std::string line = R"({"result":{"ID":"7","TTL":"5","x":)" + inner + "}}";
        EXPECT_EQ(parse_keepalive(line).error(), make_error_code(Errc::malformed_data));
        EXPECT_EQ(parse_watch(line).error(), make_error_code(Errc::malformed_data));
        EXPECT_EQ(parse_observe(line).error(), make_error_code(Errc::malformed_data));
        EXPECT_EQ(parse_txn(with_header("\"x\":" + inner)).error(), make_error_code(Errc::malformed_data));
        EXPECT_FALSE(parse_error(with_header("\"x\":" + inner)));
    }
}

// Depth up to kMaxJsonDepth is still read; brackets inside strings (and
// escaped quotes) do not count.
TEST(EtcdJson, NestingUpToTheBoundAndBracketsInStringsAreRead) {
    std::string deep = "1";
    for (size_t i = 0; i + 2 < kMaxJsonDepth; ++i) deep = "[" + deep + "]";  // the line: kMaxJsonDepth deep
    const std::string line = R"({"result":{"ID":"7","TTL":"5","x":)" + deep + R"(,"s":"[[[{{{\"[[["}})";
    auto k = parse_keepalive(line);
    ASSERT_TRUE(k) << k.error().message();
    EXPECT_EQ(k->ttl_s, 5);
    const std::string over = R"({"result":{"ID":"7","TTL":"5","x":[)" + deep + "]}}";  // one more
    EXPECT_EQ(parse_keepalive(over).error(), make_error_code(Errc::malformed_data));
}

// Only candidacies lead: `<election>/<lease hex>` on a lease. Another
// election named `<election>/x` (its candidacies, its counter) and keys
// without a lease are skipped, in create order.
TEST(EtcdJson, OnlyACandidacyOfTheElectionLeads) {
    using namespace nvfence::etcd;
    auto kv = [](std::string key, int64_t lease, int64_t rev) {
        Kv k;
        k.key = std::move(key);
        k.lease = lease;
        k.create_revision = rev;
        return k;
    };
    const std::string p = "nvfence/vol1/";
    EXPECT_TRUE(is_candidacy(p, kv("nvfence/vol1/694d7b0c5a1e2f03", 7, 1)));
    EXPECT_FALSE(is_candidacy(p, kv("nvfence/vol1/694d7b0c5a1e2f03", 0, 1))) << "no lease";
    EXPECT_FALSE(is_candidacy(p, kv("nvfence/vol1/x/694d", 7, 1))) << "election nvfence/vol1/x";
    EXPECT_FALSE(is_candidacy(p, kv("nvfence/vol1/x.epoch", 0, 1)));
    EXPECT_FALSE(is_candidacy(p, kv("nvfence/vol1/ABC", 7, 1))) << "campaigns write lowercase hex";
    EXPECT_FALSE(is_candidacy(p, kv("nvfence/vol1/", 7, 1)));
    EXPECT_FALSE(is_candidacy(p, kv("nvfence/vol1/1234567890abcdef0", 7, 1))) << "longer than a lease id";
    RangeReply r;
    r.kvs = {kv("nvfence/vol1/notes", 0, 3), kv("nvfence/vol1/x/1a", 9, 4), kv("nvfence/vol1/2b", 8, 5),
             kv("nvfence/vol1/3c", 9, 6)};
    const Kv* first = first_candidacy(p, r);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->key, "nvfence/vol1/2b");
    r.kvs.resize(2);
    EXPECT_EQ(first_candidacy(p, r), nullptr);
    EXPECT_EQ(printable_excerpt("<html>\n <body>503\tService\x01 Unavailable</body>\n"),
              "'<html> <body>503 Service Unavailable</body>'");
    EXPECT_EQ(printable_excerpt(""), "(empty)");
    EXPECT_EQ(printable_excerpt(std::string(500, 'x')).size(), 2 + 120 + 3u);
}
