"""Issue 14: every write path of a preempted host is refused by the device,
checked on the media. One lab (hosts a and b on a fabric target) for all
paths; every scenario has A hold, B preempt-and-abort, A write AFTER the
takeover, and B read the media back with O_DIRECT.

`nvfence write` across a storage outage longer than the kernel's
io_timeout reports the device's answer, not a timeout.

Paths: page-cache writes with the block device held open across the
takeover (dirty before it, and written after it), ext4 mounted on A (files
created and fsynced before and after; B runs e2fsck and mounts), an mmap
write, processes that know nothing of nvfence (pwrite, dd oflag=direct,
nvme-cli), reads per reservation type, and FencedWriter's multi-block
writes at the queue's limit under a takeover.

Layout on the 256 MiB namespace (512-byte blocks): ext4 in the first
32 MiB; plain-write regions from 40 MiB; FencedWriter from 64 MiB."""
import json
import time

import pytest

from nvlab.steps import CONFLICT, OK, exit_code, nvf, reset, stamps

BS = 512
BUF_LBA = 80_000          # buffered-write scenario
OTHER_LBA = 90_000        # other processes
READ_LBA = 100_000        # reads per type
MULTI_LBA = 131_072       # FencedWriter multi-block writes (64 MiB)
CUT_LBA = 110_000         # `nvfence write` across a storage outage


def hold(host, node, rtype="exclusive"):
    r = nvf(host, "register", "--node", str(node))
    assert r.rc == OK, r
    r = nvf(host, "acquire", "--type", rtype)
    assert r.rc == OK, r
    return r.json["key"]


def preempt(b, rtype=None, victim=None):
    args = ["preempt", "--node", "2"] + (["--type", rtype] if rtype else []) + (["--victim", victim] if victim else [])
    r = nvf(b, *args)
    assert r.rc == OK and r.json.get("changed"), r
    return r.json["key"]


def queue_attr(host, name):
    r = host.run(f'cat /sys/block/$(basename "$NVFENCE_DEV")/queue/{name}', timeout_s=20)
    assert r.rc == 0, r
    return int(r.out.strip())


def count_on_media(host, lba, blocks, text):
    """Records containing text in blocks lba.. read with O_DIRECT by host."""
    r = host.run(f'dd if="$NVFENCE_DEV" iflag=direct bs=512 skip={lba} count={blocks} 2>/dev/null '
                 f"| tr -d '\\000' | grep -c {json.dumps(text)}; true", timeout_s=60)
    return int(r.out.strip().splitlines()[-1])


def plain(host, mode, lba, count, tag, path='"$NVFENCE_DEV"'):
    r = host.run(f"nvfence-load {path} --plain {mode} --start {lba} --count {count} --tag {tag}", timeout_s=120)
    return r.rc, r.out + r.err



def test_buffered_writes_with_the_device_held_open(lab):
    reset(lab)
    a, b = lab.hosts
    hold(a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    # No periodic writeback: dirty pages stay dirty until someone syncs.
    a.run("echo 0 > /proc/sys/vm/dirty_writeback_centisecs; echo 360000 > /proc/sys/vm/dirty_expire_centisecs",
          check=True)
    # The last close of a block device writes its dirty pages back: keep it open.
    keeper = a.spawn('exec 3<"$NVFENCE_DEV"; sleep 900')
    try:
        rc, out = plain(a, "pwrite-buffered", BUF_LBA, 8, "synced")
        assert rc == 0, out                                   # the control: lands before the preempt
        r = a.run(f'yes NVFENCE-DIRTY-BEFORE | head -c 4096 > /tmp/d1 && dd if=/tmp/d1 of="$NVFENCE_DEV" bs=4096 '
                  f'seek={(BUF_LBA + 8) // 8} count=1 conv=notrunc', timeout_s=30)
        assert r.rc == 0, r                                   # dirty in A's page cache across the takeover
        preempt(b)
        # A's page cache has the dirty page; the media does not.
        r = a.run(f'dd if="$NVFENCE_DEV" bs=512 skip={BUF_LBA + 8} count=8 2>/dev/null | tr -d \'\\000\' '
                  f'| grep -c NVFENCE-DIRTY-BEFORE; true', timeout_s=30)
        cached = int(r.out.strip().splitlines()[-1])
        assert cached > 0, r
        r = a.run(f'yes NVFENCE-DIRTY-AFTER | head -c 4096 > /tmp/d2 && dd if=/tmp/d2 of="$NVFENCE_DEV" bs=4096 '
                  f'seek={(BUF_LBA + 16) // 8} count=1 conv=notrunc', timeout_s=30)
        assert r.rc == 0, r                                   # the page cache takes it...
        rc, out = plain(a, "pwrite-buffered", BUF_LBA + 24, 8, "late")
        # ...and fsync fails. Page-cache writeback of a block device reports
        # the refusal as EIO (measured), not EBADE as direct I/O does.
        assert rc in (1, 3) and "write=ok" in out and "sync=ok" not in out, (rc, out)
        s = a.run("sync; echo sync-rc=$?", timeout_s=60)
        print(f"\nbuffered: {cached} records of the dirty page in A's cache after the preempt; late fsync: "
              f"{out.strip()}; {s.out.strip()}")
        assert count_on_media(b, BUF_LBA, 8, "NVFENCE-PLAIN pwrite-buffered synced") == 8
        assert count_on_media(b, BUF_LBA + 8, 8, "NVFENCE-DIRTY-BEFORE") == 0
        assert count_on_media(b, BUF_LBA + 16, 8, "NVFENCE-DIRTY-AFTER") == 0
        assert count_on_media(b, BUF_LBA + 24, 8, "late") == 0
    finally:
        keeper.signal("KILL")
        a.run("echo 3 > /proc/sys/vm/drop_caches; echo 500 > /proc/sys/vm/dirty_writeback_centisecs; "
              "echo 3000 > /proc/sys/vm/dirty_expire_centisecs", timeout_s=60)


def test_other_processes_and_mmap_are_refused(lab):
    reset(lab)
    a, b = lab.hosts
    hold(a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    # Controls while A holds: the same tools land.
    assert plain(a, "pwrite", OTHER_LBA, 4, "ctl")[0] == 0
    assert plain(a, "mmap", OTHER_LBA + 8, 8, "ctl")[0] == 0
    assert count_on_media(b, OTHER_LBA, 16, " ctl ") == 12
    preempt(b)
    a.run("yes NVFENCE-DD | head -c 8192 > /tmp/dd", check=True)
    results = {}
    r = a.run(f'dd if=/tmp/dd of="$NVFENCE_DEV" bs=4096 seek={(OTHER_LBA + 16) // 8} count=2 oflag=direct '
              f'conv=notrunc', timeout_s=60)
    results["dd oflag=direct"] = (r.rc, r.err.strip()[-120:])
    assert r.rc != 0 and "Invalid exchange" in r.err, r
    rc, out = plain(a, "pwrite", OTHER_LBA + 32, 8, "after")
    results["pwrite O_DIRECT"] = (rc, out.strip())
    assert rc == 3 and "write=Invalid exchange" in out, out
    rc, out = plain(a, "mmap", OTHER_LBA + 40, 8, "after")
    results["mmap + msync"] = (rc, out.strip())
    assert rc in (1, 3) and "sync=ok" not in out, out        # writeback of the mapping: EIO
    r = a.run(f'nvme write "$NVFENCE_DEV" --start-block={OTHER_LBA + 48} --block-count=15 --data-size=8192 '
              f'--data=/tmp/dd', timeout_s=60)
    results["nvme-cli write"] = (r.rc, (r.out + r.err).strip()[-120:])
    assert r.rc != 0, r
    print("\nother processes after the preempt: " + json.dumps(results))
    assert count_on_media(b, OTHER_LBA + 16, 48, "NVFENCE-DD") == 0
    assert count_on_media(b, OTHER_LBA + 32, 16, "after") == 0
    assert count_on_media(b, OTHER_LBA, 16, " ctl ") == 12


def test_ext4_on_the_shared_namespace(lab):
    reset(lab)
    a, b = lab.hosts
    hold(a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    r = a.run('/usr/sbin/mke2fs -q -F -t ext4 -E lazy_itable_init=0,lazy_journal_init=0 "$NVFENCE_DEV" 32M '
              '&& mkdir -p /mnt/a && mount -t ext4 "$NVFENCE_DEV" /mnt/a', timeout_s=300)
    assert r.rc == 0, r
    try:
        r = a.run("for i in 0 1 2 3 4; do yes NVFENCE-EXT4-PRE-$i | head -c 4096 > /tmp/e && "
                  "dd if=/tmp/e of=/mnt/a/pre$i bs=4096 count=1 conv=fsync 2>/dev/null || exit 1; done; "
                  "dd if=/dev/zero of=/mnt/a/mm bs=4096 count=1 conv=fsync 2>/dev/null && sync", timeout_s=120)
        assert r.rc == 0, r
        preempt(b)
        post = a.run("n=0; for i in 0 1 2 3 4; do yes NVFENCE-EXT4-POST-$i | head -c 4096 > /tmp/e; "
                     "if dd if=/tmp/e of=/mnt/a/post$i bs=4096 count=1 conv=fsync 2>/tmp/err; then n=$((n+1)); "
                     "else echo \"post$i: $(tail -1 /tmp/err)\"; fi; done; echo synced=$n", timeout_s=180)
        assert "synced=0" in post.out, post
        rc, mm = plain(a, "mmap", 0, 8, "post", path="/mnt/a/mm")
        assert rc != 0, mm
        klog = a.run("dmesg | grep -iE 'ext4|jbd2|reservation' | tail -5").out.strip()
        print(f"\next4 on A after the preempt:\n{post.out.strip()}\nmmap: {mm.strip()}\n{klog}")
    finally:
        a.run("umount /mnt/a 2>/dev/null || umount -l /mnt/a; true", timeout_s=120)
    fsck = b.run('/usr/sbin/e2fsck -fy "$NVFENCE_DEV"', timeout_s=300)
    assert fsck.rc in (0, 1), fsck                          # clean, or errors corrected
    r = b.run('mkdir -p /mnt/b && mount -t ext4 -o ro "$NVFENCE_DEV" /mnt/b && ls /mnt/b && '
              "for i in 0 1 2 3 4; do grep -c NVFENCE-EXT4-PRE-$i /mnt/b/pre$i; done; "
              "grep -c post /mnt/b/mm; true", timeout_s=120)
    b.run("umount /mnt/b; true", timeout_s=60)
    names = set(r.out.split())
    assert {f"pre{i}" for i in range(5)} <= names, r.out       # everything synced before the preempt
    assert not any(n.startswith("post") for n in names), r.out  # nothing after it
    counts = [int(x) for x in r.out.split() if x.isdigit()]
    assert counts[:5] == [4096 // len(f"NVFENCE-EXT4-PRE-{i}\n") for i in range(5)], r.out
    assert counts[5] == 0, r.out                             # the mmap write did not land
    print(f"e2fsck on B: rc {fsck.rc}; B sees {sorted(names)}")


@pytest.mark.parametrize("rtype,fenced_reads", [("exclusive", False), ("ea", True), ("earo", True),
                                                ("eaar", True)])
def test_reads_of_a_preempted_host(lab, rtype, fenced_reads):
    reset(lab)
    a, b = lab.hosts
    akey = hold(a, 1, rtype)
    assert nvf(b, "register", "--node", "2").rc == OK
    w = nvf(a, "write", "--lba", str(READ_LBA), "--blocks", "8")
    assert w.rc == OK, w
    # All-registrants types: every registrant holds, so B names A to remove it.
    preempt(b, rtype, victim=akey if rtype == "eaar" else None)
    rd = nvf(a, "read", "--lba", str(READ_LBA), "--blocks", "8")
    dd = a.run(f'dd if="$NVFENCE_DEV" iflag=direct bs=4096 skip={READ_LBA // 8} count=1 of=/dev/null', timeout_s=30)
    if fenced_reads:
        assert rd.rc == CONFLICT, rd
        assert dd.rc != 0 and "Invalid exchange" in dd.err, dd
    else:
        # Write Exclusive: the fenced host still reads (stale reads by an old leader).
        assert rd.rc == OK and all(x["stamp"] and x["node"] == 1 for x in rd.json["blocks"]), rd
        assert dd.rc == 0, dd
    assert nvf(a, "write", "--lba", str(READ_LBA + 8), "--blocks", "8").rc == CONFLICT
    got = nvf(b, "read", "--lba", str(READ_LBA), "--blocks", "16")
    assert got.rc == OK, got
    assert all(x["stamp"] and x["node"] == 1 for x in got.json["blocks"][:8])
    assert not any(x["stamp"] for x in got.json["blocks"][8:]), got.json["blocks"][8:]


def test_multi_block_writes_at_the_queue_limit_under_takeover(lab):
    reset(lab)
    a, b = lab.hosts
    key = hold(a, 1)
    assert nvf(b, "register", "--node", "2").rc == OK
    lbs = queue_attr(a, "logical_block_size")
    limit = min(queue_attr(a, "max_sectors_kb") * 1024, (queue_attr(a, "max_segments") - 1) * 4096, 1 << 30)
    limit = limit // lbs * lbs
    # One block more than one command carries is refused before the device.
    r = a.run(f'nvfence-load "$NVFENCE_DEV" --start {MULTI_LBA} --count 1 --blocks-per-io {limit // lbs + 1} '
              f'--key {key}', timeout_s=60)
    assert r.rc == 2 and "max_io_bytes" in r.err, r
    per_io = min(limit // lbs, 256)   # multi-block; bounded so the media check stays small
    log = "/tmp/multi.log"
    bg = a.spawn(f'nvfence-load "$NVFENCE_DEV" --start {MULTI_LBA} --count 1400 --blocks-per-io {per_io} --qd 32 '
                 f'--writer-id 41 --key {key} --interval-us 20000; echo $? > {log}.rc', log_path=log)
    a.wait_for(f"[ $(grep -c '^C .* ok' {log}) -ge 20 ]", timeout_s=120).check()
    preempt(b)
    assert bg.wait(timeout_s=180), "the fenced writer hung"
    rc = exit_code(bg)
    comps, summary = [], None
    for line in bg.output().splitlines():
        p = line.split()
        if p and p[0] == "C":
            comps.append((int(p[1]), int(p[2]), p[3]))
        elif line.startswith("S "):
            summary = json.loads(line[2:])
    assert rc == 3 and summary and summary["fenced"] >= 1 and summary["settled"], (rc, summary)
    assert summary["max_io_bytes"] == limit, (summary, limit)
    first_fenced = next(i for i, c in enumerate(comps) if c[2] == "fenced")
    window = sorted(comps[max(0, first_fenced - 16):], key=lambda c: c[1])
    lo = window[0][0]
    hi = window[-1][0] + per_io
    media = stamps(b, lo, hi - lo)
    whole = 0
    for lba, seq, status in window:
        mine = [media[x]["stamp"] and media[x]["writer_id"] == 41 and media[x]["seq"] == seq
                for x in range(lba, lba + per_io)]
        if status == "ok":
            assert all(mine), (lba, seq, status, mine.count(True))
            whole += 1
        else:
            assert not any(mine), (lba, seq, status, mine.count(True))   # fenced: none of it landed
    print(f"\nmulti-block: limit {limit} B (max_sectors_kb {queue_attr(a, 'max_sectors_kb')}, max_segments "
          f"{queue_attr(a, 'max_segments')}), {per_io} blocks per I/O; {summary}; checked {len(window)} I/Os "
          f"around the takeover, {whole} whole, the rest absent")


def slow_target_writes(lab, bps_wr):
    """QEMU's throttling of the target's backing drive (d0) to bps_wr bytes
    per second of writes (0 lifts it): after a first write that passes at
    once, each 128 KiB write stays in flight for seconds, long enough to
    cut the link under it."""
    lab.target.qmp("block_set_io_throttle", device="d0", bps=0, bps_rd=0, bps_wr=bps_wr,
                   iops=0, iops_rd=0, iops_wr=0)


def writes_in_flight(host):
    r = host.run('cat /sys/block/$(basename "$NVFENCE_DEV")/inflight', timeout_s=30, check=True)
    return int(r.out.split()[1])


def test_a_write_across_a_storage_outage_reports_the_devices_answer(lab):
    """A's write is in flight when A's link to the target is cut for 40 s,
    longer than the kernel's nvme_core.io_timeout (30 s). The kernel resets
    the controller, reconnects once the link heals and sends the write
    again. `nvfence write` waits for that answer and reports it (accepted,
    every block stamped on the media): it does not give up at 30 s with
    "timed out" for a write that then lands (what the cluster lab saw after
    a rejoin). A write whose --wait-s runs out first says its outcome is
    unknown, and it does land."""
    reset(lab)
    a, b = lab.hosts
    hold(a, 1)
    assert a.run("cat /sys/module/nvme_core/parameters/io_timeout").out.strip() == "30"
    slow_target_writes(lab, 16384)          # 128 KiB: about 8 s at the target
    try:
        # QEMU lets the first write after an idle spell through at once and
        # makes the next ones wait for it: this one fills the bucket.
        assert nvf(a, "write", "--lba", str(CUT_LBA + 512), "--blocks", "256").rc == OK
        short = a.run(f'nvfence write "$NVFENCE_DEV" --lba {CUT_LBA + 256} --blocks 256 --json --wait-s 1',
                      timeout_s=60)
        assert short.rc == 1, short
        assert json.loads(short.out)["result"] == "unknown", short
        assert "outcome is unknown" in short.err and "may still land" in short.err, short
        a.wait_for('[ "$(awk \'{print $2}\' /sys/block/$(basename "$NVFENCE_DEV")/inflight)" = 0 ]',
                   timeout_s=60).check()
        log = "/tmp/cut-write.log"
        bg = a.spawn(f'nvfence write "$NVFENCE_DEV" --lba {CUT_LBA} --blocks 256 --json; echo "rc=$?"',
                     log_path=log)
        deadline = time.monotonic() + 30
        while writes_in_flight(a) == 0:
            assert time.monotonic() < deadline and bg.alive(), f"the write never went out: {bg.output()}"
            time.sleep(0.2)
        a.cut()
        t_cut = time.monotonic()
        try:
            time.sleep(40)                  # past io_timeout
            assert bg.alive(), f"the write gave up while the link was still cut: {bg.output()}"
        finally:
            a.heal()
    finally:
        slow_target_writes(lab, 0)
    assert bg.wait(timeout_s=150), "no answer to the write within 150 s of the heal"
    out = bg.output()
    took = time.monotonic() - t_cut
    assert "rc=0" in out, out
    answer = json.loads(next(x for x in out.splitlines() if x.startswith("{")))
    assert answer["result"] == "accepted", answer
    assert "no answer from" in out and "waiting up to 120 s" in out, out
    media = stamps(b, CUT_LBA, 512)
    assert all(media[x]["stamp"] and media[x]["node"] == 1 for x in range(CUT_LBA, CUT_LBA + 512)), media
    print(f"\nwrite across a 40 s storage cut: accepted {took:.0f} s after the cut; "
          f"the --wait-s 1 write landed too")
