// SPDX-License-Identifier: MIT
#pragma once
/// @file docs_table.hpp
/// The one table fence_nvfence's documentation comes from: `-o metadata`
/// (metadata.cpp) prints the agent, parameter and action entries in
/// fence-agents' XML; `-o manpage` (manpage.cpp) prints the same entries,
/// with the man page's own prose, as fence_nvfence(8).

#include <string>
#include <vector>

namespace nvfence::fence_agent {

/// One option.
struct ParamDoc {
    const char* name;                   ///< stdin name (canonical, with '_')
    const char* getopt;                 ///< command line forms, "-o, --action=[action]" ("" = stdin only)
    const char* type;                   ///< metadata content type: string, integer, second, boolean
    const char* def = nullptr;          ///< default value (nullptr: none)
    bool required = false;              ///< metadata's required="1"
    std::vector<const char*> choices = {};  ///< a select's values (type is then "select")
    const char* shortdesc = "";         ///< one paragraph, plain text
    const char* obsoletes = nullptr;    ///< the deprecated name this one replaces
    const char* deprecated_for = nullptr;  ///< set: a deprecated name of this option
    bool stdin_only = false;            ///< not in the metadata (sent by Pacemaker, not configured)
};

/// One action.
struct ActionDoc {
    const char* name;        ///< fence-agents' name
    bool on_target = false;  ///< runs on the target node (unfencing): on_target="1" automatic="1"
    const char* man = "";    ///< what it does, for the man page
};

/// The agent as a whole.
struct AgentDoc {
    const char* shortdesc;   ///< metadata shortdesc, the man page's NAME line
    const char* longdesc;    ///< metadata longdesc, the man page's first paragraph
    const char* vendor_url;  ///< metadata vendor-url
};

/// The agent's description.
const AgentDoc& agent_doc();

/// Every option, in the metadata's order; stdin_only entries last.
const std::vector<ParamDoc>& parameter_docs();

/// Every action, in the metadata's order.
const std::vector<ActionDoc>& action_docs();

}  // namespace nvfence::fence_agent
