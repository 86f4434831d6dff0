// SPDX-License-Identifier: MIT
#include "nvfence/command.hpp"

#include <cstdlib>
#include <string>

#include "nvfence/error.hpp"
#include "internal/byte_order.hpp"
#include "internal/invariant.hpp"

namespace nvfence {
namespace {

void put_le64(std::array<uint8_t, 16>& p, size_t off, uint64_t v) { store_le(p.data() + off, v); }

uint32_t action_dw10(uint8_t action, bool iekey, uint8_t rtype) {
    return (action & 0x7u) | (iekey ? 1u << 3 : 0u) | (uint32_t{rtype} << 8);
}

}  // namespace

Command encode_register(const RegisterArgs& a) {
    Command c;
    c.opcode = opcode::kResvRegister;
    c.nsid = a.nsid;
    c.cdw[0] = action_dw10(static_cast<uint8_t>(a.action), a.iekey, 0) |
               (uint32_t{static_cast<uint8_t>(a.cptpl)} << 30);
    c.host_to_device = true;
    c.data_len = 16;
    put_le64(c.payload, 0, a.crkey);
    put_le64(c.payload, 8, a.nrkey);
    return c;
}

Command encode_acquire(const AcquireArgs& a) {
    Command c;
    c.opcode = opcode::kResvAcquire;
    c.nsid = a.nsid;
    c.cdw[0] = action_dw10(static_cast<uint8_t>(a.action), a.iekey, static_cast<uint8_t>(a.type));
    c.host_to_device = true;
    c.data_len = 16;
    put_le64(c.payload, 0, a.crkey);
    put_le64(c.payload, 8, a.prkey);
    return c;
}

Command encode_release(const ReleaseArgs& a) {
    Command c;
    c.opcode = opcode::kResvRelease;
    c.nsid = a.nsid;
    c.cdw[0] = action_dw10(static_cast<uint8_t>(a.action), a.iekey, static_cast<uint8_t>(a.type));
    c.host_to_device = true;
    c.data_len = 8;
    put_le64(c.payload, 0, a.crkey);
    return c;
}

Command encode_report(const ReportArgs& a) {
    // A length that is not a whole number of dwords is a caller bug.
    NVF_INVARIANT(a.len_bytes >= 4 && a.len_bytes % 4 == 0);
    Command c;
    c.opcode = opcode::kResvReport;
    c.nsid = a.nsid;
    c.cdw[0] = a.len_bytes / 4 - 1;
    c.cdw[1] = a.extended ? 1u : 0u;
    c.data_len = a.len_bytes;
    return c;
}

Command encode_identify(IdentifyCns cns, uint32_t nsid) {
    Command c;
    c.queue = Queue::admin;
    c.opcode = opcode::kIdentify;
    c.nsid = nsid;
    c.cdw[0] = static_cast<uint8_t>(cns);
    c.data_len = 4096;
    return c;
}

Command encode_get_log_page(uint8_t lid, uint32_t nsid, uint32_t len_bytes, bool rae) {
    NVF_INVARIANT(len_bytes >= 4 && len_bytes % 4 == 0);
    const uint32_t numd = len_bytes / 4 - 1;
    Command c;
    c.queue = Queue::admin;
    c.opcode = opcode::kGetLogPage;
    c.nsid = nsid;
    c.cdw[0] = lid | (rae ? 1u << 15 : 0u) | ((numd & 0xffffu) << 16);
    c.cdw[1] = numd >> 16;
    c.data_len = len_bytes;
    return c;
}

Command encode_get_host_id() {
    Command c;
    c.queue = Queue::admin;
    c.opcode = opcode::kGetFeatures;
    c.cdw[0] = kFeatHostId;
    c.cdw[1] = 1;  // EXHID: the 128-bit identifier
    c.data_len = 16;
    return c;
}

Command encode_set_notification_mask(uint32_t nsid, const NotificationMask& m) {
    Command c;
    c.queue = Queue::admin;
    c.opcode = opcode::kSetFeatures;
    c.nsid = nsid;
    c.cdw[0] = kFeatResvNotifMask;
    c.cdw[1] = (m.registration_preempted ? 0u : 1u << 1) | (m.reservation_released ? 0u : 1u << 2) |
               (m.reservation_preempted ? 0u : 1u << 3);
    return c;
}

Command encode_get_notification_mask(uint32_t nsid) {
    Command c;
    c.queue = Queue::admin;
    c.opcode = opcode::kGetFeatures;
    c.nsid = nsid;
    c.cdw[0] = kFeatResvNotifMask;
    return c;
}

NotificationMask decode_notification_mask(uint32_t dw0) {
    return {!(dw0 & (1u << 1)), !(dw0 & (1u << 2)), !(dw0 & (1u << 3))};
}

Command encode_rw(bool write, uint32_t nsid, uint64_t slba, uint32_t nlb, uint32_t data_len) {
    NVF_INVARIANT(nlb >= 1 && nlb <= 0x10000);
    Command c;
    c.opcode = write ? opcode::kWrite : opcode::kRead;
    c.nsid = nsid;
    c.cdw[0] = static_cast<uint32_t>(slba);
    c.cdw[1] = static_cast<uint32_t>(slba >> 32);
    c.cdw[2] = (nlb - 1) & 0xffffu;
    c.data_len = data_len;
    c.host_to_device = write;
    return c;
}

Command encode_flush(uint32_t nsid) {
    Command c;
    c.opcode = opcode::kFlush;
    c.nsid = nsid;
    return c;
}

const char* resv_type_short(ResvType t) {
    switch (t) {
    case ResvType::none: return "none";
    case ResvType::write_exclusive: return "WE";
    case ResvType::exclusive_access: return "EA";
    case ResvType::write_exclusive_reg_only: return "WERO";
    case ResvType::exclusive_access_reg_only: return "EARO";
    case ResvType::write_exclusive_all_regs: return "WEAR";
    case ResvType::exclusive_access_all_regs: return "EAAR";
    }
    return "unknown";
}

const char* resv_type_name(ResvType t) {
    switch (t) {
    case ResvType::none: return "none";
    case ResvType::write_exclusive: return "Write Exclusive";
    case ResvType::exclusive_access: return "Exclusive Access";
    case ResvType::write_exclusive_reg_only: return "Write Exclusive - Registrants Only";
    case ResvType::exclusive_access_reg_only: return "Exclusive Access - Registrants Only";
    case ResvType::write_exclusive_all_regs: return "Write Exclusive - All Registrants";
    case ResvType::exclusive_access_all_regs: return "Exclusive Access - All Registrants";
    }
    return "unknown";
}

bool resv_type_valid(uint8_t raw) { return raw >= 1 && raw <= 6; }

Result<ResvType> parse_resv_type(std::string_view name) {
    // Longer than any accepted name: refused before it is copied.
    if (name.empty() || name.size() > 40) return make_error_code(Errc::invalid_argument);
    std::string s(name);
    for (char& ch : s) {
        if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        if (ch == '_') ch = '-';
    }
    struct Name {
        const char* text;
        ResvType type;
    };
    static constexpr Name kNames[] = {
        {"we", ResvType::write_exclusive},
        {"exclusive", ResvType::write_exclusive},
        {"write-exclusive", ResvType::write_exclusive},
        {"ea", ResvType::exclusive_access},
        {"exclusive-access", ResvType::exclusive_access},
        {"wero", ResvType::write_exclusive_reg_only},
        {"shared", ResvType::write_exclusive_reg_only},
        {"registrants-only", ResvType::write_exclusive_reg_only},
        {"write-exclusive-reg-only", ResvType::write_exclusive_reg_only},
        {"write-exclusive-registrants-only", ResvType::write_exclusive_reg_only},
        {"earo", ResvType::exclusive_access_reg_only},
        {"exclusive-access-reg-only", ResvType::exclusive_access_reg_only},
        {"exclusive-access-registrants-only", ResvType::exclusive_access_reg_only},
        {"wear", ResvType::write_exclusive_all_regs},
        {"write-exclusive-all-regs", ResvType::write_exclusive_all_regs},
        {"write-exclusive-all-registrants", ResvType::write_exclusive_all_regs},
        {"eaar", ResvType::exclusive_access_all_regs},
        {"exclusive-access-all-regs", ResvType::exclusive_access_all_regs},
        {"exclusive-access-all-registrants", ResvType::exclusive_access_all_regs},
    };
    for (const Name& n : kNames)
        if (s == n.text) return n.type;
    return make_error_code(Errc::invalid_argument);
}

bool resv_type_all_registrants(ResvType t) {
    return t == ResvType::write_exclusive_all_regs || t == ResvType::exclusive_access_all_regs;
}

}  // namespace nvfence
