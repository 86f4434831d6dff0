// SPDX-License-Identifier: MIT
#pragma once
/// @file testing_model.hpp
/// The reservation model of the nvfence testing kit (nvfence/testing.hpp):
/// an in-memory NVMe namespace with reservation support, shared by any
/// number of hosts (told apart by their 128-bit host identifier), for an
/// engine's unit tests. Header-only; nothing of it is in libnvfence.
///
/// FakeTarget is the model. Each host talks to it through a HostPort, a
/// Passthru that hands every Command to the model. The model decodes the
/// Command from its dwords and payload exactly as a controller would
/// (never from the args struct that produced it), so a wrong encoder makes
/// the model misbehave and the tests fail.
///
/// Semantics follow the NVMe Base Specification (Reservations, Reservation
/// Register/Acquire/Release/Report, Reservation Notification log page,
/// features 81h/82h) and, where the specification leaves room, the Linux
/// nvmet target: registration by host id, a generation counter bumped by
/// every successful Register and by every Preempt or Clear, all registrants
/// holding an all-registrants reservation, Preempt with a PRKEY matching
/// no registrant failing with Reservation Conflict.
///
/// Hooks let a test make the device fail a command, lie (claim success and
/// change nothing), let another host act right after a command (races), or
/// rewrite a Report buffer before it is returned.
///
/// The model is compared command by command with the real Linux nvmet target
/// (the project's lab test vm_model_nvmet; "Device model vs nvmet" in the
/// project's RELIABILITY document). Where nvmet deviates from the
/// specification the model follows the specification unless the matching
/// flag of FakeTarget::deviations is set; NvmetDeviations::all() makes the
/// model answer exactly as nvmet does (nvfence::testkit::SimCluster sets it).
/// With reservations_supported = false it is a namespace without
/// reservation support (QEMU's own NVMe device).

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/report.hpp"

namespace nvfence::testkit {

/// Little-endian load and store of the model's data structures (the
/// device's byte order, whatever the host's).
inline uint64_t get_le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
/// Stores @p v little-endian in @p n bytes at @p p.
inline void put_le(uint8_t* p, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
/// 16-bit little-endian store.
inline void put_le16(uint8_t* p, uint16_t v) { put_le(p, v, 2); }
/// 32-bit little-endian store.
inline void put_le32(uint8_t* p, uint32_t v) { put_le(p, v, 4); }
/// 64-bit little-endian store.
inline void put_le64(uint8_t* p, uint64_t v) { put_le(p, v, 8); }

/// A distinct 128-bit host id for host number @p n: every byte is set, and
/// ids of different hosts differ in their upper 8 bytes too.
inline HostId make_host(uint8_t n) {
    HostId h{};
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(0x10 * (i % 16) + n);
    return h;
}

inline std::error_code nvme_err(NvmeStatus s) {
    return make_nvme_error(static_cast<uint16_t>(s));
}

/// Known ways in which the Linux nvmet target (drivers/nvme/target/pr.c,
/// checked on Linux 7.3.4) deviates from the NVMe Base Specification. Each
/// flag makes FakeTarget answer as nvmet does; all off (the default) is the
/// specification. docs/RELIABILITY.md "Device model vs nvmet" lists them.
struct NvmetDeviations {
    /// N1: an undefined RREGA/RACQA/RRELA completes with Invalid Command
    /// Opcode (spec: Invalid Field in Command).
    bool undefined_action_invalid_opcode = false;
    /// N2: CPTPL is not looked at: 01b (reserved) is accepted, 11b is
    /// accepted and PTPLS stays 0.
    bool cptpl_ignored = false;
    /// N3: under WEAR/EAAR only one registrant (the one that acquired, or
    /// after it left the first remaining one) counts as holder for Acquire
    /// and Release: another registrant's Acquire of the held type gets
    /// Reservation Conflict, its Release succeeds and releases nothing
    /// (spec: every registrant is a holder). Access checks and Report
    /// (RCSTS) still treat every registrant as holder.
    bool all_regs_single_holder = false;
    /// N4: Release by the holder with the wrong RTYPE completes with
    /// Reservation Conflict (spec: Invalid Field in Command).
    bool release_wrong_type_conflict = false;
    /// N5: the holder of a WE/EA/WERO/EARO reservation that preempts with
    /// its own key only changes the type to RTYPE: other registrants that
    /// share that key stay registered (spec: they are unregistered, only the
    /// issuing host keeps its registration).
    bool holder_self_preempt_keeps_shared_key = false;
    /// Every deviation on: the model answers as nvmet does.
    static NvmetDeviations all() { return {true, true, true, true, true}; }
    /// What a new FakeTarget starts with: none, or all() when the
    /// environment has NVFENCE_FAKE_TARGET=nvmet (to run the whole unit
    /// suite against nvmet's behaviour: `NVFENCE_FAKE_TARGET=nvmet ctest -L unit`).
    static NvmetDeviations from_env() {
        const char* v = std::getenv("NVFENCE_FAKE_TARGET");
        return v && std::string_view(v) == "nvmet" ? all() : NvmetDeviations{};
    }
    friend bool operator==(const NvmetDeviations&, const NvmetDeviations&) = default;
};

/// One command as the model saw it.
struct Submission {
    HostId host;
    Command cmd;
};

/// An in-memory reservation-capable namespace shared by several hosts.
class FakeTarget {
public:
    struct Reg {
        HostId host{};
        uint64_t key = 0;
        uint16_t cntlid = 0;
    };
    struct Notice {
        NotificationType type;
        uint32_t nsid;
    };

    // ---- device state (tests may set it directly) ----
    uint32_t nsid = 1;                     ///< The one namespace id.
    std::vector<Reg> regs;                 ///< Registrants in registration order.
    ResvType type = ResvType::none;        ///< Reservation type held, none if free.
    std::optional<HostId> holder;          ///< Holder (unused for all-registrants types).
    uint32_t generation = 0;               ///< Report GEN.
    bool ptpl = false;                     ///< PTPLS.
    bool extended_supported = true;        ///< EDS=1 accepted (else Invalid Field).
    /// EDS=0 accepted (else Host Identifier Inconsistent Format). Off by
    /// default, as on nvmet: its hosts use 128-bit host ids, and nvmet then
    /// refuses the plain Report.
    bool plain_supported = false;
    /// False: a namespace without reservation support, like QEMU's own NVMe
    /// device: every reservation command fails with Invalid Command Opcode,
    /// features 81h and 82h and log page 80h with Invalid Field in Command;
    /// reads and writes are not checked against any reservation.
    bool reservations_supported = true;
    /// nvmet deviations from the specification to reproduce (default none).
    NvmetDeviations deviations = NvmetDeviations::from_env();
    /// Errors the model itself produces carry Do Not Retry, as nvmet and
    /// QEMU set it on every one of them. Seen only in last_status.
    bool dnr = true;
    /// Errors nvmet also records in its Error Information log page (those
    /// for which it names the offending field: a refused read/write/flush,
    /// a refused Report size or EDS, an undefined action, a bad
    /// notification mask) carry More (0x2000), as nvmet sets it. Seen only
    /// in last_status; off for a namespace without reservation support.
    bool error_log_more = true;
    /// The last completion as the passthrough ioctl reports it: the 15-bit
    /// status including DNR (0x4000) and More (0x2000); 0 on success.
    uint16_t last_status = 0;
    std::vector<HostId> aborted;           ///< Hosts whose commands preempt-and-abort aborted.
    std::map<HostId, uint32_t> notify_mask;        ///< Feature 82h per host.
    std::map<HostId, std::deque<Notice>> notices;  ///< Pending log pages per host.
    std::map<HostId, uint64_t> notice_count;       ///< Log page counter per host.

    // ---- observation ----
    std::vector<Submission> log;           ///< Every command submitted, in order.

    // ---- hooks (not called for commands issued from inside a hook) ----
    /// Fail the command with this error before it has any effect.
    std::function<std::optional<std::error_code>(const HostId&, const Command&)> fail;
    /// Return true to complete the command successfully without any effect.
    std::function<bool(const HostId&, const Command&)> swallow;
    /// Runs after a command completed successfully (another host may act).
    std::function<void(const HostId&, const Command&)> after;
    /// Rewrites the Report data just before it is returned.
    std::function<void(std::span<uint8_t>)> mangle_report;

    /// Registers @p h with @p key directly (test setup).
    void add(const HostId& h, uint64_t key) {
        regs.push_back({h, key, next_cntlid_++});
        ++generation;
    }
    /// Makes @p h hold a reservation of type @p t directly (test setup).
    void hold(const HostId& h, ResvType t) {
        type = t;
        holder = h;
    }
    const Reg* find(const HostId& h) const {
        for (const auto& r : regs)
            if (r.host == h) return &r;
        return nullptr;
    }
    const Reg* find_key(uint64_t key) const {
        for (const auto& r : regs)
            if (r.key == key) return &r;
        return nullptr;
    }
    bool all_regs() const { return resv_type_all_registrants(type); }
    bool is_holder(const HostId& h) const {
        if (type == ResvType::none || !find(h)) return false;
        return all_regs() || holder == h;
    }
    /// Whether @p h counts as holder for its own Acquire and Release: every
    /// holder by the specification, only the one nvmet records under the
    /// all-registrants types when deviations.all_regs_single_holder is set.
    bool holds_for_command(const HostId& h) const {
        if (deviations.all_regs_single_holder && all_regs())
            return type != ResvType::none && find(h) && holder == h;
        return is_holder(h);
    }
    /// Number of commands with @p op on queue @p q.
    size_t count(uint8_t op, Queue q = Queue::io) const {
        size_t n = 0;
        for (const auto& s : log)
            if (s.cmd.opcode == op && s.cmd.queue == q) ++n;
        return n;
    }
    /// Number of commands that changed or could change state (not Report).
    size_t state_commands() const {
        return count(opcode::kResvRegister) + count(opcode::kResvAcquire) +
               count(opcode::kResvRelease);
    }

    /// Executes @p cmd from host @p h.
    Result<uint32_t> submit(const HostId& h, uint16_t cntlid, const Command& cmd,
                            std::span<uint8_t> data) {
        log.push_back({h, cmd});
        const bool hooks = !in_hook_;
        if (hooks && fail) {
            in_hook_ = true;
            auto e = fail(h, cmd);
            in_hook_ = false;
            if (e) {
                last_status = e->category() == nvme_category() ? static_cast<uint16_t>(e->value()) : 0;
                return *e;
            }
        }
        if (hooks && swallow) {
            in_hook_ = true;
            const bool s = swallow(h, cmd);
            in_hook_ = false;
            if (s) {
                last_status = 0;
                return uint32_t{0};
            }
        }
        last_status = 0;
        logged_ = false;
        auto r = execute(h, cntlid, cmd, data);
        if (!r && r.error().category() == nvme_category()) {
            const bool more = logged_ && error_log_more && reservations_supported;
            last_status = static_cast<uint16_t>(r.error().value() | (dnr ? kStatusDnr : 0) |
                                                (more ? kStatusMore : 0));
        }
        if (r && hooks && after) {
            in_hook_ = true;
            after(h, cmd);
            in_hook_ = false;
        }
        return r;
    }

private:
    static constexpr uint32_t kMaskBits = 0xe;

    uint16_t next_cntlid_ = 1;
    bool in_hook_ = false;
    bool logged_ = false;  // the current error goes to the error log (More)

    // An error nvmet records in its error log (it names the field).
    std::error_code logged(NvmeStatus s) {
        logged_ = true;
        return nvme_err(s);
    }

    std::error_code undefined_action() {
        return logged(deviations.undefined_action_invalid_opcode ? NvmeStatus::invalid_opcode
                                                                 : NvmeStatus::invalid_field);
    }

    // The host data of a host-to-device command, as Passthru::submit defines.
    static std::span<const uint8_t> host_data(const Command& c, std::span<uint8_t> data) {
        if (data.empty()) return std::span<const uint8_t>(c.payload.data(), c.payload.size());
        return data;
    }

    void notify(const HostId& h, NotificationType t) {
        const uint32_t bit = 1u << static_cast<unsigned>(t);
        if (notify_mask[h] & bit) return;
        notices[h].push_back({t, nsid});
    }
    void notify_others(const HostId& self, NotificationType t) {
        for (const auto& r : regs)
            if (r.host != self) notify(r.host, t);
    }

    // Removes a registrant, dropping the reservation with it when it was
    // the (last) holder.
    void unregister_one(size_t i) {
        const HostId h = regs[i].host;
        const bool was_holder = is_holder(h);
        regs.erase(regs.begin() + static_cast<std::ptrdiff_t>(i));
        if (!was_holder) return;
        if (all_regs()) {
            // Every registrant still holds; nvmet hands its holder record
            // to the first remaining registrant (see holds_for_command).
            if (holder == h) {
                if (regs.empty()) holder.reset();
                else holder = regs.front().host;
            }
            if (regs.empty()) type = ResvType::none;
            return;
        }
        const ResvType old = type;
        type = ResvType::none;
        holder.reset();
        if (old == ResvType::write_exclusive_reg_only || old == ResvType::exclusive_access_reg_only)
            notify_others(h, NotificationType::reservation_released);
    }

    // Unregisters every registrant with @p key (except @p keep, if given).
    size_t unregister_by_key(uint64_t key, const HostId& issuer, bool abort, bool keep_issuer) {
        size_t n = 0;
        for (size_t i = 0; i < regs.size();) {
            if (regs[i].key == key && !(keep_issuer && regs[i].host == issuer)) {
                const HostId h = regs[i].host;
                if (abort) aborted.push_back(h);
                unregister_one(i);
                if (h != issuer) notify(h, NotificationType::registration_preempted);
                ++n;
            } else {
                ++i;
            }
        }
        return n;
    }

    Result<uint32_t> execute(const HostId& h, uint16_t cntlid, const Command& c,
                             std::span<uint8_t> data) {
        if (c.queue == Queue::admin) return admin(h, c, data);
        if (c.opcode == opcode::kFlush || c.opcode == opcode::kRead || c.opcode == opcode::kWrite)
            return rw(h, c);
        if (c.nsid != nsid) return nvme_err(NvmeStatus::invalid_namespace);
        if (!reservations_supported) return nvme_err(NvmeStatus::invalid_opcode);
        switch (c.opcode) {
        case opcode::kResvRegister: return do_register(h, cntlid, c, data);
        case opcode::kResvAcquire: return do_acquire(h, c, data);
        case opcode::kResvRelease: return do_release(h, c, data);
        case opcode::kResvReport: return do_report(c, data);
        default: return nvme_err(NvmeStatus::invalid_opcode);
        }
    }

    Result<uint32_t> rw(const HostId& h, const Command& c) {
        if (c.nsid != nsid) return nvme_err(NvmeStatus::invalid_namespace);
        if (!reservations_supported) return uint32_t{0};
        if (type == ResvType::none || is_holder(h)) return uint32_t{0};
        const bool write = c.opcode != opcode::kRead;
        const bool registered = find(h) != nullptr;
        bool ok = true;
        switch (type) {
        case ResvType::write_exclusive: ok = !write; break;
        case ResvType::exclusive_access: ok = false; break;
        case ResvType::write_exclusive_reg_only:
        case ResvType::write_exclusive_all_regs: ok = !write || registered; break;
        case ResvType::exclusive_access_reg_only:
        case ResvType::exclusive_access_all_regs: ok = registered; break;
        case ResvType::none: break;
        }
        if (!ok) return logged(NvmeStatus::reservation_conflict);
        return uint32_t{0};
    }

    Result<uint32_t> do_register(const HostId& h, uint16_t cntlid, const Command& c,
                                 std::span<uint8_t> data) {
        const uint32_t dw10 = c.cdw[0];
        if ((dw10 & 0x3ffffff0u) != 0 || c.data_len != 16 || !c.host_to_device)
            return nvme_err(NvmeStatus::invalid_field);
        const unsigned action = dw10 & 7u;
        const bool iekey = dw10 & 8u;
        const unsigned cptpl = deviations.cptpl_ignored ? 0u : dw10 >> 30;
        if (cptpl == 1) return nvme_err(NvmeStatus::invalid_field);
        auto d = host_data(c, data);
        if (d.size() < 16) return nvme_err(NvmeStatus::data_transfer_error);
        const uint64_t crkey = get_le64(d.data());
        const uint64_t nrkey = get_le64(d.data() + 8);
        size_t idx = regs.size();
        for (size_t i = 0; i < regs.size(); ++i)
            if (regs[i].host == h) idx = i;
        const bool registered = idx < regs.size();
        switch (action) {
        // A new key of 0 is accepted, as nvmet does (the specification
        // does not reserve it).
        case 0:  // register
            if (registered) {
                if (regs[idx].key != nrkey) return nvme_err(NvmeStatus::reservation_conflict);
            } else {
                regs.push_back({h, nrkey, cntlid});
            }
            break;
        case 1:  // unregister
            if (!registered || (!iekey && regs[idx].key != crkey))
                return nvme_err(NvmeStatus::reservation_conflict);
            unregister_one(idx);
            break;
        case 2:  // replace
            if (!registered && iekey) {
                // Replace with IEKEY registers a host that is not
                // registered, as nvmet does; a new key of 0 is refused then.
                if (nrkey == 0) return nvme_err(NvmeStatus::invalid_field);
                regs.push_back({h, nrkey, cntlid});
                break;
            }
            if (!registered || (!iekey && regs[idx].key != crkey))
                return nvme_err(NvmeStatus::reservation_conflict);
            regs[idx].key = nrkey;
            break;
        default: return undefined_action();
        }
        if (cptpl == 2) ptpl = false;
        if (cptpl == 3) ptpl = true;
        ++generation;
        return uint32_t{0};
    }

    Result<uint32_t> do_acquire(const HostId& h, const Command& c, std::span<uint8_t> data) {
        const uint32_t dw10 = c.cdw[0];
        if ((dw10 & 0xffff00f0u) != 0 || c.data_len != 16 || !c.host_to_device)
            return nvme_err(NvmeStatus::invalid_field);
        const unsigned action = dw10 & 7u;
        const bool iekey = dw10 & 8u;
        const auto rtype_raw = static_cast<uint8_t>(dw10 >> 8);
        if (iekey || !resv_type_valid(rtype_raw)) return nvme_err(NvmeStatus::invalid_field);
        const auto rtype = static_cast<ResvType>(rtype_raw);
        auto d = host_data(c, data);
        if (d.size() < 16) return nvme_err(NvmeStatus::data_transfer_error);
        const uint64_t crkey = get_le64(d.data());
        const uint64_t prkey = get_le64(d.data() + 8);
        const Reg* me = find(h);
        if (!me || me->key != crkey) return nvme_err(NvmeStatus::reservation_conflict);
        if (action == 0) {
            if (type != ResvType::none) {
                if (holds_for_command(h) && type == rtype) return uint32_t{0};
                return nvme_err(NvmeStatus::reservation_conflict);
            }
            type = rtype;
            holder = h;
            return uint32_t{0};
        }
        if (action != 1 && action != 2) return undefined_action();
        const bool abort = action == 2;
        if (type == ResvType::none) {
            if (unregister_by_key(prkey, h, abort, false) == 0)
                return nvme_err(NvmeStatus::reservation_conflict);
        } else if (all_regs()) {
            if (prkey == 0) {
                for (size_t i = 0; i < regs.size();) {
                    if (regs[i].host != h) {
                        const HostId o = regs[i].host;
                        if (abort) aborted.push_back(o);
                        regs.erase(regs.begin() + static_cast<std::ptrdiff_t>(i));
                        notify(o, NotificationType::registration_preempted);
                    } else {
                        ++i;
                    }
                }
                type = rtype;
                holder = h;
            } else if (unregister_by_key(prkey, h, abort, false) == 0) {
                return nvme_err(NvmeStatus::reservation_conflict);
            }
        } else {
            const Reg* hold = holder ? find(*holder) : nullptr;
            if (hold && prkey == hold->key) {
                const ResvType old = type;
                const bool self = holder == h;
                holder = h;
                type = rtype;
                if (!(self && deviations.holder_self_preempt_keeps_shared_key))
                    unregister_by_key(prkey, h, abort, true);
                if (old != rtype) notify_others(h, NotificationType::reservation_released);
            } else if (prkey != 0) {
                if (unregister_by_key(prkey, h, abort, false) == 0)
                    return nvme_err(NvmeStatus::reservation_conflict);
            } else {
                return nvme_err(NvmeStatus::invalid_field);
            }
        }
        ++generation;
        return uint32_t{0};
    }

    Result<uint32_t> do_release(const HostId& h, const Command& c, std::span<uint8_t> data) {
        const uint32_t dw10 = c.cdw[0];
        if ((dw10 & 0xffff00f0u) != 0 || c.data_len != 8 || !c.host_to_device)
            return nvme_err(NvmeStatus::invalid_field);
        const unsigned action = dw10 & 7u;
        const bool iekey = dw10 & 8u;
        const auto rtype_raw = static_cast<uint8_t>(dw10 >> 8);
        if (iekey) return nvme_err(NvmeStatus::invalid_field);
        auto d = host_data(c, data);
        if (d.size() < 8) return nvme_err(NvmeStatus::data_transfer_error);
        const uint64_t crkey = get_le64(d.data());
        const Reg* me = find(h);
        if (!me || me->key != crkey) return nvme_err(NvmeStatus::reservation_conflict);
        if (action == 0) {
            if (!holds_for_command(h)) return uint32_t{0};
            if (rtype_raw != static_cast<uint8_t>(type))
                return nvme_err(deviations.release_wrong_type_conflict ? NvmeStatus::reservation_conflict
                                                                        : NvmeStatus::invalid_field);
            const ResvType old = type;
            type = ResvType::none;
            holder.reset();
            if (old != ResvType::write_exclusive && old != ResvType::exclusive_access)
                notify_others(h, NotificationType::reservation_released);
            return uint32_t{0};
        }
        if (action != 1) return undefined_action();
        for (const auto& r : regs)
            if (r.host != h) notify(r.host, NotificationType::reservation_preempted);
        regs.clear();
        type = ResvType::none;
        holder.reset();
        ++generation;
        return uint32_t{0};
    }

    Result<uint32_t> do_report(const Command& c, std::span<uint8_t> data) {
        const uint64_t len = (uint64_t{c.cdw[0]} + 1) * 4;
        if (c.host_to_device || c.data_len != len || data.size() < len)
            return nvme_err(NvmeStatus::invalid_field);
        if (c.cdw[1] & ~1u) return nvme_err(NvmeStatus::invalid_field);
        const bool eds = c.cdw[1] & 1u;
        if (eds && !extended_supported) return nvme_err(NvmeStatus::invalid_field);
        if (!eds && !plain_supported) return logged(NvmeStatus::host_id_inconsistent_format);
        const size_t header = eds ? kReportExtHeaderBytes : kReportHeaderBytes;
        const size_t entry = eds ? kRegistrantExtBytes : kRegistrantBytes;
        if (len < header) return logged(NvmeStatus::invalid_field);
        auto out = data.first(static_cast<size_t>(len));
        std::fill(out.begin(), out.end(), uint8_t{0});
        put_le32(&out[0], generation);
        out[4] = static_cast<uint8_t>(type);
        put_le16(&out[5], static_cast<uint16_t>(regs.size()));
        out[9] = ptpl ? 1 : 0;
        size_t off = header;
        for (const auto& r : regs) {
            if (off + entry > out.size()) break;
            uint8_t* e = &out[off];
            put_le16(e, r.cntlid);
            e[2] = is_holder(r.host) ? 1 : 0;
            if (eds) {
                put_le64(e + 8, r.key);
                std::memcpy(e + 16, r.host.data(), 16);
            } else {
                std::memcpy(e + 8, r.host.data(), 8);
                put_le64(e + 16, r.key);
            }
            off += entry;
        }
        if (mangle_report && !in_hook_) mangle_report(out);
        return uint32_t{0};
    }

    Result<uint32_t> admin(const HostId& h, const Command& c, std::span<uint8_t> data) {
        const auto fid = static_cast<uint8_t>(c.cdw[0]);
        switch (c.opcode) {
        case opcode::kGetFeatures:
            if ((c.cdw[0] & ~0xffu) != 0) return nvme_err(NvmeStatus::invalid_field);
            if (fid == kFeatHostId) {
                // QEMU's NVMe device (no reservations) has no Host Identifier.
                if (!reservations_supported) return nvme_err(NvmeStatus::invalid_field);
                if (c.cdw[1] != 1 || c.data_len != 16 || data.size() < 16)
                    return nvme_err(NvmeStatus::invalid_field);
                std::memcpy(data.data(), h.data(), 16);
                return uint32_t{1};
            }
            if (fid == kFeatResvNotifMask) {
                if (c.nsid != nsid || !reservations_supported) return nvme_err(NvmeStatus::invalid_field);
                return notify_mask[h];
            }
            return nvme_err(NvmeStatus::invalid_field);
        case opcode::kSetFeatures:
            if (fid == kFeatResvNotifMask && (c.cdw[0] & ~0xffu) == 0 && reservations_supported) {
                if ((c.cdw[1] & ~kMaskBits) != 0) return logged(NvmeStatus::invalid_field);
                if (c.nsid != nsid) return nvme_err(NvmeStatus::invalid_field);
                notify_mask[h] = c.cdw[1];
                return c.cdw[1];
            }
            return nvme_err(NvmeStatus::invalid_field);
        case opcode::kGetLogPage: {
            if ((c.cdw[0] & 0xff) != kLogReservationNotification)
                return nvme_err(NvmeStatus::invalid_log_page);
            // QEMU's NVMe device: an unsupported log page is Invalid Field.
            if (!reservations_supported) return nvme_err(NvmeStatus::invalid_field);
            // Not namespace specific: only NSID 0h or FFFFFFFFh.
            if (c.nsid != 0 && c.nsid != 0xffffffffu) return nvme_err(NvmeStatus::invalid_field);
            const uint64_t numd = (c.cdw[0] >> 16) | (uint64_t{c.cdw[1] & 0xffffu} << 16);
            const uint64_t len = (numd + 1) * 4;
            if (c.data_len != len || data.size() < len || len < 64)
                return nvme_err(NvmeStatus::invalid_field);
            std::fill(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(len), uint8_t{0});
            auto& q = notices[h];
            if (q.empty()) return uint32_t{0};
            const Notice n = q.front();
            if (!(c.cdw[0] & (1u << 15))) q.pop_front();
            put_le64(&data[0], ++notice_count[h]);
            data[8] = static_cast<uint8_t>(n.type);
            data[9] = static_cast<uint8_t>(q.size() > 255 ? 255 : q.size());
            put_le32(&data[12], n.nsid);
            return uint32_t{0};
        }
        default: return nvme_err(NvmeStatus::invalid_opcode);
        }
    }
};

/// One host's view of a FakeTarget.
class HostPort final : public Passthru {
public:
    HostPort(FakeTarget& t, HostId id, uint16_t cntlid = 0) : t_(t), id_(id), cntlid_(cntlid) {}
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override {
        // Passthru contract: a device-to-host buffer holds data_len bytes.
        if (cmd.data_len > 0 && !cmd.host_to_device && data.size() < cmd.data_len) std::abort();
        return t_.submit(id_, cntlid_, cmd, data);
    }
    const HostId& id() const { return id_; }

private:
    FakeTarget& t_;
    HostId id_;
    uint16_t cntlid_;
};

}  // namespace nvfence::testkit
