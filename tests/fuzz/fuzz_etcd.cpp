// SPDX-License-Identifier: MIT
// libFuzzer target for the etcd v3 JSON gateway parsers (etcd_json.hpp) and
// the local token record: any bytes an etcd endpoint (or a man in the
// middle without TLS) or a damaged state file gives us.
// Properties: no parser crashes, throws or reads out of bounds; base64 of
// full padded input decodes and re-encodes to the same bytes; a parsed
// counter or token record prints back to its input; a parsed leader
// reply carries a positive revision and a non-empty key; a watch
// reply keeps at most 64 events; a believed TTL is within etcd's maximum.
// Inputs go up to the parsers' own bound (kMaxReplyBytes, run.sh), deeply
// nested ones included (seed `nested`).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "elector/etcd.hpp"
#include "elector/etcd_json.hpp"

using namespace nvfence;
using namespace nvfence::etcd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    (void)parse_error(in);
    (void)parse_lease_grant(in);
    if (auto k = parse_keepalive(in)) FUZZ_CHECK(k->ttl_s >= 0 && k->ttl_s <= kMaxLeaseTtlS && k->id > 0);
    if (auto l = parse_leader(in)) FUZZ_CHECK(l->revision > 0 && !l->key.empty());
    if (auto o = parse_observe(in)) FUZZ_CHECK(o->revision > 0 && !o->key.empty());
    if (auto r = parse_range(in)) FUZZ_CHECK(r->kvs.size() <= 64);
    (void)parse_txn(in);
    if (auto w = parse_watch(in)) FUZZ_CHECK(w->events.size() <= 64 && w->compact_revision >= 0);
    (void)parse_header_only(in);
    if (auto a = parse_auth_token(in)) {
        FUZZ_CHECK(!a->empty() && a->size() <= kMaxAuthTokenBytes);
        for (char c : *a) FUZZ_CHECK(c > ' ' && c < 0x7f);  // it goes into a header line
    }
    (void)auth_token_rejected(in.size() % 600, in);
    if (auto c = parse_counter(in)) FUZZ_CHECK(format_counter(*c) == in);
    if (auto t = parse_token_record(in)) {
        auto back = parse_token_record(format_token_record(*t));
        FUZZ_CHECK(back && *back == *t);
    }
    if (auto d = base64_decode(in)) {
        if (size % 4 == 0) FUZZ_CHECK(base64_encode(*d) == in);
        auto again = base64_decode(base64_encode(*d));
        FUZZ_CHECK(again && *again == *d);
    }
    return 0;
}
