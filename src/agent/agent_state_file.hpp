// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_state_file.hpp
/// What the host agent persists across restarts (its role, key and fence
/// progress; the epoch is EpochStore's), its text form and its file.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nvfence/result.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {

/// The role recorded in the state file.
enum class PersistedRole : uint8_t {
    none,     ///< Not registered (fresh, or stopped and unregistered).
    standby,  ///< Registered with key, not holding.
    holder,   ///< Registered with key and holding.
    fenced,   ///< Fenced: wait for rejoin; never register by itself.
};

/// Words for a persisted role: "none", "standby", "holder", "fenced".
const char* persisted_role_name(PersistedRole r);

/// Where the self-fence action stands (persisted: a restart re-runs a
/// pending one, never a done one).
enum class FenceActionState : uint8_t {
    none,     ///< Not fenced, or nothing to run.
    pending,  ///< FENCED was entered; stopping writers and the action not yet done.
    done,     ///< Both ran (successfully or not) to their bounded end.
    /// Both ran to their bounded end, but stopping the writers failed:
    /// not a candidate, no automatic rejoin; a restart or `nvfence rejoin`
    /// stops them again first (done once that works).
    writers_running,
};

/// Words for a fence action state: "none", "pending", "done", "writers_running".
const char* fence_action_state_name(FenceActionState a);

/// What the agent persists across restarts (besides the epoch, which
/// EpochStore keeps).
struct PersistedState {
    uint8_t node = 0;                          ///< Node id in use (0: none yet).
    uint8_t tag = 0;                           ///< Cluster tag in use.
    PersistedRole role = PersistedRole::none;  ///< Last role.
    uint64_t key = 0;                          ///< Key registered (0: none).
    int64_t fenced_unix_ms = 0;                ///< When FENCED began (0: not fenced).
    std::string reason;                        ///< Why FENCED ("" otherwise).
    FenceActionState action = FenceActionState::none;  ///< Self-fence action progress.
    std::string boot_id;                       ///< The boot that entered FENCED ("" unknown; fenced only).
    friend bool operator==(const PersistedState&, const PersistedState&) = default;
};

/// The state file's text: `key=value` lines (version, node, tag, role, key,
/// fenced_unix_ms, reason, action, and boot_id when known; a file without
/// `action`, from an older agent, reads as action done; one without
/// `boot_id` as an unknown boot). The reason is truncated to 512 bytes and control
/// characters replaced.
std::string encode_persisted_state(const PersistedState& s);
/// Parses encode_persisted_state()'s text strictly (every key exactly once,
/// values in range, role and key consistent); Errc::state_io otherwise.
Result<PersistedState> parse_persisted_state(std::string_view text);

/// fence_nvfence's record of an unfencing (AgentStateFile::save_unfenced).
struct UnfencedRecord {
    uint64_t key = 0;     ///< The key `on` registered (0: no record).
    std::string boot_id;  ///< The boot it was written in ("" unknown: an older fence_nvfence).
};

/// This boot's id (/proc/sys/kernel/random/boot_id, a UUID); "" when it
/// cannot be read.
std::string current_boot_id();

/// The agent's state file `<dir>/<volume>.agent`, written atomically
/// (temporary file, fsync, rename, fsync of the directory).
class AgentStateFile {
public:
    /// A file for @p volume (sanitised as EpochStore does) under @p dir.
    AgentStateFile(std::string dir, const std::string& volume);
    /// The same file on @p medium (borrowed; it must outlive this object):
    /// the simulator's memory instead of the file system.
    AgentStateFile(std::string dir, const std::string& volume, const StateMedium& medium);
    /// The stored state, std::nullopt when there is no file; Errc::state_io
    /// when it cannot be read or does not parse (never guessed around).
    Result<std::optional<PersistedState>> load() const;
    /// Replaces the stored state.
    Status save(const PersistedState& s) const;
    /// The file's path.
    const std::string& path() const { return path_; }
    /// Records that fence_nvfence's `on` unfenced this node with @p key in
    /// boot @p boot_id ("" unknown) (`<volume>.unfenced` beside the state
    /// file, as fence_scsi's `on` records its key for fence_scsi_check): a
    /// check-only watcher that never saw the key registered still knows
    /// the node was unfenced in this boot.
    Status save_unfenced(uint64_t key, const std::string& boot_id) const;
    /// That record; key 0 when there is none or it does not parse.
    UnfencedRecord unfenced_record() const;
    /// The record's path.
    const std::string& unfenced_path() const { return unfenced_path_; }

private:
    std::string dir_;
    std::string unfenced_path_;
    std::string path_;
    const StateMedium* medium_;
};

}  // namespace nvfence
