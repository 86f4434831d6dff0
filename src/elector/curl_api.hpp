// SPDX-License-Identifier: MIT
#pragma once
/// @file curl_api.hpp
/// libcurl, loaded at run time: the etcd elector's only way to it. No
/// binary links libcurl (an nvfenced without an elector does not map it
/// nor its dependency tree: TLS, Kerberos, LDAP, ...); the first etcd
/// elector dlopen()s it and resolves the few functions it calls.
/// <curl/curl.h> gives the types only.

#include <curl/curl.h>

#include <string>

#include "nvfence/result.hpp"

namespace nvfence {

/// The library the product loads (Debian's libcurl4).
inline constexpr const char* kCurlLibrary = "libcurl.so.4";

/// The libcurl functions the etcd elector calls, each resolved by dlsym.
struct CurlApi {
    decltype(&::curl_global_init) global_init = nullptr;
    decltype(&::curl_easy_init) easy_init = nullptr;
    decltype(&::curl_easy_setopt) easy_setopt = nullptr;
    decltype(&::curl_easy_perform) easy_perform = nullptr;
    decltype(&::curl_easy_getinfo) easy_getinfo = nullptr;
    decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
    decltype(&::curl_easy_strerror) easy_strerror = nullptr;
    decltype(&::curl_slist_append) slist_append = nullptr;
    decltype(&::curl_slist_free_all) slist_free_all = nullptr;
};

/// Loads @p library (RTLD_NOW | RTLD_LOCAL) and resolves every CurlApi
/// function in it. ElectorErrc::library_missing with @p why naming the
/// library and dlerror()'s words when it does not load or lacks one.
/// Not cached: curl_api() is the product's call; tests name other files.
Result<CurlApi> load_curl_api(const std::string& library, std::string& why);

/// kCurlLibrary's CurlApi, loaded once per process (thread-safe) and
/// curl_global_init()ed; the failure of that one attempt otherwise, with @p why.
Result<const CurlApi*> curl_api(std::string& why);

}  // namespace nvfence
