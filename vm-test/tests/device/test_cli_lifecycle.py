"""Scenario 1 and 2: the reservation lifecycle through the nvfence CLI on two
fabric hosts, each step checked with both `nvfence report --json` and
nvme-cli's `nvme resv-report`; and interop with nvme-cli both ways."""
import pytest

from nvlab.steps import CONFLICT, OK, UNSUPPORTED, USAGE, hexkey, nvf, nvme_keys, nvme_report, report, reset


@pytest.fixture
def clean(lab):
    reset(lab)
    return lab


def test_info_names_ebs_identity(lab):
    a = lab.hosts[0]
    r = nvf(a, "info")
    assert r.rc == OK, r
    info = r.json
    assert info["model"] == "Amazon Elastic Block Store"
    assert info["ebs_volume_id"].startswith("vol-")
    assert info["reservations"] is True
    assert set(info["types"]) == {"WE", "EA", "WERO", "EARO", "WEAR", "EAAR"}
    assert info["transport"] == "tcp"
    assert len(info["host_id"]) == 32
    # Two hosts, two host ids.
    other = nvf(lab.hosts[1], "info").json
    assert other["host_id"] != info["host_id"]


def test_lifecycle(clean):
    a, b = clean.hosts
    r = nvf(a, "register", "--node", "1")
    assert r.rc == OK, r
    ka = int(r.json["key"], 16)
    assert r.json["key_text"].startswith("nf:0:1:")
    r = nvf(b, "register", "--node", "2")
    assert r.rc == OK, r
    kb = int(r.json["key"], 16)

    # Both views agree: two registrants, no holder.
    st = report(a)
    assert {int(x["key"], 16) for x in st["registrants"]} == {ka, kb}
    assert st["holder"] is None and st["type"] == "none"
    assert nvme_keys(nvme_report(b)) == {ka: False, kb: False}

    # Registering again is idempotent.
    r = nvf(a, "register", "--node", "1")
    assert r.rc == OK and r.json["changed"] is False and int(r.json["key"], 16) == ka, r

    r = nvf(a, "acquire", "--type", "exclusive")
    assert r.rc == OK, r
    st = report(b)
    assert int(st["holder"], 16) == ka and st["type"] == "WE"
    nr = nvme_report(a)
    assert nvme_keys(nr) == {ka: True, kb: False}
    assert int(nr["rtype"]) == 1

    # B cannot acquire what A holds: exit 3 naming the holder.
    r = nvf(b, "acquire")
    assert r.rc == CONFLICT, r
    assert "holds the reservation" in r.err and st["holder_key"] in r.err

    # B cannot release what A holds.
    r = nvf(b, "release")
    assert r.rc == CONFLICT, r

    r = nvf(a, "release")
    assert r.rc == OK and r.json["changed"] is True, r
    st = report(a)
    assert st["holder"] is None and st["type"] == "none"
    assert nvme_keys(nvme_report(b)) == {ka: False, kb: False}
    r = nvf(a, "release")
    assert r.rc == OK and r.json["changed"] is False, r

    r = nvf(b, "unregister")
    assert r.rc == OK, r
    assert nvme_keys(nvme_report(a)) == {ka: False}
    r = nvf(b, "unregister")
    assert r.rc == OK and r.json["changed"] is False, r

    # clear refuses without --force and changes nothing.
    r = nvf(a, "clear")
    assert r.rc == USAGE, r
    assert "--force" in r.err
    assert nvme_keys(nvme_report(a)) == {ka: False}
    r = nvf(a, "clear", "--force")
    assert r.rc == OK, r
    assert nvme_keys(nvme_report(a)) == {}
    assert report(b)["registrants"] == []


def test_fresh_epochs_grow(clean):
    a, b = clean.hosts
    e1 = nvf(a, "register", "--node", "1").json["epoch"]
    e2 = nvf(b, "register", "--node", "2").json["epoch"]
    assert e2 > e1
    r = nvf(a, "register", "--node", "1", "--replace")
    assert r.rc == OK and r.json["epoch"] > e2, r


def test_nvme_cli_keys_are_foreign_and_preemptable(clean):
    a, b = clean.hosts
    # nvme-cli registers a key nvfence did not make, and holds.
    res = a.run('nvme resv-register "$NVFENCE_DEV" --nrkey=0x1234 --rrega=0 && '
                'nvme resv-acquire "$NVFENCE_DEV" --crkey=0x1234 --rtype=1 --racqa=0')
    assert res.rc == 0, (res.out, res.err)
    st = report(b)
    (reg,) = st["registrants"]
    assert reg["foreign"] is True and reg["key"] == hexkey(0x1234) and reg["holder"] is True
    assert "node" not in reg and "epoch" not in reg
    text = b.run('nvfence report "$NVFENCE_DEV"').out
    assert "foreign" in text and "0x0000000000001234" in text

    # Foreign: refused without --foreign (exit 2, nothing sent), taken with it.
    r = nvf(b, "preempt", "--node", "2", "--victim", "0x1234")
    assert r.rc == USAGE and "add --foreign" in r.err, r
    assert nvme_keys(nvme_report(a)) == {0x1234: True}
    r = nvf(b, "preempt", "--node", "2", "--victim", "0x1234", "--foreign")
    assert r.rc == OK, r
    assert r.json["removed"] == [hexkey(0x1234)]
    kb = int(r.json["key"], 16)
    assert nvme_keys(nvme_report(a)) == {kb: True}
    # The preempted nvme-cli host is fenced.
    assert nvf(a, "write", "--lba", "10").rc == CONFLICT


def test_nvfence_keys_decode_in_nvme_cli(clean):
    a, _ = clean.hosts
    r = nvf(a, "register", "--node", "7", "--epoch", "4242")
    assert r.rc == OK, r
    assert r.json["key_text"] == "nf:0:7:4242"
    key = int(r.json["key"], 16)
    assert nvme_keys(nvme_report(a)) == {key: False}
    # nvme-cli's normal output prints the same key in hex.
    out = a.run('nvme resv-report "$NVFENCE_DEV" --eds').out
    assert ("%x" % key) in out.lower(), out


def test_bad_keys_and_numbers_are_usage_errors(lab):
    a = lab.hosts[0]
    for args in (["preempt", "--node", "1", "--victim", "0x"],
                 ["preempt", "--node", "1", "--victim", "-1"],
                 ["preempt", "--node", "1", "--victim", "0x10000000000000000"],
                 ["preempt", "--node", "1", "--victim", ""],
                 ["preempt", "--node", "1", "--victim", "nf:1:0:1"],
                 ["register", "--node", "0"],
                 ["register", "--node", "256"],
                 ["register", "--node", "1", "--epoch", "4294967296"],
                 ["register", "--node", "-3"],
                 ["acquire", "--type", "bogus"]):
        r = nvf(a, *args, json_out=False)
        assert r.rc == USAGE, (args, r)
        assert r.err.startswith("nvfence:"), (args, r)
    assert nvf(a, "report").rc == OK


def test_bad_paths(lab):
    a = lab.hosts[0]
    cases = {"/nonexistent": USAGE, "/": UNSUPPORTED, "/dev/null": UNSUPPORTED, "/init": UNSUPPORTED}
    for path, code in cases.items():
        r = nvf(a, "report", dev=path, json_out=False)
        assert r.rc == code, (path, r)
        assert r.err.count("\n") == 1 and path in r.err, (path, r)
    ctrl = a.run('basename "$NVFENCE_DEV" | sed "s/n[0-9]*$//"').out.strip()
    r = nvf(a, "report", dev="/dev/" + ctrl, json_out=False)
    assert r.rc == UNSUPPORTED and "controller" in r.err, r


def test_unprivileged_user_gets_permission_denied(lab):
    a = lab.hosts[0]
    a.run("grep -q '^nobody:' /etc/passwd || echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> /etc/passwd; "
          "grep -q '^nogroup:' /etc/group 2>/dev/null || echo 'nogroup:x:65534:' >> /etc/group")
    res = a.run('su -s /bin/sh nobody -c "$(command -v nvfence) report $NVFENCE_DEV"')
    assert res.rc == 5, (res.rc, res.out, res.err)
    assert "permission denied" in res.err and "root" in res.err
