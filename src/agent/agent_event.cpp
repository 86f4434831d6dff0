// SPDX-License-Identifier: MIT
#include "agent/agent_event.hpp"

#include "agent/agent_text.hpp"

namespace nvfence {
namespace {
using agent_detail::key_text;
constexpr size_t kMaxListedRegistrants = 16;
}  // namespace

// ---- events -----------------------------------------------------------------

const char* agent_event_kind_name(AgentEventKind k) {
    switch (k) {
    case AgentEventKind::state_changed: return "state";
    case AgentEventKind::holder_changed: return "holder";
    case AgentEventKind::generation_reset: return "generation";
    case AgentEventKind::notification: return "notification";
    case AgentEventKind::notification_overflow: return "notification-overflow";
    case AgentEventKind::check_failed: return "check-failed";
    case AgentEventKind::check_recovered: return "check-recovered";
    case AgentEventKind::slow_check: return "slow";
    case AgentEventKind::loop_stalled: return "stalled";
    case AgentEventKind::host_id_shared: return "host-id";
    case AgentEventKind::request: return "request";
    case AgentEventKind::action_failed: return "action-failed";
    case AgentEventKind::info: return "info";
    }
    return "unknown";
}

std::string describe_report(const ReservationStatus& st, const HostId& self) {
    std::string s = "gen " + std::to_string(st.generation) + ", ";
    s += st.type == ResvType::none ? std::string("not reserved") : std::string(resv_type_short(st.type));
    const Registrant* h = st.holder();
    s += ", holder ";
    s += h ? key_text(h->key) : std::string("none");
    if (h && h->host_id == self) s += " (this host)";
    s += ", registrants [";
    size_t n = 0;
    for (const auto& r : st.registrants) {
        if (n == kMaxListedRegistrants) {
            s += ", +" + std::to_string(st.registrants.size() - n) + " more";
            break;
        }
        if (n++) s += ", ";
        s += key_text(r.key);
        if (r.host_id == self && r.holder) s += " (this host, holder)";
        else if (r.host_id == self) s += " (this host)";
        else if (r.holder) s += " (holder)";
    }
    s += "]";
    if (st.truncated()) s += " (device claims " + std::to_string(st.num_registrants) + ")";
    return s;
}

std::string format_event(const AgentEvent& e) {
    std::string s;
    if (e.kind == AgentEventKind::state_changed)
        s = std::string(agent_state_name(e.from)) + " -> " + agent_state_name(e.to) + ": ";
    s += e.text;
    if (e.report) s += "; report: " + describe_report(*e.report, e.self);
    return s;
}

}  // namespace nvfence
