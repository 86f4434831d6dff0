#!/usr/bin/python3
"""nvfenced's metrics text (src/agent/metrics.cpp, written by the unit test
MetricsTest.FormatHasEveryFamilyOnceAndCumulativeBuckets) parsed with
Debian's python3-prometheus-client: every family has the type nvfenced
says, and the values are the ones the test put in.
   parse_metrics.py UNIT_TESTS"""
import os
import subprocess
import sys
import tempfile

from prometheus_client.parser import text_string_to_metric_families

unit_tests = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "sample.prom")
    subprocess.run([unit_tests, "--gtest_filter=MetricsTest.FormatHasEveryFamilyOnceAndCumulativeBuckets"],
                   check=True, env=dict(os.environ, NVFENCE_METRICS_SAMPLE=out), stdout=subprocess.DEVNULL)
    text = open(out).read()
fams = {f.name: f for f in text_string_to_metric_families(text)}
want = {"nvfence_state": "gauge", "nvfence_key_epoch": "gauge", "nvfence_node_id": "gauge",
        "nvfence_last_good_check_age_seconds": "gauge", "nvfence_fences": "counter",
        "nvfence_checks": "counter", "nvfence_check_failures": "gauge",
        "nvfence_device_command_seconds": "histogram", "nvfence_elector_term": "gauge"}
fails = []
for name, typ in want.items():
    if name not in fams:
        fails.append(f"no family {name}")
    elif fams[name].type != typ:
        fails.append(f"{name} is a {fams[name].type}, want {typ}")


def value(fam, sample, **labels):
    for s in fams[fam].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


checks = [
    (value("nvfence_state", "nvfence_state", volume="vol-0123", state="HOLDER"), 1),
    (value("nvfence_state", "nvfence_state", volume="vol-0123", state="FENCED"), 0),
    (value("nvfence_key_epoch", "nvfence_key_epoch", volume="vol-0123"), 41),
    (value("nvfence_fences", "nvfence_fences_total", volume="vol-0123"), 1),
    (value("nvfence_device_command_seconds", "nvfence_device_command_seconds_bucket", volume="vol-0123", le="+Inf"), 2),
    (value("nvfence_device_command_seconds", "nvfence_device_command_seconds_count", volume="vol-0123"), 2),
    (value("nvfence_elector_term", "nvfence_elector_term", volume="vol-0123"), 41),
    (value("nvfence_key_epoch", "nvfence_key_epoch", volume='we"ird\\name'), 0),
]
for got, exp in checks:
    if got != exp:
        fails.append(f"value {got}, want {exp}")
for f in fails:
    print("FAIL:", f)
print(f"metrics: {len(fams)} families parsed, {len(fails)} failures")
sys.exit(1 if fails else 0)
