// SPDX-License-Identifier: MIT
#include "docs_table.hpp"

namespace nvfence::fence_agent {
namespace {

const AgentDoc kAgent = {
    "Fence agent for NVMe reservations (nvfence)",
    "fence_nvfence is an I/O fencing agent for shared NVMe namespaces (NVMe-oF, dual-ported SSDs, AWS EBS io2 "
    "Multi-Attach) that uses NVMe reservations, as fence_scsi does with SCSI-3 persistent reservations. Each node "
    "registers its own key (nvfence's nf:TAG:NODE:EPOCH, the node id from node_ids or from corosync) on every "
    "device when it is unfenced ('on', run on the node itself), and a \"write exclusive, registrants only\" "
    "reservation (NVMe type 3) is held, so only registered nodes can write. 'off' removes every key of the fenced "
    "node, whatever its epoch, with a verified preempt-and-abort on every device: the device then refuses every "
    "write of that node (page cache, filesystems, other processes), and its queued commands are aborted. A node "
    "that was fenced is unfenced again only by 'on'. Where nvfenced holds this host's registration, fence_nvfence "
    "goes through its control socket; a check-only nvfenced (role = watch, the recipe's watcher) holds none and is "
    "bypassed. There is no reboot action: Pacemaker turns reboot into off for fabric "
    "fencing.",
    "https://nvmexpress.org",
};

constexpr const char* kPlugDesc =
    "Node to act on: a node name of node_ids (or corosync's nodelist), or a node id it gives to a node, so a "
    "pcmk_host_map alias that is the node id works. Without it, nodename (sent by Pacemaker) is used; with both, "
    "they must name the same node.";

const std::vector<ParamDoc> kParams = {
    {.name = "action", .getopt = "-o, --action=[action]", .type = "string", .def = "off", .required = true,
     .shortdesc = "Fencing action"},
    {.name = "devices", .getopt = "-d, --devices=[devices]", .type = "string",
     .shortdesc = "Shared NVMe namespaces to fence on, comma or space separated: /dev/nvmeXnY, /dev/ngXnY or a "
                  "link to one (/dev/disk/by-id/..., /dev/nvfence/VOLUME). Each must support NVMe reservations. "
                  "Without it, the links under /dev/nvfence (nvfence's udev rules name each shared namespace "
                  "there by its volume id) to namespaces where a key of the cluster tag is registered are used; "
                  "the others are skipped with a warning, so the first unfencing names the devices. Device-mapper devices (/dev/mapper/*, /dev/dm-*: "
                  "dm-multipath) are refused: give the namespace of native NVMe multipath."},
    {.name = "key", .getopt = "-k, --key=[node id]", .type = "string",
     .shortdesc = "Node id of the node to act on (1-255, or an nvfence key nf:TAG:NODE:EPOCH whose node is used), "
                  "instead of looking it up in node_ids or corosync."},
    {.name = "node_ids", .getopt = "--node-ids=[map]", .type = "string",
     .shortdesc = "Node map name:id;name:id (ids 1-255, the node field of nvfence keys). Without it, a node's id "
                  "is its corosync nodeid (corosync-cmapctl nodelist)."},
    {.name = "reservation_type", .getopt = "--reservation-type=[type]", .type = "select",
     .def = "registrants-only", .choices = {"registrants-only", "exclusive"},
     .shortdesc = "Reservation held on the devices: registrants-only (Write Exclusive - Registrants Only, NVMe "
                  "type 3, SCSI type 5: every unfenced node writes) or exclusive (Write Exclusive, NVMe and SCSI "
                  "type 1: only the holder writes). Names only: NVMe numbers the types differently from SCSI."},
    {.name = "cluster_tag", .getopt = "--cluster-tag=[tag]", .type = "integer",
     .shortdesc = "Cluster tag of the keys (0-255), as nvfence and nvfenced use it; keys of other tags are never "
                  "touched. Without it, the tag is derived from corosync's cluster name (totem.cluster_name): "
                  "1 + FNV-1a-32(name) mod 255, never 0; 0 without corosync on the host. A cluster whose keys "
                  "were made with tag 0 keeps them with cluster_tag=0; where keys of another tag with the same "
                  "node ids are registered, a derived tag is refused."},
    {.name = "aptpl", .getopt = "-a, --aptpl", .type = "boolean", .def = "0",
     .shortdesc = "Make the registrations and the reservation persist through power loss (NVMe PTPL, fence_scsi's "
                  "APTPL). Used by 'on' only: it registers with CPTPL set (or sets it with the node's key when the "
                  "node is registered already) and verifies that the device reports PTPL on. Fails on a namespace "
                  "whose RESCAP has no PTPL, and on a device that accepts the command but does not persist (the "
                  "Linux NVMe target). Where nvfenced holds the registration, its configuration's ptpl key sets it."},
    {.name = "plug", .getopt = "-n, --plug=[nodename]", .type = "string", .shortdesc = kPlugDesc,
     .obsoletes = "port"},
    {.name = "port", .getopt = "-n, --plug=[nodename]", .type = "string", .shortdesc = kPlugDesc,
     .deprecated_for = "plug"},
    {.name = "agent_socket", .getopt = "--agent-socket=[path]", .type = "string",
     .shortdesc = "Control socket of the nvfenced serving the devices on this host (default: found under "
                  "/run/nvfence)."},
    {.name = "state_dir", .getopt = "--state-dir=[path]", .type = "string", .def = "/var/lib/nvfence",
     .shortdesc = "Directory of the persisted epochs (shared with the nvfence command)."},
    {.name = "quiet", .getopt = "-q, --quiet", .type = "boolean",
     .shortdesc = "Disable logging to stderr. Does not affect --verbose or --debug-file or logging to syslog."},
    {.name = "verbose", .getopt = "-v, --verbose", .type = "boolean",
     .shortdesc = "Verbose mode. Multiple -v flags can be stacked on the command line (e.g., -vvv) to increase "
                  "verbosity."},
    {.name = "debug_file", .getopt = "-D, --debug-file=[debugfile]", .type = "string",
     .shortdesc = "Write debug information to given file"},
    {.name = "version", .getopt = "-V, --version", .type = "boolean",
     .shortdesc = "Display version information and exit"},
    {.name = "help", .getopt = "-h, --help", .type = "boolean", .shortdesc = "Display help and exit"},
    {.name = "separator", .getopt = "-C, --separator=[char]", .type = "string", .def = ",",
     .shortdesc = "Separator for CSV created by 'list' operation"},
    {.name = "delay", .getopt = "--delay=[seconds]", .type = "second", .def = "0",
     .shortdesc = "Wait X seconds before fencing is started"},
    {.name = "corosync_cmap_path", .getopt = "--corosync-cmap-path=[path]", .type = "string",
     .def = "/usr/sbin/corosync-cmapctl", .shortdesc = "Path to corosync-cmapctl binary"},
    {.name = "nodename", .getopt = "--nodename=[name]", .type = "string",
     .shortdesc = "The target's node name, sent by Pacemaker with every action that has a target (for 'on', the "
                  "local node). Looked up by name only; the target when no plug is given, otherwise it must name "
                  "the plug's node.",
     .stdin_only = true},
    {.name = "nodeid", .getopt = "--nodeid=[id]", .type = "integer",
     .shortdesc = "The target's corosync node id, sent by some Pacemaker versions. Used only without node_ids "
                  "(whose ids are not corosync's): the target when nothing else names one, otherwise it must be "
                  "the same node.",
     .stdin_only = true},
    {.name = "watcher_interval_ms", .getopt = "--watcher-interval-ms=[ms]", .type = "integer", .def = "500",
     .shortdesc = "interval_ms of every node's watcher (nvfenced, role = watch), 50-60000: what "
                  "'fence_nvfence -o setup-watcher' writes and 'fence_nvfence -o check-config' checks. Not used "
                  "by the fencing actions."},
    {.name = "watcher_device_timeout_ms", .getopt = "--watcher-device-timeout-ms=[ms]", .type = "integer",
     .def = "5000",
     .shortdesc = "device_timeout_ms of every node's watcher, 100-120000, as watcher_interval_ms. Not used by the "
                  "fencing actions."},
};

const std::vector<ActionDoc> kActions = {
    {"on", true,
     "Unfencing (Pacemaker runs it on the node itself: on_target, automatic). Registers this node's key on every "
     "device and takes the reservation when nobody holds one. Refused when this node is not the target, or when "
     "this host's NVMe host id is registered with another node's key."},
    {"off", false,
     "Fences the target: on every device, every key of the node is preempted-and-aborted with this node's key, the "
     "reservation is taken when none is held, and a Reservation Report verifies that no key of the node is left "
     "and that a reservation is held. A node that re-registers meanwhile is preempted again (3 rounds at most). A "
     "node that is not registered is already off (success). When the node held the reservation, this node holds "
     "it afterwards. The local node is refused, by the node map or corosync and by the device itself (this host's "
     "key being the node's key). A fencer that is not registered itself (it was fenced, or never unfenced) fails "
     "and sends nothing: only 'on' registers a node, so a fenced node that rejoins with a stale cluster stack "
     "cannot fence the others; Pacemaker's fencer asks another node. A fencer that loses the race to another "
     "fencer of the same node succeeds: the Report decides. With several devices, every node fences first the "
     "device whose volume name (then namespace id) comes first, whatever order devices lists them in, and "
     "sends no reservation command to any other when it fails there, so two nodes fencing each other cannot "
     "each end up owning some of the devices: the loser of the first device stops (every device is opened and "
     "identified first, together). The winner then fences the other devices together (at "
     "most 16 at once), each verified as above; afterwards every device must have the same nodes registered, or "
     "'off' fails naming each device that differs."},
    {"status", false,
     "Prints Status: ON and exits 0 when the target has a key on any device; prints Status: OFF and exits 2 when "
     "on none; exits 1 on any error (an unknown plug included)."},
    {"list", false,
     "Prints one line per node of node_ids (or corosync's nodelist), as fence-agents do: the plug (the node's "
     "name), the separator and the alias (its node id), e.g. a,1. Either value is accepted as a plug. Needs no "
     "device."},
    {"list-status", false,
     "As list, with a third field: ON when the node has a key on any device, OFF when it has none, UNKNOWN when "
     "its id cannot be a key's node field; e.g. a,1,ON. Fails when a device cannot be read."},
    {"monitor", false,
     "Checks that every device opens, is an NVMe namespace with reservation support for the configured type, that "
     "its reservation can be read, that this node's id is known, and that the node map agrees with the keys on the "
     "devices (every key of the tag belongs to a node of the map; this host's key is this node's)."},
    {"metadata", false, "Prints the agent's metadata (fence-agents' XML format)."},
    {"manpage", false, "Prints this manual page (groff), generated from the same table as the metadata."},
    {"validate-all", false,
     "Checks the options, the node map (this node in it) and that every device is a reservation-capable NVMe "
     "namespace, changing nothing. The target is not checked (a warning at most): Pacemaker validates a device "
     "with a placeholder target, node1."},
};

}  // namespace

const AgentDoc& agent_doc() { return kAgent; }
const std::vector<ParamDoc>& parameter_docs() { return kParams; }
const std::vector<ActionDoc>& action_docs() { return kActions; }

}  // namespace nvfence::fence_agent
