"""Fixtures shared by the unit tests."""

from __future__ import annotations

import socket

import pytest
import torch.distributed as dist

from chaos.contract import LIVE_DIR_ENV, STATE_DIR_ENV, WARM_START_ENV


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path, monkeypatch):
    """Every unit test keeps trainchaos's machine-wide state (the registry of active runs, the
    live-run marks) in ``tmp_path``: nothing it registers is seen by a run or test beside it,
    and its subprocesses inherit the same directories."""
    path = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(path))
    monkeypatch.setenv(LIVE_DIR_ENV, str(tmp_path / "live"))
    monkeypatch.delenv(WARM_START_ENV, raising=False)  # the integration tests' switch
    return path


@pytest.fixture
def one_rank_group():
    """A real one-rank gloo group on loopback, for the harness's collectives."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def own_machine(tmp_path, monkeypatch):
    """``cleanup`` without run dirs sweeps the whole machine: the shared temp directory, every
    orphaned process, namespace, mount, container and Slurm job of any trainchaos run. A unit
    test that called it bare would remove what a run beside it (an integration test, another
    developer's suite) is about to look at, e.g. the leftovers of a deliberately SIGKILLed
    controller. Inside this fixture the sweep sees only what the test made: a temp root of its
    own, the one resource kind unit tests create (node directories), and no process it was
    not asked about by run id."""
    import tempfile

    import chaos.runner.cleanup
    from chaos.runfiles.resources import ScratchDir

    tmp_root = tmp_path / "machine-tmp"
    tmp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_root))
    monkeypatch.setenv("TMPDIR", str(tmp_root))
    monkeypatch.setattr(chaos.runner.cleanup, "known_kinds", lambda: {ScratchDir.kind: ScratchDir})
    find = chaos.runner.cleanup.find_run_processes
    monkeypatch.setattr(chaos.runner.cleanup, "find_run_processes", lambda run_id=None: find(run_id) if run_id else [])
    return tmp_root
