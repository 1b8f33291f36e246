"""Shared fixtures. The repository root is importable (pyproject sets pythonpath too).

Stress mode (`make test-stress`): `--stress-hogs N` keeps N busy processes running for the
whole session, so every test runs on a host whose cores are taken, the way a developer's
laptop or a shared CI runner is. It is how tests that assume one machine's timing are found
before they land: a test that passes only on an idle host asserts an ordering the machine
does not guarantee."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile

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


def _xdist_worker(config: pytest.Config) -> str | None:
    """The id of this pytest-xdist worker (``gw0``...), None in the main process."""
    return getattr(config, "workerinput", {}).get("workerid")


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("--stress-hogs")
    if count < 0:
        raise pytest.UsageError(f"--stress-hogs: {count} is not a number of processes (0 or more)")
    worker = _xdist_worker(config)
    # The hogs load the machine once, from the main process, not once per worker.
    start = count and worker is None
    config._trainchaos_hogs = _start_hogs(count, config.getoption("--stress-nice")) if start else []
    config._trainchaos_tmpdir = _own_tmpdir(worker) if worker else None


def _own_tmpdir(worker: str) -> str:
    """Each worker's tests (and the runs they start) get their own TMPDIR: the leak checks
    that compare the temp directory before and after a run (no torchelastic_* folder, no
    node temp dir left) then see their own worker's runs only, not the one beside them."""
    path = tempfile.mkdtemp(prefix=f"tc-{worker}-")
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None  # gettempdir() caches: read TMPDIR again
    return path


def pytest_report_header(config: pytest.Config) -> str | None:
    hogs = getattr(config, "_trainchaos_hogs", [])
    if not hogs:
        return None
    return f"stress mode: {len(hogs)} CPU hog(s) running (pids {', '.join(str(h.pid) for h in hogs)})"


def pytest_unconfigure(config: pytest.Config) -> None:
    for hog in getattr(config, "_trainchaos_hogs", []):
        hog.kill()
        hog.wait()
    if tmpdir := getattr(config, "_trainchaos_tmpdir", None):
        shutil.rmtree(tmpdir, ignore_errors=True)


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
    "test_toy_family",
    # one to two and a half minutes
    "test_net_heal", "test_netns", "test_stall_throttle",
    None,  # modules not listed here
    # longer
    "test_process_faults", "test_scale_from_runs", "test_sdc", "test_storage", "test_power",
    "test_hardening", "test_harness", "test_report_gate", "test_checkers", "test_safety", "test_slurm",
    # the longest: one dockerd, its image built, then two modules' runs in containers
    "test_gameday", "test_docker",
)

# With workers (`make test TEST_JOBS=N`, pytest-xdist `-n N`), integration tests run side
# by side: most of a test's wall time is waiting (timeouts, paced steps, restarts), not CPU.
# An integration module is handed to one worker whole, its tests in file order (module-scoped
# fixtures: one run, one dockerd job, one Slurm testbed, set up once); modules that share a
# session fixture go together (named here), so it is set up once. The slowest modules are
# handed out first: the suite's wall time is then the work spread over the workers, not a
# long module that started last. Unit tests still come first, one at a time to any worker.
SHARED_GROUPS = {
    "test_docker": "docker",  # one dockerd (docker_host), whose leftovers `cleanup` scans
    "test_gameday": "docker",
    "test_process_faults": "smoke-device-error",  # the shared run in _shared_runs.py
    "test_scale_from_runs": "smoke-device-error",
}


def _module_name(item: pytest.Item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1] if item.module else ""


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(INTEGRATION_ORDER)}
    unlisted = rank[None]
    longest_first = _xdist_worker(config) is not None

    def key(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("integration") is None:
            return (0, 0)
        module_rank = rank.get(_module_name(item), unlisted)
        return (1, -module_rank if longest_first else module_rank)

    items.sort(key=key)  # stable: a module's tests keep their file order


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist not installed: only the serial run
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class ModuleScheduling(LoadScopeScheduling):
        """Work units: each unit test alone, each integration module (or SHARED_GROUPS
        group) whole; handed out in collection order. (pytest-xdist's own `loadgroup`
        names a group by rewriting the test's node id, which pytest 9 no longer allows.)"""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if "/integration/" not in path:
                return nodeid
            module = path.rsplit("/", 1)[-1].removesuffix(".py")
            return SHARED_GROUPS.get(module, module)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling:
        config.option.loadscopereorder = False  # keep the order above, not the largest unit first
        return ModuleScheduling(config, log)
