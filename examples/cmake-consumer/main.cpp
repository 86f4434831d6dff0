// SPDX-License-Identifier: MIT
// A C++ program built against the installed libnvfence alone: the key
// scheme from the C++ headers, the version from the C API, and a typed
// refusal of a path that is not an NVMe namespace.
//   nvfence-consumer [PATH]     exit 0 when all of it behaved as documented
#include <nvfence/error.hpp>
#include <nvfence/key.hpp>
#include <nvfence/namespace.hpp>
#include <nvfence/nvfence.h>

#include <cstdio>
#include <cstring>
#include <span>  // C++20: fails to compile unless nvfence::nvfence asks for it

int main(int argc, char** argv) {
    auto key = nvfence::make_key({.tag = 3, .node = 2, .epoch = 41});
    if (!key) return 1;
    const std::string text = nvfence::format_key(*key);
    std::printf("key %s (%s), libnvfence %s\n", text.c_str(), nvfence::format_key_hex(*key).c_str(), nvf_version());
    if (text != "nf:3:2:41" || std::strcmp(nvf_version(), NVF_VERSION_STRING) != 0) return 1;
    const char* path = argc > 1 ? argv[1] : "/dev/null";
    auto ns = nvfence::Namespace::open(path);
    if (ns) return 1;
    std::printf("%s: %s (exit code %d)\n", path, ns.error().message().c_str(),
                static_cast<int>(nvfence::exit_code_for(ns.error())));
    return ns.error() == nvfence::Errc::not_nvme ? 0 : 1;
}
