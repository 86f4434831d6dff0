// SPDX-License-Identifier: MIT
// nvfence: the operator's and cluster manager's tool for NVMe reservation
// fencing. See README.md for the reference.
#include <syslog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
#include <nvme/fabrics.h>
}

#include "agent_cmds.hpp"
#include "foreign.hpp"
#include "json.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/nvfence.h"
#include "nvfence/reservation.hpp"
#include "nvfence/stamp.hpp"
#include "nvfence/writer.hpp"

namespace nvfence::cli {
namespace {

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  any other failure (device error, verification failed)\n"
    "  2  usage: bad arguments, no such device\n"
    "  3  reservation conflict / not the holder (the device refused this host)\n"
    "  4  device unsupported: not an NVMe namespace, or no reservation support\n"
    "  5  permission denied (run as root)\n"
    "  6  lost a takeover race (another host won; it is named)\n";

struct Common {
    std::string dev;
    bool json = false;
    unsigned tag = 0;
    std::string state_dir = "/var/lib/nvfence";
};

int code(ExitCode c) { return static_cast<int>(c); }

std::string env_or(const char* name, std::string fallback) {
    const char* v = std::getenv(name);
    return (v && *v) ? std::string(v) : fallback;
}

std::string describe_key(uint64_t key) {
    if (auto f = decode_key(key))
        return format_key(key) + " (node " + std::to_string(f->node) + ", epoch " +
               std::to_string(f->epoch) + ")";
    return format_key_hex(key) + " (foreign)";
}

// The command may not have reached the device, or its completion was lost:
// the one rule, completion_uncertain() (error.hpp).
bool is_path_error(std::error_code ec) { return completion_uncertain(ec) && !is_fenced(ec); }

// One line on stderr (what is wrong and what to do), plus the same as a
// JSON object on stdout for programs that asked for --json.
int fail(const Common& c, const std::string& what, std::error_code ec, std::string hint = {},
         std::optional<uint64_t> holder = std::nullopt) {
    const int rc = code(exit_code_for(ec));
    std::string line = "nvfence: " + what;
    if (!hint.empty()) line += ": " + hint;
    std::cerr << line << "\n";
    if (c.json) {
        Json j;
        j.begin_object().key("error").str(line).key("exit_code").num(static_cast<uint64_t>(rc));
        j.key("cause").str(ec.message());
        if (holder) j.key("holder").str(format_key_hex(*holder)).key("holder_key").str(format_key(*holder));
        j.end_object();
        std::cout << j.text() << "\n";
    }
    return rc;
}

int fail_open(const Common& c, std::error_code ec) {
    const std::string& d = c.dev;
    if (ec == Errc::not_found)
        return fail(c, d + ": no such device", ec, "check the path (ls /dev/nvme*n* /dev/disk/by-id/)");
    if (ec == Errc::not_nvme)
        return fail(c, d + ": not an NVMe namespace", ec,
                    "give a namespace block device /dev/nvmeXnY, its /dev/ngXnY, or a link to one");
    if (ec == Errc::controller_node)
        return fail(c, d + ": is an NVMe controller node, not a namespace", ec,
                    "reservations belong to a namespace: use /dev/nvmeXnY");
    if (ec == Errc::device_gone)
        return fail(c, d + ": the device disappeared", ec, "check that the namespace is still attached");
    if (ec.category() == std::system_category() && (ec.value() == EACCES || ec.value() == EPERM))
        return fail(c, d + ": permission denied", ec,
                    "NVMe passthrough needs root (CAP_SYS_ADMIN): run nvfence as root");
    if (is_nvme(ec, NvmeStatus::invalid_opcode))
        return fail(c, d + ": the device refused Identify: " + ec.message(), errno_error(EIO),
                    "is this an NVMe namespace?");
    if (is_path_error(ec))
        return fail(c, d + ": cannot open: " + ec.message(), ec,
                    "the controller is resetting or its path is down; nothing was changed; "
                    "retry once /sys/class/nvme/<ctrl>/state is live");
    return fail(c, d + ": cannot open: " + ec.message(), ec);
}

// Opens the namespace and insists on reservation support; on error returns
// nullptr and sets rc.
std::unique_ptr<Namespace> open_ns(const Common& c, int& rc, bool require_resv = true) {
    auto ns = Namespace::open(c.dev);
    if (!ns) {
        rc = fail_open(c, ns.error());
        return nullptr;
    }
    if (require_resv) {
        std::string why;
        if (auto s = (*ns)->require_reservations(&why); !s) {
            rc = fail(c, why, s.error(), "use a reservation-capable shared namespace");
            return nullptr;
        }
    }
    return std::move(*ns);
}

int fail_host_id(const Common& c) {
    return fail(c, c.dev + ": cannot read this host's NVMe host identifier", make_error_code(Errc::host_id_unknown),
                "Get Features Host Identifier failed and the controller has no sysfs hostid; "
                "nvfence needs it to find this host's registration");
}

// Error reporting for fence operations, naming the holder where known.
int fail_op(const Common& c, const std::string& op, std::error_code ec, const Fence& f) {
    std::optional<uint64_t> holder;
    std::string holder_text = "nobody";
    if (f.last_report()) {
        if (const auto* h = f.last_report()->holder()) {
            holder = h->key;
            holder_text = describe_key(h->key) + " (host id " + format_host_id(h->host_id) + ")";
        }
    }
    if (ec == Errc::lost_race)
        return fail(c, op + ": lost the takeover race: " + holder_text + " now holds " + c.dev, ec,
                    "this host registered a fresh key but did not take the reservation", holder);
    if (ec == Errc::held_by_other)
        return fail(c, op + ": " + holder_text + " holds the reservation on " + c.dev, ec,
                    "use 'nvfence preempt' to take it over", holder);
    if (ec == Errc::not_holder)
        return fail(c, op + ": this host does not hold the reservation; " + holder_text + " does", ec, {},
                    holder);
    if (ec == Errc::not_registered)
        return fail(c, op + ": this host is not registered on " + c.dev, ec,
                    "run 'nvfence register DEV --node N' first", holder);
    if (ec == Errc::host_id_conflict) {
        std::string bound = "another key";
        if (f.last_report()) {
            if (const auto* me = f.mine(*f.last_report())) bound = describe_key(me->key);
        }
        return fail(c, op + ": this host's host id is already registered with " + bound, ec,
                    "if another host shares this host id, give each host a unique hostid "
                    "(/etc/nvme/hostid); to change this host's own key use --replace",
                    holder);
    }
    if (ec == Errc::invalid_argument)
        return fail(c, op + ": " + ec.message(), ec, {}, holder);
    if (ec == Errc::verify_failed)
        return fail(c, op + ": the device accepted the command but the report does not show the change", ec,
                    "run 'nvfence report' to see the state", holder);
    if (ec == Errc::epoch_out_of_range)
        return fail(c, op + ": " + ec.message(), ec,
                    "--epoch may be at most " + std::to_string(kEpochCeiling - 1) +
                        " and at most " + std::to_string(kMaxEpochJump) + " above the highest epoch seen");
    if (ec == Errc::own_key)
        return fail(c, op + ": the victim is this host's own current key", ec, {}, holder);
    if (is_state_error(ec))
        return fail(c, op + ": cannot persist the epoch in " + c.state_dir + ": " + ec.message(), ec,
                    "check --state-dir (nothing was sent to the device)", holder);
    if (is_fenced(ec))
        return fail(c, op + ": the device refused this host: " + ec.message(), ec,
                    "this host is not allowed to do this now (see 'nvfence report')", holder);
    if (is_path_error(ec))
        return fail(c, op + ": " + ec.message(), ec,
                    "the controller was resetting or its path failed, so whether the device did it is "
                    "unknown: see 'nvfence report' and run the command again (it is idempotent)",
                    holder);
    return fail(c, op + ": " + ec.message(), ec, {}, holder);
}

void json_registrant(Json& j, const Registrant& r) {
    j.begin_object();
    j.key("key").str(format_key_hex(r.key));
    j.key("key_text").str(format_key(r.key));
    if (auto f = decode_key(r.key)) {
        j.key("foreign").boolean(false);
        j.key("tag").num(f->tag).key("node").num(f->node).key("epoch").num(f->epoch);
    } else {
        j.key("foreign").boolean(true);
    }
    j.key("holder").boolean(r.holder);
    j.key("host_id").str(format_host_id(r.host_id));
    j.key("cntlid").num(r.cntlid);
    j.end_object();
}

// @p more adds members at the end of the object (diagnostics of one command).
void json_status(Json& j, const ReservationStatus& st, const std::optional<HostId>& self,
                 const std::function<void(Json&)>& more = {}) {
    j.begin_object();
    j.key("generation").num(st.generation);
    j.key("type").str(resv_type_short(st.type));
    j.key("type_name").str(resv_type_name(st.type));
    j.key("ptpl").boolean(st.ptpl);
    j.key("extended").boolean(st.extended);
    const auto* h = st.holder();
    j.key("holder");
    if (h) j.str(format_key_hex(h->key)); else j.null();
    j.key("holder_key");
    if (h) j.str(format_key(h->key)); else j.null();
    j.key("self");
    if (self && st.find_host(*self)) j.str(format_key_hex(st.find_host(*self)->key)); else j.null();
    j.key("registrants").begin_array();
    for (const auto& r : st.registrants) json_registrant(j, r);
    j.end_array();
    if (more) more(j);
    j.end_object();
}

void print_status(const ReservationStatus& st, const std::optional<HostId>& self) {
    std::printf("generation:  %u\n", st.generation);
    if (st.type == ResvType::none)
        std::printf("reservation: none\n");
    else
        std::printf("reservation: %s (%s)\n", resv_type_name(st.type), resv_type_short(st.type));
    const auto* h = st.holder();
    std::printf("holder:      %s\n", h ? describe_key(h->key).c_str() : "none");
    std::printf("registrants: %zu%s\n", st.registrants.size(), st.extended ? "" : " (short report: 64-bit host ids)");
    if (!st.registrants.empty()) {
        std::printf("  %-20s %-18s %-6s %-5s %-6s %-32s %s\n", "KEY", "HEX", "NODE", "EPOCH", "HOLDER",
                    "HOST ID", "CNTLID");
        for (const auto& r : st.registrants) {
            auto f = decode_key(r.key);
            std::string node = f ? std::to_string(f->node) : "-";
            std::string epoch = f ? std::to_string(f->epoch) : "-";
            std::string text = f ? format_key(r.key) : "foreign";
            const bool me = self && r.host_id == *self;
            std::printf("  %-20s %-18s %-6s %-5s %-6s %-32s 0x%04x%s\n", text.c_str(),
                        format_key_hex(r.key).c_str(), node.c_str(), epoch.c_str(), r.holder ? "yes" : "no",
                        format_host_id(r.host_id).c_str(), r.cntlid, me ? "  <- this host" : "");
        }
    }
}

void json_outcome(Json& j, const Outcome& o, const std::optional<HostId>& self) {
    j.key("changed").boolean(o.changed);
    j.key("key");
    if (o.key) j.str(format_key_hex(o.key)); else j.null();
    j.key("key_text");
    if (o.key) j.str(format_key(o.key)); else j.null();
    if (auto f = o.key ? decode_key(o.key) : std::nullopt) j.key("epoch").num(f->epoch).key("node").num(f->node);
    j.key("previous_holder");
    if (o.previous_holder) j.str(format_key_hex(*o.previous_holder)); else j.null();
    j.key("removed").begin_array();
    for (auto k : o.removed) j.str(format_key_hex(k));
    j.end_array();
    j.key("replaced");
    if (o.replaced) j.str(format_key_hex(*o.replaced)); else j.null();
    j.key("generation").num(o.after.generation);
    if (o.completion_error) j.key("completion_error").str(o.completion_error->message());
    j.key("report");
    json_status(j, o.after, self);
}

// A command's completion was an error but the Report shows it done.
void print_completion_note(const Outcome& o) {
    if (o.completion_error)
        std::printf("note:        the device completed a command with %s, but its report shows it done "
                    "(a command re-sent after a controller reset)\n",
                    o.completion_error->message().c_str());
}

std::string hostnqn_for(const NamespaceInfo& i) {
    std::ifstream f("/sys/class/nvme/" + i.paths.controller + "/hostnqn");
    std::string s;
    if (f && std::getline(f, s) && !s.empty()) return s;
    char* n = nvmf_hostnqn_from_file();
    if (n) {
        s = n;
        std::free(n);
    }
    return s;
}

// ---- commands -------------------------------------------------------------

// The reservation types RESCAP says the namespace supports, in RESCAP's order.
std::vector<ResvType> supported_types(const ResvCaps& r) {
    std::vector<ResvType> out;
    for (auto t : {ResvType::write_exclusive, ResvType::exclusive_access, ResvType::write_exclusive_reg_only,
                   ResvType::exclusive_access_reg_only, ResvType::write_exclusive_all_regs,
                   ResvType::exclusive_access_all_regs})
        if (r.supports(t)) out.push_back(t);
    return out;
}

void print_info_json(const NamespaceInfo& i, bool ok, const std::string& why, const std::string& hostnqn) {
    const auto& r = i.ns.rescap;
    Json j;
    j.begin_object();
    j.key("device").str(i.paths.block).key("generic").str(i.paths.generic);
    j.key("controller").str(i.paths.controller).key("transport").str(i.paths.transport);
    j.key("model").str(i.ctrl.model).key("serial").str(i.ctrl.serial).key("firmware").str(i.ctrl.firmware);
    j.key("ebs_volume_id");
    if (i.ebs_volume) j.str(*i.ebs_volume); else j.null();
    j.key("volume_id").str(i.volume);
    j.key("nsid").num(i.nsid).key("lba_bytes").num(i.ns.lba_bytes);
    j.key("size_blocks").num(i.ns.size_blocks).key("capacity_bytes").num(i.ns.size_blocks * i.ns.lba_bytes);
    j.key("shared").boolean(i.looks_shared());
    j.key("reservations").boolean(ok);
    j.key("oncs_reservations").boolean(i.ctrl.reservations);
    j.key("rescap").num(i.ns.rescap_raw);
    j.key("types").begin_array();
    for (auto t : supported_types(r)) j.str(resv_type_short(t));
    j.end_array();
    j.key("ptpl").boolean(r.ptpl).key("iekey").boolean(r.iekey);
    j.key("host_id");
    if (i.host_id) j.str(format_host_id(*i.host_id)); else j.null();
    j.key("hostnqn").str(hostnqn);
    if (!ok) j.key("error").str("nvfence: " + why).key("exit_code").num(static_cast<uint64_t>(ExitCode::unsupported));
    j.end_object();
    std::cout << j.text() << "\n";
}

void print_info_text(const NamespaceInfo& i, bool ok, const std::string& hostnqn) {
    const auto& r = i.ns.rescap;
    std::printf("device:        %s\n", i.paths.block.c_str());
    std::printf("generic:       %s\n", i.paths.generic.empty() ? "-" : i.paths.generic.c_str());
    std::printf("controller:    %s (%s)\n", i.paths.controller.c_str(),
                i.paths.transport.empty() ? "?" : i.paths.transport.c_str());
    std::printf("model:         %s\n", i.ctrl.model.c_str());
    std::printf("serial:        %s\n", i.ctrl.serial.c_str());
    std::printf("firmware:      %s\n", i.ctrl.firmware.c_str());
    if (i.ebs_volume) std::printf("EBS volume:    %s\n", i.ebs_volume->c_str());
    std::printf("volume id:     %s\n", i.volume.c_str());
    std::printf("nsid:          %u\n", i.nsid);
    std::printf("LBA size:      %u bytes\n", i.ns.lba_bytes);
    std::printf("capacity:      %llu blocks (%llu bytes)\n", static_cast<unsigned long long>(i.ns.size_blocks),
                static_cast<unsigned long long>(i.ns.size_blocks * i.ns.lba_bytes));
    std::printf("shared:        %s\n", i.looks_shared() ? "yes" : "no");
    std::printf("reservations:  %s (ONCS bit %s, RESCAP 0x%02x)\n", ok ? "supported" : "NOT supported",
                i.ctrl.reservations ? "set" : "clear", i.ns.rescap_raw);
    std::printf("types:        ");
    for (auto t : supported_types(r)) std::printf(" %s", resv_type_short(t));
    std::printf("\nPTPL:          %s\nIEKEY:         %s\n", r.ptpl ? "yes" : "no", r.iekey ? "yes" : "no");
    std::printf("host id:       %s\n", i.host_id ? format_host_id(*i.host_id).c_str() : "unknown");
    std::printf("host NQN:      %s\n", hostnqn.empty() ? "-" : hostnqn.c_str());
    std::printf("fencing:       the device refuses every write path of a preempted host\n"
                "               (page cache, filesystems, other processes), not only nvfence's\n");
}

int cmd_info(const Common& c) {
    int rc = 0;
    auto ns = open_ns(c, rc, false);
    if (!ns) return rc;
    const auto& i = ns->info();
    std::string why;
    const bool ok = ns->require_reservations(&why).ok();
    const std::string hostnqn = hostnqn_for(i);
    if (c.json) print_info_json(i, ok, why, hostnqn);
    else print_info_text(i, ok, hostnqn);
    if (!ok) {
        // One JSON document: the error is part of the info object above.
        std::cerr << "nvfence: " << why << "\n";
        return code(ExitCode::unsupported);
    }
    return 0;
}

// initial_bytes (diagnostic, --initial-bytes): the size of the first Report
// read; a size too small for every registrant exercises the re-read, and the
// output then also says how many reads it took.
int cmd_report(const Common& c, std::optional<uint32_t> initial_bytes) {
    int rc = 0;
    auto ns = open_ns(c, rc);
    if (!ns) return rc;
    Reservations resv(ns->passthru(), ns->info().nsid);
    if (initial_bytes) resv.set_report_initial_bytes(*initial_bytes);
    auto st = resv.report();
    if (!st) return fail(c, c.dev + ": reservation report failed: " + st.error().message(), st.error());
    // Every Report raises this host's epoch floor (the agent's too: one
    // locked file), so a later key is above every epoch seen here.
    EpochStore store(c.state_dir, ns->info().volume);
    if (auto o = store.raise_from(*st, static_cast<uint8_t>(c.tag)); !o)
        std::cerr << "nvfence: warning: cannot raise the epoch floor in " << store.path() << ": "
                  << o.error().message() << "\n";
    else
        for (uint64_t k : o->implausible)
            std::cerr << "nvfence: WARNING: key " << format_key(k) << " has an implausible epoch (at or above "
                      << kEpochCeiling << " or more than " << kMaxEpochJump
                      << " above this host's floor); it does not raise the floor: preempt it "
                         "(see docs/CONTRACTS.md, epochs)\n";
    if (c.json) {
        Json j;
        json_status(j, *st, ns->info().host_id, [&](Json& o) {
            if (initial_bytes) o.key("initial_bytes").num(*initial_bytes).key("reads").snum(resv.last_report_reads());
        });
        std::cout << j.text() << "\n";
    } else {
        print_status(*st, ns->info().host_id);
        if (initial_bytes)
            std::printf("reads:       %d (first read %u bytes)\n", resv.last_report_reads(), *initial_bytes);
    }
    return 0;
}

struct FenceCtx {
    std::unique_ptr<Namespace> ns;
    std::unique_ptr<Reservations> resv;
    std::unique_ptr<EpochStore> store;
    std::unique_ptr<Fence> fence;
};

std::optional<FenceCtx> open_fence(const Common& c, FenceOptions opts, int& rc) {
    FenceCtx x;
    x.ns = open_ns(c, rc);
    if (!x.ns) return std::nullopt;
    if (!x.ns->info().host_id) {
        rc = fail_host_id(c);
        return std::nullopt;
    }
    if (!x.ns->info().ns.rescap.supports(opts.type)) {
        rc = fail(c, c.dev + ": the namespace does not support reservation type " +
                         resv_type_name(opts.type),
                  make_error_code(Errc::type_unsupported), "see 'nvfence info' for the supported types");
        return std::nullopt;
    }
    opts.tag = static_cast<uint8_t>(c.tag);
    x.resv = std::make_unique<Reservations>(x.ns->passthru(), x.ns->info().nsid);
    x.store = std::make_unique<EpochStore>(c.state_dir, x.ns->info().volume);
    x.fence = std::make_unique<Fence>(*x.resv, *x.ns->info().host_id, opts, x.store.get());
    return x;
}

int print_outcome(const Common& c, const FenceCtx& x, const Outcome& o, const std::string& verb) {
    if (c.json) {
        Json j;
        j.begin_object();
        j.key("command").str(verb);
        json_outcome(j, o, x.ns->info().host_id);
        j.end_object();
        std::cout << j.text() << "\n";
        return 0;
    }
    std::printf("%s: %s\n", verb.c_str(), o.changed ? "done" : "nothing to do (already in that state)");
    if (o.key) std::printf("this host:   %s\n", describe_key(o.key).c_str());
    else std::printf("this host:   not registered\n");
    for (auto k : o.removed) std::printf("removed:     %s\n", describe_key(k).c_str());
    print_completion_note(o);
    std::printf("verified by report:\n");
    print_status(o.after, x.ns->info().host_id);
    return 0;
}

// Type names: the library's one parser (nvfence::parse_resv_type), so the
// "WE", "WERO"... that report prints are accepted back and no number is.
Result<ResvType> parse_type(const std::string& s) { return parse_resv_type(s); }

int cmd_register(const Common& c, unsigned node, std::optional<uint32_t> epoch, bool replace, bool ptpl) {
    FenceOptions o;
    o.node = static_cast<uint8_t>(node);
    o.cptpl = ptpl ? Cptpl::set : Cptpl::no_change;
    int rc = 0;
    auto x = open_fence(c, o, rc);
    if (!x) return rc;
    if (ptpl && !x->ns->info().ns.rescap.ptpl)
        return fail(c, c.dev + ": the namespace does not support Persist Through Power Loss",
                    make_error_code(Errc::type_unsupported), "register without --ptpl");
    auto out = x->fence->join(epoch, replace);
    if (!out) return fail_op(c, "register", out.error(), *x->fence);
    return print_outcome(c, *x, *out, "register");
}

int cmd_simple(const Common& c, const std::string& verb, ResvType type) {
    FenceOptions o;
    o.type = type;
    int rc = 0;
    auto x = open_fence(c, o, rc);
    if (!x) return rc;
    Result<Outcome> out = make_error_code(Errc::invalid_argument);
    if (verb == "unregister") out = x->fence->leave();
    else if (verb == "acquire") out = x->fence->acquire();
    else if (verb == "release") out = x->fence->release();
    else if (verb == "clear") out = x->fence->clear();
    else std::abort();
    if (!out && verb == "acquire" && is_nvme(out.error(), NvmeStatus::reservation_conflict) &&
        x->fence->last_report()) {
        // The device refuses Acquire of another type by the holder itself.
        const auto& lr = *x->fence->last_report();
        if (const auto* me = x->fence->mine(lr); me && me->holder && lr.type != type)
            return fail(c, "acquire: this host already holds " + c.dev + " as " + resv_type_name(lr.type) +
                               " (" + resv_type_short(lr.type) + "); the device refuses an Acquire of another type: " +
                               out.error().message(),
                        out.error(), "change the type with 'nvfence preempt --type T' (nothing was changed)",
                        me->key);
    }
    if (!out) return fail_op(c, verb, out.error(), *x->fence);
    return print_outcome(c, *x, *out, verb);
}

// Why `nvfence preempt` (a takeover) failed, in its words.
// The takeover read the registrants and the victim was not among them: it
// sent nothing (a compare-and-swap that failed before the swap).
bool cli_victim_absent(const Fence& f, std::optional<uint64_t> victim) {
    const auto& lr = f.last_report();
    return victim && lr && std::none_of(lr->registrants.begin(), lr->registrants.end(),
                                        [&](const Registrant& r) { return r.key == *victim; });
}

int fail_preempt(const Common& c, const FenceCtx& x, std::error_code ec, std::optional<uint64_t> victim) {
    if (ec == Errc::own_key && victim)
        return fail(c, "preempt: --victim " + format_key(*victim) + " is this host's own key", ec,
                    "a host cannot preempt itself (nothing was changed)");
    const auto& lr = x.fence->last_report();
    const bool victim_absent = cli_victim_absent(*x.fence, victim);
    if (victim_absent && ec == Errc::lost_race) {
        const Registrant* h = lr->holder();
        return fail(c, "preempt: --victim " + describe_key(*victim) + " matches no registrant of " + c.dev +
                           "; " + (h ? describe_key(h->key) : std::string("another host")) +
                           " holds the reservation now",
                    ec, "nothing was changed (see 'nvfence report')",
                    h ? std::optional<uint64_t>(h->key) : std::nullopt);
    }
    if (victim_absent && ec == Errc::invalid_key)
        return fail(c, "preempt: --victim " + describe_key(*victim) + " matches no registrant of " + c.dev +
                           " and nobody holds the reservation",
                    ec,
                    "nothing was changed; see 'nvfence report', or take the free reservation with "
                    "'nvfence preempt' without --victim");
    if (ec == Errc::invalid_argument)
        return fail(c, "preempt: this host has no key of cluster tag " + std::to_string(c.tag) + " to reuse its node id",
                    ec, "pass --node N (or set NVFENCE_NODE)");
    return fail_op(c, "preempt", ec, *x.fence);
}

// No --victim: a Report says whether the holder's key is foreign. Refused
// (exit 3, naming it) without --foreign; with it, the preempt names exactly
// that key. Returns the victim to name; rc set on failure.
std::optional<uint64_t> foreign_holder_victim(const Common& c, FenceCtx& x, std::optional<uint64_t> victim,
                                              bool foreign, int& rc) {
    if (victim) return victim;
    auto st = x.fence->verify();
    if (!st) {
        rc = fail_op(c, "preempt", st.error(), *x.fence);
        return victim;
    }
    const std::string why = cli::foreign_refusal(victim, &*st, foreign);
    if (!why.empty()) {
        const Registrant* h = st->holder();
        rc = fail(c, "preempt: " + why, make_error_code(Errc::held_by_other), "nothing was changed",
                  h ? std::optional<uint64_t>(h->key) : std::nullopt);
        return victim;
    }
    return cli::foreign_victim(victim, &*st, foreign);
}

// --foreign: the removal of a foreign key goes to syslog (the journal) and
// stderr, whether or not the device took it (never when nothing was sent).
void log_foreign_eviction(const Common& c, std::optional<uint64_t> victim, bool removed) {
    if (!victim || decode_key(*victim)) return;
    const std::string line = cli::foreign_eviction_line(c.dev, *victim, static_cast<uint32_t>(getuid()), removed);
    openlog("nvfence", LOG_PID, LOG_AUTH);
    syslog(removed ? LOG_WARNING : LOG_ERR, "%s", line.c_str());
    closelog();
    std::cerr << "nvfence: " << line << "\n";
}

int cmd_preempt(const Common& c, unsigned node, ResvType type, std::optional<uint64_t> victim, bool abort,
                bool foreign) {
    FenceOptions o;
    o.node = static_cast<uint8_t>(node);
    o.type = type;
    o.abort = abort;
    int rc = 0;
    auto x = open_fence(c, o, rc);
    if (!x) return rc;
    victim = foreign_holder_victim(c, *x, victim, foreign, rc);
    if (rc) return rc;
    const auto t0 = std::chrono::steady_clock::now();
    auto out = x->fence->takeover(victim);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    // Logged only when a preempt naming the foreign key went to the device.
    if (out || (out.error() != Errc::own_key && !cli_victim_absent(*x->fence, victim)))
        log_foreign_eviction(c, victim,
                             out && std::find(out->removed.begin(), out->removed.end(), *victim) != out->removed.end());
    if (!out) return fail_preempt(c, *x, out.error(), victim);
    if (c.json) {
        Json j;
        j.begin_object();
        j.key("command").str("preempt");
        j.key("action").str(abort ? "preempt-and-abort" : "preempt");
        j.key("elapsed_us").num(static_cast<uint64_t>(us));
        json_outcome(j, *out, x->ns->info().host_id);
        j.end_object();
        std::cout << j.text() << "\n";
        return 0;
    }
    if (!out->changed) {
        std::printf("preempt: this host already holds %s; nothing changed\n", c.dev.c_str());
    } else {
        std::printf("preempt: this host now holds %s (%s, %lld us)\n", c.dev.c_str(),
                    abort ? "preempt-and-abort" : "preempt", static_cast<long long>(us));
        if (out->previous_holder) std::printf("previous:    %s\n", describe_key(*out->previous_holder).c_str());
        for (auto k : out->removed) std::printf("removed:     %s\n", describe_key(k).c_str());
        if (out->replaced) std::printf("re-keyed:    this host's %s\n", describe_key(*out->replaced).c_str());
        print_completion_note(*out);
    }
    std::printf("holder:      %s\n", describe_key(out->key).c_str());
    if (auto f = decode_key(out->key)) std::printf("epoch:       %u\n", f->epoch);
    std::printf("generation:  %u\n", out->after.generation);
    std::printf("type:        %s\n", resv_type_name(out->after.type));
    return 0;
}

// Why Fence::evict_node refused or failed, in the words of `nvfence preempt
// --victim-node`.
int fail_preempt_node(const Common& c, unsigned victim_node, std::error_code ec, const Fence& f) {
    const std::string none = "preempt: node " + std::to_string(victim_node) + " (cluster tag " +
                             std::to_string(c.tag) + ") has no key on " + c.dev;
    const Registrant* h = f.last_report() ? f.last_report()->holder() : nullptr;
    if (ec == Errc::own_key)
        return fail(c, "preempt: --victim-node " + std::to_string(victim_node) + " is this host's own node", ec,
                    "a host cannot preempt itself (nothing was changed)");
    if (ec == Errc::not_registered)
        return fail(c, "preempt: this host is not registered on " + c.dev + ", so it cannot preempt node " +
                           std::to_string(victim_node),
                    ec,
                    "--victim-node never registers this host (a fenced host must not fence others): run "
                    "'nvfence register DEV --node N' first, or use --victim KEY",
                    h ? std::optional<uint64_t>(h->key) : std::nullopt);
    if (ec == Errc::lost_race && h)
        return fail(c, none + "; " + describe_key(h->key) + " holds the reservation", ec,
                    "nothing was changed (see 'nvfence report')", h->key);
    if (ec == Errc::invalid_key)
        return fail(c, none + " and nobody holds the reservation", ec, "nothing was changed; see 'nvfence report'");
    return fail_op(c, "preempt", ec, f);
}

// --victim-node N: Fence::evict_node, every key of node N whatever its epoch
// (what a cluster manager knows is the node, not its current key), with
// this host's registered key; a node with no key is a failed compare.
int cmd_preempt_node(const Common& c, unsigned node, ResvType type, unsigned victim_node, bool abort) {
    FenceOptions o;
    o.node = static_cast<uint8_t>(node);
    o.type = type;
    o.abort = abort;
    int rc = 0;
    auto x = open_fence(c, o, rc);
    if (!x) return rc;
    auto out = x->fence->evict_node(static_cast<uint8_t>(victim_node), EvictAbsent::compare);
    if (!out) return fail_preempt_node(c, victim_node, out.error(), *x->fence);
    const Registrant* now = out->after.holder();
    const bool holds = now && x->fence->mine(out->after) == now;
    if (c.json) {
        Json j;
        j.begin_object().key("command").str("preempt").key("action").str(abort ? "preempt-and-abort" : "preempt");
        json_outcome(j, *out, x->ns->info().host_id);
        j.end_object();
        std::cout << j.text() << "\n";
        return 0;
    }
    if (!out->changed)
        std::printf("preempt: node %u (cluster tag %u) has no key on %s and this host holds it; nothing changed\n",
                    victim_node, c.tag, c.dev.c_str());
    else if (holds)
        std::printf("preempt: this host now holds %s (%s)\n", c.dev.c_str(), abort ? "preempt-and-abort" : "preempt");
    else
        std::printf("preempt: removed node %u's keys (%s); the holder keeps the reservation\n", victim_node,
                    abort ? "preempt-and-abort" : "preempt");
    for (auto k : out->removed) std::printf("removed:     %s\n", describe_key(k).c_str());
    if (out->replaced) std::printf("re-keyed:    this host's %s\n", describe_key(*out->replaced).c_str());
    print_completion_note(*out);
    std::printf("holder:      %s\n", now ? describe_key(now->key).c_str() : "none");
    std::printf("this host:   %s\n", describe_key(out->key).c_str());
    std::printf("generation:  %u\n", out->after.generation);
    return 0;
}

std::string host_name() {
    char h[64] = {};
    if (::gethostname(h, sizeof h - 1) != 0) return "?";
    return h;
}

// How long `write` and `read` wait for the device's answer (--wait-s). The
// kernel answers every I/O in the end: a fabrics controller that stops
// answering is reset after nvme_core.io_timeout (30 s by default) and the
// command is retried on the new connection, or failed when the reconnects
// give up. Giving up at the kernel's own timeout would report an error for
// a write that then lands, so the wait covers one reset with reconnect, and
// when it runs out the outcome is reported as unknown, never as an error.
constexpr uint32_t kDefaultIoWaitS = 120;
constexpr uint32_t kMaxIoWaitS = 3600;
constexpr uint32_t kIoPollMs = 10000;   // a note on stderr after this long

int io_open(const Common& c, bool passthrough, std::unique_ptr<Namespace>& ns, std::unique_ptr<FencedWriter>& w,
            uint64_t epoch, uint32_t wait_s) {
    int rc = 0;
    ns = open_ns(c, rc);
    if (!ns) return rc;
    WriterOptions wo;
    wo.mode = passthrough ? WriterMode::passthrough : WriterMode::block;
    wo.queue_depth = 4;
    wo.timeout_ms = std::min(kIoPollMs, wait_s * 1000);
    wo.epoch = epoch;
    auto wr = FencedWriter::open(c.dev, wo);
    if (!wr) {
        if (wr.error().category() == std::system_category() &&
            (wr.error().value() == EACCES || wr.error().value() == EPERM))
            return fail(c, c.dev + ": permission denied opening for I/O", wr.error(), "run as root");
        return fail(c, c.dev + ": cannot open for " + (passthrough ? "passthrough" : "block") +
                           " I/O: " + wr.error().message(), wr.error());
    }
    w = std::move(*wr);
    return 0;
}

// The block layer reports an NVMe Reservation Conflict as -EBADE; name the
// NVMe status either way so people see the same words in both modes.
std::string io_error_text(std::error_code ec) {
    if (ec.category() == std::system_category() && ec.value() == EBADE)
        return make_nvme_error(static_cast<uint16_t>(NvmeStatus::reservation_conflict)).message() +
               ", EBADE from the block layer";
    // The range was checked against the capacity first: the kernel sets a
    // removed namespace's capacity to 0, so its I/O fails with ENOSPC.
    if (ec.category() == std::system_category() && ec.value() == ENOSPC)
        return ec.message() + " (the namespace shrank or was removed while the command ran)";
    return ec.message();
}

// A synchronous I/O that ran out of the writer's timeout is still in
// flight: keep reaping (bounded by wait_s in all) until the device answers.
// Returns nullopt when it has not answered by then.
std::optional<Completion> await_answer(FencedWriter& w, Completion c, const char* op, const std::string& dev,
                                       uint32_t wait_s) {
    uint64_t waited_ms = std::min(kIoPollMs, wait_s * 1000);
    while (c.status == IoStatus::io_error && c.error == make_error_code(Errc::timeout) && w.in_flight() == 1) {
        if (waited_ms >= uint64_t{wait_s} * 1000) return std::nullopt;
        if (waited_ms == kIoPollMs)
            std::cerr << "nvfence: " << op << ": no answer from " << dev << " after " << kIoPollMs / 1000
                      << " s; waiting up to " << wait_s << " s in all (the kernel resets an unanswering "
                      << "controller and retries the command)\n";
        Completion out[1];
        auto r = w.reap(out, 1);
        waited_ms += kIoPollMs;
        if (r && *r == 1) return out[0];
        if (!r && r.error() != make_error_code(Errc::timeout) && r.error() != std::errc::interrupted) {
            c.error = r.error();
            return c;
        }
    }
    return c;
}

// The device has not answered within --wait-s: say so and leave without
// destroying the writer, whose destructor would abort over the I/O in
// flight (the kernel keeps the buffer's pages until the command ends).
[[noreturn]] void exit_outcome_unknown(const Common& c, const char* op, uint64_t lba, uint32_t blocks,
                                       uint32_t wait_s) {
    const std::string why = "no answer from the device within " + std::to_string(wait_s) + " s";
    if (c.json) {
        Json j;
        j.begin_object().key("command").str(op).key("result").str("unknown").key("lba").num(lba);
        j.key("blocks").num(blocks).key("status").str(why).end_object();
        std::cout << j.text() << "\n";
    }
    std::cerr << "nvfence: " << op << ": " << why << " on " << c.dev << ": the outcome is unknown"
              << (std::string_view(op) == "write" ? " (the write may still land); read the blocks back later" : "")
              << "\n";
    std::cout.flush();
    std::fflush(nullptr);
    std::_Exit(code(ExitCode::failure));
}

int cmd_write(const Common& c, uint64_t lba, uint32_t blocks, bool passthrough, uint32_t wait_s) {
    // The key this host is registered with goes into the stamp, so a
    // read-back names the writer and its epoch.
    std::unique_ptr<Namespace> ns;
    std::unique_ptr<FencedWriter> w;
    uint64_t key = 0;
    {
        int rc = 0;
        auto probe = open_ns(c, rc);
        if (!probe) return rc;
        if (probe->info().host_id) {
            Reservations resv(probe->passthru(), probe->info().nsid);
            if (auto st = resv.report()) {
                if (const auto* me = st->find_host(*probe->info().host_id)) key = me->key;
            }
        }
    }
    auto f = decode_key(key);
    if (int rc = io_open(c, passthrough, ns, w, f ? f->epoch : 0, wait_s)) return rc;
    const uint32_t bs = w->block_bytes();
    if (blocks == 0 || lba + blocks > w->size_blocks() || lba + blocks < lba)
        return fail(c, "write: blocks " + std::to_string(lba) + ".." + std::to_string(lba + blocks) +
                           " are past the end of " + c.dev + " (" + std::to_string(w->size_blocks()) + " blocks)",
                    make_error_code(Errc::invalid_argument));
    AlignedBuffer buf(size_t{bs} * blocks, 4096);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    for (uint32_t b = 0; b < blocks; ++b) {
        Stamp s;
        s.key = key;
        s.epoch = f ? f->epoch : 0;
        s.node = f ? f->node : 0;
        s.tag = f ? f->tag : 0;
        s.lba = lba + b;
        s.seq = b;
        s.time_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
        s.host = host_name();
        s.writer_id = static_cast<uint64_t>(::getpid());
        write_stamp(buf.span().subspan(size_t{b} * bs, bs), s);
    }
    auto answer = await_answer(*w, w->write(lba, buf.span().first(size_t{bs} * blocks)), "write", c.dev, wait_s);
    if (!answer) exit_outcome_unknown(c, "write", lba, blocks, wait_s);
    const Completion comp = *answer;
    const char* verdict = comp.status == IoStatus::ok ? "accepted" : comp.status == IoStatus::fenced ? "fenced" : "error";
    if (c.json) {
        Json j;
        j.begin_object().key("command").str("write").key("result").str(verdict);
        j.key("lba").num(lba).key("blocks").num(blocks).key("mode").str(writer_mode_name(w->mode()));
        j.key("key");
        if (key) j.str(format_key_hex(key)); else j.null();
        j.key("status").str(comp.error ? io_error_text(comp.error) : "ok");
        j.end_object();
        std::cout << j.text() << "\n";
    } else if (comp.status == IoStatus::ok) {
        std::printf("write: accepted by the device: %u block(s) at LBA %llu (%s mode, key %s)\n", blocks,
                    static_cast<unsigned long long>(lba), writer_mode_name(w->mode()),
                    key ? format_key(key).c_str() : "none");
    }
    if (comp.status == IoStatus::fenced) {
        std::cerr << "nvfence: write: FENCED: the device refused the write to " << c.dev << " ("
                  << io_error_text(comp.error) << "); this host does not hold write access\n";
        return code(ExitCode::conflict);
    }
    if (comp.status == IoStatus::io_error) {
        std::cerr << "nvfence: write: I/O error on " << c.dev << ": " << io_error_text(comp.error) << "\n";
        return code(ExitCode::failure);
    }
    return 0;
}

int cmd_read(const Common& c, uint64_t lba, uint32_t blocks, bool passthrough, uint32_t wait_s) {
    std::unique_ptr<Namespace> ns;
    std::unique_ptr<FencedWriter> w;
    if (int rc = io_open(c, passthrough, ns, w, 0, wait_s)) return rc;
    const uint32_t bs = w->block_bytes();
    if (blocks == 0 || blocks > 4096 || lba + blocks > w->size_blocks() || lba + blocks < lba)
        return fail(c, "read: blocks " + std::to_string(lba) + ".." + std::to_string(lba + blocks) +
                           " are outside " + c.dev + " (" + std::to_string(w->size_blocks()) + " blocks, at most 4096 per read)",
                    make_error_code(Errc::invalid_argument));
    AlignedBuffer buf(size_t{bs} * blocks, 4096);
    // One read per chunk the device takes in one command.
    const uint32_t per_io = std::max<uint32_t>(1, w->max_io_bytes() / bs);
    Completion comp;
    for (uint32_t done = 0; done < blocks && comp.status == IoStatus::ok;) {
        const uint32_t n = std::min(per_io, blocks - done);
        auto answer = await_answer(*w, w->read(lba + done, buf.span().subspan(size_t{bs} * done, size_t{bs} * n)),
                                   "read", c.dev, wait_s);
        if (!answer) exit_outcome_unknown(c, "read", lba + done, n, wait_s);
        comp = *answer;
        done += n;
    }
    if (comp.status != IoStatus::ok) {
        std::cerr << "nvfence: read: " << (comp.status == IoStatus::fenced ? "FENCED: the device refused the read"
                                                                          : "I/O error")
                  << " on " << c.dev << ": " << io_error_text(comp.error) << "\n";
        return code(comp.status == IoStatus::fenced ? ExitCode::conflict : ExitCode::failure);
    }
    Json j;
    j.begin_object().key("command").str("read").key("blocks").begin_array();
    for (uint32_t b = 0; b < blocks; ++b) {
        auto blk = std::span<const uint8_t>(buf.data() + size_t{b} * bs, bs);
        auto s = read_stamp(blk);
        bool zero = true;
        for (auto byte : blk)
            if (byte) { zero = false; break; }
        const uint64_t at = lba + b;
        if (c.json) {
            j.begin_object().key("lba").num(at);
            if (s) {
                j.key("stamp").boolean(true).key("key").str(format_key_hex(s->key)).key("key_text").str(format_key(s->key));
                j.key("epoch").num(s->epoch).key("node").num(s->node).key("seq").num(s->seq);
                j.key("stamped_lba").num(s->lba).key("host").str(s->host).key("writer_id").num(s->writer_id);
            } else {
                j.key("stamp").boolean(false).key("zero").boolean(zero);
            }
            j.end_object();
        } else if (s) {
            std::printf("LBA %llu: stamped by %s key %s epoch %u seq %llu%s\n", static_cast<unsigned long long>(at),
                        s->host.c_str(), format_key(s->key).c_str(), s->epoch, static_cast<unsigned long long>(s->seq),
                        s->lba == at ? "" : " (stamp names another LBA!)");
        } else {
            std::printf("LBA %llu: %s\n", static_cast<unsigned long long>(at), zero ? "zeros" : "no nvfence stamp");
        }
    }
    j.end_array().end_object();
    if (c.json) std::cout << j.text() << "\n";
    return 0;
}

int cmd_notifications(const Common& c, unsigned max_pages) {
    int rc = 0;
    auto ns = open_ns(c, rc);
    if (!ns) return rc;
    Reservations resv(ns->passthru(), ns->info().nsid);
    Json j;
    j.begin_object().key("notifications").begin_array();
    unsigned n = 0;
    for (; n < max_pages; ++n) {
        auto log = resv.notification_log();
        if (!log) return fail(c, c.dev + ": reading the Reservation Notification log failed: " + log.error().message(), log.error());
        if (log->type == NotificationType::empty) break;
        if (c.json) {
            j.begin_object().key("count").num(log->log_page_count).key("type").str(notification_type_name(log->type));
            j.key("nsid").num(log->nsid).key("available").num(log->available).end_object();
        } else {
            std::printf("#%llu %s (nsid %u, %u more)\n", static_cast<unsigned long long>(log->log_page_count),
                        notification_type_name(log->type), log->nsid, log->available);
        }
        if (log->available == 0) { ++n; break; }
    }
    j.end_array().end_object();
    if (c.json) std::cout << j.text() << "\n";
    else if (n == 0) std::printf("no reservation notifications\n");
    return 0;
}

// Prints udev properties (KEY=value lines) for one namespace. Silent and
// exit 0 for anything that is not an NVMe namespace, so a rule can run it on
// every block device; each Identify is bounded so udev is never held long.
int cmd_udev_probe(const std::string& dev) {
    OpenOptions o;
    o.timeout_ms = 2000;
    o.read_host_id = false;
    auto ns = Namespace::open(dev, o);
    if (!ns) return 0;
    const auto& i = (*ns)->info();
    const auto& r = i.ns.rescap;
    std::string types;
    for (auto t : {ResvType::write_exclusive, ResvType::exclusive_access, ResvType::write_exclusive_reg_only,
                   ResvType::exclusive_access_reg_only, ResvType::write_exclusive_all_regs,
                   ResvType::exclusive_access_all_regs})
        if (r.supports(t)) types += std::string(types.empty() ? "" : ",") + resv_type_short(t);
    std::string why;
    if (is_ebs_model(i.ctrl.model)) why = "ebs";
    else if (!i.paths.transport.empty() && i.paths.transport != "pcie") why = "fabrics";
    else if (i.ctrl.multi_controller) why = "multi-controller";
    else if (i.ns.shared) why = "nmic";
    auto clean = [](std::string v) {
        for (char& ch : v)
            if (ch == ' ' || ch == '"' || ch == '\'' || ch == '\\' || ch < 0x20) ch = '_';
        return v;
    };
    std::printf("NVFENCE_NVME=1\n");
    std::printf("NVFENCE_NSID=%u\n", i.nsid);
    std::printf("NVFENCE_MODEL=%s\n", clean(i.ctrl.model).c_str());
    std::printf("NVFENCE_VOLUME_ID=%s\n", clean(i.volume).c_str());
    std::printf("NVFENCE_RESERVATIONS=%d\n", i.reservations() ? 1 : 0);
    if (i.reservations()) std::printf("NVFENCE_RESV_TYPES=%s\n", types.c_str());
    std::printf("NVFENCE_SHARED=%d\n", why.empty() ? 0 : 1);
    if (!why.empty()) std::printf("NVFENCE_SHARED_REASON=%s\n", why.c_str());
    return 0;
}

// ---- argument parsing -------------------------------------------------------

// CLI11 validator shared by every numeric option: decimal, no sign, in range.
CLI::Validator uint_in(uint64_t lo, uint64_t hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            if (!parse_uint(s, lo, hi)) return "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
            return {};
        },
        "INT in [" + std::to_string(lo) + ".." + std::to_string(hi) + "]");
}

CLI::Validator key_text() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (!parse_cli_key(s)) return "not a reservation key: use nf:TAG:NODE:EPOCH, 0x followed by 1-16 hex digits, or a decimal number (not 0)";
            return {};
        },
        "KEY");
}

CLI::Validator type_text() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (!parse_type(s)) return "unknown reservation type: use a name, exclusive|shared|we|ea|wero|earo|wear|eaar or write-exclusive, exclusive-access, write-exclusive-registrants-only, ... as blkpr names them (any case; RTYPE numbers are not accepted)";
            return {};
        },
        "TYPE");
}

void add_common(CLI::App* sub, Common& c) {
    sub->add_option("device", c.dev, "NVMe namespace: /dev/nvmeXnY, /dev/ngXnY or a link such as /dev/disk/by-id/...")
        ->required();
    sub->add_flag("--json", c.json, "machine-readable output (keys as hex strings)");
    sub->add_option("--tag", c.tag, "cluster tag of nvfence keys (env NVFENCE_TAG)")
        ->check(uint_in(0, 255))->envname("NVFENCE_TAG");
    sub->add_option("--state-dir", c.state_dir, "where the highest used epoch is persisted (env NVFENCE_STATE_DIR)")
        ->envname("NVFENCE_STATE_DIR");
}

// Every option's value and every subcommand, filled in by CLI11 while parsing
// and read by dispatch(): one place, so the builders below can be split per
// command group without a long argument list.
struct Args {
    Common c;
    unsigned node = 0, blocks = 1, max_pages = 64, io_wait_s = kDefaultIoWaitS;
    std::string epoch_s, victim_s, type_s = "exclusive";
    uint64_t lba = 0;
    bool replace = false, ptpl = false, holder_flag = false, no_abort = false, force = false, passthrough = false;
    bool foreign = false;
    std::string initial_s;
    unsigned victim_node = 0;
    std::string probe_dev;
    AgentCli agent;
    CLI::App *info = nullptr, *report = nullptr, *reg = nullptr, *unreg = nullptr, *acq = nullptr, *pre = nullptr,
             *rel = nullptr, *clr = nullptr, *wr = nullptr, *rd = nullptr, *notif = nullptr, *probe = nullptr;
};

// A subcommand on one device: its summary, the options every such command
// has (add_common) and an example at the end of its help.
CLI::App* add_device_command(CLI::App& app, Common& c, const char* name, const char* about, const char* example) {
    CLI::App* sub = app.add_subcommand(name, about);
    add_common(sub, c);
    sub->footer(std::string("\nExample: ") + example);
    return sub;
}

// info, report, register, unregister, acquire: looking at the reservation and
// this host's own key.
void add_key_commands(CLI::App& app, Args& a) {
    a.info = add_device_command(app, a.c, "info", "identity, reservation capabilities and host id of a namespace",
                                "nvfence info /dev/nvme1n1 --json");
    a.report = add_device_command(app, a.c, "report", "the reservation: generation, type, holder, every registrant",
                                  "nvfence report /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0");
    a.report->add_option("--initial-bytes", a.initial_s,
                         "diagnostic: size of the first Report read (64-1048576); a size too small for every "
                         "registrant makes nvfence re-read with the size the device asks for")
        ->check(uint_in(64, 1u << 20));
    a.reg = add_device_command(app, a.c, "register", "register this host with a fresh key (epoch above all seen)",
                               "nvfence register /dev/nvme1n1 --node 2");
    a.reg->add_option("--node", a.node, "this host's node id (env NVFENCE_NODE)")->check(uint_in(1, 255))->envname("NVFENCE_NODE")->required();
    a.reg->add_option("--epoch", a.epoch_s, "use this epoch instead of a fresh one")->check(uint_in(1, kEpochCeiling - 1));
    a.reg->add_flag("--replace", a.replace, "replace the key this host is registered with");
    a.reg->add_flag("--ptpl", a.ptpl, "ask the device to persist the registration through power loss");
    a.unreg = add_device_command(app, a.c, "unregister", "remove this host's registration (releases if holder)",
                                 "nvfence unregister /dev/nvme1n1");
    a.acq = add_device_command(app, a.c, "acquire", "acquire the reservation with this host's key",
                               "nvfence acquire /dev/nvme1n1 --type write-exclusive");
    a.acq->add_option("--type", a.type_s, "exclusive (=we, Write Exclusive), shared (=wero), ea, earo, wear, eaar")->check(type_text());
}

// preempt, release, clear: taking the reservation from another host or giving
// it up.
void add_takeover_commands(CLI::App& app, Args& a) {
    a.pre = add_device_command(app, a.c, "preempt", "failover: take the reservation, preempt-and-abort the holder, verify",
                               "nvfence preempt /dev/nvme1n1 --node 2 --victim nf:0:1:7");
    a.pre->add_option("--node", a.node, "this host's node id (env NVFENCE_NODE; default: from its current key)")
        ->check(uint_in(1, 255))->envname("NVFENCE_NODE");
    auto* vopt = a.pre->add_option("--victim", a.victim_s, "key to preempt (default: the current holder)")->check(key_text());
    auto* hopt = a.pre->add_flag("--holder", a.holder_flag, "preempt the current holder (the default)");
    vopt->excludes(hopt);
    a.pre->add_option("--victim-node", a.victim_node, "evict node N: every key of it, whatever its epoch, with this host's registered key "
                      "(never registers this host) (1-255)")
        ->check(uint_in(1, 255))->excludes(vopt)->excludes(hopt);
    a.pre->add_flag("--foreign", a.foreign, "allow the victim (--victim KEY, or the holder) to be a foreign key, one "
                    "nvfence did not make (fence_scsi, LVM, another tool); its removal is logged to syslog")
        ->excludes("--victim-node");
    a.pre->add_flag("--no-abort", a.no_abort, "plain preempt: do not abort the victim's queued commands");
    a.pre->add_option("--type", a.type_s, "type to take: exclusive (default), shared, we, ea, wero, earo, wear, eaar")->check(type_text());
    a.rel = add_device_command(app, a.c, "release", "release the reservation this host holds",
                               "nvfence release /dev/nvme1n1");
    a.clr = add_device_command(app, a.c, "clear", "clear the reservation and ALL registrations (needs --force)",
                               "nvfence clear /dev/nvme1n1 --force");
    a.clr->add_flag("--force", a.force, "really remove every host's registration");
}

// write, read, notifications, udev-probe: diagnostics of the data path and the
// device's log, and udev's probe.
void add_io_commands(CLI::App& app, Args& a) {
    a.wr = add_device_command(app, a.c, "write", "diagnostic write of stamped blocks: accepted or fenced?",
                              "nvfence write /dev/nvme1n1 --lba 8 --blocks 4");
    a.wr->add_option("--lba", a.lba, "first block")->required()->check(uint_in(0, (1ull << 48)));
    a.wr->add_option("--blocks", a.blocks, "number of blocks (1-256)")->check(uint_in(1, 256));
    a.wr->add_flag("--passthrough", a.passthrough, "NVMe passthrough on /dev/ngXnY instead of the block device");
    a.wr->add_option("--wait-s", a.io_wait_s,
                     "how long to wait for the device's answer (1-3600, default 120); when it runs out the outcome "
                     "is unknown (exit 1, result \"unknown\"): the write may still land")
        ->check(uint_in(1, kMaxIoWaitS));
    a.rd = add_device_command(app, a.c, "read", "read blocks back and show their stamps (who wrote, which epoch)",
                              "nvfence read /dev/nvme1n1 --lba 8 --blocks 4");
    a.rd->add_option("--lba", a.lba, "first block")->required()->check(uint_in(0, (1ull << 48)));
    a.rd->add_option("--blocks", a.blocks, "number of blocks (1-4096)")->check(uint_in(1, 4096));
    a.rd->add_flag("--passthrough", a.passthrough, "NVMe passthrough on /dev/ngXnY instead of the block device");
    a.rd->add_option("--wait-s", a.io_wait_s, "how long to wait for the device's answer (1-3600, default 120)")
        ->check(uint_in(1, kMaxIoWaitS));
    a.notif = add_device_command(app, a.c, "notifications", "read (and consume) the Reservation Notification log",
                                 "nvfence notifications /dev/nvme1n1");
    a.notif->add_option("--max", a.max_pages, "most pages to read (1-1024)")->check(uint_in(1, 1024));

    a.probe = app.add_subcommand("udev-probe", "print udev properties of a namespace (silent for non-NVMe)");
    a.probe->footer("\nExample: nvfence udev-probe /dev/nvme1n1   (udev runs it: IMPORT{program})");
    a.probe->add_option("devnode", a.probe_dev, "device node, e.g. /dev/nvme1n1")->required();
}

// The whole command line, in the order `nvfence --help` lists it.
void build_app(CLI::App& app, Args& a) {
    app.footer(std::string("\nKeys: nf:TAG:NODE:EPOCH (nvfence's own) or 0x<hex> (any key); foreign keys are never decoded.\n\n") +
               kExitCodes);
    app.set_version_flag("--version", std::string("nvfence ") + nvf_version());
    app.require_subcommand(1);
    a.c.state_dir = env_or("NVFENCE_STATE_DIR", a.c.state_dir);
    add_key_commands(app, a);
    add_takeover_commands(app, a);
    add_io_commands(app, a);
    add_agent_commands(app, a.agent);
}

// Parses the command line; an exit code when nvfence is done already (help,
// version, or a usage error, reported on stderr and, for --json, as JSON).
std::optional<int> parse_args(CLI::App& app, int argc, char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "nvfence: " << e.what() << "\n       run 'nvfence --help' for usage\n";
        // A program that asked for --json gets the error as JSON too.
        if (std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string_view(a) == "--json"; })) {
            Json j;
            j.begin_object().key("error").str(std::string("nvfence: ") + e.what());
            j.key("exit_code").num(static_cast<uint64_t>(ExitCode::usage)).key("cause").str("usage").end_object();
            std::cout << j.text() << "\n";
        }
        return code(ExitCode::usage);
    }
    return std::nullopt;
}

// Runs the one subcommand that was parsed.
int dispatch(const Args& a) {
    const Common& c = a.c;
    auto type = parse_type(a.type_s);
    if (!type) return code(ExitCode::usage);
    if (auto rc = run_agent_commands(a.agent)) return *rc;

    if (a.probe->parsed()) return cmd_udev_probe(a.probe_dev);
    if (a.info->parsed()) return cmd_info(c);
    if (a.report->parsed()) {
        std::optional<uint32_t> initial;
        if (!a.initial_s.empty()) initial = static_cast<uint32_t>(*parse_uint(a.initial_s, 64, 1u << 20));
        return cmd_report(c, initial);
    }
    if (a.reg->parsed()) {
        std::optional<uint32_t> epoch;
        if (!a.epoch_s.empty()) epoch = static_cast<uint32_t>(*parse_uint(a.epoch_s, 1, kEpochCeiling - 1));
        return cmd_register(c, a.node, epoch, a.replace, a.ptpl);
    }
    if (a.unreg->parsed()) return cmd_simple(c, "unregister", *type);
    if (a.acq->parsed()) return cmd_simple(c, "acquire", *type);
    if (a.rel->parsed()) return cmd_simple(c, "release", *type);
    if (a.clr->parsed()) {
        if (!a.force)
            return fail(c, "clear: refusing to remove every host's registration without --force",
                        make_error_code(Errc::refused), "nothing was changed") ,
                   code(ExitCode::usage);
        return cmd_simple(c, "clear", *type);
    }
    if (a.pre->parsed()) {
        std::optional<uint64_t> victim;
        if (!a.victim_s.empty()) victim = *parse_cli_key(a.victim_s);
        if (a.victim_node) return cmd_preempt_node(c, a.node, *type, a.victim_node, !a.no_abort);
        if (const auto why = cli::foreign_refusal(victim, nullptr, a.foreign); !why.empty())
            return fail(c, "preempt: " + why, make_error_code(Errc::invalid_argument), "nothing was sent");
        return cmd_preempt(c, a.node, *type, victim, !a.no_abort, a.foreign);
    }
    if (a.wr->parsed()) return cmd_write(c, a.lba, a.blocks, a.passthrough, a.io_wait_s);
    if (a.rd->parsed()) return cmd_read(c, a.lba, a.blocks, a.passthrough, a.io_wait_s);
    if (a.notif->parsed()) return cmd_notifications(c, a.max_pages);
    return code(ExitCode::usage);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"nvfence: storage-level fencing with NVMe reservations"};
    Args a;
    build_app(app, a);
    if (auto rc = parse_args(app, argc, argv)) return *rc;
    return dispatch(a);
}

}  // namespace nvfence::cli

int main(int argc, char** argv) { return nvfence::cli::main(argc, argv); }
