// SPDX-License-Identifier: MIT
#include "fence_agent.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "agent/agent_state_file.hpp"
#include "agent/cluster_tag.hpp"
#include "internal/invariant.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"
#include "target.hpp"
#include "watcher_setup.hpp"

namespace nvfence::fence_agent {
namespace {

struct Ctx {
    const Options& o;
    Host& host;
    std::string& out;
    std::vector<std::string> devices;  ///< o.devices, or the links found under /dev/nvfence
    void log(Level l, const std::string& s) const {
        if (host.log) host.log(l, s);
    }
    void error(const std::string& s) const { log(Level::error, s); }
    void info(const std::string& s) const { log(Level::info, s); }
    void debug(const std::string& s) const { log(Level::debug, s); }
};

std::string short_name(const std::string& n) { return n.substr(0, n.find('.')); }

std::string key_words(uint64_t key) {
    if (auto f = decode_key(key))
        return format_key(key) + " (node " + std::to_string(f->node) + ", epoch " + std::to_string(f->epoch) + ")";
    return format_key_hex(key) + " (foreign)";
}

// Keys on @p st that are not this cluster's (another tag, or not nvfence's
// at all), as text; "" when there are none.
std::string keys_not_ours(const ReservationStatus& st, uint8_t tag) {
    std::string keys;
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (!f || f->tag != tag) keys += (keys.empty() ? "" : ", ") + key_words(r.key);
    }
    return keys;
}

// Keys of another tag with node ids of @p nodes, where this cluster's tag
// was derived from corosync's cluster name: this cluster's own keys from
// before the tag was derived (the migration keeps them with an explicit
// cluster_tag), or another cluster with the same node ids. Refused, with
// both in the message; an explicit cluster_tag is the operator's choice.
bool other_tag_refused(const Ctx& c, const Device& d, const ReservationStatus& st, std::set<uint8_t> nodes) {
    if (!c.o.tag_from_name) return false;
    std::string keys;
    std::optional<uint8_t> other;
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (!f || f->tag == c.o.tag || !nodes.count(f->node)) continue;
        keys += (keys.empty() ? "" : ", ") + key_words(r.key);
        if (!other) other = f->tag;
    }
    if (!other) return false;
    const std::string t = std::to_string(*other);
    c.error(d.path() + ": keys of cluster tag " + t + " with this cluster's node ids are registered (" + keys +
            "), but this cluster's tag is " + std::to_string(c.o.tag) + " (derived from corosync's cluster name): "
            "if they are this cluster's keys from before the tag was derived, set cluster_tag=" + t +
            " to keep them; if another cluster's, give each cluster its own cluster_tag");
    return true;
}

// 'on' never takes a reservation beside keys that are not this cluster's:
// it would lock that volume's own writers out.
bool refuse_acquire_beside(const Ctx& c, const Device& d, const ReservationStatus& st) {
    const std::string other = keys_not_ours(st, c.o.tag);
    if (other.empty()) return false;
    c.error(d.path() + ": not taking the reservation nobody holds: keys that are not this cluster's (cluster tag " +
            std::to_string(c.o.tag) + ") are registered: " + other +
            "; taking it would lock out their writers (another cluster's volume?)");
    return true;
}

Result<std::map<std::string, uint8_t>> node_map(const Ctx& c, std::string& why) {
    return parse_node_map(c.o.node_ids, why);
}

// The cluster's nodes: node_ids, else corosync's nodelist.
Result<NodeMap> load_node_map(const Ctx& c, std::string& why) {
    NodeMap nm;
    if (!c.o.node_ids.empty()) {
        auto m = node_map(c, why);
        if (!m) return m.error();
        for (const auto& [n, id] : *m) nm.ids[n] = id;
        return nm;
    }
    if (!c.host.cmapctl) {
        why = "no node_ids and no corosync-cmapctl";
        return make_error_code(Errc::not_found);
    }
    auto text = c.host.cmapctl(c.o.corosync_cmap_path, {"nodelist"});
    if (!text) {
        why = "no node_ids, and " + c.o.corosync_cmap_path + " nodelist failed: " + text.error().message();
        return text.error();
    }
    nm.ids = parse_cmap_nodelist(*text);
    nm.from_corosync = true;
    return nm;
}

// The node the action is about: -k, else plug/nodename/nodeid by
// target.hpp's rule.
Result<Target> target_of(const Ctx& c, std::string& why) {
    if (c.o.key_node) return Target{*c.o.key_node, "node " + std::to_string(*c.o.key_node)};
    auto m = load_node_map(c, why);
    if (!m) return m.error();
    return resolve_target(TargetArgs{c.o.plug, c.o.nodename, c.o.nodeid}, *m, why);
}

// The target, or an error logged (exit 1 for the caller).
std::optional<Target> need_target_id(const Ctx& c) {
    std::string why;
    auto t = target_of(c, why);
    if (!t) {
        c.error("cannot tell the node to act on: " + why);
        return std::nullopt;
    }
    return *t;
}

// This node's id: node_ids by this node's name, else corosync's
// runtime.votequorum.this_node_id.
Result<uint8_t> local_node_id(const Ctx& c, std::string& why) {
    if (!c.o.node_ids.empty()) {
        auto m = node_map(c, why);
        if (!m) return m.error();
        for (const std::string& n : {c.host.local_name, short_name(c.host.local_name)})
            if (auto it = m->find(n); it != m->end()) return it->second;
        why = "this node ('" + c.host.local_name + "') is not in node_ids";
        return make_error_code(Errc::not_found);
    }
    if (!c.host.cmapctl) {
        why = "no node_ids and no corosync-cmapctl";
        return make_error_code(Errc::not_found);
    }
    auto text = c.host.cmapctl(c.o.corosync_cmap_path, {"-g", "runtime.votequorum.this_node_id"});
    if (!text) {
        why = "no node_ids, and " + c.o.corosync_cmap_path + " -g runtime.votequorum.this_node_id failed: " +
              text.error().message();
        return text.error();
    }
    return parse_cmap_nodeid(*text, "", why);
}

// A device-mapper device (dm-multipath over NVMe, fence_mpath's devices) is
// refused before it is opened: the reservation has to reach the namespace.
bool refuse_device_mapper(const Ctx& c, const std::string& path) {
    std::string dm = is_device_mapper_path(path) ? path : std::string();
    const std::string real = c.host.resolve ? c.host.resolve(path) : std::string();
    if (!real.empty() && is_device_mapper_path(real)) dm = real;
    if (dm.empty()) return false;
    std::string over;
    const std::string name = real.empty() ? std::string() : real.substr(real.find_last_of('/') + 1);
    if (c.host.dm_slaves && name.rfind("dm-", 0) == 0)
        for (const auto& s : c.host.dm_slaves(name)) over += (over.empty() ? " over " : ", ") + s;
    c.error(path + ": a device-mapper device (" + (name.empty() ? dm : name) + over +
            "): fence_nvfence does not work through dm-multipath. Give the NVMe namespace itself: with native "
            "NVMe multipath (nvme_core.multipath=Y, the kernel's default) one /dev/nvmeXnY stands for every path "
            "of the namespace ('nvme list-subsys' shows them), or use its /dev/nvfence/VOLUME link");
    return true;
}

// The device's reservation, or nullopt once the failure is reported
// (path names the device in the message).
std::optional<ReservationStatus> read_reservation(const Ctx& c, Device& d, const std::string& path) {
    auto st = d.resv().report();
    if (st) return std::move(*st);
    c.error(path + ": reading the reservation failed: " + st.error().message());
    return std::nullopt;
}

std::unique_ptr<Device> open_device(const Ctx& c, const std::string& path) {
    if (refuse_device_mapper(c, path)) return nullptr;
    std::string why;
    auto d = c.host.open(path, why);
    if (!d) {
        c.error(path + ": " + (why.empty() ? d.error().message() : why));
        return nullptr;
    }
    if (!(*d)->supports(resv_type_for(c.o.mode))) {
        c.error(path + ": the namespace does not support reservation type " + resv_type_name(resv_type_for(c.o.mode)) +
                " (reservation_type=" + mode_name(c.o.mode) + ")");
        return nullptr;
    }
    return std::move(*d);
}

bool need_devices(const Ctx& c) {
    if (c.devices.empty()) {
        c.error("no devices given (devices=/dev/nvme1n1,... or -d) and none found under " + std::string(kNvfenceLinkDir) +
                " (the udev rules' links to shared namespaces; one is this cluster's when a key of cluster tag " +
                std::to_string(c.o.tag) + " is registered on it: name the devices for the first unfencing)");
        return false;
    }
    return true;
}

// A discovered namespace is this cluster's when a key of its tag is
// registered there; one that cannot be opened or read is kept (the action
// reports why). Another cluster's volume, a local dual-ported SSD, an
// auto-connected namespace: skipped with a warning.
bool of_this_cluster(const Ctx& c, const std::string& path) {
    std::string why;
    auto d = c.host.open(path, why);
    if (!d) return true;
    auto st = (*d)->resv().report();
    if (!st) return true;
    for (const auto& r : st->registrants)
        if (auto f = decode_key(r.key); f && f->tag == c.o.tag) return true;
    c.log(Level::warning, path + ": skipped: no key of cluster tag " + std::to_string(c.o.tag) +
                              " is registered on it (not this cluster's namespace; name it in devices if it is)");
    return false;
}

// devices when given; otherwise the links under /dev/nvfence to this
// cluster's namespaces, in the volume order discover gives (the same on
// every node).
std::vector<std::string> devices_of(const Ctx& c) {
    if (!c.o.devices.empty() || !c.host.discover) return c.o.devices;
    std::vector<std::string> found;
    for (auto& p : c.host.discover())
        if (of_this_cluster(c, p)) found.push_back(std::move(p));
    if (!found.empty()) {
        std::string list;
        for (const auto& p : found) list += (list.empty() ? "" : ", ") + p;
        c.debug("no devices given: using " + list);
    }
    return found;
}

bool need_target(const Ctx& c) {
    if (!c.o.has_target()) {
        c.error("the node to act on is missing (plug, port or nodename; -n on the command line)");
        return false;
    }
    return true;
}

Result<ControlReply> ask_agent(const Ctx& c, const std::string& sock, ControlOp op, uint64_t victim = 0);

// The local nvfenced serving a device, and its answer to a status request.
struct AgentLink {
    std::string sock;
    Result<ControlReply> status;
};

// The nvfenced to go through for @p d, if one runs and registers: a
// check-only watcher (role = watch; its status reply says check_only)
// never registers or takes over, so 'on' and 'off' act on the device
// directly, as with no nvfenced at all, and the watcher sees the result.
std::optional<AgentLink> agent_for(const Ctx& c, const Device& d) {
    if (!c.host.find_agent || !c.host.control) return std::nullopt;
    auto sock = c.host.find_agent(d);
    if (!sock) return std::nullopt;
    AgentLink a{*sock, ask_agent(c, *sock, ControlOp::status)};
    if (a.status && a.status->check_only) {
        c.debug(d.path() + ": nvfenced at " + *sock + " is a check-only watcher (" +
                agent_state_name(a.status->state) + "): acting on the device directly");
        return std::nullopt;
    }
    return a;
}

Result<ControlReply> ask_agent(const Ctx& c, const std::string& sock, ControlOp op, uint64_t victim) {
    ControlRequest req;
    req.op = op;
    req.victim = victim;
    req.id = 0x6e76;  // any id: the reply echoes it
    auto r = c.host.control(sock, req);
    if (!r) return r.error();
    if (r->exit_code != 0) {
        c.log(Level::warning, "nvfenced at " + sock + ": " + control_op_name(op) + ": " + r->message);
    } else {
        c.debug("nvfenced at " + sock + ": " + control_op_name(op) + ": " + r->message);
    }
    return r;
}

// ---- on --------------------------------------------------------------------

// An unfencing whose fencer has exited is not carried out: a node's
// Pacemaker that stops because the node was just fenced leaves its fencer's
// last `on` running, which would register the node again (the cluster lab:
// the DC asked to unfence the node it had just fenced, before it saw the
// node lost; the orphan had nvfenced rejoin it 2 s later, once nvfenced had
// run its fence action). Asked before every change: nvfenced answers only
// after its fence action, by when the fencer may be gone.
bool requester_gone(const Ctx& c, const std::string& path) {
    if (!c.host.requester_alive || c.host.requester_alive()) return false;
    c.error(path + ": the process that asked for this unfencing has exited (its Pacemaker stopped, perhaps "
            "because this node was just fenced): not registering it");
    return true;
}

// nvfenced holds this host's registration: re-keying behind its back would
// look to it like another host using this host's id, so 'on' asks it.
bool on_through_agent(const Ctx& c, Device& d, const AgentLink& agent, uint8_t node) {
    const std::string& sock = agent.sock;
    const auto& st = agent.status;
    if (!st) {
        c.error(d.path() + ": nvfenced at " + sock + " does not answer: " + st.error().message());
        return false;
    }
    if (st->node != node || st->tag != c.o.tag) {
        c.error(d.path() + ": nvfenced on this host is node " + std::to_string(st->node) + " (cluster tag " +
                std::to_string(st->tag) + ") but this node is node " + std::to_string(node) + " (cluster tag " +
                std::to_string(c.o.tag) + "): fix node_ids/cluster_tag or the agent's configuration");
        return false;
    }
    if (st->state == AgentState::fenced) {
        if (requester_gone(c, d.path())) return false;
        auto r = ask_agent(c, sock, ControlOp::rejoin);
        if (!r || r->exit_code != 0) {
            c.error(d.path() + ": nvfenced could not rejoin: " + (r ? r->message : r.error().message()));
            return false;
        }
        c.info(d.path() + ": unfenced through nvfenced: " + r->message);
    }
    // Unfencing promises a reservation (Registrants Only keeps unregistered
    // hosts out). Nobody holds one (a target restart without PTPL, a first
    // Acquire that failed): the agent, asked to rejoin, takes it when its
    // role is acquire; verify_on warns when it did not.
    if (c.o.mode == Mode::registrants_only) {
        auto now = read_reservation(c, d, d.path());
        if (now && now->type == ResvType::none && !refuse_acquire_beside(c, d, *now)) {
            if (requester_gone(c, d.path())) return false;
            auto r = ask_agent(c, sock, ControlOp::rejoin);
            if (r && r->exit_code == 0 && r->changed) c.info(d.path() + ": nobody held the reservation: " + r->message);
        }
    }
    return true;
}

// aptpl on a registration made without it: Register (replace) with the same
// key and CPTPL set turns PTPL on without changing the key.
void set_ptpl_with(const Ctx& c, Device& d, uint64_t key) {
    RegisterArgs a;
    a.action = RegisterAction::replace_key;
    a.cptpl = Cptpl::set;
    a.crkey = key;
    a.nrkey = key;
    if (auto s = d.resv().reg(a); !s)
        c.log(Level::warning, d.path() + ": setting PTPL with " + key_words(key) + " failed: " + s.error().message());
    else
        c.info(d.path() + ": asked the device to persist the reservation through power loss (CPTPL set)");
}

// This host's epoch floor for @p d under state_dir, on the host's medium.
EpochStore epoch_store(const Ctx& c, const Device& d) {
    if (c.host.state_medium) return EpochStore(c.o.state_dir, d.volume(), *c.host.state_medium);
    return EpochStore(c.o.state_dir, d.volume());
}

// The record of this unfencing that a check-only watcher reads
// (AgentStateFile::save_unfenced): without it, a watcher that has not seen
// the key yet would miss a fence that removes it before its next check.
void record_unfenced(const Ctx& c, const Device& d, uint64_t key) {
    const AgentStateFile f = c.host.state_medium ? AgentStateFile(c.o.state_dir, d.volume(), *c.host.state_medium)
                                                 : AgentStateFile(c.o.state_dir, d.volume());
    if (auto s = f.save_unfenced(key, c.host.boot_id); !s)
        c.log(Level::warning, d.path() + ": cannot record the unfencing in " + f.unfenced_path() + ": " +
                                  s.error().message() + " (a check-only watcher that has not seen " +
                                  key_words(key) + " yet would miss a fence that removes it before it does)");
}

bool on_direct(const Ctx& c, Device& d, uint8_t node) {
    const ResvType type = resv_type_for(c.o.mode);
    EpochStore store = epoch_store(c, d);
    FenceOptions fo;
    fo.tag = c.o.tag;
    fo.node = node;
    fo.type = type;
    fo.cptpl = c.o.aptpl ? Cptpl::set : Cptpl::no_change;
    Fence f(d.resv(), d.host_id(), fo, &store);
    if (requester_gone(c, d.path())) return false;
    auto j = f.join(std::nullopt, false);
    if (!j) {
        if (j.error() == Errc::host_id_conflict && f.last_report()) {
            const Registrant* me = f.mine(*f.last_report());
            c.error(d.path() + ": this host is registered with " + (me ? key_words(me->key) : "another key") +
                    ", not node " + std::to_string(node) + "'s: another host shares this host id, or the "
                    "node map changed (unregister it with 'nvfence unregister')");
        } else {
            c.error(d.path() + ": registering node " + std::to_string(node) + " failed: " + j.error().message());
        }
        return false;
    }
    if (j->changed) c.info(d.path() + ": registered " + key_words(j->key));
    else c.debug(d.path() + ": already registered with " + key_words(j->key));
    record_unfenced(c, d, j->key);
    if (c.o.aptpl && !j->after.ptpl) set_ptpl_with(c, d, j->key);
    if (j->after.type == ResvType::none && !refuse_acquire_beside(c, d, j->after)) {
        auto a = f.acquire();
        if (a) c.info(d.path() + ": took the " + resv_type_name(type) + " reservation");
        else if (a.error() != Errc::held_by_other)
            c.log(Level::warning, d.path() + ": acquiring the reservation failed: " + a.error().message());
    }
    return true;
}

// The Report after 'on': this host registered as @p node, and with aptpl
// the device persisting through power loss (PTPLS).
bool verify_on(const Ctx& c, Device& d, uint8_t node, bool through_agent) {
    auto st = read_reservation(c, d, d.path());
    if (!st) return false;
    const Registrant* me = st->find_host(d.host_id());
    auto f = me ? decode_key(me->key) : std::nullopt;
    if (!f || f->node != node || f->tag != c.o.tag) {
        c.error(d.path() + ": verification failed: this host is not registered as node " + std::to_string(node));
        return false;
    }
    if (c.o.aptpl && !st->ptpl) {
        c.error(d.path() + ": aptpl: the device reports Persist Through Power Loss off after 'on'" +
                (through_agent ? std::string(" (nvfenced holds this host's registration: set ptpl = true in its "
                                             "configuration)")
                               : std::string(" although the Register asked for it (CPTPL set): this target does "
                                             "not persist reservations (the Linux NVMe target ignores CPTPL)")));
        return false;
    }
    if (st->type == ResvType::none) {
        // Registrants Only: the reservation is what keeps unregistered hosts
        // out, and `on` promises it. Not held (the Acquire failed, the agent
        // did not take it, the device was unreadable meanwhile): the action
        // fails and Pacemaker retries the unfencing (nvfence-sim seed 187761).
        if (c.o.mode == Mode::registrants_only) {
            c.error(d.path() + ": registered, but no reservation is held: unregistered hosts can still write");
            return false;
        }
        c.log(Level::warning, d.path() + ": registered, but no reservation is held: unregistered hosts can still write");
    }
    return true;
}

bool on_device(const Ctx& c, Device& d, uint8_t node) {
    if (requester_gone(c, d.path())) return false;
    if (c.o.aptpl && !d.ptpl_capable()) {
        c.error(d.path() + ": aptpl: the namespace does not support Persist Through Power Loss (RESCAP bit 0 "
                "clear); nothing was changed");
        return false;
    }
    if (c.o.tag_from_name) {
        auto st = read_reservation(c, d, d.path());
        if (!st || other_tag_refused(c, d, *st, {node})) return false;
    }
    const auto agent = agent_for(c, d);
    if (!(agent ? on_through_agent(c, d, *agent, node) : on_direct(c, d, node))) return false;
    return verify_on(c, d, node, agent.has_value());
}

int action_on(const Ctx& c) {
    if (!need_target(c) || !need_devices(c)) return kExitError;
    auto target = need_target_id(c);
    if (!target) return kExitError;
    std::string lwhy;
    if (auto local = local_node_id(c, lwhy); local && *local != target->id) {
        c.error("'on' registers the node it runs on, but this node is node " + std::to_string(*local) + " and " +
                target->label + " is not (unfencing runs on the target: on_target)");
        return kExitError;
    }
    int failed = 0;
    for (const auto& path : c.devices) {
        auto d = open_device(c, path);
        if (!d || !on_device(c, *d, target->id)) ++failed;
    }
    if (failed) {
        c.error("failed on " + std::to_string(failed) + " of " + std::to_string(c.devices.size()) + " device(s)");
        return kExitError;
    }
    c.out += "Success: Powered ON\n";
    return kExitOk;
}

// ---- off -------------------------------------------------------------------

enum class OffResult { already_off, fenced, refused, failed };

// The local nvfenced does the verified preempt-and-abort with its own key.
void preempt_through_agent(const Ctx& c, const std::string& sock, const std::vector<uint64_t>& victims,
                           std::string& last_problem) {
    for (uint64_t k : victims.empty() ? std::vector<uint64_t>{0} : victims) {
        auto r = ask_agent(c, sock, ControlOp::takeover, k);
        if (!r) last_problem = "nvfenced at " + sock + ": " + r.error().message();
        else if (r->exit_code) last_problem = "nvfenced: " + r->message;
    }
}

// The failure of 'off' on @p d after @p rounds rounds, @p st the last Report
// (if any) naming what is still registered.
void log_not_fenced(const Ctx& c, const Device& d, uint8_t victim, const std::optional<ReservationStatus>& st,
                    const std::string& last_problem) {
    std::string left;
    if (st)
        for (uint64_t k : node_keys(*st, c.o.tag, victim)) left += " " + key_words(k);
    c.error(d.path() + ": node " + std::to_string(victim) + " could not be fenced after " + std::to_string(kOffRounds) +
            " rounds" + (left.empty() ? std::string(": no reservation is held") : ": still registered:" + left) +
            (last_problem.empty() ? "" : " (last: " + last_problem + ")"));
}

// This host is registered as @p victim itself.
OffResult refuse_local(const Ctx& c, const Device& d, uint8_t victim, uint64_t mykey) {
    c.error(d.path() + ": refusing to fence node " + std::to_string(victim) + ": this host is registered with its key " +
            key_words(mykey) + " (it is the local node)");
    return OffResult::refused;
}

// Through the local nvfenced: rounds of Report and the agent's takeover of
// each key of the victim, until none is registered and a reservation is held.
OffResult off_through_agent(const Ctx& c, Device& d, const std::string& sock, uint8_t victim) {
    bool changed = false;
    std::string last_problem;
    for (int round = 0; round < kOffRounds; ++round) {
        auto st = read_reservation(c, d, d.path());
        if (!st) return OffResult::failed;
        if (const Registrant* me = st->find_host(d.host_id())) {
            auto f = decode_key(me->key);
            if (f && f->tag == c.o.tag && f->node == victim) return refuse_local(c, d, victim, me->key);
        }
        const auto victims = node_keys(*st, c.o.tag, victim);
        if (victims.empty() && st->type != ResvType::none) {
            if (round > 0) {
                c.info(d.path() + ": node " + std::to_string(victim) + " fenced (verified: no key of it registered, " +
                       resv_type_name(st->type) + " held)");
                return OffResult::fenced;
            }
            c.debug(d.path() + ": node " + std::to_string(victim) + " is not registered: already off");
            return changed ? OffResult::fenced : OffResult::already_off;
        }
        preempt_through_agent(c, sock, victims, last_problem);
        changed = true;
    }
    auto st = d.resv().report();
    if (st && node_keys(*st, c.o.tag, victim).empty() && st->type != ResvType::none) return OffResult::fenced;
    log_not_fenced(c, d, victim, st ? std::optional<ReservationStatus>(*st) : std::nullopt, last_problem);
    return OffResult::failed;
}

// Why Fence::evict_node failed, in fence_nvfence's words.
OffResult off_direct_failed(const Ctx& c, const Device& d, const Fence& f, uint8_t victim, std::error_code ec) {
    const auto& st = f.last_report();
    if (ec == Errc::own_key && st && f.mine(*st)) return refuse_local(c, d, victim, f.mine(*st)->key);
    if (ec == Errc::not_registered) {
        // Only 'on' registers. A host without a key here was fenced (or never
        // unfenced): were it to register in order to preempt, a fenced node
        // whose stale cluster stack rejoins could fence the healthy nodes.
        // The fencer tries another node.
        c.error(d.path() + ": this host is not registered (fenced, or never unfenced), so it cannot fence node " +
                std::to_string(victim) + ": only 'on' registers a node");
    } else if (ec == Errc::verify_failed || completion_uncertain(ec)) {
        log_not_fenced(c, d, victim, st, ec == Errc::verify_failed ? std::string() : ec.message());
    } else {
        c.error(d.path() + ": fencing node " + std::to_string(victim) + " failed: " + ec.message());
    }
    return OffResult::failed;
}

// Without nvfenced: Fence::evict_node with this host's registered key.
OffResult off_direct(const Ctx& c, Device& d, uint8_t victim) {
    EpochStore store = epoch_store(c, d);
    FenceOptions fo;
    fo.tag = c.o.tag;
    fo.type = resv_type_for(c.o.mode);  // node 0: the node of this host's key
    Fence f(d.resv(), d.host_id(), fo, &store);
    auto o = f.evict_node(victim);
    if (!o) return off_direct_failed(c, d, f, victim, o.error());
    if (o->completion_error)
        c.log(Level::warning, d.path() + ": a command completed with " + o->completion_error->message() +
                                  ", but the Report shows it done (another fencer, or a command re-sent after a reset)");
    if (!o->changed) {
        c.debug(d.path() + ": node " + std::to_string(victim) + " is not registered: already off");
        return OffResult::already_off;
    }
    for (uint64_t k : node_keys(o->before, c.o.tag, victim)) c.info(d.path() + ": preempted-and-aborted " + key_words(k));
    if (o->replaced) c.info(d.path() + ": re-keyed to " + key_words(o->key) + " (above the victim's epoch)");
    if (const Registrant* me = f.mine(o->after); me && me->holder && !(f.mine(o->before) && f.mine(o->before)->holder))
        c.info(d.path() + ": took the " + std::string(resv_type_name(o->after.type)) + " reservation");
    c.info(d.path() + ": node " + std::to_string(victim) + " fenced (verified: no key of it registered, " +
           resv_type_name(o->after.type) + " held)");
    return OffResult::fenced;
}

OffResult off_device(const Ctx& c, Device& d, uint8_t victim) {
    if (c.o.tag_from_name) {
        auto st = read_reservation(c, d, d.path());
        if (!st) return OffResult::failed;
        if (other_tag_refused(c, d, *st, {victim})) return OffResult::refused;
    }
    if (auto agent = agent_for(c, d)) return off_through_agent(c, d, agent->sock, victim);
    return off_direct(c, d, victim);
}

// The nodes of tag c.o.tag registered on @p st, as "1,3" (none: "none").
std::string node_set_text(const std::set<uint8_t>& nodes) {
    std::string t;
    for (uint8_t n : nodes) t += (t.empty() ? "" : ",") + std::to_string(n);
    return t.empty() ? "none" : t;
}

// Runs fn(ci, i) for every i in [first, n) through Host::run_all, so that
// their commands are in flight together (at most kMaxParallelDevices on the
// real host; one after another where run_all is unset). Each job gets its
// own Ctx whose log lines are kept and logged in index order afterwards.
void together(const Ctx& c, size_t first, size_t n, const std::function<void(const Ctx&, size_t)>& fn) {
    NVF_INVARIANT(first <= n);
    using Line = std::pair<Level, std::string>;
    std::vector<std::vector<Line>> lines(n);
    std::vector<Host> hosts(n, c.host);
    std::vector<std::function<void()>> jobs;
    for (size_t i = first; i < n; ++i) {
        hosts[i].log = [&lines, i](Level l, const std::string& s) { lines[i].emplace_back(l, s); };
        jobs.emplace_back([&c, &hosts, &fn, i] { fn(Ctx{c.o, hosts[i], c.out, c.devices}, i); });
    }
    if (c.host.run_all) c.host.run_all(jobs);
    else for (auto& j : jobs) j();
    for (size_t i = first; i < n; ++i)
        for (const auto& [l, s] : lines[i]) c.log(l, s);
}

// After 'off' on several devices: the same surviving nodes on each, or a
// failure naming every device whose nodes differ from the first's (split
// ownership: fence-agents issue 278). The Reports go out together.
bool same_survivors(const Ctx& c, std::vector<std::unique_ptr<Device>>& devs) {
    std::vector<std::optional<std::set<uint8_t>>> sets(devs.size());
    together(c, 0, devs.size(), [&](const Ctx& ci, size_t i) {
        auto st = read_reservation(ci, *devs[i], devs[i]->path());
        if (!st) return;
        std::set<uint8_t> nodes;
        for (const auto& r : st->registrants)
            if (auto f = decode_key(r.key); f && f->tag == c.o.tag) nodes.insert(f->node);
        sets[i] = std::move(nodes);
    });
    for (const auto& s : sets)
        if (!s) return false;
    std::string differ;
    for (size_t i = 1; i < devs.size(); ++i)
        if (*sets[i] != *sets[0])
            differ += "; " + devs[i]->path() + " (" + devs[i]->volume() + "): nodes " + node_set_text(*sets[i]);
    if (differ.empty()) return true;
    c.error("the devices are left with different nodes registered, " + devs[0]->path() + " (" + devs[0]->volume() +
            "): nodes " + node_set_text(*sets[0]) + differ +
            ": a node missing on a device must be unfenced there ('on' on that node), a node present only on some "
            "must be fenced again");
    return false;
}

// Every device opened (together: opening sends Identify, nothing that
// changes a reservation), in volume order (the order every node fences in,
// so that of two nodes fencing each other the one that loses the first
// device stops there). Devices that fail to open are counted in @p failed.
std::vector<std::unique_ptr<Device>> open_in_volume_order(const Ctx& c, int& failed) {
    std::vector<std::unique_ptr<Device>> slots(c.devices.size());
    together(c, 0, slots.size(), [&](const Ctx& ci, size_t i) { slots[i] = open_device(ci, c.devices[i]); });
    std::vector<std::unique_ptr<Device>> devs;
    for (auto& d : slots) {
        if (d) devs.push_back(std::move(d));
        else ++failed;
    }
    std::stable_sort(devs.begin(), devs.end(), [](const auto& a, const auto& b) {
        return std::pair(a->volume(), a->nsid()) < std::pair(b->volume(), b->nsid());
    });
    return devs;
}

// The devices after the first, together: the fencer already holds the
// first, so a fencer racing it has stopped there.
void off_rest_together(const Ctx& c, std::vector<std::unique_ptr<Device>>& devs, uint8_t victim,
                       std::vector<OffResult>& res) {
    NVF_INVARIANT(res.size() == devs.size() && !devs.empty());
    together(c, 1, devs.size(), [&](const Ctx& ci, size_t i) { res[i] = off_device(ci, *devs[i], victim); });
}

int action_off(const Ctx& c) {
    if (!need_target(c) || !need_devices(c)) return kExitError;
    auto target = need_target_id(c);
    if (!target) return kExitError;
    const uint8_t victim = target->id;
    std::string lwhy;
    if (auto local = local_node_id(c, lwhy); local && *local == victim) {
        c.error("refusing to fence the local node " + target->label);
        return kExitError;
    } else if (!local) {
        c.debug("this node's id is unknown: " + lwhy);
    }
    if (c.o.delay_s > 0) {
        c.info("delay " + std::to_string(c.o.delay_s) + " s before fencing");
        if (c.host.sleep) c.host.sleep(c.o.delay_s);
    }
    int failed = 0;  // a device that does not open is reported; the others are still fenced
    auto devs = open_in_volume_order(c, failed);
    std::vector<OffResult> res(devs.size(), OffResult::already_off);
    if (!devs.empty()) {
        // The first volume alone: of two nodes fencing each other, the one
        // that loses it stops here and touches no other device.
        res[0] = off_device(c, *devs[0], victim);
        if (res[0] == OffResult::failed && devs.size() > 1)
            c.error("not fencing on the devices after " + devs[0]->path() + " (volume order): a fencer that failed "
                    "on the first device must not win the others (split ownership)");
        else if (res[0] != OffResult::refused && devs.size() > 1)
            off_rest_together(c, devs, victim, res);
    }
    bool any_change = false;
    for (OffResult r : res) {
        if (r == OffResult::refused) return kExitError;
        any_change = any_change || r == OffResult::fenced;
        failed += r == OffResult::failed;
    }
    if (failed) {
        c.error("failed to verify " + std::to_string(failed) + " of " + std::to_string(c.devices.size()) +
                " device(s)");
        return kExitError;
    }
    if (devs.size() > 1 && !same_survivors(c, devs)) return kExitError;
    c.out += any_change ? "Success: Powered OFF\n" : "Success: Already OFF\n";
    return kExitOk;
}

// ---- status, monitor, validate-all, list -------------------------------------

int action_status(const Ctx& c) {
    if (!need_target(c) || !need_devices(c)) return kExitError;
    auto target = need_target_id(c);
    if (!target) return kExitError;
    const std::optional<uint8_t> node = target->id;
    bool on = false;
    for (const auto& path : c.devices) {
        auto d = open_device(c, path);
        if (!d) return kExitError;
        auto st = read_reservation(c, *d, path);
        if (!st || other_tag_refused(c, *d, *st, {*node})) return kExitError;
        auto keys = node_keys(*st, c.o.tag, *node);
        if (!keys.empty()) {
            on = true;
            c.debug(path + ": node " + std::to_string(*node) + " registered with " + key_words(keys.front()));
        } else {
            c.debug(path + ": node " + std::to_string(*node) + " not registered");
        }
    }
    c.out += on ? "Status: ON\n" : "Status: OFF\n";
    return on ? kExitOk : kExitOff;
}

// Checks the map against what the device shows: every key of our tag must
// belong to a node of the map, and this host's key to this node.
bool check_map_against(const Ctx& c, const Device& d, const ReservationStatus& st, std::optional<uint8_t> local) {
    bool ok = true;
    std::set<uint8_t> ids;
    if (!c.o.node_ids.empty()) {
        std::string why;
        if (auto m = parse_node_map(c.o.node_ids, why))
            for (const auto& [n, id] : *m) ids.insert(id);
    }
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (!f || f->tag != c.o.tag) continue;
        if (r.host_id == d.host_id() && local && f->node != *local) {
            c.error(d.path() + ": this host is registered as node " + std::to_string(f->node) + " (" +
                    format_key(r.key) + ") but the node map makes it node " + std::to_string(*local));
            ok = false;
        }
        if (!ids.empty() && !ids.count(f->node)) {
            c.error(d.path() + ": key " + format_key(r.key) + " belongs to node id " + std::to_string(f->node) +
                    ", which no node_ids entry has: the map does not describe this cluster");
            ok = false;
        }
    }
    return ok;
}

int action_monitor(const Ctx& c) {
    if (!need_devices(c)) return kExitError;
    std::string why;
    auto local = local_node_id(c, why);
    bool ok = true;
    if (!local) {
        c.error("this node's id is unknown: " + why);
        ok = false;
    }
    for (const auto& path : c.devices) {
        auto d = open_device(c, path);
        if (!d) {
            ok = false;
            continue;
        }
        auto st = read_reservation(c, *d, path);
        if (!st) {
            ok = false;
            continue;
        }
        if (!check_map_against(c, *d, *st, local ? std::optional<uint8_t>(*local) : std::nullopt)) ok = false;
        c.debug(path + ": readable, " + std::to_string(st->registrants.size()) + " registrant(s)");
    }
    return ok ? kExitOk : kExitError;
}

int action_validate(const Ctx& c) {
    bool ok = need_devices(c);
    if (!c.o.node_ids.empty()) {
        std::string why;
        if (auto l = local_node_id(c, why); !l) {
            c.error(why);
            ok = false;
        }
    }
    if (c.o.has_target()) {
        // Pacemaker validates a device with a placeholder target ("node1"):
        // the configuration is what is checked, not the target.
        std::string why;
        if (auto t = target_of(c, why); !t) c.log(Level::warning, "not checking the target: " + why);
    }
    for (const auto& path : c.devices)
        if (!open_device(c, path)) ok = false;
    return ok ? kExitOk : kExitError;
}

// The nodes of the map, by id: what list and list-status print.
std::optional<std::vector<std::pair<uint32_t, std::string>>> list_nodes(const Ctx& c) {
    std::string why;
    auto m = load_node_map(c, why);
    if (!m) {
        c.error(c.o.node_ids.empty() ? why : "node_ids: " + why);
        return std::nullopt;
    }
    std::vector<std::pair<uint32_t, std::string>> nodes;
    for (const auto& [n, id] : m->ids) nodes.emplace_back(id, n);
    std::sort(nodes.begin(), nodes.end());
    return nodes;
}

// fence-agents' list: "plug<separator>alias" per line; the plug is the
// node's name, the alias its node id (either is accepted as a plug).
int action_list(const Ctx& c) {
    auto nodes = list_nodes(c);
    if (!nodes) return kExitError;
    for (const auto& [id, n] : *nodes) c.out += n + c.o.separator + std::to_string(id) + "\n";
    return kExitOk;
}

// fence-agents' list-status: "plug<separator>alias<separator>status" per
// line, status ON (a key of the node on any device, as the status action),
// OFF or UNKNOWN (an id no key can carry). A device that cannot be read
// fails the action, as an unreachable fence device does.
int action_list_status(const Ctx& c) {
    if (!need_devices(c)) return kExitError;
    auto nodes = list_nodes(c);
    if (!nodes) return kExitError;
    std::set<uint8_t> on;
    for (const auto& path : c.devices) {
        auto d = open_device(c, path);
        if (!d) return kExitError;
        auto st = read_reservation(c, *d, path);
        if (!st) return kExitError;
        for (const auto& r : st->registrants)
            if (auto f = decode_key(r.key); f && f->tag == c.o.tag) on.insert(f->node);
    }
    for (const auto& [id, n] : *nodes) {
        const char* status = id < 1 || id > kMaxNode ? "UNKNOWN" : on.count(static_cast<uint8_t>(id)) ? "ON" : "OFF";
        c.out += n + c.o.separator + std::to_string(id) + c.o.separator + status + "\n";
    }
    return kExitOk;
}

int dispatch(const Ctx& c) {
    switch (c.o.action) {
    case Action::on: return action_on(c);
    case Action::off: return action_off(c);
    case Action::status: return action_status(c);
    case Action::monitor: return action_monitor(c);
    case Action::list: return action_list(c);
    case Action::list_status: return action_list_status(c);
    case Action::validate_all: return action_validate(c);
    case Action::setup_watcher:   // run() handles these before the devices are found
    case Action::check_config:
    case Action::metadata:
    case Action::manpage: break;
    }
    return kExitOk;
}

// corosync's cluster name (totem.cluster_name), from which the tag is
// derived when cluster_tag is not given; "" when corosync is not installed
// (corosync-cmapctl missing: tag 0, as before the tag was derived);
// nullopt, logged, when corosync is there but the name cannot be read: no
// guess (a wrong tag would make 'off' find nobody to fence).
std::optional<std::string> corosync_cluster_name(const Ctx& c) {
    if (!c.host.cmapctl) return std::string();
    const std::string& cmap = c.o.corosync_cmap_path;
    auto text = c.host.cmapctl(cmap, {"-g", "totem.cluster_name"});
    if (!text && text.error() == errno_error(ENOENT)) {
        c.debug("cluster_tag not set and no corosync on this host (" + cmap + " not found): cluster tag 0");
        return std::string();
    }
    std::optional<std::string> name;
    if (text) name = cmap_string_value(*text, "totem.cluster_name");
    if (!name)
        c.error("cluster_tag is not set and corosync's cluster name cannot be read (" + cmap +
                " -g totem.cluster_name: " + (text ? std::string("no value") : text.error().message()) +
                "): set cluster_tag (0 for a cluster whose keys were made with tag 0)");
    return name;
}

}  // namespace

bool is_device_mapper_path(std::string_view path) {
    const std::string_view name = path.substr(path.find_last_of('/') + 1);
    auto starts = [](std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; };
    if (starts(path, "/dev/mapper/")) return true;
    if (starts(path, "/dev/disk/by-id/") && (starts(name, "dm-uuid-") || starts(name, "dm-name-"))) return true;
    if (!starts(path, "/dev/") || !starts(name, "dm-") || name.size() == 3) return false;
    return name.substr(3).find_first_not_of("0123456789") == std::string_view::npos;
}

std::vector<std::string> discover_links(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (out.size() >= kMaxDiscovered) break;
        const std::string name = e.path().filename().string();
        if (name.empty() || name[0] == '.' || !e.is_block_file(ec)) continue;
        out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

ResvType resv_type_for(Mode m) {
    return m == Mode::exclusive ? ResvType::write_exclusive : ResvType::write_exclusive_reg_only;
}

void run_all_threads(std::vector<std::function<void()>>& jobs) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t i = next++; i < jobs.size(); i = next++) jobs[i]();
    };
    std::vector<std::thread> threads;
    const size_t n = std::min(jobs.size(), kMaxParallelDevices);
    threads.reserve(n);
    for (size_t t = 0; t < n; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    NVF_INVARIANT(next.load() >= jobs.size());
}

Result<uint8_t> this_node_id(const Options& o, Host& host, std::string& why) {
    std::string out;
    return local_node_id(Ctx{o, host, out, {}}, why);
}

Result<NodeMap> cluster_nodes(const Options& o, Host& host, std::string& why) {
    std::string out;
    return load_node_map(Ctx{o, host, out, {}}, why);
}

std::vector<std::string> stonith_devices(const Options& o, Host& host) {
    std::string out;
    return devices_of(Ctx{o, host, out, {}});
}

bool resolve_cluster_tag(Options& o, Host& host) {
    if (o.tag_given) return true;
    std::string sink;
    const Ctx c{o, host, sink, {}};
    auto name = corosync_cluster_name(c);
    if (!name) return false;
    o.tag = name->empty() ? 0 : cluster_tag_for_name(*name);
    o.tag_from_name = !name->empty();
    return true;
}

int run(const Parsed& parsed, Host& host, std::string& out) {
    const Options& o = parsed.opts;
    Ctx c{o, host, out, {}};
    for (const auto& w : parsed.warnings) c.log(Level::warning, "Parse error: " + w);
    if (o.help) {
        out += usage_text();
        return kExitOk;
    }
    if (o.version) {
        out += "fence_nvfence " NVFENCE_VERSION_STRING "\n";
        return kExitOk;
    }
    if (o.action == Action::metadata) {
        out += metadata_xml();
        return kExitOk;
    }
    if (o.action == Action::manpage) {
        out += manpage_text();
        return kExitOk;
    }
    if (!parsed.ok()) {
        for (const auto& e : parsed.errors) c.error("Failed: " + e);
        c.error("Please use '-h' for usage");
        return kExitError;
    }
    c.debug(std::string("action ") + action_name(o.action) + ", reservation_type " + mode_name(o.mode));
    Options tagged = o;
    if (o.action != Action::list && !resolve_cluster_tag(tagged, host)) return kExitError;
    if (tagged.tag_from_name)
        c.debug("cluster tag " + std::to_string(tagged.tag) + " (from corosync's cluster name)");
    // The watcher's setup and check read the stonith resource's parameters
    // themselves (the CIB), and resolve its tag the same way.
    if (o.action == Action::setup_watcher) return action_setup_watcher(tagged, host, out);
    if (o.action == Action::check_config) return action_check_config(host, out);
    Ctx ct{tagged, host, out, {}};
    if (o.action != Action::list) ct.devices = devices_of(ct);
    return dispatch(ct);
}

}  // namespace nvfence::fence_agent
