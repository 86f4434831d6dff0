// SPDX-License-Identifier: MIT
// The elector's error category (elector.hpp): every elector's, not only
// etcd's, so it is built with or without NVFENCE_ETCD.
#include <string>
#include <system_error>

#include "elector/elector.hpp"

namespace nvfence {
namespace {

class ElectorCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "elector"; }
    std::string message(int v) const override {
        switch (static_cast<ElectorErrc>(v)) {
        case ElectorErrc::unreachable: return "coordination service unreachable";
        case ElectorErrc::server_error: return "coordination service error";
        case ElectorErrc::lease_expired: return "lease expired";
        case ElectorErrc::no_leader: return "no leader";
        case ElectorErrc::not_leader: return "not the leader";
        case ElectorErrc::not_campaigning: return "no campaign in progress";
        case ElectorErrc::auth_failed: return "authentication refused";
        case ElectorErrc::library_missing: return "a library the elector needs did not load";
        }
        return "unknown elector error";
    }
};

}  // namespace

const std::error_category& elector_category() noexcept {
    static const ElectorCategory c;
    return c;
}

std::error_code make_error_code(ElectorErrc e) noexcept { return {static_cast<int>(e), elector_category()}; }

}  // namespace nvfence
