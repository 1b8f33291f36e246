"""Shared fixtures. The repository root is importable (pyproject sets pythonpath too).

Stress mode (`make test-stress`): `--stress-hogs N` keeps N busy processes running for the
whole session, so every test runs on a host whose cores are taken, the way a developer's
laptop or a shared CI runner is. It is how tests that assume one machine's timing are found
before they land: a test that passes only on an idle host asserts an ordering the machine
does not guarantee."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

import pytest

# A hog is a bare busy loop. Its command line names it, so `ps` tells what it is, and it
# asks the kernel to kill it when pytest dies (PR_SET_PDEATHSIG): a SIGKILLed test session
# must not leave the machine loaded.
HOG_MARK = "trainchaos-stress-hog"
_PR_SET_PDEATHSIG = 1


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trainchaos stress")
    group.addoption("--stress-hogs", type=int, default=0, metavar="N",
                    help="keep N CPU-bound processes running during the session (stress mode)")
    group.addoption("--stress-nice", type=int, default=0, metavar="N",
                    help="niceness of the hogs: 0 competes as an equal, a negative value "
                         "(root only) takes the CPU ahead of the tests")


def _die_with_parent(nice: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if nice:
        os.nice(nice)


def _start_hogs(count: int, nice: int) -> list[subprocess.Popen]:
    code = f"# {HOG_MARK}\nwhile True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: _die_with_parent(nice),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            for _ in range(count)]


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("--stress-hogs")
    if count < 0:
        raise pytest.UsageError(f"--stress-hogs: {count} is not a number of processes (0 or more)")
    config._trainchaos_hogs = _start_hogs(count, config.getoption("--stress-nice")) if count else []


def pytest_report_header(config: pytest.Config) -> str | None:
    hogs = getattr(config, "_trainchaos_hogs", [])
    if not hogs:
        return None
    return f"stress mode: {len(hogs)} CPU hog(s) running (pids {', '.join(str(h.pid) for h in hogs)})"


def pytest_unconfigure(config: pytest.Config) -> None:
    for hog in getattr(config, "_trainchaos_hogs", []):
        hog.kill()
        hog.wait()


# ----------------------------------------------------------------------------- order
# `make test` surfaces failures early: every unit test first (about 1.5 min), then the
# integration modules from the quickest to the slowest, by their wall time on a 2-core
# machine (a module not listed runs between the quick and the slow ones). Modules stay
# whole and keep their own order: module-scoped fixtures (one dockerd job, one Slurm
# testbed) are set up once, and test_gameday's tests follow the job's life in file order.
INTEGRATION_ORDER = (
    # under a minute each
    "test_storage_mount", "test_net_faults", "test_engine", "test_pytest_plugin", "test_user_command",
    "test_triggers", "test_toxi_store", "test_preempt", "test_net_latency", "test_warm_start",
    # one to two and a half minutes
    "test_net_heal", "test_netns", "test_docker", "test_gameday",
    None,  # modules not listed here
    # longer
    "test_process_faults", "test_scale_from_runs", "test_sdc", "test_storage", "test_power",
    "test_hardening", "test_harness", "test_report_gate", "test_safety", "test_slurm",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(INTEGRATION_ORDER)}
    unlisted = rank[None]

    def key(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("integration") is None:
            return (0, 0)
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return (1, rank.get(module, unlisted))

    items.sort(key=key)  # stable: a module's tests keep their file order
