// SPDX-License-Identifier: MIT
#include "nvfence/reservation.hpp"

#include <algorithm>
#include <vector>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"

namespace nvfence {

namespace {
Status send(Passthru& pt, const Command& c) {
    auto r = pt.submit(c, {});
    if (!r) return r.error();
    return Ok{};
}
}  // namespace

Status Reservations::reg(RegisterArgs a) {
    a.nsid = nsid_;
    return send(pt_, encode_register(a));
}

Status Reservations::acquire(AcquireArgs a) {
    a.nsid = nsid_;
    Command c = encode_acquire(a);
    if (a.action == AcquireAction::preempt_and_abort) c.timeout_ms = kPreemptAbortTimeoutMs;
    return send(pt_, c);
}

Status Reservations::release(ReleaseArgs a) {
    a.nsid = nsid_;
    return send(pt_, encode_release(a));
}

Result<ReservationStatus> Reservations::report_once(bool extended, uint32_t len,
                                                    std::vector<uint8_t>& buf) {
    // Never ask for less than the header: a device may refuse it (nvmet
    // answers Invalid Field, which would read as "no extended report").
    // Nor more than the largest report there can be (65535 registrants).
    const uint32_t header = static_cast<uint32_t>(extended ? kReportExtHeaderBytes : kReportHeaderBytes);
    const uint32_t most = static_cast<uint32_t>(report_size_for(0xffff, true));
    len = std::clamp(len, header, most);
    len = (len + 3) & ~uint32_t{3};
    // A whole number of dwords (the command's NUMD), at least the header and
    // at most the largest report: the rounding never passes the bound.
    NVF_INVARIANT(len % 4 == 0 && len >= header && len <= most);
    ++last_reads_;
    buf.assign(len, 0);
    auto r = pt_.submit(encode_report({nsid_, extended, len}), buf);
    if (!r) return r.error();
    return parse_report(buf, extended);
}

Result<ReservationStatus> Reservations::report() {
    std::vector<uint8_t> buf;
    // Decided per call from what the device accepts now, never latched: one
    // Invalid Field (a transient refusal) must not switch a device that needs
    // the extended structure (nvmet with 128-bit host ids) to one it refuses.
    bool extended = true;
    extended_refused_ = false;
    uint32_t len = initial_bytes_;
    last_reads_ = 0;
    for (int i = 0; i < kReportMaxReads; ++i) {
        auto st = report_once(extended, len, buf);
        if (!st && extended && is_nvme(st.error(), NvmeStatus::invalid_field)) {
            extended_refused_ = true;
            extended = false;
            --i;  // the refused extended read does not count against the bound
            continue;
        }
        if (!st || !st->truncated()) return st;
        // Registrants were added between reads, or the first buffer was too
        // small: size for what the device claims now and read again.
        const size_t need = report_size_for(st->num_registrants, extended);
        // Truncated: the device claims more entries than fitted, so the next
        // read asks for more than this one (each retry makes progress).
        NVF_INVARIANT(need > buf.size());
        len = static_cast<uint32_t>((need + 3) & ~size_t{3});
    }
    return make_error_code(Errc::malformed_data);
}

Result<ResvNotification> Reservations::notification_log() {
    std::vector<uint8_t> buf(64);
    // The log page is per controller (each page names its namespace): ask
    // for all namespaces as libnvme does; a strict controller refuses a
    // specific NSID for a log page that is not namespace specific.
    auto r = pt_.submit(encode_get_log_page(kLogReservationNotification, 0xffffffffu, 64, false), buf);
    if (!r) return r.error();
    return parse_notification_log(buf);
}

Status Reservations::set_notification_mask(const NotificationMask& m) {
    return send(pt_, encode_set_notification_mask(nsid_, m));
}

Result<NotificationMask> Reservations::notification_mask() {
    auto r = pt_.submit(encode_get_notification_mask(nsid_), {});
    if (!r) return r.error();
    return decode_notification_mask(*r);
}

}  // namespace nvfence
