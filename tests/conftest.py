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
import time

import pytest

from tests import failure_logs
from tests.machine_load import MachineLoad

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
    parser.getgroup("trainchaos order").addoption(
        "--timeline", default=None, metavar="FILE",
        help="write when each test ran and on which worker (TSV: worker, start, end, seconds, "
             "test), to see what a suite's wall time waits on")


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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # A test marked gpu (docs/gpu.md) needs a CUDA device: skipped, with the reason, where
    # torch sees none, before any of its fixtures starts. torch is asked only then.
    if item.get_closest_marker("gpu") is not None:
        from chaos.workload.devices import cuda_missing

        if (reason := cuda_missing()) is not None:
            raise pytest.skip.Exception(f"gpu: {reason}", _use_item_location=True)


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("--stress-hogs")
    if count < 0:
        raise pytest.UsageError(f"--stress-hogs: {count} is not a number of processes (0 or more)")
    worker = _xdist_worker(config)
    # The hogs load the machine once, from the main process, not once per worker.
    start = count and worker is None
    config._trainchaos_hogs = _start_hogs(count, config.getoption("--stress-nice")) if start else []
    config._trainchaos_tmpdir = _own_tmpdir(worker) if worker else None
    # In every process that runs tests (the workers, or the main one without xdist).
    config.pluginmanager.register(failure_logs, "trainchaos-failure-logs")
    if worker is None and (path := config.getoption("--timeline")):
        config.pluginmanager.register(Timeline(path), "trainchaos-timeline")
        config.pluginmanager.register(MachineLoad(), "trainchaos-machine-load")


def _own_tmpdir(worker: str) -> str:
    """Each worker's tests (and the runs they start) get their own TMPDIR: the leak checks
    that compare the temp directory before and after a run (no torchelastic_* folder, no
    node temp dir left) then see their own worker's runs only, not the one beside them."""
    path = tempfile.mkdtemp(prefix=f"tc-{worker}-")
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None  # gettempdir() caches: read TMPDIR again
    return path


CPU_PROPERTY = "trainchaos_cpu_s"
"""A test report's user property: the CPU seconds of its phase (``pytest_runtest_makereport``)."""
_cpu_mark: list[float] = []
_live_cpu: list[float] = []
"""The live children's CPU when /proc was last read: an integration test's phases read it
(a few ms each), a unit test's reuse it (1400 of them would cost about 20 CPU-s)."""


def _cpu_seconds(live: bool = True) -> float:
    """This process's CPU time, that of every child it reaped (and theirs, reaped in turn),
    and so far that of its live children (and what they reaped): a helper that outlives
    the test that started it (the controller's agent zygote, kept for the session by an
    in-process controller) is counted as it goes, not when it is reaped at the end."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    if live:
        _live_cpu[:] = [_live_children_cpu()]
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + sum(_live_cpu)


def _live_children_cpu() -> float:
    """The live children's CPU, and that of the agent zygotes this process's trainchaos
    commands share (``_support.popen_trainchaos``): the command that started one ends
    before it, so it is nobody's child here, and it forks the agents of every later run."""
    from tests.integration._support import agent_zygote_keeper_name

    me, ticks, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0
    shared = b"\0" + agent_zygote_keeper_name()
    servers: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                head, tail = fh.read().rsplit(b")", 1)
            fields = tail.split()
            # after the name: state, ppid, ... utime (14th field of the file), stime, cutime, cstime
            if int(fields[1]) != me:
                if b"(python" not in head:  # the server: an interpreter whose command line names it
                    continue
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if shared not in fh.read():
                        continue
                servers[int(entry)] = sum(int(v) for v in fields[11:15])
                continue
        except OSError:
            continue  # gone meanwhile
        total += sum(int(v) for v in fields[11:15])
    # A server that exited (idle, chaos.workload.agent_forks.KEEPER_IDLE_EXIT_S) keeps the
    # CPU it was last seen with: the count never goes back.
    _shared_servers_cpu.update(servers)
    return (total + sum(_shared_servers_cpu.values())) / ticks


_shared_servers_cpu: dict[int, int] = {}
"""Clock ticks of each shared agent zygote when last seen, by pid."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """Each phase's report carries the CPU spent since the phase before it ended: by the
    test's process and the processes it started and reaped, and theirs (controllers, a
    Chromium). A lower bound: the daemons a test talks to are not its children (the
    session's dockerd, its containers, the Slurm testbed's), and a process whose parent
    did not wait for it is reaped by init, with its CPU. Measured alone on an idle
    machine: test_harness took 109 CPU-s of the machine and 77 were counted here (the
    rest is pytest's own start, before the first test); test_slurm 162 and 48, test_docker
    and test_gameday 122 and 37. In a suite that keeps both cores busy, the CPU a test
    costs is what its wall time costs the others."""
    outcome = yield
    if not item.config.getoption("--timeline"):
        return
    now = _cpu_seconds(live=item.get_closest_marker("integration") is not None)
    spent = now - _cpu_mark[0] if _cpu_mark else 0.0
    _cpu_mark[:] = [now]
    outcome.get_result().user_properties.append((CPU_PROPERTY, round(spent, 3)))


class Timeline:
    """Each test's span (setup to teardown), the CPU it took (``pytest_runtest_makereport``)
    and the worker that ran it, from the reports the main process receives; written at the
    end of the session, in order of start."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.spans: dict[str, tuple[str, float, float, float]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        worker = gateway.id if gateway is not None else "main"
        cpu = sum(value for name, value in report.user_properties if name == CPU_PROPERTY)
        _, start, stop, spent = self.spans.get(report.nodeid, (worker, report.start, report.stop, 0.0))
        self.spans[report.nodeid] = (worker, min(start, report.start), max(stop, report.stop), spent + cpu)

    def pytest_sessionfinish(self) -> None:
        rows = sorted(self.spans.items(), key=lambda kv: kv[1][1])
        t0 = rows[0][1][1] if rows else 0.0
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as fh:
            fh.write("worker\tstart_s\tend_s\tseconds\tcpu_s\ttest\n")
            for nodeid, (worker, start, stop, cpu) in rows:
                fh.write(f"{worker}\t{start - t0:.1f}\t{stop - t0:.1f}\t{stop - start:.1f}\t{cpu:.1f}\t{nodeid}\n")


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
# integration modules. Modules stay whole and keep their own order: module-scoped fixtures
# (one dockerd job, one Slurm testbed) are set up once, and test_gameday's tests follow the
# job's life in file order.
#
# What each integration module costs, in seconds of wall time (fixtures included) in a full
# `make test` on 3 workers of a 2-core machine (the timeline of a fresh clone's run on
# 2026-12-06, less what was cut since: the stacks started warm, crash runs ended at their
# restart's first step, test_safety's two timed-out hangs made one): the serial run goes from the quickest to the slowest, the workers take
# the slowest first (below). A module not listed counts as UNLISTED_S. Refresh them from a
# run's `--durations=0` (or `--timeline`) when a module's cost changes by much: they only
# order and plan, nothing fails on them.
MODULE_SECONDS: dict[str, float] = {
    "test_slurm": 226, "test_power": 216, "test_command_storage": 80, "test_docker": 245, "test_safety": 105,
    "test_stack_deepspeed": 95, "test_gameday": 160, "test_hardening": 104, "test_storage": 97,
    "test_harness": 90, "test_sdc": 78, "test_netns": 67, "test_stack_torchft": 66, "test_process_faults": 63,
    "test_checkers": 45, "test_net_heal": 55, "test_report_gate": 54, "test_stack_lightning": 35,
    "test_warm_start": 66, "test_checkpoint_formats": 28, "test_stack_accelerate": 28,
    "test_controller_faults": 43, "test_stack_nvrx": 35, "test_preempt": 39, "test_net_latency": 39,
    "test_own_script": 25, "test_stack_dcp": 25, "test_net_faults": 33, "test_toxi_store": 30,
    "test_neighbor": 28, "test_gameday_slurm": 35, "test_data_checker": 23, "test_stall_throttle": 22,
    "test_triggers": 22, "test_engine": 22, "test_pytest_plugin": 19, "test_toy_workload": 18,
    "test_bench_stacks": 19, "test_late_node": 16, "test_twin_and_blindness": 28, "test_user_command": 10,
    "test_toy_family": 9, "test_scale_from_runs": 2, "test_storage_mount": 1, "test_gpu": 1,
}
UNLISTED_S = 60.0
UNIT_TEST_S = 0.1

# With workers (`make test TEST_JOBS=N`, pytest-xdist `-n N`), integration tests run side
# by side: most of a test's wall time is waiting (timeouts, paced steps, restarts), not CPU.
# An integration module is handed to one worker whole, its tests in file order (module-scoped
# fixtures: one run, one dockerd job, one Slurm testbed, set up once); modules that share a
# session fixture go together (named here), so it is set up once. Unit tests still come
# first, one at a time to any worker.
SHARED_GROUPS = {
    # Not test_docker with test_gameday: they share no engine (test_docker starts two of its
    # own, routed_dockerds), so they may run side by side.
    "test_process_faults": "smoke-device-error",  # the shared run in _shared_runs.py
    "test_scale_from_runs": "smoke-device-error",
}


def _module_name(item: pytest.Item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1] if item.module else ""


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    longest_first = _xdist_worker(config) is not None

    def key(item: pytest.Item) -> tuple[int, float]:
        if item.get_closest_marker("integration") is None:
            return (0, 0.0)
        seconds = MODULE_SECONDS.get(_module_name(item), UNLISTED_S)
        return (1, -seconds if longest_first else seconds)

    items.sort(key=key)  # stable: a module's tests keep their file order


def _unit_of(nodeid: str) -> str:
    """The work unit of a test: itself (a unit test), or its integration module's name (or
    its SHARED_GROUPS group's)."""
    path = nodeid.split("::", 1)[0]
    if "/integration/" not in path:
        return nodeid
    module = path.rsplit("/", 1)[-1].removesuffix(".py")
    return SHARED_GROUPS.get(module, module)


def unit_seconds(unit: str) -> float:
    """The expected wall time of a work unit (a group costs what its modules cost)."""
    if "::" in unit:
        return UNIT_TEST_S
    modules = [m for m, group in SHARED_GROUPS.items() if group == unit] or [unit]
    return sum(MODULE_SECONDS.get(m, UNLISTED_S) for m in modules)


def plan_next(free_at: dict[str, float], asking: str, units: list[str]) -> str:
    """Which of ``units`` (not empty) the worker ``asking`` should get now, given when each
    worker is expected to be free (``free_at``: seconds from now; the asking one is busy
    with its last test until then).

    The longest units go first to whichever worker frees first (longest processing time
    first): the remaining units are planned that way over the workers' free times, and the
    asking worker gets the first unit the plan gives it. If the plan gives it none (it frees
    last and the work runs out before), it gets the shortest: whatever it gets now waits
    behind its last test."""
    free = dict(free_at)
    for unit in sorted(units, key=unit_seconds, reverse=True):
        worker = min(free, key=lambda w: (free[w], w != asking))
        if worker == asking:
            return unit
        free[worker] += unit_seconds(unit)
    return min(units, key=unit_seconds)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist not installed: only the serial run
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class ModuleScheduling(LoadScopeScheduling):
        """Work units: each unit test alone, each integration module (or SHARED_GROUPS
        group) whole. A free worker takes the next unit in collection order: unit tests,
        then the integration units, the slowest first. (pytest-xdist's own `loadgroup` names
        a group by rewriting the test's node id, which pytest 9 no longer allows.)

        A worker runs a test only once it knows the one after (pytest's ``nextitem``), so
        its last test waits until it is handed more, and what it is handed waits behind
        that test. pytest-xdist hands a worker more while 2 tests are still pending there:
        integration modules queued behind a long last test (or a whole one-test module)
        while other workers ran out of work. Here a worker still running an integration
        test is handed one unit test held back for this (FILLERS of them), which waits
        there at no cost; its next integration unit it gets when it is free. Without a
        filler left (an integration-only run), ``plan_next`` chooses what waits there."""

        FILLERS = 200

        def __init__(self, config: pytest.Config, log: object = None) -> None:
            super().__init__(config, log)
            self._clock = time.monotonic
            self._fillers: set[str] | None = None
            # worker -> {unit: when it began (None: queued behind another unit there)}
            self._began: dict[object, dict[str, float | None]] = {}

        def _split_scope(self, nodeid: str) -> str:
            return _unit_of(nodeid)

        def _pending(self, node: object) -> list[str]:
            return [nodeid for unit in self.assigned_work.get(node, {}).values()
                    for nodeid, done in unit.items() if not done]

        def _free_in(self, node: object, now: float) -> float:
            """Seconds until ``node`` is expected to have run what it holds."""
            left = 0.0
            for unit, began in self._began.get(node, {}).items():
                elapsed = now - began if began is not None else 0.0
                left += max(unit_seconds(unit) - elapsed, 1.0)
            return left

        def mark_test_complete(self, node: object, item_index: int, duration: float = 0) -> None:
            nodeid = self.registered_collections[node][item_index]
            unit = self._split_scope(nodeid)
            self.assigned_work[node][unit][nodeid] = True
            if all(self.assigned_work[node][unit].values()):
                began = self._began[node]
                began.pop(unit, None)
                if began and None in began.values():  # the next unit there begins
                    began[next(u for u, t in began.items() if t is None)] = self._clock()
            self._reschedule(node)

        def _reschedule(self, node: object) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            pending = self._pending(node)
            running_integration = any("/integration/" in nodeid for nodeid in pending)
            # Unit tests take milliseconds: one more queued keeps the worker busy. Behind an
            # integration test, only what it needs to run its last one.
            if len(pending) > (1 if running_integration else 2):
                return
            self._assign_work_unit(node, running_integration)

        def _assign_work_unit(self, node: object, busy: bool = False) -> None:
            if self._fillers is None:  # the last unit tests, held back
                tests = [u for u in self.workqueue if "::" in u]
                self._fillers = set(tests[-self.FILLERS:]) if len(tests) > self.FILLERS else set()
            fillers = [u for u in self.workqueue if u in self._fillers]
            others = [u for u in self.workqueue if u not in self._fillers]
            if busy and fillers:
                unit = fillers[0]
            elif busy and others:
                now = self._clock()
                unit = plan_next({n: self._free_in(n, now) for n in self.nodes}, node, others)
            else:
                unit = (others or fillers)[0]
            work = self.workqueue.pop(unit)
            self.assigned_work.setdefault(node, {})[unit] = work
            self._began.setdefault(node, {})[unit] = None if busy else self._clock()
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid) for nodeid, done in work.items() if not done])

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling:
        config.option.loadscopereorder = False  # keep the order above, not the largest unit first
        return ModuleScheduling(config, log)
