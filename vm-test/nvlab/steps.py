"""Helpers shared by the lab scenarios: run the nvfence CLI and nvme-cli on a
lab host and parse what they print."""
import json
import re
import shlex

# CLI exit codes (docs/CONTRACTS.md).
OK, FAIL, USAGE, CONFLICT, UNSUPPORTED, PERMISSION, LOST_RACE = 0, 1, 2, 3, 4, 5, 6


class Cli:
    """Result of one nvfence run: rc, parsed JSON (or None), stdout, stderr."""

    def __init__(self, res):
        self.rc = res.rc
        self.out = res.out
        self.err = res.err
        self.json = None
        for line in reversed(res.out.strip().splitlines()):
            if line.startswith("{"):
                self.json = json.loads(line)
                break

    def __repr__(self):
        return f"Cli(rc={self.rc}, out={self.out!r}, err={self.err!r})"


def nvf(host, *args, json_out=True, timeout_s=60, dev=None):
    """Runs `nvfence ARGS... $NVFENCE_DEV [--json]` on host (device inserted
    after the subcommand)."""
    sub, rest = args[0], list(args[1:])
    device = shlex.quote(dev) if dev else '"$NVFENCE_DEV"'
    cmd = f"nvfence {sub} {device} " + " ".join(shlex.quote(a) for a in rest)
    if json_out:
        cmd += " --json"
    return Cli(host.run(cmd, timeout_s=timeout_s))


def report(host):
    """nvfence report --json, asserting success."""
    r = nvf(host, "report")
    assert r.rc == 0, r
    return r.json


def nvme_report(host):
    """nvme-cli's own view: `nvme resv-report --eds -o json`."""
    res = host.run('nvme resv-report "$NVFENCE_DEV" --eds --numd=1023 -o json', timeout_s=30)
    assert res.rc == 0, (res.rc, res.out, res.err)
    return json.loads(res.out)


def nvme_keys(nr):
    """{key: holder?} from an nvme-cli report."""
    regs = nr.get("regctlext") or nr.get("regctl_eds") or nr.get("regctlds") or []
    out = {}
    for r in regs:
        out[int(r["rkey"])] = bool(int(r["rcsts"]) & 1)
    return out


def hexkey(k):
    return "0x%016x" % k


def reset(lab):
    """Clears every registration on the shared namespace, through nvme-cli on
    the first host, so each scenario starts from an empty reservation."""
    h = lab.hosts[0]
    h.run('nvme resv-register "$NVFENCE_DEV" --nrkey=0xdead --rrega=0 >/dev/null 2>&1 || '
          'nvme resv-register "$NVFENCE_DEV" --nrkey=0xdead --rrega=2 --iekey >/dev/null 2>&1',
          timeout_s=30)
    res = h.run('nvme resv-release "$NVFENCE_DEV" --crkey=0xdead --rrela=1 --rtype=1', timeout_s=30)
    assert res.rc == 0, (res.out, res.err)
    st = report(h)
    assert st["registrants"] == [] and st["holder"] is None, st


def start_load(host, key, writer_id, log_path, ramp_acks=100, extra=""):
    """Starts nvfence-load on host (QD32, stamped with key and writer_id,
    LBAs from 4096) in the background and waits until ramp_acks writes were
    acknowledged. Returns the Background; its exit code goes to
    log_path + ".rc" (see exit_code)."""
    bg = host.spawn(f'nvfence-load "$NVFENCE_DEV" --start 4096 --count 60000 --qd 32 '
                    f'--writer-id {writer_id} --key {key} {extra}; echo $? > {log_path}.rc', log_path=log_path)
    host.wait_for(f"[ $(grep -c '^C .* ok' {log_path}) -ge {ramp_acks} ]", timeout_s=120).check()
    return bg


def exit_code(bg):
    """The real exit code of a Background started by start_load (None while
    it runs or if it was killed before writing it)."""
    r = bg.host.run(f"cat {bg.log_path}.rc 2>/dev/null", timeout_s=30)
    return int(r.out.strip()) if r.rc == 0 and r.out.strip() else None


def stamps(host, lba, n):
    """{lba: block} of `nvfence read --json` over n blocks from lba, read in
    chunks of 4096 blocks (what one read command takes)."""
    blocks = []
    for off in range(0, n, 4096):
        r = nvf(host, "read", "--lba", str(lba + off), "--blocks", str(min(4096, n - off)), timeout_s=120)
        assert r.rc == OK, r
        blocks += r.json["blocks"]
    return {b["lba"]: b for b in blocks}


def unit_show(host, unit, *props):
    """`systemctl show UNIT -p P...` on host as a dict of property -> value."""
    r = host.run(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props), timeout_s=30, check=True)
    return dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)


def agent_conf_path(host, vol):
    """<sysconfdir>/nvfence/<vol>.conf, as the installed nvfenced@.service
    names it (its ConditionPathExists=)."""
    r = host.run(f"systemctl cat nvfenced@{vol}.service", timeout_s=30, check=True)
    m = re.search(r"^ConditionPathExists=(\S+)$", r.out, re.M)
    assert m, r.out
    return m.group(1).replace("%i", vol).replace("%I", vol)


def _ns_path(nsid):
    import nvlab
    return f"/sys/kernel/config/nvmet/subsystems/{nvlab.NQN}/namespaces/{int(nsid)}"


def add_namespaces(lab, nsids, size_mib=16):
    """Exports more namespaces in the shared subsystem, one per nsid in
    nsids (each a sparse size_mib file on the target's RAM disk, buffered
    I/O, reservations on), and waits until every host sees all of them.
    Returns {host name: {nsid: its block device}}."""
    nsids = [int(n) for n in nsids]
    assert nsids and 1 not in nsids and len(set(nsids)) == len(nsids), nsids
    script = " && ".join(
        f"dd if=/dev/zero of=/tmp/ns{n}.img bs=1M count=0 seek={int(size_mib)} 2>/dev/null && mkdir {_ns_path(n)} && "
        f"echo /tmp/ns{n}.img > {_ns_path(n)}/device_path && echo 1 > {_ns_path(n)}/buffered_io && "
        f"echo 1 > {_ns_path(n)}/resv_enable && echo 1 > {_ns_path(n)}/enable" for n in nsids)
    lab.target.run(script, check=True, timeout_s=60 + 2 * len(nsids))
    want = " ".join(str(n) for n in nsids)
    devs = {}
    for h in lab.hosts:
        c = f"/sys/class/nvme/{h.ctrl}"
        # Prints "nsid /dev/X" for each wanted nsid once all have a block
        # device; rescans the controller while some are missing.
        script = (f"end=$(( $(cut -d. -f1 /proc/uptime) + 60 )); "
                  f"while :; do out=; miss=0; for w in {want}; do d=; "
                  f"for n in {c}/nvme*n*; do b=${{n##*/}}; "
                  f"[ \"$(cat $n/nsid 2>/dev/null)\" = $w ] && [ -b /dev/$b ] && {{ d=/dev/$b; break; }}; done; "
                  f"[ -n \"$d\" ] && out=\"$out$w $d\n\" || miss=1; done; "
                  f"[ $miss = 0 ] && {{ printf \"$out\"; exit 0; }}; "
                  f"[ $(cut -d. -f1 /proc/uptime) -ge $end ] && exit 1; "
                  f"echo 1 > {c}/rescan_controller 2>/dev/null; {{ sleep 0.5 || usleep 500000; }} 2>/dev/null; done")
        r = h.run(script, timeout_s=80)
        assert r.rc == 0 and r.out.strip(), (h.name, r)
        got = {int(a): b for a, b in (line.split() for line in r.out.strip().splitlines())}
        assert sorted(got) == sorted(nsids), (h.name, got)
        devs[h.name] = got
    return devs


def remove_namespaces(lab, nsids):
    """Undoes add_namespaces (best effort: each nsid whether or not it was added)."""
    lab.target.run("; ".join(f"echo 0 > {_ns_path(n)}/enable; rmdir {_ns_path(n)}; rm -f /tmp/ns{int(n)}.img"
                             for n in nsids), timeout_s=60 + 2 * len(nsids))


def add_second_namespace(lab):
    """Exports a second namespace (nsid 2) in the same subsystem and waits
    until every host sees it. Returns {host name: its block device}."""
    return {name: d[2] for name, d in add_namespaces(lab, [2]).items()}


def remove_second_namespace(lab):
    remove_namespaces(lab, [2])


def node_of(host):
    """The node id the lab's tests give a host: a=1, b=2, ... p=16."""
    from nvlab.lab import HOST_NAMES
    return HOST_NAMES.index(host.name) + 1


def node_keys(st):
    """{node: [epochs]} of nvfence's own registrants in an nvfence report."""
    out = {}
    for r in st["registrants"]:
        if not r["foreign"]:
            out.setdefault(r["node"], []).append(r["epoch"])
    return out


def fence_agent_cmd(lines, devices="$NVFENCE_DEV", node_ids=None, state_dir=None):
    """The shell command that runs fence_nvfence with its options on stdin,
    as Pacemaker's fencer passes them (a here-document, so $NVFENCE_DEV
    expands); None leaves an option out."""
    opts = [f"{k}={v}" for k, v in (("devices", devices), ("node_ids", node_ids), ("state_dir", state_dir))
            if v is not None]
    text = "\n".join(opts + list(lines))
    return f"fence_nvfence <<EOF\n{text}\nEOF"
