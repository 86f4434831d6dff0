// SPDX-License-Identifier: MIT
// fence_nvfence -o manpage: fence_nvfence(8) from the metadata's table
// (docs_table.cpp) and the prose below. man/fence_nvfence.8 is this output,
// checked by the fence_nvfence_manpage test.
#include <string_view>

#include "docs_table.hpp"
#include "fence_agent.hpp"

namespace nvfence::fence_agent {
namespace {

constexpr const char* kManDate = "2026-12";

// Plain text as groff input: backslashes printed as such, hyphens as the
// ASCII minus a reader can copy, no line taken for a request.
std::string roff(std::string_view s) {
    std::string out;
    bool line_start = true;
    for (char ch : s) {
        if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
        if (ch == '\\') out += "\\e";
        else if (ch == '-') out += "\\-";
        else out += ch;
        line_start = ch == '\n';
    }
    return out;
}

// Paragraphs of the DESCRIPTION after the metadata's longdesc.
constexpr const char* kDescription[] = {
    "Keys are nvfence keys, nf:TAG:NODE:EPOCH, the same as nvfence(8) and nvfenced(8) use. A node is on on a device "
    "while any key of its cluster tag and node id is registered there, whatever the epoch; every unfencing takes an "
    "epoch above every epoch seen on the device and persisted in state_dir. Keys of other tags and foreign keys are "
    "never touched.",
    "The node an action is about (the target): Pacemaker passes nodename (the target's name), plug or port (its "
    "pcmk_host_map alias, or its name without a map) and, in some versions, nodeid (its corosync node id). key, when "
    "given, is the target's node id and nothing else is looked up. Otherwise plug is the target: a node name of the "
    "node map (node_ids, else corosync's nodelist), or its short name, else a node id the map gives to a node; a "
    "plug that is neither is an unknown plug and the action fails (exit 1). nodename is looked up by name: the "
    "target when there is no plug; with a plug it must name the same node, otherwise the action fails (exit 1), "
    "because pcmk_host_map and node_ids disagree. nodeid is used only without node_ids, as the target when nothing "
    "else names one and as a check otherwise. So pcmk_host_map=\"a:1;b:2\" with node_ids=\"a:1;b:2\" works, as do "
    "plug=b and nodename=b alone.",
    "Device-mapper devices (/dev/mapper/*, /dev/dm-*, /dev/disk/by-id/dm-*), such as the dm-multipath devices that "
    "fence_mpath uses, are refused (exit 1): fence_nvfence sends NVMe reservation commands to the NVMe namespace "
    "itself. With native NVMe multipath (nvme_core.multipath=Y, the kernel's default) one /dev/nvmeXnY stands for "
    "every path of a namespace; give that, or its /dev/nvfence/VOLUME link.",
    "Options are read from the command line (GNU getopt style) when there are arguments; otherwise from standard "
    "input as name=value lines, as Pacemaker's fencer passes them: blank lines and lines starting with # are "
    "skipped, - and _ in names are equivalent, double quotes around a value are removed, the last value wins, "
    "unknown names are warned about and ignored, booleans are 1/yes/on/true or 0/no/off/false.",
};

constexpr std::pair<const char*, const char*> kExitStatus[] = {
    {"0", "Success; status: the target is ON."},
    {"1", "Failure: bad options, an unknown plug, a plug and nodename that name different nodes, a device that is "
          "missing, not an NVMe namespace, without reservation support or a device-mapper device, a device that "
          "cannot be read or changed, a fence that cannot be verified."},
    {"2", "status: the target is OFF (no key of it on any device)."},
};

// Plain text, as typed (roff() escapes it).
constexpr const char* kExamples =
    "pcs stonith create nvfence fence_nvfence \\\n"
    "    devices=/dev/nvfence/vol-0123456789abcdef0 \\\n"
    "    node_ids=\"n1:1;n2:2;n3:3\" pcmk_host_list=\"n1 n2 n3\" \\\n"
    "    meta provides=unfencing\n"
    "\n"
    "printf 'action=off\\nplug=n2\\ndevices=/dev/nvme1n1\\nnode_ids=n1:1;n2:2\\n' | fence_nvfence\n"
    "fence_nvfence -o status -n n2 -d /dev/nvme1n1 --node-ids 'n1:1;n2:2'\n"
    "fence_nvfence -o list-status -d /dev/nvme1n1 --node-ids 'n1:1;n2:2'\n";

// The shortdesc as sentences, then the values, the default and whether it
// is required.
std::string param_text(const ParamDoc& p) {
    if (p.deprecated_for) return "Deprecated name of " + std::string(p.deprecated_for) + ".";
    std::string t = p.shortdesc;
    if (!t.empty() && t.back() != '.') t += '.';
    if (!p.choices.empty()) {
        t += " Values:";
        for (size_t i = 0; i < p.choices.size(); ++i) t += std::string(i ? ", " : " ") + p.choices[i];
        t += ".";
    }
    if (p.def) t += std::string(" Default: ") + (std::string_view(p.def) == "," ? "a comma" : p.def) + ".";
    if (p.required && !p.def) t += " Required.";
    if (p.obsoletes) t += std::string(" Obsoletes: ") + p.obsoletes + ".";
    return t;
}

void head(std::string& m) {
    m += ".\\\" Generated by 'fence_nvfence -o manpage' from the table of its metadata: do not edit.\n";
    m += std::string(".TH FENCE_NVFENCE 8 \"") + kManDate + "\" \"nvfence " NVFENCE_VERSION_STRING
         "\" \"System Administration\"\n";
    m += ".SH NAME\nfence_nvfence \\- " + roff(agent_doc().shortdesc) + "\n";
    m += ".SH SYNOPSIS\n.B fence_nvfence\n.RI [ options ]\n.br\n.B fence_nvfence\n< \n.I name=value-lines\n";
    m += ".SH DESCRIPTION\n" + roff(agent_doc().longdesc) + "\n";
    for (const char* para : kDescription) m += ".PP\n" + roff(para) + "\n";
}

void reference(std::string& m) {
    m += ".SH OPTIONS\n";
    for (const ParamDoc& p : parameter_docs())
        if (!p.stdin_only && !p.deprecated_for) m += ".TP\n.B " + roff(p.getopt) + "\n" + roff(param_text(p)) + "\n";
    m += ".SH ACTIONS\n";
    for (const ActionDoc& a : action_docs()) m += ".TP\n.B " + roff(a.name) + "\n" + roff(a.man) + "\n";
    m += ".PP\nThere is no reboot action: the agent fences at the storage, and Pacemaker turns a reboot into off "
         "for such agents. Pair it with a power or watchdog device in a fencing topology when fenced nodes must "
         "also restart.\n";
    m += ".SH STDIN PARAMETERS\n";
    for (const ParamDoc& p : parameter_docs()) m += ".TP\n.B " + roff(p.name) + "\n" + roff(param_text(p)) + "\n";
}

void tail(std::string& m) {
    m += ".SH EXIT STATUS\n";
    for (const auto& [code, text] : kExitStatus) m += ".TP\n.B " + std::string(code) + "\n" + roff(text) + "\n";
    m += ".SH EXAMPLES\n.nf\n" + roff(kExamples) + ".fi\n";
    m += ".SH FILES\n.TP\n.I /var/lib/nvfence/VOLUME.epoch\nThe highest epoch used on a volume.\n";
    m += ".TP\n.I /run/nvfence/*.sock\nnvfenced control sockets.\n";
    m += ".SH SEE ALSO\n.BR nvfence (8),\n.BR nvfenced (8),\n.BR fence_scsi (8),\n.BR fence_mpath (8),\n"
         ".BR stonith_admin (8),\n.BR pcs (8),\n.BR crm (8)\n";
}

}  // namespace

std::string manpage_text() {
    std::string m;
    head(m);
    reference(m);
    tail(m);
    return m;
}

}  // namespace nvfence::fence_agent
