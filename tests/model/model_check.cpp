// SPDX-License-Identifier: MIT
/// @file model_check.cpp
/// nvfence-model-check: proves the device model (FakeTarget,
/// tests/fake_passthru.hpp) against a real namespace.
///
/// For each seed it generates a deterministic random sequence of reservation
/// commands (Register/Acquire/Release/Report with right and wrong keys,
/// types, actions, IEKEY, CPTPL, buffer sizes) and reads, writes and flushes
/// from every host identity (one --dev per host: its own controller, its own
/// 128-bit host id), sends each command to the real device through the
/// project's IoctlPassthru and the same Command to FakeTarget, and compares:
///  - the completion status exactly as the passthrough ioctl returns it
///    (15 bits, with Do Not Retry and More) and completion dword 0;
///  - the data of every successful Report (controller ids normalised: nvmet
///    reports 0xffff for its dynamic controllers, the model its own numbers);
///  - after every command, an extended Report of the whole state (generation,
///    type, PTPLS, registrants with host id, key and RCSTS, in order).
/// After a divergence the model is resynchronised from the device's Report,
/// so one divergence does not hide the next.
///
/// With --model nvmet (default) the model runs with every known nvmet
/// deviation (NvmetDeviations::all()) and every command is also replayed on
/// copies of the model with one deviation turned off: a different answer
/// there counts as that deviation being exercised. --model spec runs the
/// model as the specification says; --model none is a namespace without
/// reservation support (QEMU's own NVMe device).
///
/// Output: one JSON object on stdout. Exit 0: no divergence; 1: divergences;
/// 2: usage; 3: the device could not be used.

#include <fcntl.h>
#include <linux/nvme_ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../fake_passthru.hpp"
#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/passthru.hpp"
#include "internal/byte_order.hpp"

using nlohmann::json;
using namespace nvfence;
using nvfence::test::FakeTarget;
using nvfence::test::NvmetDeviations;

namespace {

constexpr uint32_t kTimeoutMs = 30000;
constexpr uint32_t kStateReportBytes = 4096;

std::string hex(uint64_t v, int width = 0) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%0*" PRIx64, width, v);
    return b;
}

std::string host_hex(const HostId& h) {
    std::string s;
    char b[3];
    for (auto c : h) {
        std::snprintf(b, sizeof b, "%02x", c);
        s += b;
    }
    return s;
}

/// One completion, as either side answered it.
struct Answer {
    int err = 0;                 ///< errno (system category) or 0.
    uint16_t status = 0;         ///< Raw NVMe status incl. DNR/More, 0 = success.
    uint32_t dw0 = 0;            ///< Completion dword 0 on success.
    std::vector<uint8_t> data;   ///< Device-to-host data (Report, Read).
    bool operator==(const Answer& o) const = default;
};

json answer_json(const Answer& a) {
    json j;
    if (a.err) {
        j["errno"] = a.err;
        j["error"] = std::strerror(a.err);
        return j;
    }
    j["status"] = hex(a.status, 4);
    if (a.status) {
        j["name"] = nvme_status_name(a.status);
        j["dnr"] = (a.status & kStatusDnr) != 0;
    } else {
        j["dw0"] = hex(a.dw0);
    }
    return j;
}

/// Report data decoded for comparison and for the JSON output. Controller
/// ids are left out (normalised).
struct ReportView {
    uint32_t gen = 0;
    uint8_t rtype = 0;
    uint16_t regctl = 0;
    uint8_t ptpls = 0;
    struct Entry {
        HostId host{};
        uint64_t key = 0;
        uint8_t rcsts = 0;
        bool operator==(const Entry&) const = default;
    };
    std::vector<Entry> entries;
    bool operator==(const ReportView&) const = default;
};

uint32_t le32(const uint8_t* p) { return nvfence::load_le<uint32_t>(p); }

ReportView decode_report(const std::vector<uint8_t>& d, bool eds) {
    ReportView v;
    if (d.size() < 10) return v;
    v.gen = le32(d.data());
    v.rtype = d[4];
    v.regctl = static_cast<uint16_t>(d[5] | d[6] << 8);
    v.ptpls = d[9];
    const size_t header = eds ? 64 : 24, entry = eds ? 64 : 24;
    for (size_t off = header; off + entry <= d.size() && v.entries.size() < v.regctl; off += entry) {
        ReportView::Entry e;
        const uint8_t* p = &d[off];
        e.rcsts = p[2];
        if (eds) {
            e.key = test::get_le64(p + 8);
            std::memcpy(e.host.data(), p + 16, 16);
        } else {
            std::memcpy(e.host.data(), p + 8, 8);
            e.key = test::get_le64(p + 16);
        }
        v.entries.push_back(e);
    }
    return v;
}

/// The Report data with every controller id zeroed (the one field allowed
/// to differ).
std::vector<uint8_t> normalise_report(std::vector<uint8_t> d, bool eds) {
    const size_t header = eds ? 64 : 24, entry = eds ? 64 : 24;
    for (size_t off = header; off + 2 <= d.size(); off += entry) d[off] = d[off + 1] = 0;
    return d;
}

json report_json(const ReportView& v, const std::map<std::string, std::string>& names) {
    json regs = json::array();
    for (const auto& e : v.entries) {
        const auto it = names.find(host_hex(e.host));
        regs.push_back({{"host", it != names.end() ? it->second : host_hex(e.host)},
                        {"key", hex(e.key)},
                        {"rcsts", e.rcsts}});
    }
    return {{"gen", v.gen}, {"rtype", v.rtype}, {"regctl", v.regctl}, {"ptpls", v.ptpls}, {"registrants", regs}};
}

/// One host identity: a controller of the namespace.
struct Host {
    std::string name;
    std::string dev;
    int fd = -1;
    HostId id{};
    uint16_t cntlid = 0;
    std::unique_ptr<IoctlPassthru> pt;
};

/// One generated command and what it means.
struct Step {
    size_t host = 0;
    Command cmd;
    std::vector<uint8_t> data;  ///< Buffer (write data, or receive buffer).
    bool receives = false;      ///< Device-to-host data.
    bool report = false;
    bool eds = true;
    std::string kind;           ///< e.g. "acquire/preempt_and_abort".
    json desc;
};

const char* kRegActs[] = {"register", "unregister", "replace"};
const char* kAcqActs[] = {"acquire", "preempt", "preempt_and_abort"};
const char* kRelActs[] = {"release", "clear"};

class Checker {
public:
    Checker(std::vector<Host>& hosts, std::string model, uint32_t nsid, uint32_t lba_bytes,
            uint64_t lba_base, size_t max_listed)
        : hosts_(hosts), model_(std::move(model)), nsid_(nsid), lba_bytes_(lba_bytes),
          lba_base_(lba_base), max_listed_(max_listed) {
        for (auto& h : hosts_) names_[host_hex(h.id)] = h.name;
    }

    /// Runs one seed of @p steps commands. False if the device failed us.
    bool run_seed(uint64_t seed, size_t steps) {
        seed_ = seed;
        rng_.seed(seed);
        if (!reset_device()) return false;
        t_ = make_model();
        if (reservations()) {
            auto st = device_state();
            if (!st) return false;
            resync(*st);
            for (size_t i = 0; i < hosts_.size(); ++i) {
                Answer a;
                a.data.assign(64, 0);
                a.data[9] = 1;  // read until the device says nothing is left
                drain(i, a);
            }
        }
        for (size_t i = 0; i < steps; ++i) {
            step_ = i;
            Step s = generate();
            if (!compare(s)) return false;
        }
        ++seeds_run_;
        return true;
    }

    json summary() const {
        json j;
        j["model"] = model_;
        j["hosts"] = json::array();
        for (const auto& h : hosts_)
            j["hosts"].push_back({{"name", h.name}, {"dev", h.dev}, {"hostid", host_hex(h.id)}});
        j["seeds_run"] = seeds_run_;
        j["commands_compared"] = compared_;
        j["state_reports_compared"] = state_reports_;
        j["notification_logs_compared"] = logs_;
        json pages = json::object();  // non-empty pages by type (1 registration preempted, 2 released, 3 preempted)
        for (const auto& [type, n] : log_pages_) pages[std::to_string(type)] = n;
        j["notification_pages_by_type"] = pages;
        j["divergences_total"] = divergences_total_;
        j["divergences"] = divergences_;
        j["statuses"] = statuses_;
        if (model_ == "nvmet") {
            json d = json::object();
            for (const auto& [k, n] : deviation_counts_) d[k] = {{"exercised", n}, {"first", deviation_first_.at(k)}};
            for (const auto* k : kDeviationNames)
                if (!d.contains(k)) d[k] = {{"exercised", 0}};
            j["nvmet_deviations"] = d;
        }
        j["controller_ids"] = "normalised: Report CNTLID is not compared (nvmet reports 0xffff, dynamic controllers)";
        return j;
    }
    size_t divergences() const { return divergences_total_; }

private:
    static constexpr const char* kDeviationNames[] = {
        "N1_undefined_action_invalid_opcode", "N2_cptpl_ignored", "N3_all_regs_single_holder",
        "N4_release_wrong_type_conflict", "N5_holder_self_preempt_keeps_shared_key"};

    std::vector<Host>& hosts_;
    std::string model_;
    uint32_t nsid_;
    uint32_t lba_bytes_;
    uint64_t lba_base_;
    size_t max_listed_;
    std::map<std::string, std::string> names_;
    FakeTarget t_;
    std::mt19937_64 rng_;
    uint64_t seed_ = 0;
    size_t step_ = 0;
    size_t seeds_run_ = 0;
    size_t compared_ = 0;
    size_t state_reports_ = 0;
    size_t logs_ = 0;
    std::map<unsigned, size_t> log_pages_;
    std::vector<uint64_t> last_count_ = std::vector<uint64_t>(8, 0);  // last page counter seen per host
    std::vector<bool> count_known_ = std::vector<bool>(8, false);
    size_t divergences_total_ = 0;
    json divergences_ = json::array();
    json statuses_ = json::object();
    std::map<std::string, size_t> deviation_counts_;
    json before_;

    ReportView model_view(const FakeTarget& t) const {
        FakeTarget copy = t;
        Answer a = on_model(copy, hosts_[0], state_report_cmd(t.nsid), std::vector<uint8_t>(kStateReportBytes));
        return decode_report(a.data, true);
    }
    std::map<std::string, json> deviation_first_;

    bool reservations() const { return model_ != "none"; }

    FakeTarget make_model() const {
        FakeTarget t;
        t.nsid = nsid_;
        t.deviations = model_ == "nvmet" ? NvmetDeviations::all() : NvmetDeviations{};
        if (model_ == "none") t.reservations_supported = false;
        return t;
    }

    uint64_t pick(uint64_t n) { return n ? rng_() % n : 0; }
    bool chance(unsigned percent) { return pick(100) < percent; }

    uint64_t key_pool() {
        static constexpr uint64_t pool[] = {0x1, 0x2, 0x3, 0xa5a5a5a5a5a5a5a5ull, 0xffffffffffffffffull, 0x1};
        if (chance(4)) return 0;
        return pool[pick(std::size(pool))];
    }
    uint64_t own_key(size_t h) {
        const auto* r = t_.find(hosts_[h].id);
        return r ? r->key : key_pool();
    }
    uint64_t crkey_for(size_t h, unsigned right_percent) {
        return chance(right_percent) ? own_key(h) : key_pool();
    }
    uint64_t prkey_for(size_t h) {
        const unsigned r = static_cast<unsigned>(pick(100));
        if (r < 40 && t_.holder) {
            if (const auto* hr = t_.find(*t_.holder)) return hr->key;
        }
        if (r < 75 && !t_.regs.empty()) return t_.regs[pick(t_.regs.size())].key;
        if (r < 85) return 0;
        if (r < 92) return own_key(h);
        return key_pool();
    }
    uint8_t rtype_pick() {
        if (chance(3)) return chance(50) ? 0 : 7;
        return static_cast<uint8_t>(1 + pick(6));
    }

    Step generate() {
        Step s;
        s.host = pick(hosts_.size());
        const unsigned r = static_cast<unsigned>(pick(100));
        json& d = s.desc;
        d["host"] = hosts_[s.host].name;
        if (r < 26) {
            unsigned act = static_cast<unsigned>(pick(100));
            act = act < 50 ? 0 : act < 72 ? 1 : act < 97 ? 2 : 3 + static_cast<unsigned>(pick(5));
            const bool iekey = chance(25);
            const unsigned cp = static_cast<unsigned>(pick(100));
            const unsigned cptpl = cp < 70 ? 0 : cp < 80 ? 1 : cp < 90 ? 2 : 3;
            const uint64_t crkey = crkey_for(s.host, 70), nrkey = key_pool();
            RegisterArgs a{.nsid = nsid_, .action = RegisterAction::register_key, .cptpl = Cptpl::no_change,
                           .iekey = iekey, .crkey = crkey, .nrkey = nrkey};
            s.cmd = encode_register(a);
            s.cmd.cdw[0] = (act & 7u) | (iekey ? 8u : 0u) | (cptpl << 30);
            s.kind = std::string("register/") + (act < 3 ? kRegActs[act] : "undefined_action");
            d.update({{"op", "register"}, {"rrega", act}, {"iekey", iekey}, {"cptpl", cptpl},
                      {"crkey", hex(crkey)}, {"nrkey", hex(nrkey)}});
        } else if (r < 52) {
            unsigned act = static_cast<unsigned>(pick(100));
            act = act < 40 ? 0 : act < 68 ? 1 : act < 96 ? 2 : 3 + static_cast<unsigned>(pick(5));
            const bool iekey = chance(4);
            const uint8_t rtype = rtype_pick();
            const uint64_t crkey = crkey_for(s.host, 85), prkey = prkey_for(s.host);
            AcquireArgs a{.nsid = nsid_, .crkey = crkey, .prkey = prkey};
            s.cmd = encode_acquire(a);
            s.cmd.cdw[0] = (act & 7u) | (iekey ? 8u : 0u) | uint32_t{rtype} << 8;
            s.kind = std::string("acquire/") + (act < 3 ? kAcqActs[act] : "undefined_action");
            d.update({{"op", "acquire"}, {"racqa", act}, {"rtype", rtype}, {"iekey", iekey},
                      {"crkey", hex(crkey)}, {"prkey", hex(prkey)}});
        } else if (r < 66) {
            unsigned act = static_cast<unsigned>(pick(100));
            act = act < 72 ? 0 : act < 96 ? 1 : 2 + static_cast<unsigned>(pick(6));
            const bool iekey = chance(4);
            const unsigned tr = static_cast<unsigned>(pick(100));
            const uint8_t rtype = tr < 60 ? static_cast<uint8_t>(t_.type) : tr < 95 ? static_cast<uint8_t>(1 + pick(6)) : 0;
            const uint64_t crkey = crkey_for(s.host, 85);
            ReleaseArgs a{.nsid = nsid_, .crkey = crkey};
            s.cmd = encode_release(a);
            s.cmd.cdw[0] = (act & 7u) | (iekey ? 8u : 0u) | uint32_t{rtype} << 8;
            s.kind = std::string("release/") + (act < 2 ? kRelActs[act] : "undefined_action");
            d.update({{"op", "release"}, {"rrela", act}, {"rtype", rtype}, {"iekey", iekey}, {"crkey", hex(crkey)}});
        } else if (r < 76) {
            static constexpr uint32_t sizes[] = {4, 8, 24, 60, 64, 88, 128, 152, 192, 256, 4096};
            const uint32_t len = sizes[pick(std::size(sizes))];
            s.eds = !chance(15);
            s.cmd = encode_report({.nsid = nsid_, .extended = s.eds, .len_bytes = len});
            s.report = true;
            s.receives = true;
            s.data.assign(len, 0);
            s.kind = s.eds ? "report/extended" : "report/plain";
            d.update({{"op", "report"}, {"eds", s.eds}, {"bytes", len}});
        } else {
            const unsigned k = static_cast<unsigned>(pick(100));
            if (k < 8) {
                s.cmd = encode_flush(nsid_);
                s.kind = "flush";
                d["op"] = "flush";
            } else {
                const bool write = k < 60;
                const uint64_t lba = lba_base_ + pick(1024);
                s.cmd = encode_rw(write, nsid_, lba, 1, lba_bytes_);
                s.data.assign(lba_bytes_, static_cast<uint8_t>(seed_ + step_));
                s.receives = !write;
                s.kind = write ? "write" : "read";
                d.update({{"op", s.kind}, {"lba", lba}});
            }
        }
        s.cmd.timeout_ms = kTimeoutMs;
        d["cdw10"] = hex(s.cmd.cdw[0], 8);
        d["cdw11"] = hex(s.cmd.cdw[1], 8);
        return s;
    }

    Answer on_device(size_t h, const Command& cmd, std::vector<uint8_t> data) {
        Answer a;
        uint16_t raw = 0;
        auto r = hosts_[h].pt->submit_raw(cmd, std::span<uint8_t>(data), raw);
        if (r) {
            a.dw0 = *r;
        } else if (raw) {
            a.status = raw;
        } else {
            a.err = r.error().category() == std::system_category() ? r.error().value() : EIO;
            if (a.err == 0) a.err = EIO;
        }
        if (!cmd.host_to_device) a.data = std::move(data);
        return a;
    }

    static Answer on_model(FakeTarget& t, const Host& h, const Command& cmd, std::vector<uint8_t> data) {
        Answer a;
        auto r = t.submit(h.id, h.cntlid, cmd, std::span<uint8_t>(data));
        t.log.clear();
        if (r) a.dw0 = *r;
        else a.status = t.last_status;
        if (!cmd.host_to_device) a.data = std::move(data);
        return a;
    }

    static Command state_report_cmd(uint32_t nsid) {
        auto c = encode_report({.nsid = nsid, .extended = true, .len_bytes = kStateReportBytes});
        c.timeout_ms = kTimeoutMs;
        return c;
    }

    /// Everything a Report shows of the model, plus the answers of @p a.
    static std::vector<uint8_t> visible(FakeTarget& t, const Host& h, const Answer& a, bool report, bool eds) {
        std::vector<uint8_t> v;
        v.push_back(static_cast<uint8_t>(a.status));
        v.push_back(static_cast<uint8_t>(a.status >> 8));
        if (report && a.status == 0) {
            auto n = normalise_report(a.data, eds);
            v.insert(v.end(), n.begin(), n.end());
        }
        Answer st = on_model(t, h, state_report_cmd(t.nsid), std::vector<uint8_t>(kStateReportBytes));
        auto n = normalise_report(st.data, true);
        v.insert(v.end(), n.begin(), n.end());
        return v;
    }

    void attribute_deviations(const FakeTarget& before, const Step& s) {
        const Host& h = hosts_[s.host];
        FakeTarget after = before;
        // The primary model already ran the command; rebuild its visible
        // outcome from a copy so both sides are measured the same way.
        Answer a = on_model(after, h, s.cmd, s.data);
        const auto want = visible(after, h, a, s.report, s.eds);
        for (size_t k = 0; k < std::size(kDeviationNames); ++k) {
            FakeTarget alt = before;
            bool* flags[] = {&alt.deviations.undefined_action_invalid_opcode, &alt.deviations.cptpl_ignored,
                             &alt.deviations.all_regs_single_holder, &alt.deviations.release_wrong_type_conflict,
                             &alt.deviations.holder_self_preempt_keeps_shared_key};
            *flags[k] = false;
            Answer b = on_model(alt, h, s.cmd, s.data);
            if (visible(alt, h, b, s.report, s.eds) == want) continue;
            const std::string name = kDeviationNames[k];
            if (deviation_counts_[name]++ == 0) {
                deviation_first_[name] = {{"seed", seed_}, {"step", step_}, {"command", s.desc},
                                          {"nvmet", answer_json(a)}, {"specification", answer_json(b)}};
            }
        }
    }

    void count_status(const std::string& kind, const Answer& a) {
        const std::string k = a.err ? "errno " + std::to_string(a.err) : hex(a.status, 4);
        auto& slot = statuses_[kind][k];
        slot = slot.is_null() ? 1 : slot.get<size_t>() + 1;
    }

    void diverge(const char* what, const Step* s, const Answer& dev, const Answer& mod, json extra = {}) {
        ++divergences_total_;
        if (divergences_.size() >= max_listed_) return;
        json j{{"seed", seed_}, {"step", step_}, {"what", what}, {"device", answer_json(dev)},
               {"model", answer_json(mod)}};
        if (s) j["command"] = s->desc;
        j["state_before"] = before_;
        if (!extra.is_null()) j.update(extra);
        divergences_.push_back(j);
    }

    bool compare(const Step& s) {
        const Host& h = hosts_[s.host];
        const FakeTarget before = t_;
        before_ = report_json(model_view(before), names_);
        if (before.holder) before_["holder_record"] = names_[host_hex(*before.holder)];
        Answer dev = on_device(s.host, s.cmd, s.data);
        if (dev.err == ENODEV || dev.err == ENXIO) return false;
        Answer mod = on_model(t_, h, s.cmd, s.data);
        if (model_ == "nvmet") attribute_deviations(before, s);
        ++compared_;
        count_status(s.kind, dev);
        bool same = dev.err == mod.err && dev.status == mod.status && (dev.status || dev.dw0 == mod.dw0);
        if (!same) {
            diverge("status", &s, dev, mod);
        } else if (s.report && dev.status == 0 && !dev.err) {
            if (normalise_report(dev.data, s.eds) != normalise_report(mod.data, s.eds)) {
                same = false;
                diverge("report_data", &s, dev, mod,
                        {{"device_report", report_json(decode_report(dev.data, s.eds), names_)},
                         {"model_report", report_json(decode_report(mod.data, s.eds), names_)}});
            }
        }
        // The state after the command, through the first host.
        const Command rc = state_report_cmd(nsid_);
        Answer dst = on_device(0, rc, std::vector<uint8_t>(kStateReportBytes));
        Answer mst = on_model(t_, hosts_[0], rc, std::vector<uint8_t>(kStateReportBytes));
        ++state_reports_;
        if (dst.err == ENODEV || dst.err == ENXIO) return false;
        bool state_same = dst.err == mst.err && dst.status == mst.status;
        if (state_same && dst.status == 0 && !dst.err)
            state_same = normalise_report(dst.data, true) == normalise_report(mst.data, true);
        if (!state_same) {
            diverge("state_after", &s, dst, mst,
                    {{"device_report", report_json(decode_report(dst.data, true), names_)},
                     {"model_report", report_json(decode_report(mst.data, true), names_)}});
        }
        if ((!same || !state_same) && reservations() && dst.status == 0 && !dst.err)
            resync(decode_report(dst.data, true));
        if (reservations()) compare_notifications(&s);
        return true;
    }

    static Command log_cmd() {
        auto c = encode_get_log_page(kLogReservationNotification, 0xffffffffu, 64, false);
        c.timeout_ms = kTimeoutMs;
        return c;
    }

    static json log_json(const Answer& a) {
        if (a.err || a.status || a.data.size() < 16) return answer_json(a);
        return {{"count", test::get_le64(a.data.data())}, {"type", a.data[8]}, {"available", a.data[9]},
                {"nsid", le32(&a.data[12])}};
    }

    /// Each host's Reservation Notification log page (80h), read (and so
    /// consumed) after every command on both sides.
    void compare_notifications(const Step* s) {
        for (size_t i = 0; i < hosts_.size(); ++i) {
            // Up to a few pages per command and host; stop when both are empty.
            for (int n = 0; n < 8; ++n) {
                Answer d = on_device(i, log_cmd(), std::vector<uint8_t>(64));
                const uint64_t dc = d.err || d.status ? 0 : test::get_le64(d.data.data());
                if (dc && !count_known_[i]) {
                    // The device's counter runs on across runs of this
                    // tool: the first page seen sets the model's.
                    t_.notice_count[hosts_[i].id] = dc - 1;
                    count_known_[i] = true;
                }
                if (dc) {
                    last_count_[i] = dc;
                    ++log_pages_[d.data[8]];
                }
                Answer m = on_model(t_, hosts_[i], log_cmd(), std::vector<uint8_t>(64));
                ++logs_;
                if (!(d == m)) {
                    diverge("notification_log", s, d, m,
                            {{"log_host", hosts_[i].name}, {"device_log", log_json(d)}, {"model_log", log_json(m)}});
                    drain(i, d);
                    break;
                }
                if (d.err || d.status || test::get_le64(d.data.data()) == 0) break;
            }
        }
    }

    /// After a divergence: empties the device's log of host @p i and makes
    /// the model's log of that host empty with the device's counter.
    void drain(size_t i, Answer last) {
        uint64_t count = last.data.size() >= 8 ? test::get_le64(last.data.data()) : 0;
        for (int n = 0; n < 70 && !last.err && !last.status && last.data.size() >= 10 && last.data[9]; ++n) {
            last = on_device(i, log_cmd(), std::vector<uint8_t>(64));
            if (last.data.size() >= 8 && test::get_le64(last.data.data())) count = test::get_le64(last.data.data());
        }
        t_.notices[hosts_[i].id].clear();
        if (count) {
            last_count_[i] = count;
            count_known_[i] = true;
        }
        t_.notice_count[hosts_[i].id] = last_count_[i];
    }

    std::optional<ReportView> device_state() {
        Answer a = on_device(0, state_report_cmd(nsid_), std::vector<uint8_t>(kStateReportBytes));
        if (a.err || a.status) {
            std::cerr << "nvfence-model-check: Report on " << hosts_[0].dev << " failed: "
                      << answer_json(a).dump() << "\n";
            return std::nullopt;
        }
        return decode_report(a.data, true);
    }

    /// Makes the model's state the device's (after a divergence or at the
    /// start of a seed).
    void resync(const ReportView& v) {
        std::optional<HostId> old_holder = t_.holder;
        t_.regs.clear();
        for (const auto& e : v.entries) {
            uint16_t cntlid = 0;
            for (const auto& h : hosts_)
                if (h.id == e.host) cntlid = h.cntlid;
            t_.regs.push_back({e.host, e.key, cntlid});
        }
        t_.type = static_cast<ResvType>(v.rtype);
        t_.generation = v.gen;
        t_.ptpl = v.ptpls & 1;
        t_.holder.reset();
        if (t_.type != ResvType::none) {
            if (resv_type_all_registrants(t_.type)) {
                // The one nvmet records is not visible: keep the model's if
                // it is still registered, else the first registrant.
                if (old_holder && t_.find(*old_holder)) t_.holder = old_holder;
                else if (!t_.regs.empty()) t_.holder = t_.regs.front().host;
            } else {
                for (const auto& e : v.entries)
                    if (e.rcsts & 1) t_.holder = e.host;
            }
        }
    }

    /// Unregisters every host (IEKEY), so the reservation goes with them.
    bool reset_device() {
        if (!reservations()) return true;
        for (size_t i = 0; i < hosts_.size(); ++i) {
            auto c = encode_register({.nsid = nsid_, .action = RegisterAction::unregister_key,
                                      .cptpl = Cptpl::no_change, .iekey = true, .crkey = 0, .nrkey = 0});
            c.timeout_ms = kTimeoutMs;
            Answer a = on_device(i, c, {});
            if (a.err) {
                std::cerr << "nvfence-model-check: unregister on " << hosts_[i].dev << ": " << std::strerror(a.err) << "\n";
                return false;
            }
        }
        auto st = device_state();
        if (!st) return false;
        if (!st->entries.empty() || st->rtype != 0) {
            std::cerr << "nvfence-model-check: registrants left after unregistering every host (another "
                         "host uses the namespace?)\n";
            return false;
        }
        return true;
    }
};

int usage(const char* msg) {
    std::cerr << "nvfence-model-check: " << msg << "\n"
              << "usage: nvfence-model-check --dev PATH [--dev PATH ...] [--seed N ...] [--seeds A-B]\n"
                 "         [--steps N] [--model nvmet|spec|none] [--lba-base N] [--max-listed N]\n"
                 "  One --dev per host identity (its own controller of the shared namespace).\n"
                 "  Default: --seed 1 --steps 1000 --model nvmet --lba-base 8192 --max-listed 50\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> devs;
    std::vector<uint64_t> seeds;
    size_t steps = 1000, max_listed = 50;
    std::string model = "nvmet";
    uint64_t lba_base = 8192;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        try {
            if (a == "--dev") devs.push_back(val());
            else if (a == "--seed") seeds.push_back(std::stoull(val(), nullptr, 0));
            else if (a == "--seeds") {
                const std::string v = val();
                const auto dash = v.find('-');
                if (dash == std::string::npos) return usage("--seeds takes A-B");
                for (uint64_t s = std::stoull(v.substr(0, dash)); s <= std::stoull(v.substr(dash + 1)); ++s)
                    seeds.push_back(s);
            } else if (a == "--steps") steps = std::stoull(val());
            else if (a == "--model") model = val();
            else if (a == "--lba-base") lba_base = std::stoull(val(), nullptr, 0);
            else if (a == "--max-listed") max_listed = std::stoull(val());
            else if (a == "-h" || a == "--help") return usage("compare FakeTarget with a real namespace"), 0;
            else return usage(("unknown argument " + a).c_str());
        } catch (const std::exception& e) {
            return usage(e.what());
        }
    }
    if (devs.empty() || devs.size() > 8) return usage("one to eight --dev");
    if (model != "nvmet" && model != "spec" && model != "none") return usage("--model is nvmet, spec or none");
    if (seeds.empty()) seeds.push_back(1);

    std::vector<Host> hosts(devs.size());
    uint32_t nsid = 0;
    uint32_t lba_bytes = 512;
    for (size_t i = 0; i < devs.size(); ++i) {
        Host& h = hosts[i];
        h.name = std::string(1, static_cast<char>('a' + i));
        h.dev = devs[i];
        h.fd = ::open(h.dev.c_str(), O_RDWR | O_CLOEXEC);
        if (h.fd < 0) {
            std::cerr << "nvfence-model-check: " << h.dev << ": " << std::strerror(errno) << "\n";
            return 3;
        }
        h.pt = std::make_unique<IoctlPassthru>(h.fd);
        h.cntlid = static_cast<uint16_t>(i + 1);
        const int id = ::ioctl(h.fd, NVME_IOCTL_ID);
        if (id <= 0) {
            std::cerr << "nvfence-model-check: " << h.dev << ": not an NVMe namespace\n";
            return 3;
        }
        if (nsid && static_cast<uint32_t>(id) != nsid) {
            std::cerr << "nvfence-model-check: the devices have different namespace ids\n";
            return 3;
        }
        nsid = static_cast<uint32_t>(id);
        std::vector<uint8_t> hid(16);
        if (auto r = h.pt->submit(encode_get_host_id(), hid); r) std::memcpy(h.id.data(), hid.data(), 16);
        else h.id = test::make_host(static_cast<uint8_t>(i + 1));  // no feature 81h (QEMU): any distinct id
        if (i == 0) {
            std::vector<uint8_t> idns(4096);
            if (auto r = h.pt->submit(encode_identify(IdentifyCns::namespace_, nsid), idns); r) {
                const unsigned fl = (idns[26] & 0xf) | ((idns[26] >> 1) & 0x30);
                const unsigned lbads = idns[128 + 4 * fl + 2];
                if (lbads >= 9 && lbads <= 16) lba_bytes = 1u << lbads;
            }
        }
    }
    for (size_t i = 0; i < hosts.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (hosts[i].id == hosts[j].id && model != "none") {
                std::cerr << "nvfence-model-check: " << hosts[i].dev << " and " << hosts[j].dev
                          << " have the same host id\n";
                return 3;
            }

    const auto t0 = std::chrono::steady_clock::now();
    Checker c(hosts, model, nsid, lba_bytes, lba_base, max_listed);
    bool ok = true;
    for (uint64_t s : seeds) {
        if (!c.run_seed(s, steps)) {
            ok = false;
            break;
        }
    }
    json j = c.summary();
    j["seeds"] = seeds;
    j["steps_per_seed"] = steps;
    j["nsid"] = nsid;
    j["lba_bytes"] = lba_bytes;
    j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    j["completed"] = ok;
    std::cout << j.dump() << std::endl;
    if (!ok) return 3;
    return c.divergences() ? 1 : 0;
}
