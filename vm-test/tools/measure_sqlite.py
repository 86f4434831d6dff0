"""Prints SQLite's failover time through the nvfence VFS in the lab (not a test).

    vm-test/tool measure_sqlite [rounds]      (default 20)

Two host VMs on a fabric target (the lab of vm_sqlite_failover). Host a
takes the reservation; then each round the holder runs
nvfence-sqlite-example on `file:$NVFENCE_DEV?vfs=nvfence`, committing one
row per transaction, until it has 5 acknowledged commits; its VM is frozen
(QMP stop) and the other host, inside its guest and by its own clock (/proc/uptime: 10 ms
steps), times

  preempt        `nvfence preempt` (preempt-and-abort of the frozen holder)
  first commit   from there to the exit of a program that opened the
                 database (rolling back a hot journal if the freeze left one)
                 and committed one row: its first acknowledged commit
  total          the two together

The frozen host is resumed: its program must exit 3 with the fenced
message, or the round fails. The roles swap every round. Medians, p99 and
max over the rounds; TCG guests, so the figures are an emulated CPU's.
"""
import statistics
import sys

import nvlab
from nvlab.steps import OK, nvf, reset

EX = "nvfence-sqlite-example"
URI = '"file:$NVFENCE_DEV?vfs=nvfence"'
# The guest's clock in centiseconds (/proc/uptime; busybox date has no %N).
CS = "cs() { read -r up _ < /proc/uptime; echo $(( ${up%.*} * 100 + 1${up#*.} - 100 )); }"


def one_round(holder, other, node):
    bg = holder.spawn(f"{EX} {URI} 1000000 0 > /tmp/sqlite.acks")
    w = holder.wait_for("[ $(grep -c '^ack' /tmp/sqlite.acks) -ge 5 ]", timeout_s=180)
    assert w.rc == 0, (w, bg.output())
    holder.pause()
    try:
        r = other.run(f"{CS}; t0=$(cs); "
                      f"nvfence preempt \"$NVFENCE_DEV\" --node {node} >/dev/null || exit 9; t1=$(cs); "
                      f"{EX} {URI} 1 0 > /tmp/sqlite.first || exit 8; t2=$(cs); "
                      "grep -q '^ack' /tmp/sqlite.first || exit 7; echo $((t1 - t0)) $((t2 - t1))",
                      timeout_s=180)
    finally:
        holder.resume()
    assert r.rc == 0, r
    assert bg.wait(timeout_s=120), bg.output()
    assert "fenced: the device refused this host's write" in bg.output(), bg.output()
    pre, first = (int(x) * 10.0 for x in r.out.split())
    return pre, first


def pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with nvlab.Lab(hosts=2, topology="fabric", ebs=True) as lab:
        reset(lab)
        a, b = lab.hosts
        a.run('dd if=/dev/zero of="$NVFENCE_DEV" bs=4096 count=2 oflag=direct 2>/dev/null', timeout_s=60)
        assert nvf(a, "register", "--node", "1").rc == OK
        assert nvf(a, "acquire").rc == OK
        nodes = {a.name: 1, b.name: 2}
        pres, firsts, totals = [], [], []
        holder, other = a, b
        for i in range(rounds):
            pre, first = one_round(holder, other, nodes[other.name])
            pres.append(pre)
            firsts.append(first)
            totals.append(pre + first)
            print(f"round {i + 1}: {holder.name} -> {other.name}: preempt {pre:.0f} ms, first commit {first:.0f} ms",
                  flush=True)
            holder, other = other, holder
        print(f"\n{rounds} failovers (TCG guests)        median      p99      max")
        for name, v in (("preempt", pres), ("first commit after it", firsts), ("total", totals)):
            print(f"{name:<32} {statistics.median(v):>7.0f} {pct(v, 0.99):>8.0f} {max(v):>8.0f}  ms")


if __name__ == "__main__":
    main()
