// SPDX-License-Identifier: MIT
#include "foreign.hpp"

#include "nvfence/key.hpp"

namespace nvfence::cli {

namespace {
bool foreign(uint64_t key) { return !decode_key(key).has_value(); }
}  // namespace

std::string foreign_refusal(std::optional<uint64_t> victim, const ReservationStatus* st, bool allow_foreign) {
    if (allow_foreign) return {};
    if (victim) {
        if (!foreign(*victim)) return {};
        return "--victim " + format_key_hex(*victim) +
               " is a foreign key (not nvfence's: fence_scsi, LVM or another tool registered it); nvfence removes "
               "a foreign key only when told so: add --foreign";
    }
    const Registrant* h = st ? st->holder() : nullptr;
    if (!h || !foreign(h->key)) return {};
    // Key 0 is a valid NVMe key (nvmet registers it) but --victim refuses it
    // as a usage error, so the hint for it must not name --victim.
    const std::string how = h->key == 0 ? "add --foreign (it preempts exactly the key read here)"
                                        : "name it with --victim " + format_key_hex(h->key) + " --foreign";
    return "the reservation is held by the foreign key " + format_key_hex(h->key) +
           " (not nvfence's: fence_scsi, LVM or another tool); nvfence preempts a foreign holder only when told "
           "so: " + how;
}

std::optional<uint64_t> foreign_victim(std::optional<uint64_t> victim, const ReservationStatus* st,
                                       bool allow_foreign) {
    if (victim || !allow_foreign || !st) return victim;
    const Registrant* h = st->holder();
    if (h && foreign(h->key)) return h->key;
    return std::nullopt;
}

std::string foreign_eviction_line(const std::string& dev, uint64_t key, uint32_t uid, bool removed) {
    return std::string("preempt --foreign: ") + (removed ? "removed" : "tried to remove") + " the foreign key " +
           format_key_hex(key) + " from " + dev + " (uid " + std::to_string(uid) + ")";
}

}  // namespace nvfence::cli
