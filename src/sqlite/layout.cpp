// SPDX-License-Identifier: MIT
#include "sqlite/layout.hpp"

#include <algorithm>
#include <cstring>

#include "internal/byte_order.hpp"

namespace nvfence::sqlite {
namespace {

// Field offsets inside a slot.
constexpr size_t kOffVersion = 8, kOffSeq = 16, kOffCapacity = 24, kOffJOff = 32, kOffJCap = 40,
                 kOffDbOff = 48, kOffDbCap = 56, kOffDbLen = 64, kOffJLen = 72, kOffJKind = 80,
                 kOffEpoch = 88, kOffSum = 120, kCovered = 120;

uint64_t fnv1a(std::span<const uint8_t> b) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint8_t c : b) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

bool all_zero(std::span<const uint8_t> b) {
    return std::all_of(b.begin(), b.end(), [](uint8_t c) { return c == 0; });
}

bool regions_fit(const Superblock& sb, uint64_t media_bytes) {
    auto inside = [&](uint64_t off, uint64_t cap) {
        return off >= kHeaderBytes && cap <= sb.capacity && off <= sb.capacity - cap;
    };
    const bool disjoint = sb.journal_off + sb.journal_cap <= sb.db_off || sb.db_off + sb.db_cap <= sb.journal_off;
    return sb.capacity <= media_bytes && inside(sb.journal_off, sb.journal_cap) && inside(sb.db_off, sb.db_cap) &&
           disjoint && sb.db_len <= sb.db_cap && sb.journal_len <= sb.journal_cap &&
           static_cast<uint32_t>(sb.journal_kind) <= 2;
}

enum class Slot { zero, foreign, newer, bad, good };

Slot decode_slot(std::span<const uint8_t> s, Superblock& sb, uint32_t& version) {
    if (all_zero(s)) return Slot::zero;
    if (std::memcmp(s.data(), kMagic, sizeof kMagic) != 0) return Slot::foreign;
    version = load_le<uint32_t>(s.data() + kOffVersion);
    if (version > kLayoutVersion) return Slot::newer;
    if (version != kLayoutVersion) return Slot::bad;
    if (load_le<uint64_t>(s.data() + kOffSum) != fnv1a(s.first(kCovered))) return Slot::bad;
    sb.version = version;
    sb.seq = load_le<uint64_t>(s.data() + kOffSeq);
    sb.capacity = load_le<uint64_t>(s.data() + kOffCapacity);
    sb.journal_off = load_le<uint64_t>(s.data() + kOffJOff);
    sb.journal_cap = load_le<uint64_t>(s.data() + kOffJCap);
    sb.db_off = load_le<uint64_t>(s.data() + kOffDbOff);
    sb.db_cap = load_le<uint64_t>(s.data() + kOffDbCap);
    sb.db_len = load_le<uint64_t>(s.data() + kOffDbLen);
    sb.journal_len = load_le<uint64_t>(s.data() + kOffJLen);
    sb.journal_kind = static_cast<JournalKind>(load_le<uint32_t>(s.data() + kOffJKind));
    sb.epoch = load_le<uint64_t>(s.data() + kOffEpoch);
    return Slot::good;
}

}  // namespace

bool plan_layout(uint64_t capacity, Superblock& out, std::string& why) {
    if (capacity < kMinCapacity) {
        why = "namespace too small: " + std::to_string(capacity) + " bytes, the nvfence VFS needs at least " +
              std::to_string(kMinCapacity) + " bytes (4 MiB)";
        return false;
    }
    const uint64_t rest = capacity - kHeaderBytes;
    const uint64_t journal = std::max(kMinJournal, rest / 4 / kMiB * kMiB);
    out = Superblock{};
    out.capacity = capacity;
    out.journal_off = kMiB;  // regions start 1 MiB aligned
    out.journal_cap = journal;
    out.db_off = out.journal_off + journal;
    out.db_cap = (capacity - out.db_off) / kMiB * kMiB;
    return true;
}

std::array<uint8_t, kSlotBytes> encode_superblock(const Superblock& sb) {
    std::array<uint8_t, kSlotBytes> s{};
    std::memcpy(s.data(), kMagic, sizeof kMagic);
    store_le<uint32_t>(s.data() + kOffVersion, sb.version);
    store_le<uint64_t>(s.data() + kOffSeq, sb.seq);
    store_le<uint64_t>(s.data() + kOffCapacity, sb.capacity);
    store_le<uint64_t>(s.data() + kOffJOff, sb.journal_off);
    store_le<uint64_t>(s.data() + kOffJCap, sb.journal_cap);
    store_le<uint64_t>(s.data() + kOffDbOff, sb.db_off);
    store_le<uint64_t>(s.data() + kOffDbCap, sb.db_cap);
    store_le<uint64_t>(s.data() + kOffDbLen, sb.db_len);
    store_le<uint64_t>(s.data() + kOffJLen, sb.journal_len);
    store_le<uint32_t>(s.data() + kOffJKind, static_cast<uint32_t>(sb.journal_kind));
    store_le<uint64_t>(s.data() + kOffEpoch, sb.epoch);
    store_le<uint64_t>(s.data() + kOffSum, fnv1a(std::span<const uint8_t>(s).first(kCovered)));
    return s;
}

Pick pick_superblock(std::span<const uint8_t> header, uint64_t media_bytes) {
    Pick p;
    Superblock sb[2];
    uint32_t ver[2] = {0, 0};
    Slot st[2];
    for (int i = 0; i < 2; ++i) st[i] = decode_slot(header.subspan(i * kSlotBytes, kSlotBytes), sb[i], ver[i]);
    for (int i = 0; i < 2; ++i)
        if (st[i] == Slot::newer) {
            p.kind = Pick::Kind::newer;
            p.found_version = ver[i];
            return p;
        }
    int best = -1;
    for (int i = 0; i < 2; ++i)
        if (st[i] == Slot::good && (best < 0 || sb[i].seq > sb[best].seq)) best = i;
    if (best >= 0) {
        p.kind = regions_fit(sb[best], media_bytes) ? Pick::Kind::ok : Pick::Kind::corrupt;
        p.sb = sb[best];
        p.slot = best;
        return p;
    }
    if (st[0] == Slot::zero && st[1] == Slot::zero) return p;  // fresh
    p.kind = (st[0] == Slot::bad || st[1] == Slot::bad) ? Pick::Kind::corrupt : Pick::Kind::foreign;
    return p;
}

std::string describe_pick(const Pick& p) {
    switch (p.kind) {
    case Pick::Kind::newer:
        return "region layout version " + std::to_string(p.found_version) +
               " was written by a newer nvfence; this one reads version " + std::to_string(kLayoutVersion) +
               " only (nothing changed)";
    case Pick::Kind::foreign:
        return "the first 8 KiB hold other data (not an nvfence SQLite layout); refusing to overwrite it";
    case Pick::Kind::corrupt:
        return "the nvfence superblocks do not check out (checksum, or regions outside the media)";
    case Pick::Kind::fresh: return "never formatted";
    case Pick::Kind::ok: return "ok";
    }
    return "unknown";
}

}  // namespace nvfence::sqlite
