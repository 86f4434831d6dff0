// SPDX-License-Identifier: MIT
#pragma once
/// @file foreign.hpp
/// `nvfence preempt` and keys that are not nvfence's (fence_scsi's, LVM's,
/// any other tool's: decode_key() refuses them). nvfence never removes such
/// a key unless the operator names it and says --foreign; the removal is
/// logged (syslog, so the journal keeps who removed what).

#include <cstdint>
#include <optional>
#include <string>

#include "nvfence/report.hpp"

namespace nvfence::cli {

/// Why `nvfence preempt` must not go on, "" when it may: @p victim (the
/// --victim key, if any) is foreign, or (no --victim) the holder in @p st
/// is, and @p allow_foreign (--foreign) is not set.
std::string foreign_refusal(std::optional<uint64_t> victim, const ReservationStatus* st, bool allow_foreign);

/// The key the preempt must name: @p victim when given; otherwise, with
/// @p allow_foreign, the holder's key in @p st when that is foreign (so the
/// preempt is a compare on exactly the key the operator allowed); else none
/// (the library's default: the holder it reads).
std::optional<uint64_t> foreign_victim(std::optional<uint64_t> victim, const ReservationStatus* st,
                                       bool allow_foreign);

/// The log line of a foreign key's removal from @p dev by user @p uid.
std::string foreign_eviction_line(const std::string& dev, uint64_t key, uint32_t uid, bool removed);

}  // namespace nvfence::cli
