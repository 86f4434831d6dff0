// SPDX-License-Identifier: MIT
#pragma once
/// @file epoch_store.hpp
/// The highest epoch this host has used or seen on a volume (its "floor"),
/// persisted so a fresh key is always above every key this host ever
/// registered or saw, even after the device lost its registrations.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nvfence/export.h"
#include "nvfence/key.hpp"
#include "nvfence/report.hpp"
#include "nvfence/result.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {

/// The first epoch nvfence never uses: its keys and tokens are 1 up to
/// kEpochCeiling - 1. Keys at or above it are "implausible": they never
/// raise the floor (a warning names them), never count as a term above a
/// token, and a takeover removes them like any earlier key. So one key at the
/// ceiling or at kMaxEpoch (a stray write to the election's counter, another
/// tool) can neither exhaust the epochs of a host, a fresh one included, nor
/// stop the next failover. The 2^24 epochs from it up stay unused on purpose.
inline constexpr uint32_t kEpochCeiling = kMaxEpoch - (1u << 24);

/// Whether nvfence may use @p epoch in a key or as a token.
constexpr bool usable_epoch(uint32_t epoch) { return epoch != 0 && epoch < kEpochCeiling; }

/// How far above this host's floor one observed epoch may raise it (and how
/// far above the highest epoch seen `register --epoch` may go). A key further
/// above is implausible (a typo or a rogue tool), is ignored and warned about.
inline constexpr uint32_t kMaxEpochJump = 1u << 20;

/// What the epochs of one Report say about this host's floor.
struct NVFENCE_API EpochObservation {
    uint32_t highest = 0;               ///< Highest plausible epoch of the tag seen.
    std::vector<uint64_t> implausible;  ///< Keys of the tag ignored as implausible.
};

/// Classifies the epochs of @p tag in @p st against @p floor (0: no floor
/// known, only the ceiling applies). Pure.
NVFENCE_API EpochObservation observe_epochs(const ReservationStatus& st, uint8_t tag, uint32_t floor);

/// Parses the text of an epoch file: a decimal epoch 0..kMaxEpoch, with
/// trailing spaces and newlines allowed; Errc::state_io otherwise. Pure.
NVFENCE_API Result<uint32_t> parse_epoch_text(std::string_view text);

/// One small file per volume: `<dir>/<volume>.epoch`, holding a decimal
/// epoch. Raised under an exclusive flock of `<dir>/<volume>.epoch.lock`
/// (shared by the CLI and the agent), written atomically: a uniquely named
/// temporary file, fsync, rename, fsync of the directory.
class NVFENCE_API EpochStore {
public:
    /// A store for @p volume (sanitised to [A-Za-z0-9._-]) under @p dir.
    EpochStore(std::string dir, const std::string& volume);
    /// The same store on @p medium (borrowed; it must outlive the store):
    /// the simulator's memory instead of the file system.
    EpochStore(std::string dir, const std::string& volume, const StateMedium& medium);
    /// The stored epoch, 0 when none was stored. Errc::state_io when the
    /// file does not parse; the errno (state_category()) when it cannot be read.
    Result<uint32_t> load() const;
    /// Stores @p epoch if it is above the stored one (never lowers it), with
    /// load and store under the lock.
    Status raise_to(uint32_t epoch) const;
    /// Raises the floor to the highest plausible epoch of @p tag in @p st;
    /// returns what it saw (the implausible keys are for the caller to warn
    /// about).
    Result<EpochObservation> raise_from(const ReservationStatus& st, uint8_t tag) const;
    /// The file's path.
    const std::string& path() const { return path_; }

private:
    std::string dir_;
    std::string path_;
    const StateMedium* medium_;
};

}  // namespace nvfence
