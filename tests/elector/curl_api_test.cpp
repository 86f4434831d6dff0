// SPDX-License-Identifier: MIT
// libcurl loaded at run time (curl_api.hpp): a missing or unusable library
// is ElectorErrc::library_missing with words naming it; the real one
// resolves every function the etcd elector calls.
#include <gtest/gtest.h>

#include <string>

#include "elector/curl_api.hpp"
#include "elector/elector.hpp"

using namespace nvfence;

namespace {

void expect_complete(const CurlApi& api) {
    EXPECT_NE(api.global_init, nullptr);
    EXPECT_NE(api.easy_init, nullptr);
    EXPECT_NE(api.easy_setopt, nullptr);
    EXPECT_NE(api.easy_perform, nullptr);
    EXPECT_NE(api.easy_getinfo, nullptr);
    EXPECT_NE(api.easy_cleanup, nullptr);
    EXPECT_NE(api.easy_strerror, nullptr);
    EXPECT_NE(api.slist_append, nullptr);
    EXPECT_NE(api.slist_free_all, nullptr);
}

// The words of load_curl_api(@p library), which must refuse it.
std::string refusal(const std::string& library) {
    std::string why;
    auto r = load_curl_api(library, why);
    EXPECT_FALSE(r) << library << " loaded";
    if (!r) {
        EXPECT_EQ(r.error(), make_error_code(ElectorErrc::library_missing));
    }
    EXPECT_NE(why.find("elector = etcd needs " + library + ": "), std::string::npos) << why;
    return why;
}

}  // namespace

TEST(CurlApi, MissingLibraryIsAnErrorNamingIt) {
    // dlerror()'s words follow the name.
    const std::string why = refusal("libnvfence-no-such-curl.so.4");
    EXPECT_NE(why.find("No such file"), std::string::npos) << why;
}

TEST(CurlApi, LibraryWithoutCurlsFunctionsIsAnError) {
    const std::string why = refusal("libc.so.6");
    EXPECT_NE(why.find("curl_global_init"), std::string::npos) << why;
}

TEST(CurlApi, RealLibraryResolvesEveryFunction) {
    std::string why;
    auto r = load_curl_api(kCurlLibrary, why);
    ASSERT_TRUE(r) << why;
    EXPECT_TRUE(why.empty()) << why;
    expect_complete(*r);
    EXPECT_STREQ(r->easy_strerror(CURLE_OK), "No error");
}

TEST(CurlApi, ProductLoadIsOnceAndUsable) {
    std::string why;
    auto a = curl_api(why);
    ASSERT_TRUE(a) << why;
    auto b = curl_api(why);
    ASSERT_TRUE(b) << why;
    EXPECT_EQ(*a, *b);  // one load per process
    expect_complete(**a);
    CURL* h = (*a)->easy_init();
    ASSERT_NE(h, nullptr);
    curl_slist* hdr = (*a)->slist_append(nullptr, "X-Test: 1");
    EXPECT_NE(hdr, nullptr);
    EXPECT_EQ((*a)->easy_setopt(h, CURLOPT_HTTPHEADER, hdr), CURLE_OK);
    (*a)->slist_free_all(hdr);
    (*a)->easy_cleanup(h);
}

TEST(CurlApi, ErrorHasWords) {
    EXPECT_EQ(make_error_code(ElectorErrc::library_missing).message(), "a library the elector needs did not load");
}
