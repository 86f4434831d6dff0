// SPDX-License-Identifier: MIT
#include "fence_agent.hpp"

namespace nvfence::fence_agent {

// The layout of fence-agents' own metadata (fencing.py prints the same
// elements in the same order), so tools that read it (pcs, crm, Pacemaker's
// fencer) see nothing unusual. tests/fence_nvfence/metadata.xml is the
// golden copy.
std::string metadata_xml() {
    return R"XML(<?xml version="1.0" ?>
<resource-agent name="fence_nvfence" shortdesc="Fence agent for NVMe reservations (nvfence)" >
<longdesc>fence_nvfence is an I/O fencing agent for shared NVMe namespaces (NVMe-oF, dual-ported SSDs, AWS EBS io2 Multi-Attach) that uses NVMe reservations, as fence_scsi does with SCSI-3 persistent reservations. Each node registers its own key (nvfence's nf:TAG:NODE:EPOCH, the node id from node_ids or from corosync) on every device when it is unfenced ('on', run on the node itself), and a "write exclusive, registrants only" reservation (NVMe type 3) is held, so only registered nodes can write. 'off' removes every key of the fenced node, whatever its epoch, with a verified preempt-and-abort on every device: the device then refuses every write of that node (page cache, filesystems, other processes), and its queued commands are aborted. A node that was fenced is unfenced again only by 'on'. Where nvfenced holds this host's registration, fence_nvfence goes through its control socket. There is no reboot action: Pacemaker turns reboot into off for fabric fencing.</longdesc>
<vendor-url>https://nvmexpress.org</vendor-url>
<parameters>
	<parameter name="action" unique="0" required="1">
		<getopt mixed="-o, --action=[action]" />
		<content type="string" default="off"  />
		<shortdesc lang="en">Fencing action</shortdesc>
	</parameter>
	<parameter name="devices" unique="0" required="1">
		<getopt mixed="-d, --devices=[devices]" />
		<content type="string"  />
		<shortdesc lang="en">Shared NVMe namespaces to fence on, comma or space separated: /dev/nvmeXnY, /dev/ngXnY or a link to one (/dev/disk/by-id/..., /dev/nvfence/VOLUME). Each must support NVMe reservations.</shortdesc>
	</parameter>
	<parameter name="key" unique="0" required="0">
		<getopt mixed="-k, --key=[node id]" />
		<content type="string"  />
		<shortdesc lang="en">Node id of the node to act on (1-255, or an nvfence key nf:TAG:NODE:EPOCH whose node is used), instead of looking it up in node_ids or corosync.</shortdesc>
	</parameter>
	<parameter name="node_ids" unique="0" required="0">
		<getopt mixed="--node-ids=[map]" />
		<content type="string"  />
		<shortdesc lang="en">Node map name:id;name:id (ids 1-255, the node field of nvfence keys). Without it, a node's id is its corosync nodeid (corosync-cmapctl nodelist).</shortdesc>
	</parameter>
	<parameter name="reservation_type" unique="0" required="0">
		<getopt mixed="--reservation-type=[type]" />
		<content type="select" default="registrants-only"  >
			<option value="registrants-only" />
			<option value="exclusive" />
		</content>
		<shortdesc lang="en">Reservation held on the devices: registrants-only (Write Exclusive - Registrants Only, NVMe type 3, SCSI type 5: every unfenced node writes) or exclusive (Write Exclusive, NVMe and SCSI type 1: only the holder writes). Names only: NVMe numbers the types differently from SCSI.</shortdesc>
	</parameter>
	<parameter name="cluster_tag" unique="0" required="0">
		<getopt mixed="--cluster-tag=[tag]" />
		<content type="integer" default="0"  />
		<shortdesc lang="en">Cluster tag of the keys (0-255), as nvfence and nvfenced use it; keys of other tags are never touched.</shortdesc>
	</parameter>
	<parameter name="plug" unique="0" required="0" obsoletes="port">
		<getopt mixed="-n, --plug=[nodename]" />
		<content type="string"  />
		<shortdesc lang="en">Name of the node to act on. Without it, nodename (sent by Pacemaker) is used.</shortdesc>
	</parameter>
	<parameter name="port" unique="0" required="0" deprecated="1">
		<getopt mixed="-n, --plug=[nodename]" />
		<content type="string"  />
		<shortdesc lang="en">Name of the node to act on. Without it, nodename (sent by Pacemaker) is used.</shortdesc>
	</parameter>
	<parameter name="agent_socket" unique="0" required="0">
		<getopt mixed="--agent-socket=[path]" />
		<content type="string"  />
		<shortdesc lang="en">Control socket of the nvfenced serving the devices on this host (default: found under /run/nvfence).</shortdesc>
	</parameter>
	<parameter name="state_dir" unique="0" required="0">
		<getopt mixed="--state-dir=[path]" />
		<content type="string" default="/var/lib/nvfence"  />
		<shortdesc lang="en">Directory of the persisted epochs (shared with the nvfence command).</shortdesc>
	</parameter>
	<parameter name="quiet" unique="0" required="0">
		<getopt mixed="-q, --quiet" />
		<content type="boolean"  />
		<shortdesc lang="en">Disable logging to stderr. Does not affect --verbose or --debug-file or logging to syslog.</shortdesc>
	</parameter>
	<parameter name="verbose" unique="0" required="0">
		<getopt mixed="-v, --verbose" />
		<content type="boolean"  />
		<shortdesc lang="en">Verbose mode. Multiple -v flags can be stacked on the command line (e.g., -vvv) to increase verbosity.</shortdesc>
	</parameter>
	<parameter name="debug_file" unique="0" required="0">
		<getopt mixed="-D, --debug-file=[debugfile]" />
		<content type="string"  />
		<shortdesc lang="en">Write debug information to given file</shortdesc>
	</parameter>
	<parameter name="version" unique="0" required="0">
		<getopt mixed="-V, --version" />
		<content type="boolean"  />
		<shortdesc lang="en">Display version information and exit</shortdesc>
	</parameter>
	<parameter name="help" unique="0" required="0">
		<getopt mixed="-h, --help" />
		<content type="boolean"  />
		<shortdesc lang="en">Display help and exit</shortdesc>
	</parameter>
	<parameter name="delay" unique="0" required="0">
		<getopt mixed="--delay=[seconds]" />
		<content type="second" default="0"  />
		<shortdesc lang="en">Wait X seconds before fencing is started</shortdesc>
	</parameter>
	<parameter name="corosync_cmap_path" unique="0" required="0">
		<getopt mixed="--corosync-cmap-path=[path]" />
		<content type="string" default="/usr/sbin/corosync-cmapctl"  />
		<shortdesc lang="en">Path to corosync-cmapctl binary</shortdesc>
	</parameter>
</parameters>
<actions>
	<action name="on" on_target="1" automatic="1"/>
	<action name="off" />
	<action name="status" />
	<action name="list" />
	<action name="monitor" />
	<action name="metadata" />
	<action name="validate-all" />
</actions>
</resource-agent>
)XML";
}

std::string usage_text() {
    return R"TXT(Usage:
	fence_nvfence [options]
Options:
   -o, --action=[action]          on, off, status, monitor, list, metadata,
                                  validate-all (default off; no reboot)
   -d, --devices=[devices]        shared NVMe namespaces, comma or space separated
   -n, --plug=[nodename]          node to act on (default: nodename)
   -k, --key=[node id]            node id of the node to act on (1-255)
   --node-ids=[map]               name:id;name:id (default: corosync nodeids)
   --reservation-type=[type]      registrants-only (default) or exclusive
   --cluster-tag=[tag]            cluster tag of the keys (0-255, default 0)
   --agent-socket=[path]          nvfenced's control socket (default: searched)
   --state-dir=[path]             persisted epochs (default /var/lib/nvfence)
   --corosync-cmap-path=[path]    default /usr/sbin/corosync-cmapctl
   --delay=[seconds]              wait before 'off' (0-3600)
   -v, --verbose                  verbose (repeat for more)
   -q, --quiet                    nothing on stderr
   -D, --debug-file=[debugfile]   also append log lines to this file
   -V, --version                  version
   -h, --help                     this text
Without arguments, options are read from stdin as name=value lines.
Exit codes: 0 success (status: ON), 1 failure, 2 status: OFF.
See fence_nvfence(8).
)TXT";
}

}  // namespace nvfence::fence_agent
