"""The checkpoint manager: round trips, atomicity under a crash, verified fallback, pruning."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.checkpoint import (
    DATA,
    MANIFEST_FILE,
    MODEL,
    OPTIMIZER,
    RNG,
    STATE_FILE,
    STEP,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointManager,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_state(step: int, size: int = 1000) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(step)
    return {
        MODEL: {"w": torch.randn(size, generator=gen), "b": torch.zeros(3)},
        OPTIMIZER: {"state": {0: {"exp_avg": torch.ones(4) * step}}, "param_groups": [{"lr": 0.1}]},
        RNG: {"torch": torch.get_rng_state(), "python": (3, tuple(range(5)), None)},
        DATA: {"cursor": step, "seed": 7},
        STEP: step,
    }


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [fields for k, fields in self.events if k == kind]


def manager(directory: Path, mode: str = "sync", keep: int = 3, **kwargs: Any) -> CheckpointManager:
    options: dict[str, Any] = {"every_steps": 10, "every_seconds": 0.0, "is_writer": True}
    options.update(kwargs)
    return CheckpointManager(str(directory), keep=keep, mode=mode, **options)  # type: ignore[arg-type]


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert torch.equal(a[MODEL]["w"], b[MODEL]["w"])
    assert torch.equal(a[OPTIMIZER]["state"][0]["exp_avg"], b[OPTIMIZER]["state"][0]["exp_avg"])
    assert torch.equal(a[RNG]["torch"], b[RNG]["torch"])
    assert a[RNG]["python"] == b[RNG]["python"]
    assert a[DATA] == b[DATA] and a[STEP] == b[STEP]


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_round_trip_returns_saved_state_and_emits_events(tmp_path: Path, mode: str) -> None:
    events = Recorder()
    ckpt = manager(tmp_path, mode=mode, emit=events)
    state = make_state(10)
    ckpt.save(10, state)
    ckpt.wait()
    loaded, info = ckpt.load()  # type: ignore[misc]
    ckpt.close()

    assert_same_state(loaded, state)
    assert info.step == 10 and info.skipped == []
    assert info.path == str(tmp_path / "step-00000010")
    manifest = json.loads((tmp_path / "step-00000010" / MANIFEST_FILE).read_text())
    assert manifest["step"] == 10
    assert manifest["files"][STATE_FILE]["bytes"] == (tmp_path / "step-00000010" / STATE_FILE).stat().st_size
    assert [kind for kind, _ in events.events] == ["ckpt_save_start", "ckpt_save_end", "ckpt_load"]
    end = events.of("ckpt_save_end")[0]
    assert end["step"] == 10 and end["tier"] == "disk" and end["bytes"] > 0
    assert end["seconds"] >= 0 and end["blocked_seconds"] >= 0
    assert events.of("ckpt_load")[0] == {
        "step": 10, "tier": "disk", "verified": True, "path": info.path, "skipped": [],
        "seconds": events.of("ckpt_load")[0]["seconds"],
    }


def test_async_save_snapshots_state_before_training_mutates_it(tmp_path: Path) -> None:
    ckpt = manager(tmp_path, mode="async")
    state = make_state(10)
    expected = state[MODEL]["w"].clone()
    ckpt.save(10, state)
    state[MODEL]["w"].add_(1.0)  # the next optimizer step, in place, while the write runs
    ckpt.close()
    loaded, _ = manager(tmp_path).load()  # type: ignore[misc]
    assert torch.equal(loaded[MODEL]["w"], expected)


def test_async_reports_blocked_and_write_time_for_large_state(tmp_path: Path) -> None:
    events = Recorder()
    ckpt = manager(tmp_path, mode="async", emit=events)
    for step in (10, 20):
        ckpt.save(step, make_state(step, size=4_000_000))  # 16 MB of weights
    ckpt.close()
    ends = events.of("ckpt_save_end")
    assert [e["step"] for e in ends] == [10, 20]
    for end in ends:
        assert end["bytes"] > 16_000_000
        assert end["seconds"] >= 0 and end["blocked_seconds"] >= 0


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys, torch
    from harness.checkpoint import CheckpointManager

    directory, mode = sys.argv[1], sys.argv[2]

    def die_mid_write(point, step=None, **context):
        if point == "ckpt_write" and step == 20:
            os._exit(137)  # like trainchaos's crash_during_checkpoint: no handlers run

    ckpt = CheckpointManager(directory, keep=3, mode=mode, every_steps=10, every_seconds=0,
                             is_writer=True, fault_point=die_mid_write)
    big = {"w": torch.arange(200_000, dtype=torch.float32)}
    ckpt.save(10, {"model": big, "step": 10})
    ckpt.wait()
    ckpt.save(20, {"model": big, "step": 20})
    ckpt.wait()
    sys.exit(0)  # not reached: the process dies inside the second save
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_crash_mid_write_leaves_partial_tmp_and_previous_checkpoint_loads(tmp_path: Path, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), mode],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 137, proc.stderr

    tmp_dirs = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-step-00000020-")]
    assert len(tmp_dirs) == 1, sorted(p.name for p in tmp_path.iterdir())
    partial = tmp_dirs[0] / STATE_FILE
    complete = tmp_path / "step-00000010" / STATE_FILE
    assert 0 < partial.stat().st_size < complete.stat().st_size
    assert not (tmp_dirs[0] / MANIFEST_FILE).exists()
    assert not (tmp_path / "step-00000020").exists()

    loaded, info = manager(tmp_path, is_writer=False).load()  # type: ignore[misc]
    assert info.step == 10 and loaded[STEP] == 10 and info.skipped == []

    # A new writer (the restarted job) clears what the dead one left behind.
    manager(tmp_path).close()
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def save_steps(directory: Path, *steps: int, keep: int = 3) -> None:
    ckpt = manager(directory, keep=keep)
    for step in steps:
        ckpt.save(step, make_state(step))
    ckpt.close()


def test_flipped_byte_in_newest_falls_back_to_previous_with_reason(tmp_path: Path) -> None:
    save_steps(tmp_path, 10, 20)
    newest = tmp_path / "step-00000020"
    flip_byte(newest / STATE_FILE, offset=(newest / STATE_FILE).stat().st_size // 2)
    events = Recorder()

    loaded, info = manager(tmp_path, emit=events).load()  # type: ignore[misc]

    assert info.step == 10 and loaded[STEP] == 10
    assert len(info.skipped) == 1
    path, reason = info.skipped[0]
    assert path == str(newest) and "sha256 mismatch" in reason
    assert events.of("ckpt_load")[0]["skipped"] == [[str(newest), reason]]


def test_truncated_newest_is_skipped(tmp_path: Path) -> None:
    save_steps(tmp_path, 10, 20)
    state_file = tmp_path / "step-00000020" / STATE_FILE
    data = state_file.read_bytes()
    state_file.write_bytes(data[: len(data) // 3])

    _, info = manager(tmp_path).load()  # type: ignore[misc]

    assert info.step == 10
    assert "truncated" in info.skipped[0][1] and f"manifest says {len(data)}" in info.skipped[0][1]


def test_missing_manifest_is_skipped(tmp_path: Path) -> None:
    save_steps(tmp_path, 10, 20)
    (tmp_path / "step-00000020" / MANIFEST_FILE).unlink()

    _, info = manager(tmp_path).load()  # type: ignore[misc]

    assert info.step == 10
    assert f"no {MANIFEST_FILE}" in info.skipped[0][1]


def test_unloadable_file_with_matching_manifest_is_skipped(tmp_path: Path) -> None:
    """A state.pt whose bytes match its manifest but that torch.load rejects is unusable too."""
    save_steps(tmp_path, 10, 20)
    newest = tmp_path / "step-00000020"
    garbage = b"not a torch file" * 10
    (newest / STATE_FILE).write_bytes(garbage)
    manifest = json.loads((newest / MANIFEST_FILE).read_text())
    manifest["files"][STATE_FILE] = {"bytes": len(garbage), "sha256": hashlib.sha256(garbage).hexdigest()}
    (newest / MANIFEST_FILE).write_text(json.dumps(manifest))

    _, info = manager(tmp_path).load()  # type: ignore[misc]

    assert info.step == 10 and "torch.load failed" in info.skipped[0][1]


def test_all_corrupt_raises_naming_each_checkpoint(tmp_path: Path) -> None:
    save_steps(tmp_path, 10, 20)
    flip_byte(tmp_path / "step-00000010" / STATE_FILE, offset=100)
    (tmp_path / "step-00000020" / MANIFEST_FILE).unlink()

    with pytest.raises(CheckpointCorruptError, match="all 2 checkpoint") as excinfo:
        manager(tmp_path).load()

    message = str(excinfo.value)
    assert "step-00000010" in message and "sha256 mismatch" in message
    assert "step-00000020" in message and MANIFEST_FILE in message
    assert [p for p, _ in excinfo.value.corrupt] == [
        str(tmp_path / "step-00000020"), str(tmp_path / "step-00000010"),
    ]
    assert isinstance(excinfo.value, RuntimeError)


def test_all_corrupt_with_fresh_start_allowed_returns_none(tmp_path: Path) -> None:
    save_steps(tmp_path, 10)
    (tmp_path / "step-00000010" / MANIFEST_FILE).unlink()
    assert manager(tmp_path).load(allow_fresh_start=True) is None


def test_no_checkpoint_returns_none(tmp_path: Path) -> None:
    assert manager(tmp_path).load() is None
    assert manager(tmp_path / "never-created", is_writer=False).load() is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_keep_last_k_prunes_older_checkpoints(tmp_path: Path, mode: str) -> None:
    ckpt = manager(tmp_path, mode=mode, keep=2)
    for step in (10, 20, 30, 40, 50):
        ckpt.save(step, make_state(step))
    ckpt.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "step-00000040", "step-00000050"]
    assert (tmp_path / "LATEST").read_text() == "step-00000050\n"  # the newest, once it is durable


def test_resaving_over_abandoned_timeline_replaces_and_drops_newer(tmp_path: Path) -> None:
    """After falling back to step 10, the corrupt 20 and 30 must not be resumed from later."""
    save_steps(tmp_path, 10, 20, 30)
    flip_byte(tmp_path / "step-00000020" / STATE_FILE, offset=50)
    flip_byte(tmp_path / "step-00000030" / STATE_FILE, offset=50)
    ckpt = manager(tmp_path)
    _, info = ckpt.load()  # type: ignore[misc]
    assert info.step == 10

    ckpt.save(20, make_state(20))
    ckpt.close()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "step-00000010", "step-00000020"]
    assert (tmp_path / "LATEST").read_text() == "step-00000020\n"
    _, info = manager(tmp_path).load()  # type: ignore[misc]
    assert info.step == 20 and info.skipped == []


def test_background_error_surfaces_on_wait_and_next_save(tmp_path: Path) -> None:
    def broken_storage(point: str, step: int | None = None, **context: Any) -> None:
        raise OSError(5, "Input/output error")

    ckpt = manager(tmp_path, mode="async", fault_point=broken_storage)
    ckpt.save(10, make_state(10))
    with pytest.raises(CheckpointError, match="step 10 failed.*Input/output error"):
        ckpt.wait()

    ckpt.save(20, make_state(20))
    ckpt._thread.join()  # type: ignore[union-attr]  # let it fail without calling wait()
    with pytest.raises(CheckpointError, match="step 20 failed"):
        ckpt.save(30, make_state(30))
    ckpt.close()  # the error was reported once; closing does not raise it again
    assert manager(tmp_path).load() is None  # nothing partial was ever published


def test_sync_error_raises_in_save(tmp_path: Path) -> None:
    def broken_storage(point: str, step: int | None = None, **context: Any) -> None:
        raise OSError(28, "No space left on device")

    ckpt = manager(tmp_path, fault_point=broken_storage)
    with pytest.raises(OSError, match="No space left"):
        ckpt.save(10, make_state(10))


def test_non_writer_never_writes(tmp_path: Path) -> None:
    events = Recorder()
    ckpt = manager(tmp_path / "ckpt", is_writer=False, emit=events)
    ckpt.save(10, make_state(10))
    ckpt.close()
    assert not (tmp_path / "ckpt").exists() and events.events == []


def test_should_save_by_steps_and_seconds(tmp_path: Path) -> None:
    by_steps = manager(tmp_path, every_steps=10)
    assert [s for s in range(0, 31) if by_steps.should_save(s)] == [10, 20, 30]
    never = manager(tmp_path, every_steps=0)
    assert not any(never.should_save(s) for s in range(1, 50))
    by_time = manager(tmp_path, every_steps=0, every_seconds=0.05)
    assert not by_time.should_save(1)
    time.sleep(0.06)
    assert by_time.should_save(2)
    by_time.save(2, make_state(2))
    assert not by_time.should_save(3)
    by_time.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keep": 1}, "keep at least 2"),
        ({"mode": "lazy"}, "allowed values: sync, async"),
        ({"every_steps": -1}, ">= 0"),
    ],
)
def test_bad_options_are_rejected(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        manager(tmp_path, **kwargs)


def test_save_rejects_state_that_could_never_be_loaded(tmp_path: Path) -> None:
    class Opaque:
        pass

    ckpt = manager(tmp_path)
    with pytest.raises(TypeError, match=r"state\['rng'\]\['numpy'\].*weights_only"):
        ckpt.save(10, {RNG: {"numpy": Opaque()}, STEP: 10})
    with pytest.raises(ValueError, match="checkpoint step is 20"):
        ckpt.save(20, make_state(10))
    ckpt.close()
    with pytest.raises(CheckpointError, match="closed"):
        ckpt.save(30, make_state(30))
