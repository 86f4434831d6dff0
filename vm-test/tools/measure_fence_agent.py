"""Prints fence_nvfence figures from the lab (not a test: figures, medians).

    vm-test/tool measure_fence_agent [rounds]

Three host VMs unfenced with fence_nvfence (Registrants Only). Each round
freezes the victim (QMP stop, as a hung node), then times, on a survivor,
`fence_nvfence` off (options on stdin, as Pacemaker's fencer runs it: process
start, device open and Identify, Report, preempt-and-abort, verifying Report)
and the survivor's first accepted write after it; the victim is resumed, its
next write must be refused, and it is unfenced again ('on') for the next
round. Times are measured inside the survivor's guest (/proc/uptime: 10 ms
resolution; busybox date has no %N).
"""
import statistics
import sys

import nvlab
from nvlab.steps import reset

MAP = "devices=$NVFENCE_DEV\nnode_ids=a:1;b:2;c:3\n"


def fa(host, text):
    return host.run(f"fence_nvfence <<EOF\n{MAP}{text}\nEOF", timeout_s=90)


def main(rounds):
    off_ms, write_ms = [], []
    with nvlab.Lab(hosts=3, topology="fabric") as lab:
        a, b, c = lab.hosts
        reset(lab)
        for h in lab.hosts:
            assert fa(h, f"action=on\nnodename={h.name}").rc == 0
        for i in range(rounds):
            victim, fencer = (b, a) if i % 2 == 0 else (c, a)
            victim.pause()
            r = fencer.run(
                "ms() { awk '{printf \"%d\\n\", $1 * 1000}' /proc/uptime; }; "
                "t0=$(ms); fence_nvfence <<EOF >/dev/null\n" + MAP +
                f"action=off\nplug={victim.name}\nEOF\n"
                "rc=$?; t1=$(ms); "
                'dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=1 seek=40 oflag=direct 2>/dev/null; '
                "w=$?; t2=$(ms); echo $rc $w $((t1 - t0)) $((t2 - t0))", timeout_s=120)
            assert len(r.out.split()) == 4, (r.rc, r.out, r.err)
            rc, w, us_off, us_write = map(int, r.out.split())
            assert rc == 0 and w == 0, r
            off_ms.append(float(us_off))
            write_ms.append(float(us_write))
            victim.resume()
            dd = victim.run('dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=1 seek=41 oflag=direct', timeout_s=60)
            assert dd.rc != 0 and "Invalid exchange" in dd.err, dd
            assert fa(victim, f"action=on\nnodename={victim.name}").rc == 0
    print(f"fence_nvfence off (frozen victim), ms: {[round(x, 1) for x in off_ms]} "
          f"median {statistics.median(off_ms):.1f}")
    print(f"off start -> survivor's first accepted write, ms: {[round(x, 1) for x in write_ms]} "
          f"median {statistics.median(write_ms):.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
