// SPDX-License-Identifier: MIT
// The CLI's --json writer (tools/nvfence/json): member order, the schema
// version first, every string valid JSON whatever its bytes, misuse fatal.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "json.hpp"

using nvfence::cli::Json;

TEST(CliJson, MembersInTheOrderWrittenAfterTheSchemaVersion) {
    Json j;
    j.begin_object().key("z").num(1).key("a").str("x").key("m").begin_array().snum(-2).boolean(true).null();
    j.end_array().key("o").begin_object().key("k").str("v").end_object().end_object();
    EXPECT_EQ(j.text(), R"({"schema_version":1,"z":1,"a":"x","m":[-2,true,null],"o":{"k":"v"}})");
}

TEST(CliJson, AnyBytesGiveValidJson) {
    // Control characters escaped; a byte that is not UTF-8 (a device's
    // model string may hold anything) becomes U+FFFD instead of breaking
    // the document.
    std::string raw = "q\"b\\s\n\t";
    raw.push_back('\x01');
    raw.push_back('\xff');
    raw += "\xc3\xa9";  // é, valid UTF-8, kept
    Json j;
    j.begin_object().key(raw).str(raw).end_object();
    const auto doc = nlohmann::json::parse(j.text(), nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << j.text();
    const std::string want = "q\"b\\s\n\t\x01\xef\xbf\xbd\xc3\xa9";
    ASSERT_TRUE(doc.contains(want)) << j.text();
    EXPECT_EQ(doc[want], want);
}

TEST(CliJson, LargeNumbersExact) {
    Json j;
    j.begin_object().key("u").num((uint64_t{1} << 53) - 1).key("s").snum(INT64_MIN).end_object();
    EXPECT_EQ(j.text(), R"({"schema_version":1,"u":9007199254740991,"s":-9223372036854775808})");
}

TEST(CliJson, MisuseIsABrokenInvariant) {
    EXPECT_DEATH({ Json j; j.begin_object().str("no name"); }, "broken invariant");
    EXPECT_DEATH({ Json j; j.begin_array().key("k"); }, "broken invariant");
    EXPECT_DEATH({ Json j; j.begin_object().end_array(); }, "broken invariant");
    EXPECT_DEATH({ Json j; j.begin_object(); (void)j.text(); }, "broken invariant");
}
