// SPDX-License-Identifier: MIT
#include "elector/curl_api.hpp"

#include <dlfcn.h>

#include "elector/elector.hpp"

namespace nvfence {

namespace {

// dlerror()'s words for the last failed dl call (never null).
std::string dl_reason() {
    const char* e = ::dlerror();
    return e ? e : "unknown dynamic loader error";
}

// Resolves @p name in @p handle into @p fn; false when it is not there.
template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn) {
    void* p = ::dlsym(handle, name);
    fn = reinterpret_cast<Fn>(p);
    return p != nullptr;
}

}  // namespace

Result<CurlApi> load_curl_api(const std::string& library, std::string& why) {
    why.clear();
    ::dlerror();  // a stale error must not stand for this call's
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        why = "elector = etcd needs " + library + ": " + dl_reason();
        return make_error_code(ElectorErrc::library_missing);
    }
    CurlApi api;
    const bool all = resolve(handle, "curl_global_init", api.global_init) &&
                     resolve(handle, "curl_easy_init", api.easy_init) &&
                     resolve(handle, "curl_easy_setopt", api.easy_setopt) &&
                     resolve(handle, "curl_easy_perform", api.easy_perform) &&
                     resolve(handle, "curl_easy_getinfo", api.easy_getinfo) &&
                     resolve(handle, "curl_easy_cleanup", api.easy_cleanup) &&
                     resolve(handle, "curl_easy_strerror", api.easy_strerror) &&
                     resolve(handle, "curl_slist_append", api.slist_append) &&
                     resolve(handle, "curl_slist_free_all", api.slist_free_all);
    if (!all) {
        why = "elector = etcd needs " + library + ": " + dl_reason();
        ::dlclose(handle);
        return make_error_code(ElectorErrc::library_missing);
    }
    // The handle is never closed: the functions are used until the process
    // ends (and libcurl's global state with them). Not a leak: a dlopen
    // handle kept for the process lifetime, as a linked library would be.
    return api;
}

Result<const CurlApi*> curl_api(std::string& why) {
    struct Loaded {
        std::string why;
        std::error_code error;
        CurlApi api;
    };
    // A function-local static: loaded once, by the first caller, whichever thread.
    static const Loaded loaded = [] {
        Loaded l;
        auto api = load_curl_api(kCurlLibrary, l.why);
        if (!api) {
            l.error = api.error();
            return l;
        }
        l.api = *api;
        if (const CURLcode rc = l.api.global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK) {
            l.why = std::string("elector = etcd: curl_global_init: ") + l.api.easy_strerror(rc);
            l.error = make_error_code(ElectorErrc::library_missing);
        }
        return l;
    }();
    if (loaded.error) {
        why = loaded.why;
        return loaded.error;
    }
    return &loaded.api;
}

}  // namespace nvfence
