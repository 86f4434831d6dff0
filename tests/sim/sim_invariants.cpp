// SPDX-License-Identifier: MIT
#include "sim_invariants.hpp"

#include <algorithm>
#include <cassert>

#include "nvfence/key.hpp"

namespace nvfence::sim {

const char* inv_name(Inv i) {
    switch (i) {
    case Inv::holder_highest_epoch: return "holder_highest_epoch";
    case Inv::write_after_preempt: return "write_after_preempt";
    case Inv::epoch_not_token: return "epoch_not_token";
    case Inv::epoch_went_back: return "epoch_went_back";
    case Inv::acted_on_resigned_term: return "acted_on_resigned_term";
    case Inv::older_token_holds: return "older_token_holds";
    case Inv::acked_write_lost: return "acked_write_lost";
    case Inv::holder_past_lease: return "holder_past_lease";
    case Inv::liveness: return "liveness";
    case Inv::holder_without_view: return "holder_without_view";
    case Inv::fence_action_pending: return "fence_action_pending";
    case Inv::fence_unverified: return "fence_unverified";
    case Inv::leader_unstable: return "leader_unstable";
    case Inv::self_test: return "self_test";
    }
    return "?";
}

int known_defect(Inv i) {
    switch (i) {
    default: return 0;  // none known: finding 11 was the simulator's own (nested waits)
    }
}

void InvariantChecker::token_issued(uint32_t token, int host) {
    if (const Issued* i = find(token)) {
        // The elector's tokens are unique: a second issue of one is a bug
        // of the election model itself.
        assert(i->host == host);
        (void)i;
        return;
    }
    issued_.push_back({token, host, false, 0});
}

void InvariantChecker::term_resigned(uint32_t token, int host, int64_t at_ms) {
    for (auto& i : issued_)
        if (i.token == token && i.host == host && !i.resigned) {
            i.resigned = true;
            i.resigned_at_ms = at_ms;
        }
}

const InvariantChecker::Issued* InvariantChecker::find(uint32_t token) const {
    for (const auto& i : issued_)
        if (i.token == token) return &i;
    return nullptr;
}

std::optional<Violation> InvariantChecker::new_holder(int host, uint64_t key, uint32_t epoch, uint64_t previous,
                                                      std::optional<int64_t> sent_ms) {
    ++checks_;
    std::string who = "host " + std::to_string(host) + " took the reservation with " + format_key(key);
    if (previous) {
        const Issued* p = find(decode_key(previous) ? decode_key(previous)->epoch : 0);
        who += " from " + format_key(previous) +
               (p ? " (token " + std::to_string(p->token) + " of host " + std::to_string(p->host) + ")" : "");
    }
    std::optional<Violation> v;
    const Issued* i = find(epoch);
    if (epoch < max_held_)
        v = Violation{Inv::older_token_holds, who + ": epoch " + std::to_string(max_held_) + " already held"};
    else if (!i || i->host != host)
        v = Violation{Inv::epoch_not_token,
                      who + ": the elector never issued token " + std::to_string(epoch) + " to it" +
                          (i ? " (it went to host " + std::to_string(i->host) + ")" : "")};
    else if (i->resigned && (!sent_ms || *sent_ms >= i->resigned_at_ms))
        v = Violation{Inv::acted_on_resigned_term,
                      who + ": its elector had resigned the term of token " + std::to_string(epoch) + " at " +
                          std::to_string(i->resigned_at_ms) + " ms" +
                          (sent_ms ? ", before the command was sent at " + std::to_string(*sent_ms) + " ms" : "")};
    max_held_ = std::max(max_held_, epoch);
    return v;
}

std::optional<Violation> InvariantChecker::holder_now(std::optional<uint32_t> epoch) const {
    ++checks_;
    if (!epoch || *epoch == max_held_) return std::nullopt;
    return Violation{Inv::holder_highest_epoch, "the device's holder has epoch " + std::to_string(*epoch) +
                                                    " but epoch " + std::to_string(max_held_) + " held before"};
}

std::optional<Violation> InvariantChecker::agent_key(int host, uint32_t epoch) {
    ++checks_;
    assert(host >= 0);
    if (last_epoch_.size() <= static_cast<size_t>(host)) last_epoch_.resize(static_cast<size_t>(host) + 1, 0);
    uint32_t& last = last_epoch_[static_cast<size_t>(host)];
    if (epoch == 0) return std::nullopt;
    if (epoch < last)
        return Violation{Inv::epoch_went_back, "host " + std::to_string(host) + "'s key epoch went from " +
                                                   std::to_string(last) + " back to " + std::to_string(epoch)};
    last = epoch;
    return std::nullopt;
}

void InvariantChecker::preempted(uint64_t key) {
    if (std::find(preempted_.begin(), preempted_.end(), key) == preempted_.end()) preempted_.push_back(key);
}

void InvariantChecker::took_over(int host, uint32_t epoch) {
    if (epoch >= newest_takeover_.epoch) newest_takeover_ = Takeover{host, epoch};
}

void InvariantChecker::target_restarted() {
    // The device forgot every key: what held before the restart is no
    // longer "used on the device", and a preempt-and-abort no longer
    // fences anything. A stale winner that takes the emptied device with
    // an older token is judged by the elector's rules only
    // (epoch_not_token, acted_on_resigned_term): PTPL is what prevents it.
    preempted_.clear();
    newest_takeover_ = Takeover{};
    max_held_ = 0;
}

std::optional<Violation> InvariantChecker::write_landed(int host, uint64_t key, uint32_t epoch, uint32_t lba,
                                                        uint64_t seq, bool unfenced) {
    ++checks_;
    assert(lba < media_.size());
    const std::string who = "write " + std::to_string(seq) + " of host " + std::to_string(host) + " (" +
                            format_key(key) + ") landed at block " + std::to_string(lba);
    Block& b = media_[lba];
    std::optional<Violation> v;
    if (unfenced) {
        // judged by nobody: the device could not refuse it
    } else if (std::find(preempted_.begin(), preempted_.end(), key) != preempted_.end())
        v = Violation{Inv::write_after_preempt, who + " after a completed preempt of that key"};
    else if (newest_takeover_.host >= 0 && newest_takeover_.host != host && epoch < newest_takeover_.epoch)
        v = Violation{Inv::write_after_preempt, who + " after the takeover of host " +
                                                    std::to_string(newest_takeover_.host) + " with epoch " +
                                                    std::to_string(newest_takeover_.epoch) + " completed"};
    // Another host's write of a newer term overwritten by an older term:
    // the fence failed. The same host's own late write over its own newer
    // one (a write of a process that died or re-keyed, still in flight when
    // the next one wrote) is that host's write order, which no reservation
    // can keep and which same-epoch overwrites show just as well: the
    // device admits writes by host, not by key. Had another host preempted
    // the older key in between, write_after_preempt above judges it.
    else if (b.host >= 0 && b.host != host && b.epoch > epoch)
        v = Violation{Inv::acked_write_lost, who + " over write " + std::to_string(b.seq) + " of host " +
                                                 std::to_string(b.host) + " with the newer epoch " +
                                                 std::to_string(b.epoch)};
    b = Block{host, epoch, seq};
    landed_.insert(write_id(host, seq));
    return v;
}

std::optional<Violation> InvariantChecker::write_acked(int host, uint64_t seq) const {
    ++checks_;
    if (landed_.count(write_id(host, seq))) return std::nullopt;
    return Violation{Inv::acked_write_lost, "host " + std::to_string(host) + "'s writer acknowledged write " +
                                                std::to_string(seq) + ", which never landed"};
}

std::optional<Violation> InvariantChecker::lease(int host, const HostView& h) const {
    ++checks_;
    // What it reports: judged when its agent had its turn (not inside a
    // device command, frozen or due), as nvfenced answers a status only
    // between calls, after serving the elector's queued events.
    // Inside a device command too: its writers run on while it waits, so
    // the step-down must not wait for the command to return.
    if (!h.alive || !(h.idle || h.in_device_call) || h.state != AgentState::holder ||
        h.local_ms <= h.lease_deadline_ms)
        return std::nullopt;
    const std::string late = h.lease_deadline_ms == INT64_MIN
                                 ? std::string("it never had a lease")
                                 : "its lease ran out " + std::to_string(h.local_ms - h.lease_deadline_ms) +
                                       " ms ago by its own clock";
    return Violation{Inv::holder_past_lease, "host " + std::to_string(host) + " is HOLDER" +
                                                 (h.idle ? "" : " inside a device command") + " but " + late};
}

std::optional<Violation> InvariantChecker::view(int host, const HostView& h) const {
    ++checks_;
    if (!h.alive || !h.idle) return std::nullopt;
    if (h.action_pending)
        return Violation{Inv::fence_action_pending, "host " + std::to_string(host) + " is " +
                                                        agent_state_name(h.state) +
                                                        " with its fence action still pending in its state file"};
    if (h.state != AgentState::holder || h.local_ms - h.last_view_ms <= h.view_bound_ms) return std::nullopt;
    return Violation{Inv::holder_without_view, "host " + std::to_string(host) + " reports HOLDER " +
                                                   std::to_string(h.local_ms - h.last_view_ms) +
                                                   " ms after its last successful Report (bound " +
                                                   std::to_string(h.view_bound_ms) + " ms)"};
}

std::optional<Violation> InvariantChecker::fence_done(int fencer, int victim, int exit, size_t victim_keys) const {
    ++checks_;
    if (exit != 0 || victim_keys == 0) return std::nullopt;
    return Violation{Inv::fence_unverified, "fence_nvfence off of host " + std::to_string(victim) + " on host " +
                                                std::to_string(fencer) + " exited 0 with " +
                                                std::to_string(victim_keys) + " key(s) of the victim registered"};
}

std::optional<Violation> InvariantChecker::watch_live(const std::vector<HostView>& hosts, int device_holder) const {
    ++checks_;
    for (size_t i = 0; i < hosts.size(); ++i) {
        const HostView& h = hosts[i];
        if (h.alive && h.state != AgentState::watching)
            return Violation{Inv::liveness, "host " + std::to_string(i) + "'s check-only watcher is " +
                                                agent_state_name(h.state) +
                                                " after the world healed: its node is not unfenced"};
    }
    if (device_holder < 0)
        return Violation{Inv::liveness, "nobody holds the reservation after the world healed: a host that is not "
                                        "registered could write"};
    return std::nullopt;
}

std::optional<Violation> InvariantChecker::live(const std::vector<HostView>& hosts, int device_holder) const {
    ++checks_;
    int holders = 0, holder = -1;
    for (size_t i = 0; i < hosts.size(); ++i) {
        const HostView& h = hosts[i];
        if (!h.alive) continue;
        if (h.state != AgentState::standby && h.state != AgentState::holder && !h.candidate)
            return Violation{Inv::liveness, "host " + std::to_string(i) + " is " + agent_state_name(h.state) +
                                                " after the world healed: not a candidate" +
                                                (h.idle ? "" : " (its agent is inside a call)")};
        if (h.state == AgentState::holder) {
            ++holders;
            holder = static_cast<int>(i);
        }
    }
    if (holders != 1)
        return Violation{Inv::liveness, std::to_string(holders) + " agents report HOLDER after the world healed"};
    if (holder != device_holder)
        return Violation{Inv::liveness, "host " + std::to_string(holder) + " reports HOLDER but the device shows " +
                                            (device_holder < 0 ? std::string("nobody")
                                                               : "host " + std::to_string(device_holder))};
    return std::nullopt;
}

}  // namespace nvfence::sim
