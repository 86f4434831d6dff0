// SPDX-License-Identifier: MIT
#pragma once
/// @file epoch_store.hpp
/// The highest epoch this host has used on a volume, persisted so a fresh
/// key is always above every key this host ever registered, even after the
/// device lost its registrations.

#include <cstdint>
#include <string>

#include "nvfence/result.hpp"

namespace nvfence {

/// One small file per volume: `<dir>/<volume>.epoch`, holding a decimal
/// epoch. Written atomically: temporary file, fsync, rename, fsync of the
/// directory.
class EpochStore {
public:
    /// A store for @p volume (sanitised to [A-Za-z0-9._-]) under @p dir.
    EpochStore(std::string dir, const std::string& volume);
    /// The stored epoch, 0 when none was stored. Errc::state_io when the
    /// file exists but cannot be read or parsed.
    Result<uint32_t> load() const;
    /// Stores @p epoch if it is above the stored one (never lowers it).
    Status raise_to(uint32_t epoch) const;
    /// The file's path.
    const std::string& path() const { return path_; }

private:
    std::string dir_;
    std::string path_;
};

}  // namespace nvfence
