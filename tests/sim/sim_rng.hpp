// SPDX-License-Identifier: MIT
#pragma once
/// @file sim_rng.hpp
/// The simulator's one source of randomness: std::mt19937_64 (its output
/// is fixed by the C++ standard) with bounded draws written here, because
/// std::uniform_int_distribution and friends may differ between standard
/// library versions and a seed must replay bit for bit everywhere.

#include <cassert>
#include <cstdint>
#include <random>

namespace nvfence::sim {

/// Seeded PRNG with exact, portable bounded draws.
class Rng {
public:
    /// Seeds with @p seed.
    explicit Rng(uint64_t seed) : g_(seed) {}
    /// 64 random bits.
    uint64_t bits() { return g_(); }
    /// Uniform in [0, n) for n > 0 (multiply-high: at most 2^-64 bias per value).
    uint64_t below(uint64_t n) {
        assert(n > 0);
        const unsigned __int128 m = static_cast<unsigned __int128>(g_()) * n;
        return static_cast<uint64_t>(m >> 64);
    }
    /// Uniform in [lo, hi] (lo <= hi).
    int64_t range(int64_t lo, int64_t hi) {
        assert(lo <= hi);
        return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
    }
    /// True with probability @p per_mille / 1000.
    bool chance(uint32_t per_mille) { return below(1000) < per_mille; }

private:
    std::mt19937_64 g_;
};

}  // namespace nvfence::sim
