// SPDX-License-Identifier: MIT
#include "sqlite/block_cache.hpp"

#include <cstring>

#include "internal/invariant.hpp"

namespace nvfence::sqlite {

BlockCache::BlockCache(size_t capacity_blocks, uint32_t block_bytes)
    : capacity_(capacity_blocks), block_(block_bytes) {}

bool BlockCache::get(uint64_t block, uint8_t* dst) {
    auto it = map_.find(block);
    if (it == map_.end()) return false;
    lru_.splice(lru_.begin(), lru_, it->second.at);
    std::memcpy(dst, it->second.data.data(), block_);
    return true;
}

void BlockCache::put(uint64_t block, const uint8_t* src) {
    if (capacity_ == 0) return;
    auto it = map_.find(block);
    if (it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.at);
        std::memcpy(it->second.data.data(), src, block_);
        return;
    }
    std::vector<uint8_t> data;
    if (map_.size() >= capacity_) {  // reuse the least recently used block's memory
        auto old = map_.find(lru_.back());
        data = std::move(old->second.data);
        map_.erase(old);
        lru_.pop_back();
    } else {
        data.resize(block_);
    }
    std::memcpy(data.data(), src, block_);
    lru_.push_front(block);
    map_.emplace(block, Entry{lru_.begin(), std::move(data)});
    NVF_INVARIANT(map_.size() <= capacity_ && map_.size() == lru_.size());
}

void BlockCache::erase(uint64_t first, uint64_t count) {
    if (count > map_.size()) {  // a long range: walk the cache instead
        for (auto it = map_.begin(); it != map_.end();) {
            if (it->first >= first && it->first - first < count) {
                lru_.erase(it->second.at);
                it = map_.erase(it);
            } else {
                ++it;
            }
        }
        return;
    }
    for (uint64_t b = first; b < first + count; ++b) {
        auto it = map_.find(b);
        if (it == map_.end()) continue;
        lru_.erase(it->second.at);
        map_.erase(it);
    }
}

void BlockCache::clear() {
    map_.clear();
    lru_.clear();
}

}  // namespace nvfence::sqlite
