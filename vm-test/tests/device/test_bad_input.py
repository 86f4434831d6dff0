"""Bad-input suite (issue 7): each case asserts the exact outcome at two
levels on the fabric lab (nvmet, Linux 7.x):

 (b) the device: the raw command sent with nvme-cli and the NVMe status nvmet
     answers (Invalid Field in Command 0x2, Reservation Conflict 0x83, ...),
     which justifies what nvfence does with it;
 (a) nvfence: the documented exit code (0 ok, 1 failure, 2 usage/invalid/not
     found, 3 conflict, 4 unsupported, 5 permission, 6 lost race), a message
     on stderr that names the problem, the --json error object, and nothing
     changed on the device when it refuses (nvme resv-report and nvfence
     report --json compared before and after).

The table of cases, expected and observed outcomes is docs/RELIABILITY.md
("Bad-input suite"). Unknown paths, non-NVMe devices and a namespace without
reservations are covered by test_cli_lifecycle.py (test_bad_paths) and
test_unsupported.py.

Run: cd vm-test && NVFENCE_BUILD_DIR=../build /usr/bin/python3 -m pytest -q test_bad_input.py
"""
import json
import re
import threading
import time
import uuid

import pytest

from nvlab.steps import (CONFLICT, FAIL, LOST_RACE, OK, USAGE, hexkey, nvf, nvme_keys, nvme_report, report,
                    reset)

# NVMe status codes (SCT << 8 | SC) as nvme-cli prints them, DNR/More masked.
SC_INVALID_FIELD = 0x002
SC_HOST_ID_INCONSISTENT = 0x018
SC_RESERVATION_CONFLICT = 0x083

DEV = '"$NVFENCE_DEV"'


@pytest.fixture
def clean(lab):
    for h in lab.hosts:
        wait_live(h)
    reset(lab)
    return lab


# ---- helpers ----------------------------------------------------------------

class Raw:
    """One nvme-cli command: rc, the NVMe status it printed (masked), output."""

    def __init__(self, res):
        self.rc, self.out, self.err = res.rc, res.out, res.err
        m = re.search(r"\(0x([0-9a-fA-F]+)\)\s*$", res.err.strip())
        self.status = int(m.group(1), 16) & 0x7FF if m else None

    def __repr__(self):
        return f"Raw(rc={self.rc}, status={self.status}, out={self.out!r}, err={self.err!r})"


def raw(host, args):
    """`nvme ARGS` on $NVFENCE_DEV of host (args start with the subcommand)."""
    sub, rest = args.split(" ", 1) if " " in args else (args, "")
    return Raw(host.run(f"nvme {sub} {DEV} {rest}", timeout_s=30))


def ok_raw(host, args):
    r = raw(host, args)
    assert r.rc == 0, r
    return r


def snapshot(host):
    """The reservation as nvme-cli and nvfence both see it."""
    nr = nvme_report(host)
    st = report(host)
    regs = nr.get("regctlext") or []
    return {
        "gen": int(nr["gen"]),
        "rtype": int(nr["rtype"]),
        "regs": [(int(r["rkey"]), int(r["rcsts"]) & 1, r["hostid"]) for r in regs],
        "nvfence": (st["generation"], st["type"], st["holder"],
                    [(r["key"], r["holder"], r["host_id"]) for r in st["registrants"]]),
    }


def assert_unchanged(before, host):
    after = snapshot(host)
    assert after == before, f"the device changed:\nbefore {before}\nafter  {after}"


def assert_usage(r, *words):
    """Exit 2, one 'nvfence:' line naming the problem, the JSON error object."""
    assert r.rc == USAGE, r
    assert r.err.startswith("nvfence: "), r
    for w in words:
        assert w in r.err, (w, r)
    assert r.json and r.json["exit_code"] == USAGE, r


def assert_runtime_error(r, rc, *words):
    """A runtime failure: exit rc, exactly one stderr line, the JSON object."""
    assert r.rc == rc, r
    assert r.err.startswith("nvfence: ") and r.err.strip().count("\n") == 0, r
    for w in words:
        assert w in r.err, (w, r)
    assert r.json and r.json["exit_code"] == rc, r


def wait_live(host, timeout_s=60):
    host.wait_for('[ "$(cat /sys/class/nvme/$NVFENCE_CTRL/state)" = live ] && [ -b "$NVFENCE_DEV" ]',
                  timeout_s=timeout_s).check()


def add_identity(host):
    """One more fabrics connection of host to the target with a new host id
    (its own controller and /dev/nvmeXnY): one more registrant identity.
    Returns (controller instance, namespace block device)."""
    hid = str(uuid.uuid4())
    res = host.run(
        'a=$(cat /sys/class/nvme/$NVFENCE_CTRL/address); t=${a#traddr=}; t=${t%%,*}; '
        'p=${a#*trsvcid=}; p=${p%%,*}; exec 3<>/dev/nvme-fabrics && '
        f'printf "%s" "transport=tcp,traddr=$t,trsvcid=$p,nqn=$NVFENCE_NQN,'
        f'hostnqn=nqn.2014-08.org.nvmexpress:uuid:{hid},hostid={hid}" >&3 && read -r r <&3 && echo "$r"',
        timeout_s=30)
    m = re.search(r"instance=(\d+)", res.out)
    assert m, (res.rc, res.out, res.err)
    inst = m.group(1)
    ns = host.wait_for(f"for n in /sys/class/nvme/nvme{inst}/nvme*n*; do b=${{n##*/}}; "
                       f"[ -b /dev/$b ] && echo $b && exit 0; done; exit 1", timeout_s=30)
    ns.check()
    return inst, "/dev/" + ns.out.strip()


def run_until_failure(host, cmds, tag, bound_s=90):
    """Starts `cmds` (sh commands, each with 2>/tmp/TAG.err) in a loop until
    one fails; returns the Background. The log gets 'RC=<rc> N=<iterations>'
    and the failing command's stderr."""
    loop = (f"end=$(( $(cut -d. -f1 /proc/uptime) + {bound_s} )); n=0; rc=; "
            f"while :; do {cmds} || {{ rc=$?; break; }}; n=$((n+1)); "
            f"[ $(cut -d. -f1 /proc/uptime) -ge $end ] && {{ rc=BOUND; break; }}; done; "
            f'echo "RC=$rc N=$n"; cat /tmp/{tag}.err')
    return host.spawn(loop, log_path=f"/tmp/{tag}.log")


def loop_result(bg, timeout_s=120):
    assert bg.wait(timeout_s), "the command loop did not end: a command hung"
    out = bg.output()
    m = re.search(r"^RC=(\S+) N=(\d+)$", out, re.M)
    assert m, out
    assert m.group(1) != "BOUND", f"no command failed although the namespace was removed:\n{out}"
    err = out[m.end():].strip()
    return int(m.group(1)), int(m.group(2)), err


# Words nvfence uses when the namespace goes away under a command: the node
# is gone before open (exit 2), or vanishes during it, or the device answers
# with an error (exit 1).
GONE = re.compile(r"no such device|the device disappeared|I/O error|Input/output error|"
                  r"Invalid Namespace|No space left on device|namespace shrank or was removed|"
                  r"\(0x3[0-9a-f]{2}\)|Interrupted system call")


# ---- cases ------------------------------------------------------------------

def test_key_zero(clean):
    a, b = clean.hosts
    before = snapshot(a)
    # (a) nvfence cannot be made to send key 0: every way to name one is a
    # usage error, and nothing reaches the device.
    for args, word in ((["preempt", "--node", "1", "--victim", "0"], "not a reservation key"),
                       (["preempt", "--node", "1", "--victim", "0x0"], "not a reservation key"),
                       (["preempt", "--node", "1", "--victim", "0x0000000000000000"], "not a reservation key"),
                       (["preempt", "--node", "1", "--victim", "nf:0:1:0"], "not a reservation key"),
                       (["register", "--node", "1", "--epoch", "0"], "--epoch"),
                       (["register", "--node", "0"], "--node")):
        assert_usage(nvf(a, *args), word)
    assert_unchanged(before, a)

    # (b) nvmet accepts Register with NRKEY 0 (the NVMe spec gives key 0 no
    # special meaning there); nvfence shows it as a foreign key, never decoded.
    ok_raw(a, "resv-register --nrkey=0 --rrega=0")
    st = report(b)
    (reg,) = st["registrants"]
    assert reg["key"] == hexkey(0) and reg["foreign"] is True and "epoch" not in reg
    assert nvme_keys(nvme_report(b)) == {0: False}

    # This host's id is bound to key 0: register refuses (exit 3, names the
    # key, says --replace), nothing changed.
    before = snapshot(a)
    r = nvf(a, "register", "--node", "1")
    assert_runtime_error(r, CONFLICT, "0x0000000000000000 (foreign)", "--replace")
    assert_unchanged(before, a)

    # A holder with key 0 is foreign: the default preempt refuses it (exit 3)
    # and its hint is one that can be followed ("--victim 0" is a usage
    # error, so the hint is the bare --foreign); nothing is sent.
    ok_raw(a, "resv-acquire --crkey=0 --rtype=1 --racqa=0")
    before = snapshot(a)
    r = nvf(b, "preempt", "--node", "2")
    assert_runtime_error(r, CONFLICT, "held by the foreign key 0x0000000000000000", "add --foreign")
    assert "--victim" not in r.err, r
    assert_unchanged(before, a)
    # --foreign takes it over (PRKEY 0 equals the holder's key, which nvmet
    # accepts) and reports key 0 as removed.
    r = nvf(b, "preempt", "--node", "2", "--foreign")
    assert r.rc == OK, r
    kb = int(r.json["key"], 16)
    assert r.json["previous_holder"] == hexkey(0) and r.json["removed"] == [hexkey(0)], r.json
    assert nvme_keys(nvme_report(a)) == {kb: True}

    # --replace re-keys a host registered with key 0 (CRKEY 0, no IEKEY).
    ok_raw(a, "resv-register --nrkey=0 --rrega=0")
    r = nvf(a, "register", "--node", "1", "--replace")
    assert r.rc == OK and r.json["replaced"] == hexkey(0), r
    ka = int(r.json["key"], 16)
    assert nvme_keys(nvme_report(b)) == {ka: False, kb: True}


def test_iekey_where_the_target_refuses_it(clean):
    a, b = clean.hosts
    # RESCAP bit 7: IEKEY as in NVMe 1.3+, i.e. Acquire and Release with
    # IEKEY set are refused; only Register's unregister/replace honour it.
    info = nvf(a, "info")
    assert info.rc == OK and info.json["iekey"] is True and info.json["rescap"] & 0x80, info.json
    ok_raw(a, "resv-register --nrkey=0x11 --rrega=0")
    ok_raw(a, "resv-acquire --crkey=0x11 --rtype=1 --racqa=0")
    ok_raw(b, "resv-register --nrkey=0x21 --rrega=0")
    before = snapshot(a)
    for host, args in ((a, "resv-acquire --crkey=0x11 --rtype=1 --racqa=0 --iekey"),
                       (a, "resv-acquire --crkey=0x99 --rtype=1 --racqa=0 --iekey"),
                       (a, "resv-release --crkey=0x11 --rtype=1 --rrela=0 --iekey"),
                       (a, "resv-release --crkey=0x11 --rtype=1 --rrela=1 --iekey"),
                       (b, "resv-acquire --crkey=0x21 --prkey=0x11 --rtype=1 --racqa=2 --iekey")):
        r = raw(host, args)
        assert r.rc != 0 and r.status == SC_INVALID_FIELD, (args, r)
    assert_unchanged(before, a)
    # IEKEY does not apply to the Register action: a different key conflicts.
    r = raw(a, "resv-register --nrkey=0x13 --rrega=0 --iekey")
    assert r.status == SC_RESERVATION_CONFLICT, r
    # Replace and unregister honour it: the wrong CRKEY is ignored.
    r = raw(a, "resv-register --crkey=0x99 --nrkey=0x12 --rrega=2")
    assert r.status == SC_RESERVATION_CONFLICT, r
    ok_raw(a, "resv-register --crkey=0x99 --nrkey=0x12 --rrega=2 --iekey")
    ok_raw(b, "resv-register --crkey=0x99 --rrega=1 --iekey")
    assert nvme_keys(nvme_report(a)) == {0x12: True}, "replace keeps the reservation"

    # (a) nvfence never sets IEKEY (unit test BadInputTest.NoCommandEverSetsIekey):
    # it replaces, releases and unregisters with the current key it read,
    # which is what works on this target.
    r = nvf(a, "register", "--node", "1", "--replace")
    assert r.rc == OK and r.json["replaced"] == hexkey(0x12), r
    ka = int(r.json["key"], 16)
    assert nvme_keys(nvme_report(b)) == {ka: True}
    r = nvf(a, "release")
    assert r.rc == OK and r.json["changed"] is True, r
    r = nvf(a, "unregister")
    assert r.rc == OK and r.json["changed"] is True, r
    assert nvme_keys(nvme_report(b)) == {}


def test_reservation_type_0_and_7(clean):
    a, b = clean.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    before = snapshot(a)
    # (a) --type takes names (any case), never RTYPE numbers: 0 and 7 are no
    # types, and 1..6 are refused too so a number is never misread.
    # ("exclusive-access" and the other blkpr names are aliases since the
    # CLI took blkpr's names; a near miss of one is still refused.)
    for t in ("0", "7", "8", "1", "6", "-1", "", "none", "we,ea", "exclusive-acess"):
        assert_usage(nvf(a, "acquire", "--type", t), "--type", "unknown reservation type")
    assert_usage(nvf(a, "preempt", "--type", "7"), "--type")
    assert_unchanged(before, a)
    # The names report prints are accepted back.
    r = nvf(a, "acquire", "--type", "WE")
    assert r.rc == OK and r.json["report"]["type"] == "WE", r
    ka = int(r.json["key"], 16)

    # (b) nvmet: Acquire with RTYPE 0, 7 or 8 is Invalid Field in Command,
    # checked before the key; nothing changes.
    ok_raw(b, "resv-register --nrkey=0x41 --rrega=0")
    before = snapshot(a)
    for t in (0, 7, 8):
        r = raw(b, f"resv-acquire --crkey=0x41 --rtype={t} --racqa=0")
        assert r.status == SC_INVALID_FIELD, (t, r)
        r = raw(b, f"resv-acquire --crkey=0x41 --prkey={ka:#x} --rtype={t} --racqa=2")
        assert r.status == SC_INVALID_FIELD, (t, r)
    # Release by the holder with a type other than the one held (0, 7, or a
    # valid but different one): nvmet answers Reservation Conflict (the NVMe
    # spec says Invalid Field in Command; either way nothing changes).
    for t in (0, 7, 2):
        r = raw(a, f"resv-release --crkey={ka:#x} --rtype={t} --rrela=0")
        assert r.status == SC_RESERVATION_CONFLICT, (t, r)
    assert_unchanged(before, a)

    # The holder asking to acquire another type: the device refuses (0x83);
    # nvfence says this host already holds it and how to change the type.
    r = nvf(a, "acquire", "--type", "shared")
    assert_runtime_error(r, CONFLICT, "already holds", "Write Exclusive (WE)", "preempt --type")
    assert_unchanged(before, a)
    r = nvf(a, "preempt", "--type", "wero")
    assert r.rc == OK and r.json["report"]["type"] == "WERO", r
    # nvfence release uses the type the report shows.
    r = nvf(a, "release")
    assert r.rc == OK and r.json["report"]["type"] == "none", r


def test_register_again_with_a_different_key(clean):
    a, b = clean.hosts
    r = nvf(a, "register", "--node", "1")
    assert r.rc == OK, r
    ka, ea, text = int(r.json["key"], 16), r.json["epoch"], r.json["key_text"]
    assert nvf(a, "acquire").rc == OK
    before = snapshot(a)
    # (a) Another node id, another epoch, another cluster tag: exit 3 naming
    # the key this host id is bound to, nothing changed.
    for args in (["--node", "3"], ["--node", "1", "--epoch", str(ea + 5)], ["--node", "1", "--tag", "7"]):
        r = nvf(a, "register", *args)
        assert_runtime_error(r, CONFLICT, "already registered with " + text, "--replace")
        assert r.json["cause"] == "another registrant uses this host's host identifier"
    assert_unchanged(before, a)
    # The same key again is nothing to do.
    for args in (["--node", "1"], ["--node", "1", "--epoch", str(ea)]):
        r = nvf(a, "register", *args)
        assert r.rc == OK and r.json["changed"] is False and int(r.json["key"], 16) == ka, r
    assert_unchanged(before, a)

    # (b) nvmet: Register of a different key by a registered host is a
    # Reservation Conflict, IEKEY or not; Replace needs the current key.
    for args in ("resv-register --nrkey=0x55 --rrega=0", "resv-register --nrkey=0x55 --rrega=0 --iekey",
                 "resv-register --crkey=0x99 --nrkey=0x55 --rrega=2"):
        r = raw(a, args)
        assert r.status == SC_RESERVATION_CONFLICT, (args, r)
    assert_unchanged(before, a)
    # Registering the key it already has succeeds without a change of key.
    ok_raw(a, f"resv-register --nrkey={ka:#x} --rrega=0")
    assert nvme_keys(nvme_report(b)) == {ka: True}

    # --replace: a fresh key (epoch above all), the reservation kept.
    r = nvf(a, "register", "--node", "3", "--replace")
    assert r.rc == OK and r.json["changed"] is True and r.json["replaced"] == hexkey(ka), r
    k3 = int(r.json["key"], 16)
    assert r.json["node"] == 3 and r.json["epoch"] > ea
    assert r.json["report"]["holder"] == hexkey(k3)
    assert nvme_keys(nvme_report(b)) == {k3: True}


def test_report_buffer_too_small(clean):
    a, b = clean.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    assert nvf(b, "register", "--node", "2").rc == OK
    extra = []
    try:
        for i in range(3):
            inst, dev = add_identity(a)
            extra.append(inst)
            r = a.run(f"nvme resv-register {dev} --nrkey={0x101 + i:#x} --rrega=0", timeout_s=30)
            assert r.rc == 0, (r.out, r.err)
        full = nvme_report(b)
        keys = sorted(int(x["rkey"]) for x in full["regctlext"])
        assert int(full["regctl"]) == 5 and len(keys) == 5

        # (b) nvme-cli with a small buffer gets what fits: a 64-byte buffer
        # (NUMD 15) holds the header only, 192 bytes two registrants; REGCTL
        # still says 5. Less than the header is Invalid Field; the 64-bit
        # host id form is refused by nvmet (Host Identifier Inconsistent).
        r = b.run(f"nvme resv-report {DEV} --eds --numd=15 -o json", timeout_s=30)
        small = json.loads(r.out)
        assert int(small["regctl"]) == 5 and small["regctlext"] == [], small
        r = b.run(f"nvme resv-report {DEV} --eds --numd=47 -o json", timeout_s=30)
        assert len(json.loads(r.out)["regctlext"]) == 2
        r = raw(b, "resv-report --eds --numd=3")
        assert r.rc != 0 and r.status == SC_INVALID_FIELD, r
        r = raw(b, "resv-report --numd=31")
        assert r.rc != 0 and r.status == SC_HOST_ID_INCONSISTENT, r

        # (a) nvfence sizes its first read at 4096 bytes (63 registrants); a
        # smaller first read (diagnostic --initial-bytes) is re-read with the
        # size REGCTL asks for, and every registrant is shown.
        r = nvf(b, "report")
        assert r.rc == OK and "reads" not in r.json
        assert sorted(int(x["key"], 16) for x in r.json["registrants"]) == keys
        for initial, reads in ((64, 2), (128, 2), (192, 2), (384, 1), (4096, 1)):
            r = nvf(b, "report", "--initial-bytes", str(initial))
            assert r.rc == OK, r
            assert r.json["initial_bytes"] == initial and r.json["reads"] == reads, (initial, r.json)
            assert sorted(int(x["key"], 16) for x in r.json["registrants"]) == keys, (initial, r.json)
            assert r.json["generation"] == int(full["gen"])
        text = b.run(f"nvfence report {DEV} --initial-bytes 64", timeout_s=30).out
        assert "registrants: 5" in text and re.search(r"^reads:\s+2 ", text, re.M), text
        # Below the header the device would refuse the read: usage error.
        for bad in ("63", "0", "1048577", "x"):
            assert_usage(nvf(b, "report", "--initial-bytes", bad), "--initial-bytes")
    finally:
        for inst in extra:
            a.run(f"echo 1 > /sys/class/nvme/nvme{inst}/delete_controller", timeout_s=30)


def test_victim_key_that_matches_no_registrant(clean):
    a, b = clean.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    r = nvf(a, "acquire")
    assert r.rc == OK, r
    ka, ka_text = int(r.json["key"], 16), r.json["key_text"]
    r = nvf(b, "register", "--node", "2")
    assert r.rc == OK, r
    kb = int(r.json["key"], 16)
    before = snapshot(a)

    # (b) nvmet: Preempt with a PRKEY no registrant has is Reservation Conflict.
    r = raw(b, f"resv-acquire --crkey={kb:#x} --prkey=0x777 --rtype=1 --racqa=2")
    assert r.status == SC_RESERVATION_CONFLICT, r
    assert_unchanged(before, a)

    # (a) --victim is a compare-and-swap: the victim is not registered, so
    # nvfence sends nothing (it used to re-key this host first) and exits 6
    # naming who holds now, as when another manager won the race.
    # A foreign victim without --foreign is refused before anything is sent.
    r = nvf(b, "preempt", "--victim", "0x777")
    assert_usage(r, "is a foreign key", "add --foreign")
    assert_unchanged(before, a)
    for victim in (("0x777", "--foreign"), ("nf:0:9:9",)):
        r = nvf(b, "preempt", "--victim", *victim)
        assert_runtime_error(r, LOST_RACE, "matches no registrant", ka_text + " (node 1", "nothing was changed")
        assert r.json["holder"] == hexkey(ka), r.json
        assert_unchanged(before, a)
    # Not even registered: still nothing sent, not even a registration.
    assert nvf(b, "unregister").rc == OK
    before = snapshot(a)
    r = nvf(b, "preempt", "--node", "2", "--victim", "0x777", "--foreign")
    assert_runtime_error(r, LOST_RACE, "matches no registrant")
    assert_unchanged(before, a)
    # Nobody holds: no winner to name; the key is simply not there (exit 2).
    assert nvf(a, "release").rc == OK
    before = snapshot(a)
    r = nvf(b, "preempt", "--node", "2", "--victim", "0x777", "--foreign")
    assert_runtime_error(r, USAGE, "matches no registrant", "nobody holds", "nothing was changed")
    assert_unchanged(before, a)

    # A retried compare-and-swap that already succeeded: success, no change.
    assert nvf(a, "acquire").rc == OK
    r = nvf(b, "preempt", "--node", "2", "--victim", hexkey(ka))
    assert r.rc == OK and r.json["removed"] == [hexkey(ka)], r
    kb = int(r.json["key"], 16)
    before = snapshot(a)
    r = nvf(b, "preempt", "--node", "2", "--victim", hexkey(ka))
    assert r.rc == OK and r.json["changed"] is False and int(r.json["key"], 16) == kb, r
    assert_unchanged(before, a)


def test_preempt_with_this_hosts_own_key(clean):
    a, b = clean.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    r = nvf(a, "acquire")
    ka = int(r.json["key"], 16)
    r = nvf(b, "register", "--node", "2")
    kb = int(r.json["key"], 16)
    before = snapshot(a)

    # (a) The holder's default preempt: idempotent, nothing sent.
    r = nvf(a, "preempt")
    assert r.rc == OK and r.json["changed"] is False and int(r.json["key"], 16) == ka, r
    assert r.json["generation"] == before["gen"]
    assert_unchanged(before, a)
    # Naming its own key as the victim, as holder or as standby: exit 2.
    for host, key in ((a, ka), (b, kb)):
        r = nvf(host, "preempt", "--victim", hexkey(key))
        assert_usage(r, "is this host's own key", "nothing was changed")
        assert_unchanged(before, a)

    # (b) Why nvfence refuses: on nvmet, the holder preempting its own key
    # succeeds and changes nothing but the generation; a standby preempting
    # its own key unregisters itself.
    ok_raw(a, f"resv-acquire --crkey={ka:#x} --prkey={ka:#x} --rtype=1 --racqa=1")
    nr = nvme_report(b)
    assert nvme_keys(nr) == {ka: True, kb: False} and int(nr["gen"]) == before["gen"] + 1, nr
    ok_raw(b, f"resv-acquire --crkey={kb:#x} --prkey={kb:#x} --rtype=1 --racqa=1")
    assert nvme_keys(nvme_report(a)) == {ka: True}, "the standby preempted itself away"


def test_namespace_removed_while_a_command_is_in_flight(clean):
    lab = clean
    a, b = lab.hosts
    target = lab.target
    r = nvf(a, "register", "--node", "1")
    assert r.rc == OK, r
    epoch_before = r.json["epoch"]
    try:
        # 1. QD32 FencedWriter load (nvfence-load): 32 writes in flight when
        # the target disables the namespace.
        log = "/tmp/bad-load.log"
        bg = a.spawn('nvfence-load "$NVFENCE_DEV" --start 4096 --count 60000 --qd 32 --writer-id 71 '
                     '--key 0x1; echo "RC=$?"', log_path=log)
        a.wait_for(f"[ $(grep -c '^C .* ok' {log}) -ge 50 ]", timeout_s=120).check()
        t0 = time.monotonic()
        target.ns_disable()
        assert bg.wait(60), "nvfence-load hung after the namespace was removed"
        ended_s = time.monotonic() - t0
        out = bg.output()
        m = re.search(r"^RC=(\d+)$", out, re.M)
        assert m and int(m.group(1)) == FAIL, out[-2000:]
        summary = json.loads(re.search(r"^S (\{.*\})$", out, re.M).group(1))
        assert summary["in_flight"] == 0 and summary["fenced"] == 0 and summary["error"] > 0, summary
        # Bounded: it stops submitting after --max-errors (64) errors; only
        # what was in flight then (at most 32) completes after that.
        assert summary["error"] <= 64 + 32 and "E stopping after 64 I/O errors" in out, summary
        causes = {line.split(" ", 4)[4] for line in out.splitlines() if re.match(r"^C \d+ \d+ error ", line)}
        assert causes <= {"Input/output error", "No space left on device"}, causes
        print(f"\nload: ended {ended_s:.1f} s after ns_disable, {summary}, causes {sorted(causes)}")

        # The node is gone: every CLI command is "no such device" (exit 2).
        a.wait_for('[ ! -b "$NVFENCE_DEV" ]', timeout_s=60).check()
        for args in (["report"], ["register", "--node", "1"], ["write", "--lba", "0"]):
            assert_runtime_error(nvf(a, *args), USAGE, "no such device")
        target.ns_enable()

        # 2. The CLI's own I/O (write + read) and 3. reservation commands
        # (preempt, report) in a loop; the host is frozen while the target
        # removes the namespace, so a command is mid-way when it resumes.
        for host, tag, cmds in (
                (a, "bad-io", f'nvfence write {DEV} --lba 100 --blocks 256 >/dev/null 2>/tmp/bad-io.err && '
                              f'nvfence read {DEV} --lba 0 --blocks 4096 >/dev/null 2>/tmp/bad-io.err'),
                (b, "bad-resv", f'nvfence preempt {DEV} --node 2 >/dev/null 2>/tmp/bad-resv.err && '
                                f'nvfence report {DEV} >/dev/null 2>/tmp/bad-resv.err')):
            bg = run_until_failure(host, cmds, tag)
            time.sleep(2)
            host.pause()
            # The disable may wait for the paused host (a write of its
            # waiting for data it has not sent): give it a few seconds, then
            # resume the host, which is frozen across it either way. Even
            # starting it can wait: in CI (2026-12-01) the target's agent
            # answered the spawn only once the host ran again (50 s later,
            # after the request had timed out), so the spawn runs in a
            # thread and the resume never waits for it.
            box = {}

            def begin():
                try:
                    box["job"] = target.ns_disable_begin()
                except Exception as e:  # noqa: BLE001 - reported below
                    box["error"] = e

            t0 = time.monotonic()
            starter = threading.Thread(target=begin, daemon=True)
            starter.start()
            try:
                starter.join(5)
                early = "job" in box and box["job"].wait(max(0.0, 5 - (time.monotonic() - t0)))
            finally:
                host.resume()
            starter.join(60)
            assert not starter.is_alive() and "job" in box, f"starting the disable: {box}"
            job = box["job"]
            assert job.wait(60) and "DISABLED" in job.output(), job.output()
            print(f"{tag}: namespace disabled {'before' if early else 'after'} the host resumed")
            rc, n, err = loop_result(bg)
            print(f"{tag}: exit {rc} after {n} rounds: {err}")
            assert rc in (FAIL, USAGE), (rc, err)
            assert err.startswith("nvfence: ") and err.count("\n") == 0, err
            assert GONE.search(err), err
            target.ns_enable()
    finally:
        if not target.ns_enabled():
            target.ns_enable()

    # Back: nvmet dropped the reservation state with the namespace (like a
    # power cycle without PTPL); both hosts agree, and registering again
    # takes an epoch above the one this host used before (state dir).
    for h in (a, b):
        wait_live(h)
        st = report(h)
        assert st["registrants"] == [] and st["holder"] is None, st
        assert nvme_keys(nvme_report(h)) == {}
    r = nvf(a, "register", "--node", "1")
    assert r.rc == OK and r.json["epoch"] > epoch_before, r
    assert nvf(a, "write", "--lba", "0").rc == OK


def test_controller_reset_during_preempt(clean):
    a, b = clean.hosts
    assert nvf(a, "register", "--node", "1").rc == OK
    outcomes = []
    # The reset lands at different points of the preempt: before it opens
    # the device, during Identify, between Register and Acquire, while the
    # preempt-and-abort is in flight (its completion is lost and the host
    # re-sends it after reconnecting: the copy gets Reservation Conflict,
    # the victim being gone), or after it finished.
    for delay_us in (0, 30000, 60000, 90000, 110000, 130000, 150000, 170000, 200000, 250000):
        r = nvf(a, "preempt", "--node", "1")
        assert r.rc == OK, r
        ka = int(r.json["key"], 16)
        res = b.run(f'nvfence preempt {DEV} --node 2 --json >/tmp/pre.out 2>/tmp/pre.err & p=$!; '
                    f'usleep {delay_us}; nvme reset /dev/$NVFENCE_CTRL >/dev/null 2>&1; wait $p; '
                    f'echo "PRC=$?"; cat /tmp/pre.out; cat /tmp/pre.err >&2', timeout_s=120)
        m = re.search(r"^PRC=(\d+)$", res.out, re.M)
        assert m, (res.rc, res.out, res.err)
        rc = int(m.group(1))
        cli_json = json.loads(res.out[m.end():].strip().splitlines()[-1])
        wait_live(b)
        nr = nvme_report(b)
        st = report(b)
        # nvfence and the device agree after the reset.
        assert {int(x["key"], 16): x["holder"] for x in st["registrants"]} == nvme_keys(nr)
        if rc == OK:
            # Success only with the verification Report showing B holding,
            # and the device agrees.
            kb = int(cli_json["key"], 16)
            assert cli_json["report"]["holder"] == hexkey(kb), cli_json
            assert nvme_keys(nr).get(kb) is True and ka not in nvme_keys(nr), nr
            # A lost completion is said so (completion_error), never hidden.
            outcomes.append((delay_us, "ok" + (f" (completion: {cli_json['completion_error']})"
                                               if "completion_error" in cli_json else "")))
        else:
            # A clear failure, documented code 1, naming the device error.
            assert rc == FAIL, (rc, res.err)
            assert res.err.startswith("nvfence: ") and res.err.strip().count("\n") == 0, res.err
            assert GONE.search(res.err) or "(0x" in res.err, res.err
            assert cli_json["exit_code"] == FAIL
            outcomes.append((delay_us, res.err.strip()))
        # Re-running the preempt succeeds (idempotent if the failed run did
        # take the reservation after all).
        r = nvf(b, "preempt", "--node", "2")
        assert r.rc == OK, r
        kb = int(r.json["key"], 16)
        assert nvme_keys(nvme_report(a)) == {kb: True}
    print("\nreset during preempt:", *outcomes, sep="\n  ")
