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
};

/// Words for a fence action state: "none", "pending", "done".
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
    friend bool operator==(const PersistedState&, const PersistedState&) = default;
};

/// The state file's text: `key=value` lines (version, node, tag, role, key,
/// fenced_unix_ms, reason, action; a file without `action`, from an older
/// agent, reads as action done). The reason is truncated to 512 bytes and control
/// characters replaced.
std::string encode_persisted_state(const PersistedState& s);
/// Parses encode_persisted_state()'s text strictly (every key exactly once,
/// values in range, role and key consistent); Errc::state_io otherwise.
Result<PersistedState> parse_persisted_state(std::string_view text);

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
    /// Records that fence_nvfence's `on` unfenced this node with @p key
    /// (`<volume>.unfenced` beside the state file, as fence_scsi's `on`
    /// records its key for fence_scsi_check): a check-only watcher that
    /// never saw the key registered still knows the node was unfenced.
    Status save_unfenced(uint64_t key) const;
    /// The key of that record; 0 when there is none or it does not parse.
    uint64_t unfenced_key() const;
    /// The record's path.
    const std::string& unfenced_path() const { return unfenced_path_; }

private:
    std::string dir_;
    std::string unfenced_path_;
    std::string path_;
    const StateMedium* medium_;
};

}  // namespace nvfence
