// SPDX-License-Identifier: MIT
#pragma once
/// @file key.hpp
/// nvfence's 64-bit reservation keys: who registered, and with which epoch.
///
/// Layout (bit 63 is the most significant):
///
///     63      56 55      48 47      40 39      32 31                     0
///    +----------+----------+----------+----------+------------------------+
///    |  magic   |  check   |   tag    |   node   |         epoch          |
///    |   0xF5   |  CRC-8   |  0..255  |  1..255  |      1..2^32-1         |
///    +----------+----------+----------+----------+------------------------+
///
///  - magic is 0xF5; check is CRC-8 (poly 0x07) of the low 48 bits. A key
///    whose magic or check does not match, or whose node or epoch is 0, is
///    *foreign* (registered by another tool) and is never decoded.
///  - tag names the cluster, so two clusters never read each other's keys as
///    their own; node is the host's node id; epoch is the fencing token: each
///    acquisition takes an epoch above every epoch seen on the device.
///
/// Text format (one format for printing and parsing):
///  - ours:    `nf:<tag>:<node>:<epoch>` in decimal, e.g. `nf:7:2:41`;
///  - any key: `0x` followed by 1 to 16 hex digits, e.g. `0xf5c4070200000029`.
/// Printing gives the `nf:` form for ours and the hex form for foreign keys.
/// Key 0 is never valid: NVMe uses it to mean "no key".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nvfence/export.h"
#include "nvfence/result.hpp"

namespace nvfence {

/// The decoded fields of one of nvfence's keys.
struct NVFENCE_API KeyFields {
    uint8_t tag = 0;      ///< Cluster tag, 0..255.
    uint8_t node = 0;     ///< Node id, 1..255.
    uint32_t epoch = 0;   ///< Epoch (fencing token), 1..2^32-1.
    friend bool operator==(const KeyFields&, const KeyFields&) = default;
};

inline constexpr uint8_t kKeyMagic = 0xF5;      ///< Top byte of our keys.
inline constexpr uint32_t kMaxEpoch = 0xffffffffu;  ///< Largest epoch.
inline constexpr uint8_t kMaxNode = 255;          ///< Largest node id.

/// Builds the key for @p f; fails with Errc::invalid_argument when node or
/// epoch is 0.
NVFENCE_API Result<uint64_t> make_key(const KeyFields& f);

/// Decodes @p key when it is one of ours; std::nullopt for a foreign key.
NVFENCE_API std::optional<KeyFields> decode_key(uint64_t key) noexcept;

/// True when @p key is not one of nvfence's keys.
inline bool is_foreign(uint64_t key) noexcept { return !decode_key(key).has_value(); }

/// Prints @p key in the documented text format.
NVFENCE_API std::string format_key(uint64_t key);

/// Prints @p key as `0x` and 16 hex digits.
NVFENCE_API std::string format_key_hex(uint64_t key);

/// Parses either text form. Rejects empty strings, signs, whitespace,
/// overflow, key 0 and an `nf:` form with a field out of range
/// (Errc::invalid_key).
NVFENCE_API Result<uint64_t> parse_key(std::string_view text);

/// Parses a decimal unsigned integer in [min, max] with no sign, space or
/// trailing characters (Errc::invalid_argument otherwise). Shared by every
/// parser of user numbers.
NVFENCE_API Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max);

}  // namespace nvfence
