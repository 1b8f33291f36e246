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
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.contract import AGENT_ZYGOTE_KEEPER_ENV, STATE_DIR_ENV
from chaos.model.scenario import Scenario

__all__ = ["CAPABILITIES", "DDP_TORCH_SAVE_SCRIPT", "REPO", "TRAINCHAOS", "agent_zygote_keeper_name",
           "assert_no_storage_left", "cli_env", "harness_copy", "load_warm", "machine_cleanup_lock", "missing",
           "popen_trainchaos", "run_trainchaos", "state_dir_env", "storage_daemons_of", "warm_copy",
           "write_ddp_torch_save_script"]

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


# ----------------------------------------------------------------------------- a user's own DDP script
# The `command` workload's tests (storage faults and crash points, checkpoint formats and
# freshness) run one plain DDP script of their own that saves with torch.save into the
# directory it is given; each test chooses the save's protocol by its options.
DDP_TORCH_SAVE_SCRIPT = textwrap.dedent(
    """
    import argparse, os, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from chaos import probe

    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)  # {ckpt_dir}, or a directory of the test's
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--every", type=int, required=True)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--declared", action="store_true")  # --ckpt is the workload's checkpoint_dir
    parser.add_argument("--per-run", action="store_true")  # a directory per run (the twin's apart)
    parser.add_argument("--fsync", action="store_true")  # make each save durable before its rename
    parser.add_argument("--direct", action="store_true")  # save straight to the final name
    parser.add_argument("--late", action="store_true")  # the bug: step N's save after step N+1's update
    args = parser.parse_args()
    if args.declared:
        assert args.ckpt == os.environ["TRAINCHAOS_CKPT_DIR"], "the declared directory, both ways"
    root = os.path.join(args.ckpt, os.environ["TRAINCHAOS_RUN_ID"]) if args.per_run else args.ckpt
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    probe.emit("rank_start", rank=rank, world_size=dist.get_world_size(), pid=os.getpid(),
               node=int(os.environ["TRAINCHAOS_NODE"]))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(root, exist_ok=True)
    step = 0
    # Newest first; a checkpoint that does not load (torn by a crash) is passed over.
    names = [n for n in os.listdir(root) if n.startswith("step-") and n.endswith(".pt")]
    for name in sorted(names, key=lambda n: -int(n[5:-3])):
        path = os.path.join(root, name)
        try:
            state = torch.load(path)
        except Exception:
            continue
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        probe.emit("ckpt_load", step=step, tier="shared", verified=False, path=path)
        break

    def save(step):
        path = os.path.join(root, f"step-{step}.pt")
        probe.emit("ckpt_save_start", step=step, tier="shared", path=path)
        try:
            state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}
            if args.direct:  # the classic bug: no temporary name, no fsync, no rename
                torch.save(state, path)
            else:
                torch.save(state, path + ".tmp")
                if args.fsync:
                    fd = os.open(path + ".tmp", os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                os.replace(path + ".tmp", path)
        except Exception as exc:  # a failed save is reported and training goes on without it
            probe.emit("ckpt_save_failed", step=step, tier="shared", error=str(exc), abandoned=True)
            return
        probe.emit("ckpt_save_end", step=step, tier="shared", path=path)

    pending = None
    while step < args.steps:
        step += 1
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 4, generator=gen)
        loss = ((model(x) - x[:, :2].sin()) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        probe.step_end(step, loss.item())
        if rank == 0:
            probe.state_digest(step, model=model)  # the twin's reference, a no-op elsewhere
            if pending is not None:
                save(pending)
                pending = None
            if step % args.every == 0:
                if args.late and step < args.steps:
                    pending = step
                else:
                    save(step)
        time.sleep(args.sleep)
    if rank == 0:
        probe.final_state(step, model=model)
    dist.destroy_process_group()
    """
)


def write_ddp_torch_save_script(into: Path) -> Path:
    """``DDP_TORCH_SAVE_SCRIPT`` as ``into/train.py``."""
    script = into / "train.py"
    script.write_text(DDP_TORCH_SAVE_SCRIPT)
    return script


def storage_daemons_of(run_id: str) -> list[int]:
    from chaos.contract import STORAGE_RUN_ID_ENV

    needle = f"{STORAGE_RUN_ID_ENV}={run_id}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def assert_no_storage_left(run_id: str) -> None:
    """Nothing of a run with the storage fault layer is left: no mount, no daemon, no process."""
    from chaos.cluster.mounts import fuse_mounts
    from chaos.util.procs import find_run_processes

    assert not [m for m in fuse_mounts() if m[0].startswith(run_id)], "a fault-layer mount was left"
    assert not storage_daemons_of(run_id), "a fault-layer daemon was left"
    assert not find_run_processes(run_id), "processes of the run left behind"


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


def slurm_cluster_fixture(nodes: int) -> Any:
    """A module's ``slurm_cluster`` fixture: a throwaway Slurm of ``nodes`` emulated nodes
    (``chaos.cluster.slurm_testbed``), started once for the module and stopped after, every
    daemon gone and its folder removed (``slurm_cluster = slurm_cluster_fixture(4)``)."""

    @pytest.fixture(scope="module")
    def slurm_cluster() -> Iterator[Any]:
        from chaos.cluster import slurm_testbed

        bed = slurm_testbed.SlurmTestbed(nodes=nodes)
        bed.start()
        root = bed.root
        try:
            yield bed
        finally:
            bed.stop()
        assert not slurm_testbed.testbed_processes(root), "the test's Slurm daemons must all be stopped"
        assert not os.path.exists(root)

    return slurm_cluster


def slurm_cmd(bed: Any, *argv: str) -> str:
    """A Slurm command's output (``squeue``, ``sinfo``...) against testbed ``bed``."""
    return subprocess.run(list(argv), env={**os.environ, **bed.env()}, capture_output=True, text=True,
                          timeout=15, check=True).stdout


def slurm_node_states(bed: Any) -> dict[str, str]:
    """Node name -> its Slurm state (``idle``, ``down``...) in testbed ``bed``."""
    return dict(line.split() for line in slurm_cmd(bed, "sinfo", "-h", "-N", "-o", "%N %T").splitlines())


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
