// SPDX-License-Identifier: MIT
#pragma once
/// @file block_cache.hpp
/// The blocks a read-write volume read or wrote during its term, least
/// recently used first out, bounded by a count of blocks. It is valid
/// because nobody else writes the namespace while this host holds the
/// reservation (Write Exclusive): the media changes only by this volume's
/// own writes, which update it. A volume drops it when fenced, and a
/// read-only volume (the holder writes under it) has none. Pure logic.
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace nvfence::sqlite {

class BlockCache {
public:
    /// At most @p capacity_blocks blocks of @p block_bytes; 0: caches nothing.
    BlockCache(size_t capacity_blocks, uint32_t block_bytes);

    /// Copies block @p block into @p dst (block_bytes) when cached.
    bool get(uint64_t block, uint8_t* dst);
    /// Caches (or updates) block @p block from @p src, evicting the least
    /// recently used block when full.
    void put(uint64_t block, const uint8_t* src);
    /// Forgets blocks [first, first + count).
    void erase(uint64_t first, uint64_t count);
    /// Forgets every block.
    void clear();
    size_t size() const { return map_.size(); }
    size_t capacity() const { return capacity_; }

private:
    struct Entry {
        std::list<uint64_t>::iterator at;
        std::vector<uint8_t> data;
    };
    size_t capacity_;
    uint32_t block_;
    std::list<uint64_t> lru_;  // most recently used first
    std::unordered_map<uint64_t, Entry> map_;
};

}  // namespace nvfence::sqlite
