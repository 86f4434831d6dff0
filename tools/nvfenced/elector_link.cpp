// SPDX-License-Identifier: MIT
#include "elector_link.hpp"

#include <unistd.h>

#include "nvfence/error.hpp"
#if NVFENCE_HAVE_ETCD
#include "elector/etcd.hpp"
#endif

namespace nvfenced {

std::optional<nvfence::ElectorSettings> ElectorLink::settings(const std::map<std::string, std::string>& kv,
                                                              const std::string& volume, std::string& why) {
    auto s = nvfence::parse_elector_settings(kv, volume, why);
    if (!s) return std::nullopt;
    if (!NVFENCE_HAVE_ETCD && s->kind == nvfence::ElectorKind::etcd) {
        why = "elector = etcd: this nvfenced was built without the etcd elector (configure with -DNVFENCE_ETCD=ON)";
        return std::nullopt;
    }
#if NVFENCE_HAVE_ETCD
    // libcurl is loaded only for an etcd elector; a missing one is a bad
    // configuration for this host, said at the check, not a crash later.
    if (s->kind == nvfence::ElectorKind::etcd && !nvfence::EtcdElector::load_library(why)) return std::nullopt;
#endif
    return *s;
}

ElectorLink::ElectorLink(nvfence::ElectorSettings es, uint8_t tag, const nvfence::HostId& self,
                         const nvfence::EpochStore* epochs, std::unique_ptr<nvfence::Elector> elector)
    : es_(std::move(es)), elector_(std::move(elector)), bridge_(tag, self, epochs) {}

std::unique_ptr<ElectorLink> ElectorLink::create(const nvfence::ElectorSettings& es, uint8_t node, uint8_t tag,
                                                 const nvfence::HostId& self, const nvfence::EpochStore* epochs,
                                                 const std::string& state_dir, const std::string& volume,
                                                 std::string& why) {
#if NVFENCE_HAVE_ETCD
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    std::string detail;
    auto e = nvfence::EtcdElector::create(
        nvfence::etcd_options(es, "node=" + std::to_string(node) + " host=" + host, state_dir, volume), &detail);
    if (!e) {
        why = detail.empty() ? "elector = etcd: " + e.error().message() : detail;
        return nullptr;
    }
    return std::unique_ptr<ElectorLink>(new ElectorLink(es, tag, self, epochs, std::move(*e)));
#else
    (void)es, (void)node, (void)tag, (void)self, (void)epochs, (void)state_dir, (void)volume;
    why = "elector = etcd: this nvfenced was built without the etcd elector";
    return nullptr;
#endif
}

ElectorLink::~ElectorLink() { thread_.reset(); }

void ElectorLink::start() {
    if (!thread_)
        thread_ = std::make_unique<nvfence::ElectorThread>(*elector_, bridge_, nvfence::lease_guard_options(es_),
                                                           std::chrono::milliseconds(es_.etcd_timeout_ms));
}

bool ElectorLink::refuse(const nvfence::ControlRequest& q, nvfence::ControlReply& out, nvfence::Agent& agent) const {
    if (q.op != nvfence::ControlOp::takeover) return false;
    out = agent.status();
    out.op = q.op;
    out.id = q.id;
    out.exit_code = static_cast<uint8_t>(kExitElectorOwnsTakeover);
    out.message = "takeover refused: elector = etcd decides who holds (election " + es_.election_name +
                  "); stop the leader's nvfenced, or make it resign, and the next elected host takes over";
    return true;
}

void ElectorLink::decorate(nvfence::ControlReply& r) const { r.message += "; elector: " + describe(); }

}  // namespace nvfenced
