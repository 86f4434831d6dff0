// SPDX-License-Identifier: MIT
#pragma once
/// @file layout.hpp
/// The on-media layout of the SQLite VFS `nvfence` (docs/SQLITE.md,
/// "Region layout"): two superblock slots, a journal region and a database
/// region, all at fixed byte offsets of the namespace (or regular file).
///
///   [0, 4096)            superblock slot 0
///   [4096, 8192)         superblock slot 1
///   [journal_off, +cap)  journal region (rollback journal or WAL)
///   [db_off, +cap)       database region
///
/// A superblock is written to the slot the current one is not in, with
/// seq + 1, so a torn superblock write leaves the previous one readable.
/// Each holds the layout version, the regions, the logical lengths of the
/// database and of the journal, what the journal region holds, and the
/// highest fencing token (epoch) that wrote. Pure logic: no I/O here.
#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace nvfence::sqlite {

inline constexpr uint32_t kLayoutVersion = 1;          ///< The version this code writes and reads.
inline constexpr uint64_t kSlotBytes = 4096;           ///< One superblock slot.
inline constexpr uint64_t kHeaderBytes = 2 * kSlotBytes;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kMinCapacity = 4 * kMiB;     ///< Smallest namespace formatted.
inline constexpr uint64_t kMinJournal = 1 * kMiB;      ///< Smallest journal region.
inline constexpr char kMagic[8] = {'N', 'V', 'F', 'S', 'Q', 'L', 'T', '1'};

/// What the journal region holds.
enum class JournalKind : uint32_t { none = 0, rollback = 1, wal = 2 };

/// One superblock (the newest valid slot's content).
struct Superblock {
    uint32_t version = kLayoutVersion;
    uint64_t seq = 0;           ///< Higher wins between the two slots.
    uint64_t capacity = 0;      ///< Bytes the layout covers.
    uint64_t journal_off = 0;
    uint64_t journal_cap = 0;
    uint64_t db_off = 0;
    uint64_t db_cap = 0;
    uint64_t db_len = 0;        ///< Logical size of the database "file".
    uint64_t journal_len = 0;   ///< Logical size of the journal "file".
    JournalKind journal_kind = JournalKind::none;
    uint64_t epoch = 0;         ///< Highest fencing token that wrote.
    friend bool operator==(const Superblock&, const Superblock&) = default;
};

/// Lays out a namespace of @p capacity bytes: the journal region is a
/// quarter of what follows the superblocks (at least kMinJournal), rounded
/// down to 1 MiB, the database region the rest, rounded down to 1 MiB.
/// Returns false (and @p why) when @p capacity is below kMinCapacity.
bool plan_layout(uint64_t capacity, Superblock& out, std::string& why);

/// Encodes @p sb into one slot (kSlotBytes), checksummed.
std::array<uint8_t, kSlotBytes> encode_superblock(const Superblock& sb);

/// What the two slots hold.
struct Pick {
    enum class Kind {
        fresh,     ///< Both slots all zero: never formatted.
        ok,        ///< sb is the newest valid superblock, in slot `slot`.
        newer,     ///< A slot has a layout version above kLayoutVersion (found_version).
        foreign,   ///< Other data (no magic): not ours, never overwritten.
        corrupt,   ///< Our magic but no slot checks out, or regions outside capacity.
    } kind = Kind::fresh;
    Superblock sb;
    int slot = 0;
    uint32_t found_version = 0;
};

/// Decides from the first kHeaderBytes of the media, whose size in bytes is
/// @p media_bytes (regions beyond it are corrupt).
Pick pick_superblock(std::span<const uint8_t> header, uint64_t media_bytes);

/// A sentence for people about a pick that is not ok/fresh.
std::string describe_pick(const Pick& p);

}  // namespace nvfence::sqlite
