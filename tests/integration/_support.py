"""What the integration tests share: where the repository is, how the ``trainchaos`` command
is run, the environment a test's own runs get, and the probes behind the capability markers.

A test that needs something of the machine says so with a marker (registered in
pyproject.toml): ``netns`` (network namespaces: root or CAP_NET_ADMIN and CAP_SYS_ADMIN, ip, nft), ``docker`` (an
engine that answers, or dockerd and root to start one), ``slurm`` (Slurm and munge, or root
to install them), ``fuse`` (/dev/fuse and libfuse for the storage fault layer), ``chromium``
(a headless browser). ``conftest.py`` skips a marked test, with the probe's reason, when
the machine lacks it; ``pytest -m "not docker"`` leaves such tests out altogether.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.contract import AGENT_ZYGOTE_KEEPER_ENV, STATE_DIR_ENV
from chaos.model.scenario import Scenario

__all__ = ["CAPABILITIES", "REPO", "TRAINCHAOS", "agent_zygote_keeper_name", "cli_env", "harness_copy", "load_warm", "machine_cleanup_lock",
           "missing", "popen_trainchaos", "run_trainchaos", "state_dir_env", "warm_copy"]

REPO = Path(__file__).resolve().parents[2]

# The console script installed next to this interpreter, as a user runs it; in a checkout
# that was never installed, the same entry point through the interpreter.
_SCRIPT = Path(sys.executable).with_name("trainchaos")
TRAINCHAOS: list[str] = [str(_SCRIPT)] if _SCRIPT.exists() else [
    sys.executable, "-c", "import sys; from chaos.cli import main; sys.argv[0] = 'trainchaos'; main()"]


def cli_env(state_dir: Path, *paths: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``trainchaos`` subprocess: this one's, with the test's own state
    dir (so ``cleanup`` and the leak checks see this test's runs only) and ``paths`` then the
    repository ahead on PYTHONPATH (the controller and its jobs import the code under test)."""
    python_path = os.pathsep.join(filter(None, [*map(str, paths), str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, STATE_DIR_ENV: str(state_dir), "PYTHONPATH": python_path, **extra}


@contextlib.contextmanager
def state_dir_env(path: Path) -> Iterator[Path]:
    """Runs started in this process (``run_scenario_once``) register in ``path`` while inside."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STATE_DIR_ENV, str(path))
        yield path


# ----------------------------------------------------------------------------- warm starts
# A restart under harness.warm_start forks the ranks from each node's zygote, which imported
# torch once: kill -> next step about 3 s here instead of about 11 s cold (docs of the
# option). Tests whose runs restart ranks and assert nothing about a cold launch (its
# timing, the process tree of a plain torchrun) run the shipped scenario this way.

def _harness_doc(scenario: Path, **harness: Any) -> dict:
    doc = yaml.safe_load(scenario.read_text())
    doc["workload"]["harness"].update(harness)
    return doc


def harness_copy(scenario: Path, into: Path, **harness: Any) -> Path:
    """A copy of ``scenario`` (a harness workload) in ``into`` with these ``harness`` options
    (the tiny model where nothing asserted depends on the model's size, ``warm_start``): for
    a test that runs it through the ``trainchaos`` command."""
    into.mkdir(parents=True, exist_ok=True)
    copy = into / scenario.name
    copy.write_text(yaml.safe_dump(_harness_doc(scenario, **harness), sort_keys=False))
    return copy


def warm_copy(scenario: Path, into: Path) -> Path:
    """A copy of ``scenario`` (a harness workload) in ``into``, its ranks started warm: for
    a test that runs it through the ``trainchaos`` command."""
    return harness_copy(scenario, into, warm_start=True)


def _load_harness(scenario: str | os.PathLike[str], **harness: Any) -> Scenario:
    from chaos.scenario.load import parse_scenario

    return parse_scenario(_harness_doc(Path(scenario), **harness), str(scenario))


def load_warm(scenario: str | os.PathLike[str]) -> Scenario:
    """``scenario`` (a harness workload) loaded as ``load_scenario`` does, its ranks started
    warm: for a test that runs it in this process."""
    return _load_harness(scenario, warm_start=True)


# ----------------------------------------------------------------------------- machine-wide cleanup
# `trainchaos cleanup` (without --run-dir) and `cleanup --check` look at the whole machine:
# every process whose controller is gone, every resource of a run not alive. A test that
# SIGKILLs a controller leaves such leftovers on purpose until its own cleanup; a test beside
# it (pytest-xdist workers) that runs `cleanup` would remove them first, or its `--check`
# would list them. Such sections take this lock (the `machine_cleanup` marker takes it for a
# whole test); every other test runs beside them freely.
_LOCK_PATH = Path(__file__).resolve().parent  # a directory every worker of this checkout shares
_lock_state = threading.local()


@contextlib.contextmanager
def machine_cleanup_lock() -> Iterator[None]:
    """Held while this process SIGKILLs a controller, or runs or checks a machine-wide
    cleanup; re-entrant within a process."""
    depth = getattr(_lock_state, "depth", 0)
    if depth:
        _lock_state.depth = depth + 1
        try:
            yield
        finally:
            _lock_state.depth -= 1
        return
    fd = os.open(_LOCK_PATH, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _lock_state.depth = 1
        try:
            yield
        finally:
            _lock_state.depth = 0
    finally:
        os.close(fd)  # releases the lock


# ----------------------------------------------------------------------------- running the command
# A run that outlives its test's timeout is stopped the way a user stops one, with SIGTERM:
# the controller reverts its faults and stops its job. subprocess.run's timeout SIGKILLs it
# instead, which leaves its faults in effect (a FUSE mount, a namespace, a stopped rank) for
# the next test's leak check to trip over: one slow run on a loaded host then fails three.
TERM_GRACE_S = 120.0


@functools.cache
def _agent_zygote_keeper() -> int:
    """The read end of a pipe this process holds open until it exits: the commands it runs
    share their agent zygotes (``chaos.workload.agent_forks``), each paying no imports of
    its own for its warm agents (about 3 CPU-s a command here)."""
    read_end, _write_end = os.pipe()  # the write end stays open, unwritten, for the session
    return read_end


def agent_zygote_keeper_name() -> bytes:
    """What the command line of each agent zygote this process keeps starts its name with
    (``chaos.workload.agent_forks``: named after the keeper pipe's inode)."""
    from chaos.workload.agent_forks import keeper_server_prefix

    return keeper_server_prefix(os.fstat(_agent_zygote_keeper()).st_ino).encode()


def popen_trainchaos(argv: list[str], *, env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """``trainchaos *argv`` started (``subprocess.Popen``'s keyword arguments), sharing this
    process's agent zygotes with every other command it starts."""
    keeper = _agent_zygote_keeper()
    return subprocess.Popen([*TRAINCHAOS, *argv], env={**env, AGENT_ZYGOTE_KEEPER_ENV: str(keeper)},
                            pass_fds=(keeper,), **popen)


def run_trainchaos(argv: list[str], *, env: dict[str, str], timeout: float,
                   cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``trainchaos *argv`` to its end, its output captured as text; past ``timeout`` seconds
    (or when the test itself is interrupted) it is SIGTERMed and, if it does not end within
    TERM_GRACE_S, SIGKILLed and cleaned up after with ``trainchaos cleanup``."""
    proc = popen_trainchaos(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = _stop(proc, env)
        pytest.fail(f"trainchaos {' '.join(map(str, argv))} ran past its {timeout:.0f} s and was stopped "
                    f"with SIGTERM\n{out[-4000:]}\n{err[-4000:]}")
    except BaseException:
        _stop(proc, env)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _stop(proc: subprocess.Popen[str], env: dict[str, str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        with machine_cleanup_lock():
            proc.kill()
            out, err = proc.communicate()
            subprocess.run([*TRAINCHAOS, "cleanup"], env=env, capture_output=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        return out, err


# ----------------------------------------------------------------------------- capabilities
# Each probe returns why the machine cannot run such a test, or None when it can.

def _netns() -> str | None:
    from chaos.net.fabric import missing_capabilities

    lacks = missing_capabilities()
    if os.geteuid() != 0:
        lacks.insert(0, "not root")
    return f"the netns backend needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), ip and nft: {'; '.join(lacks)}" if lacks else None


def _docker() -> str | None:
    from tests.integration._dockerd import engine_answers

    if engine_answers(os.environ.get("DOCKER_HOST")):
        return None
    if shutil.which("dockerd") is None:
        return "no docker engine and no dockerd to start (make install adds docker.io)"
    if os.geteuid() != 0:
        return "no docker engine answers, and starting a private dockerd needs root"
    return None


def _slurm() -> str | None:
    from chaos.cluster.slurm_testbed import missing_binaries

    lacks = missing_binaries()
    if lacks and os.geteuid() != 0:
        return f"Slurm/munge not installed ({', '.join(lacks)}) and not root (make install sets them up)"
    return None


def _fuse() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "the storage fault layer needs FUSE: /dev/fuse is missing"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "the storage fault layer needs FUSE: not root and no fusermount3 (Debian: fuse3)"
    try:
        import mfusepy  # noqa: F401  (loads libfuse3)
    except (ImportError, OSError) as exc:
        return f"the storage fault layer needs FUSE: mfusepy does not load ({exc})"
    return None


def _chromium() -> str | None:
    from tests.integration._chromium import chromium_binary

    # As root a missing browser is a failure, not a skip: `make install` installs it.
    if chromium_binary() is None and os.geteuid() != 0:
        return ("chromium is not installed and this is not root to install it (`make install` "
                "installs the Debian package chromium when run as root)")
    return None


def _cgroup() -> str | None:
    from chaos.cluster.cgroups import own_cgroup

    lacks = [c for c in ("memory", "cpu") if own_cgroup(c) is None or not os.access(own_cgroup(c) or "", os.W_OK)]
    return (f"node memory limits and neighbours' CPU caps need writable cgroup v1 hierarchies: "
            f"{', '.join(lacks)} missing or read-only") if lacks else None


CAPABILITIES: dict[str, Callable[[], str | None]] = {
    "netns": _netns, "docker": _docker, "slurm": _slurm, "fuse": _fuse, "chromium": _chromium,
    "cgroup": _cgroup,
}


@functools.cache
def missing(capability: str) -> str | None:
    """Why this machine cannot run a test marked ``capability`` (probed once a session)."""
    return CAPABILITIES[capability]()


def catches_signal(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` in place (``SigCgt`` of its
    /proc status): a test sends a signal only once the process under test is ready for it,
    instead of racing its start-up."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        caught = next(line for line in fh if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signum - 1)))
