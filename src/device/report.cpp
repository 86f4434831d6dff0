// SPDX-License-Identifier: MIT
#include "nvfence/report.hpp"

#include <algorithm>
#include <cstdio>

#include "nvfence/error.hpp"
#include "internal/byte_order.hpp"
#include "internal/file_name.hpp"
#include "internal/invariant.hpp"

namespace nvfence {
namespace {

// Fields of a device's data structure: the callers check the length first
// (a device's short buffer is malformed data, refused before any field).
template <class T>
T field(std::span<const uint8_t> b, size_t o) {
    NVF_INVARIANT(o <= b.size() && sizeof(T) <= b.size() - o);
    return load_le<T>(&b[o]);
}
uint16_t le16(std::span<const uint8_t> b, size_t o) { return field<uint16_t>(b, o); }
uint32_t le32(std::span<const uint8_t> b, size_t o) { return field<uint32_t>(b, o); }
uint64_t le64(std::span<const uint8_t> b, size_t o) { return field<uint64_t>(b, o); }

// Identify strings are space padded ASCII; anything unprintable is replaced
// so a hostile device cannot inject control characters into our output.
std::string trimmed(std::span<const uint8_t> b, size_t off, size_t len) {
    NVF_INVARIANT(off <= b.size() && len <= b.size() - off);
    std::string s;
    for (size_t i = 0; i < len; ++i) {
        uint8_t c = b[off + i];
        if (c == 0) break;
        s.push_back((c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    size_t first = s.find_first_not_of(' ');
    return first == std::string::npos ? std::string{} : s.substr(first);
}

}  // namespace

std::string format_host_id(const HostId& id) {
    std::string s;
    char buf[3];
    for (uint8_t b : id) {
        std::snprintf(buf, sizeof buf, "%02x", b);
        s += buf;
    }
    return s;
}

bool host_id_is_zero(const HostId& id) {
    for (uint8_t b : id)
        if (b) return false;
    return true;
}

const Registrant* ReservationStatus::holder() const {
    for (const auto& r : registrants)
        if (r.holder) return &r;
    return nullptr;
}

const Registrant* ReservationStatus::find_host(const HostId& id) const {
    // The plain data structure carries 64-bit host ids: compare those bytes.
    const size_t n = extended ? id.size() : 8;
    for (const auto& r : registrants)
        if (std::equal(id.begin(), id.begin() + static_cast<std::ptrdiff_t>(n), r.host_id.begin())) return &r;
    return nullptr;
}

size_t report_size_for(uint16_t n, bool extended) {
    return extended ? kReportExtHeaderBytes + size_t{n} * kRegistrantExtBytes
                    : kReportHeaderBytes + size_t{n} * kRegistrantBytes;
}

Result<ReservationStatus> parse_report(std::span<const uint8_t> buf, bool extended) {
    const size_t header = extended ? kReportExtHeaderBytes : kReportHeaderBytes;
    const size_t entry = extended ? kRegistrantExtBytes : kRegistrantBytes;
    if (buf.size() < header) return make_error_code(Errc::malformed_data);
    ReservationStatus st;
    st.extended = extended;
    st.generation = le32(buf, 0);
    st.raw_type = buf[4];
    if (st.raw_type > 6) return make_error_code(Errc::malformed_data);
    st.type = static_cast<ResvType>(st.raw_type);
    st.num_registrants = le16(buf, 5);
    st.ptpl = buf[9] & 1;
    const size_t fit = (buf.size() - header) / entry;
    const size_t n = std::min<size_t>(fit, st.num_registrants);
    st.registrants.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        auto e = buf.subspan(header + i * entry, entry);
        Registrant r;
        r.cntlid = le16(e, 0);
        r.holder = e[2] & 1;
        if (extended) {
            r.key = le64(e, 8);
            std::copy(e.begin() + 16, e.begin() + 32, r.host_id.begin());
        } else {
            std::copy(e.begin() + 8, e.begin() + 16, r.host_id.begin());
            r.key = le64(e, 16);
        }
        st.registrants.push_back(r);
    }
    // Never more entries than the device claims, never one read past the
    // buffer: truncated() tells the caller to read again with more room.
    NVF_INVARIANT(st.registrants.size() <= st.num_registrants);
    NVF_INVARIANT(header + st.registrants.size() * entry <= buf.size());
    return st;
}

const char* notification_type_name(NotificationType t) {
    switch (t) {
    case NotificationType::empty: return "empty";
    case NotificationType::registration_preempted: return "registration preempted";
    case NotificationType::reservation_released: return "reservation released";
    case NotificationType::reservation_preempted: return "reservation preempted";
    }
    return "unknown";
}

Result<ResvNotification> parse_notification_log(std::span<const uint8_t> buf) {
    if (buf.size() < 64) return make_error_code(Errc::malformed_data);
    ResvNotification n;
    n.log_page_count = le64(buf, 0);
    if (buf[8] > 3) return make_error_code(Errc::malformed_data);
    n.type = static_cast<NotificationType>(buf[8]);
    n.available = buf[9];
    n.nsid = le32(buf, 12);
    return n;
}

Result<ControllerIdentity> parse_identify_controller(std::span<const uint8_t> buf) {
    if (buf.size() < 4096) return make_error_code(Errc::malformed_data);
    ControllerIdentity c;
    c.vid = le16(buf, 0);
    c.serial = trimmed(buf, 4, 20);
    c.model = trimmed(buf, 24, 40);
    c.firmware = trimmed(buf, 64, 8);
    c.multi_controller = buf[76] & 0x2;
    c.cntlid = le16(buf, 78);
    c.hostid_128 = le32(buf, 96) & 1;
    c.reservations = le16(buf, 520) & (1u << 5);
    c.subnqn = trimmed(buf, 768, 256);
    return c;
}

bool ResvCaps::supports(ResvType t) const {
    switch (t) {
    case ResvType::write_exclusive: return we;
    case ResvType::exclusive_access: return ea;
    case ResvType::write_exclusive_reg_only: return wero;
    case ResvType::exclusive_access_reg_only: return earo;
    case ResvType::write_exclusive_all_regs: return wear;
    case ResvType::exclusive_access_all_regs: return eaar;
    case ResvType::none: return false;
    }
    return false;
}

Result<NamespaceIdentity> parse_identify_namespace(std::span<const uint8_t> buf) {
    if (buf.size() < 4096) return make_error_code(Errc::malformed_data);
    if (std::all_of(buf.begin(), buf.begin() + 4096, [](uint8_t b) { return b == 0; }))
        return make_error_code(Errc::device_gone);
    NamespaceIdentity n;
    n.size_blocks = le64(buf, 0);
    n.capacity_blocks = le64(buf, 8);
    const unsigned nlbaf = buf[25];
    const uint8_t flbas = buf[26];
    const unsigned idx = (flbas & 0xfu) | (((flbas >> 5) & 0x3u) << 4);
    if (idx > nlbaf || idx >= 64) return make_error_code(Errc::malformed_data);
    const uint32_t lbaf = le32(buf, 128 + 4 * idx);
    const unsigned lbads = (lbaf >> 16) & 0xff;
    if (lbads < 9 || lbads > 16) return make_error_code(Errc::malformed_data);
    n.lba_bytes = 1u << lbads;
    n.metadata_bytes = static_cast<uint16_t>(lbaf & 0xffff);
    n.shared = buf[30] & 1;
    const uint8_t r = buf[31];
    n.rescap_raw = r;
    std::copy(buf.begin() + 104, buf.begin() + 120, n.nguid.begin());
    std::copy(buf.begin() + 120, buf.begin() + 128, n.eui64.begin());
    n.rescap = ResvCaps{bool(r & 0x01), bool(r & 0x02), bool(r & 0x04), bool(r & 0x08),
                        bool(r & 0x10), bool(r & 0x20), bool(r & 0x40), bool(r & 0x80)};
    return n;
}

std::optional<std::string> ebs_volume_id(const std::string& serial) {
    if (serial.size() < 4 || serial.compare(0, 3, "vol") != 0) return std::nullopt;
    std::string rest = serial.substr(3);
    if (!rest.empty() && rest[0] == '-') rest.erase(0, 1);
    if (rest.empty() || rest.size() > 32) return std::nullopt;
    for (char c : rest)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
    return "vol-" + rest;
}

bool is_ebs_model(const std::string& model) {
    return model == "Amazon Elastic Block Store";
}

std::string volume_id(const std::string& serial, const NamespaceIdentity& ns, uint32_t nsid) {
    // An EBS volume is one controller with one namespace, nsid 1. A target
    // that copies an EBS-style serial onto several namespaces (a lab, a
    // gateway) must still give each its own name: every per-volume thing
    // (the agent's socket, its epoch store, the udev link) is keyed by it.
    if (auto ebs = ebs_volume_id(serial)) return nsid == 1 ? *ebs : *ebs + "-n" + std::to_string(nsid);
    auto hex = [](std::span<const uint8_t> b) {
        std::string s;
        bool nonzero = false;
        char t[3];
        for (uint8_t x : b) {
            nonzero |= x != 0;
            std::snprintf(t, sizeof t, "%02x", x);
            s += t;
        }
        return nonzero ? s : std::string{};
    };
    if (auto g = hex(ns.nguid); !g.empty()) return "nguid-" + g;
    if (auto e = hex(ns.eui64); !e.empty()) return "eui-" + e;
    std::string out = file_name_bytes(serial);
    if (out.empty()) out = "unnamed";
    return out + "-n" + std::to_string(nsid);
}

}  // namespace nvfence
