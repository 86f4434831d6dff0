// SPDX-License-Identifier: MIT
#pragma once
/// @file stamp.hpp
/// Block stamps: a self-describing header that diagnostic writes, the lab's
/// workloads and storage engines put in each block, so a read-back shows
/// who wrote it and under which epoch (fencing token).
///
/// Layout of the first 96 bytes of a block (little-endian), the rest of the
/// block filled with a pattern derived from lba and seq, and a CRC-32C of
/// the whole block (with the crc field zero) at bytes 88..91:
///
///     0   magic "NVFSTAMP"   8 key      16 epoch(u32) 20 node(u8) 21 tag(u8)
///     24  lba(u64)          32 seq(u64) 40 time_ns(u64)
///     48  host name (32 bytes, NUL padded)  80 writer_id(u64)  88 crc32c
///     92  block_bytes(u32)

#include <cstdint>
#include <span>
#include <string>

#include "nvfence/export.h"
#include "nvfence/result.hpp"

namespace nvfence {

/// What a stamp says about its block.
struct NVFENCE_API Stamp {
    uint64_t key = 0;       ///< Reservation key the writer held.
    uint32_t epoch = 0;     ///< Epoch of that key.
    uint8_t node = 0;       ///< Node id of the writer.
    uint8_t tag = 0;        ///< Cluster tag.
    uint64_t lba = 0;       ///< Block address it was written to.
    uint64_t seq = 0;       ///< Writer's sequence number.
    uint64_t time_ns = 0;   ///< Wall clock at write (CLOCK_REALTIME).
    std::string host;       ///< Host name (at most 31 bytes kept).
    uint64_t writer_id = 0; ///< Distinguishes writers on one host.
    friend bool operator==(const Stamp&, const Stamp&) = default;
};

/// Smallest block a stamp fits in.
inline constexpr size_t kStampMinBlock = 512;

/// Fills @p block (a multiple of 512 bytes) with @p s. Aborts on a smaller
/// block: a caller bug.
NVFENCE_API void write_stamp(std::span<uint8_t> block, const Stamp& s);

/// Reads the stamp of @p block: Errc::malformed_data when the block holds no
/// stamp (never written by nvfence, or torn: CRC mismatch).
NVFENCE_API Result<Stamp> read_stamp(std::span<const uint8_t> block);

/// CRC-32C (Castagnoli) of @p data.
NVFENCE_API uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc = 0);

}  // namespace nvfence
