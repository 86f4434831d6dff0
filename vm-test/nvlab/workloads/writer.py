"""The writer workload: a loop run in every host VM that writes whenever
its agent holds, and the record of one nvfence-load pass (parsed from its
log) that the fencing checker reads."""

from __future__ import annotations

from dataclasses import dataclass, field


# The writer loop, run in every host VM. Whenever the agent says HOLDER it
# runs one pass over the region with the agent's key; after a pass that did
# not end cleanly (fenced, error) it waits, bounded, until the agent no
# longer holds with that key, so it never spins on a stale grant.
WRITER_LOOP = r"""
base=$1; start=$2; count=$3; qd=$4; backoff_s=${5:-10}; w=${NVLAB_WDIR:-/tmp/w}
mkdir -p $w; i=0
while :; do
  st=$(nvfence status vol --json 2>/dev/null)
  case "$st" in *'"state":"HOLDER"'*) ;; *) usleep 200000; continue;; esac
  key=$(echo "$st" | sed -n 's/.*"key":"\(0x[0-9a-f]*\)".*/\1/p')
  dev=$(echo "$st" | sed -n 's/.*"device":"\([^"]*\)".*/\1/p')
  if [ -z "$key" ] || [ -z "$dev" ]; then usleep 200000; continue; fi
  i=$((i+1)); id=$((base+i))
  echo "start $id $key $dev" >> $w/index
  nvfence-load "$dev" --start $start --count $count --qd $qd --interval-us 2000 \
      --key $key --writer-id $id --timeout-ms 60000 > $w/$id.log 2>&1
  rc=$?
  echo "end $id $rc" >> $w/index
  if [ $rc -ne 0 ]; then
    # Wait until the agent no longer holds with that key (it may not have
    # seen the preempt or the lost keys yet), bounded in seconds, not in
    # rounds: under load one status call takes about a second.
    end=$(( $(cut -d. -f1 /proc/uptime) + backoff_s ))
    while [ $(cut -d. -f1 /proc/uptime) -lt $end ] && nvfence status vol --json 2>/dev/null | \
          grep -q "\"state\":\"HOLDER\".*\"key\":\"$key\""; do usleep 100000; done
  fi
done
"""


@dataclass
class Writer:
    """One nvfence-load pass, from its log."""
    wid: int
    host: str
    key: int
    completions: list = field(default_factory=list)   # (lba, seq, status, detail)
    ended: bool = False
    killed_host: bool = False   # its VM was killed while it ran: its log may lack the tail
    fenced_next: int | None = None   # its `F` line: every seq it had queued at its first fenced completion is below
    settled_ms: float | None = None  # its `Q` line: ms from the first fenced completion to settled()

    def read_log(self, text: str) -> None:
        """Takes in nvfence-load's log lines (C completions, F, Q, S)."""
        for line in text.splitlines():
            p = line.split(None, 4)
            if p and p[0] == "C" and len(p) >= 4:
                self.completions.append((int(p[1]), int(p[2]), p[3], p[4] if len(p) > 4 else ""))
            elif p and p[0] == "F" and len(p) >= 2 and self.fenced_next is None:
                self.fenced_next = int(p[1])
            elif p and p[0] == "Q" and len(p) >= 2:
                self.settled_ms = float(p[1])
            elif p and p[0] == "S":
                self.ended = True
