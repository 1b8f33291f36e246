"""The FUSE fault layer on a real mount, without a training job (seconds): rules changed at
run time without remounting -- slow, disk full, errors by probability, caller filter -- and
a clean teardown through the run's resource journal."""

from __future__ import annotations

import errno
import os
import time
import uuid

import pytest

from chaos.cluster.mounts import FuseMount, mounted
from chaos.runfiles.resources import RunResources
from chaos.storage.control import MountControl

pytestmark = [pytest.mark.integration, pytest.mark.fuse, pytest.mark.timeout(60)]


@pytest.fixture
def layer(tmp_path):
    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    resources = RunResources(run_id, str(tmp_path / "run"))
    path = tmp_path / "mnt"
    path.mkdir()
    (path / "before.txt").write_text("written before the mount")
    details = resources.acquire(FuseMount.kind, {
        "path": str(path), "control_dir": str(tmp_path / "control"), "fsname": f"{run_id}-test",
        "track_unfsynced": False})
    yield path, MountControl(str(tmp_path / "control"))
    assert resources.release_all() == []
    assert not mounted(str(path)) and not FuseMount.exists({"path": str(path)}, details)
    assert (path / "before.txt").read_text() == "written before the mount"  # the bytes stayed below


def test_rules_change_at_run_time_without_remounting(layer):
    path, control = layer
    assert mounted(str(path)) and (path / "before.txt").read_text() == "written before the mount"

    control.add_rule({"rule_id": "slow", "action": "slow", "ops": ["write"], "latency_s": 0.05})
    started = time.perf_counter()
    with open(path / "slow.bin", "wb", buffering=0) as fh:
        for _ in range(4):
            fh.write(b"x" * 100)  # one FUSE write each (no write-back cache)
    assert time.perf_counter() - started >= 4 * 0.05
    control.remove_rule("slow")

    control.add_rule({"rule_id": "full", "action": "disk_full", "ops": ["write"], "bytes_left": 100})
    with pytest.raises(OSError) as info, open(path / "full.bin", "wb", buffering=0) as fh:
        fh.write(b"y" * 60)
        fh.write(b"y" * 60)  # a short write of 40 bytes, then ENOSPC
        fh.write(b"y")
    assert info.value.errno == errno.ENOSPC and os.path.getsize(path / "full.bin") == 100
    control.remove_rule("full")

    control.add_rule({"rule_id": "never", "action": "error", "ops": ["write"], "probability": 0.0})
    control.add_rule({"rule_id": "other-rank", "action": "error", "ops": ["write"], "ranks": [7]})
    (path / "fine.txt").write_text("probability 0 and another rank's rule never hit")
    control.add_rule({"rule_id": "rofs", "action": "error", "ops": ["create"], "errno": errno.EROFS,
                      "paths": ["ro/*"]})
    (path / "ro").mkdir()
    with pytest.raises(OSError) as info:
        (path / "ro" / "x").write_text("refused")
    assert info.value.errno == errno.EROFS
    (path / "rw.txt").write_text("outside the glob")
    state = control.state()
    assert state["version"] == 7 and "never" not in state.get("hits", {})


def test_a_rule_armed_over_the_kernels_cache_acts_at_once(layer):
    """No rule armed: the kernel keeps entries and attributes (for a second) and pages (across
    opens, until the first arming). Arming a rule makes it forget them first, so a read
    through a file handle opened before, and the very next stat, reach the rule instead of
    the cache; pages read under the rule are not kept past it."""
    path, control = layer
    target = path / "before.txt"
    assert control.state()["kernel_cache"] is True and control.state()["kernel_pages"] is True
    written = path / "through.bin"
    written.write_bytes(b"written through the layer" * 1000)  # its pages: kept from the write on
    kept = open(written, "rb", buffering=0)  # noqa: SIM115 - read again after arming
    assert kept.read() == b"written through the layer" * 1000
    with open(target, "rb", buffering=0) as fh:
        assert fh.read() == b"written before the mount"  # its pages are cached now
        control.add_rule({"rule_id": "flip", "action": "corrupt", "ops": ["read"], "bits": 8})
        assert os.pread(fh.fileno(), 100, 0) != b"written before the mount"  # the rule, not the pages
    with kept:
        assert os.pread(kept.fileno(), 25000, 0) != b"written through the layer" * 1000
    control.remove_rule("flip")
    # The flipped pages read under the rule are not kept past it: a new open drops them.
    assert control.state()["kernel_cache"] is True and target.read_bytes() == b"written before the mount"
    assert control.state()["kernel_pages"] is False and written.read_bytes() == b"written through the layer" * 1000

    os.stat(target)  # its entry and attributes are cached now
    control.add_rule({"rule_id": "stat", "action": "error", "ops": ["getattr"]})
    with pytest.raises(OSError) as info:
        os.stat(target)
    assert info.value.errno == errno.EIO
    state = control.state()
    assert state["kernel_cache"] is False and state["cache_forgets"] == 2
    control.remove_rule("stat")


def test_the_daemon_keeps_a_python_thread_state_per_worker_not_per_request(layer):
    """Each request is a ctypes callback on one of libfuse's threads; the Python thread state
    ctypes makes for it is kept for the thread's life (chaos.storage.daemon), so hundreds of
    requests make as many states as there are workers, not one each."""
    path, control = layer
    for i in range(300):
        with pytest.raises(FileNotFoundError):
            os.stat(path / f"missing-{i}")  # a lookup each: a name never seen is not cached
    # a rule that never acts: the daemon answers a new rules version with its state as of now
    state = control.add_rule({"rule_id": "never", "action": "error", "ops": ["write"], "probability": 0.0})
    assert 1 <= state["python_thread_states"] <= 20


@pytest.mark.machine_cleanup
def test_a_mount_whose_controller_died_without_a_journal_is_found_by_name(tmp_path, state_dir):
    """No registry entry leads to it (a foreign state dir, an entry removed by hand): the scan
    finds the mount by its fsname and the daemon by its environment, and cleanup removes both."""
    import signal
    import subprocess
    import sys

    from chaos.runner.cleanup import cleanup_runs, find_leftovers

    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "mnt"
    # A controller that mounts and is SIGKILLed: nothing of it tears the mount down.
    code = ("import os, signal; from chaos.cluster.mounts import FuseMount; "
            f"FuseMount.create({run_id!r}, {{'path': {str(path)!r}, 'control_dir': {str(tmp_path / 'c')!r}, "
            f"'fsname': '{run_id}-orphan'}}); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], timeout=30, cwd=os.getcwd())
    assert proc.returncode == -signal.SIGKILL and mounted(str(path))
    assert any(run_id in line and "fuse_mount" in line for line in find_leftovers())
    report = cleanup_runs([])
    assert not report.failures, report.failures
    assert not mounted(str(path)) and not any(run_id in line for line in find_leftovers())
