// SPDX-License-Identifier: MIT
// fence_nvfence's metadata and its man page, both printed from one table
// (docs_table.cpp), so the man page cannot say what the metadata does not.
#include <string_view>

#include "docs_table.hpp"
#include "fence_agent.hpp"

namespace nvfence::fence_agent {
namespace {

std::string xml_escape(std::string_view s, bool attribute) {
    std::string out;
    for (char ch : s) {
        if (ch == '&') out += "&amp;";
        else if (ch == '<') out += "&lt;";
        else if (ch == '>') out += "&gt;";
        else if (ch == '"' && attribute) out += "&quot;";
        else out += ch;
    }
    return out;
}

void xml_parameter(std::string& x, const ParamDoc& p) {
    x += "\t<parameter name=\"" + std::string(p.name) + "\" unique=\"0\" required=\"" + (p.required ? "1" : "0") + "\"";
    if (p.obsoletes) x += std::string(" obsoletes=\"") + p.obsoletes + "\"";
    if (p.deprecated_for) x += " deprecated=\"1\"";
    x += ">\n";
    x += "\t\t<getopt mixed=\"" + xml_escape(p.getopt, true) + "\" />\n";
    const std::string def = p.def ? "default=\"" + xml_escape(p.def, true) + "\" " : std::string();
    if (!p.choices.empty()) {
        x += "\t\t<content type=\"select\" " + def + " >\n";
        for (const char* ch : p.choices) x += "\t\t\t<option value=\"" + xml_escape(ch, true) + "\" />\n";
        x += "\t\t</content>\n";
    } else {
        x += "\t\t<content type=\"" + std::string(p.type) + "\" " + def + " />\n";
    }
    x += "\t\t<shortdesc lang=\"en\">" + xml_escape(p.shortdesc, false) + "</shortdesc>\n";
    x += "\t</parameter>\n";
}

}  // namespace

// The layout of fence-agents' own metadata (fencing.py prints the same
// elements in the same order, with the same spacing), so tools that read it
// (pcs, crm, Pacemaker's fencer) see nothing unusual.
// tests/fence_nvfence/metadata.xml is the golden copy.
std::string metadata_xml() {
    const AgentDoc& d = agent_doc();
    std::string x = "<?xml version=\"1.0\" ?>\n";
    x += "<resource-agent name=\"fence_nvfence\" shortdesc=\"" + xml_escape(d.shortdesc, true) + "\" >\n";
    x += "<longdesc>" + xml_escape(d.longdesc, false) + "</longdesc>\n";
    x += "<vendor-url>" + xml_escape(d.vendor_url, false) + "</vendor-url>\n";
    x += "<parameters>\n";
    for (const ParamDoc& p : parameter_docs())
        if (!p.stdin_only) xml_parameter(x, p);
    x += "</parameters>\n<actions>\n";
    for (const ActionDoc& a : action_docs()) {
        if (a.on_target) x += "\t<action name=\"" + std::string(a.name) + "\" on_target=\"1\" automatic=\"1\"/>\n";
        else x += "\t<action name=\"" + std::string(a.name) + "\" />\n";
    }
    x += "</actions>\n</resource-agent>\n";
    return x;
}

std::string usage_text() {
    return R"TXT(Usage:
	fence_nvfence [options]
Options:
   -o, --action=[action]          on, off, status, monitor, list, list-status,
                                  metadata, manpage, validate-all
                                  (default off; no reboot); for administrators:
                                  setup-watcher (this node's nvfenced watcher
                                  from the stonith parameters), check-config
                                  (every node's watcher against the stonith
                                  resource; exit 0 agree, 1 cannot check,
                                  2 differ)
   -d, --devices=[devices]        shared NVMe namespaces, comma or space separated
                                  (default: this cluster's links under /dev/nvfence)
   -n, --plug=[nodename]          node to act on: name or node id (default: nodename)
   -k, --key=[node id]            node id of the node to act on (1-255)
   --node-ids=[map]               name:id;name:id (default: corosync nodeids)
   --reservation-type=[type]      registrants-only (default) or exclusive
   --cluster-tag=[tag]            cluster tag of the keys (0-255, default: from corosync's cluster name)
   --agent-socket=[path]          nvfenced's control socket (default: searched)
   --state-dir=[path]             persisted epochs (default /var/lib/nvfence)
   --corosync-cmap-path=[path]    default /usr/sbin/corosync-cmapctl
   --delay=[seconds]              wait before 'off' (0-3600)
   -a, --aptpl                    'on': persist through power loss (CPTPL)
   --watcher-interval-ms=[ms]     the watchers' interval_ms (default 500)
   --watcher-device-timeout-ms=[ms] the watchers' device_timeout_ms (default 5000)
   -C, --separator=[char]         between the fields of list (default ,)
   -v, --verbose                  verbose (repeat for more)
   -q, --quiet                    nothing on stderr
   -D, --debug-file=[debugfile]   also append log lines to this file
   -V, --version                  version
   -h, --help                     this text
Without arguments, options are read from stdin as name=value lines.
Exit codes: 0 success (status: ON), 1 failure, 2 status: OFF.
See fence_nvfence(8) (fence_nvfence -o manpage).
)TXT";
}

}  // namespace nvfence::fence_agent
