"""pytest glue for the nvfence QEMU lab.

Provides lab fixtures (`import nvlab` works from any test folder: pytest.ini
puts vm-test/ on the path), and keeps the run dir of every lab used by
a failing test (its path is printed in the failure report); run dirs of
passing tests are removed.
"""

import shutil
import sys

import pytest


import nvlab
from nvlab import lab as _labmod

# Run dirs of labs closed during a test are decided on by the report hook.
_labmod.deferred_cleanup = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    # item.rep_setup / rep_call / rep_teardown: fixtures that collect
    # diagnostics on a failure read them (request.node.rep_call.failed).
    setattr(item, "rep_" + rep.when, rep)
    if rep.failed:
        _labmod.failures_seen += 1
    if rep.when != "teardown":
        return
    # Labs closed during this test (function fixtures, `with` blocks) or at
    # the end of a module/session fixture: keep the run dir if any test
    # failed while that lab was up, remove it otherwise.
    pending = list(_labmod.pending_run_dirs)
    _labmod.pending_run_dirs.clear()
    for run_dir, failures_at_start in pending:
        if _labmod.failures_seen > failures_at_start:
            rep.sections.append(("nvlab run dir kept", str(run_dir)))
            _kept.append((item.nodeid, str(run_dir)))
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


_kept = []


def pytest_terminal_summary(terminalreporter):
    if _kept:
        terminalreporter.section("nvlab run dirs kept (a test failed while the lab was up)")
        for nodeid, d in _kept:
            terminalreporter.write_line(f"{d}  <- closed after {nodeid}")


def pytest_sessionfinish(session):
    # Session-scoped labs close after the last teardown report.
    for run_dir, failures_at_start in _labmod.pending_run_dirs:
        if _labmod.failures_seen > failures_at_start:
            sys.stderr.write(f"nvlab: run dir kept: {run_dir}\n")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    _labmod.pending_run_dirs.clear()


@pytest.fixture(scope="module")
def lab():
    """The lab a test module shares: host VMs a and b on a fabric target, EBS
    identity. A module that needs another lab defines its own `lab`."""
    with nvlab.Lab(hosts=2, topology="fabric", ebs=True) as lab:
        yield lab


@pytest.fixture
def lab_factory():
    """Make labs inside a test: `lab = lab_factory(hosts=2, topology="fabric")`.

    Every lab is torn down at the end of the test (even on failure)."""
    labs = []

    def make(**kwargs):
        lab = nvlab.Lab(**kwargs)
        labs.append(lab)
        try:
            lab.start()
        except BaseException:
            lab.failed = True
            lab.close()
            raise
        return lab

    yield make
    for lab in labs:
        lab.close()


@pytest.fixture
def fabric_lab(lab_factory):
    """Two host VMs (a, b) and a target VM, EBS identity."""
    return lab_factory(hosts=2, topology="fabric", ebs=True)


@pytest.fixture
def loop_lab(lab_factory):
    """One VM, nvme-loop, two host identities (a, b)."""
    return lab_factory(hosts=2, topology="loop", ebs=True)


@pytest.fixture
def plain_lab(lab_factory):
    """One VM on QEMU's own NVMe namespace (no reservation support)."""
    return lab_factory(hosts=1, topology="plain")
