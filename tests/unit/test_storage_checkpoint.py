"""The harness's storage policies on a real directory: retry then abandon (never reported as
saved), fail after max_failed_saves, skip a save while the previous write runs, the save
deadline, tiers loaded newest-verified-first, the fast tier without fsync; the config
checks; and the storage metrics computed from the events."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from chaos.faults.storage.metrics import storage_metrics
from harness.checkpoint import CheckpointCorruptError, CheckpointManager
from harness.ckpt_tiers import TieredCheckpoints, agree_on_start, build_checkpoints
from harness.config import ConfigError
from harness.config_load import config_from_mapping


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f for k, f in self.events if k == kind]


def _state(step: int) -> dict[str, Any]:
    return {"model": {"w": torch.full((64,), float(step))}, "step": step}


def _manager(directory: Path, **kw: Any) -> CheckpointManager:
    defaults = dict(keep=3, mode="sync", every_steps=10, every_seconds=0.0, is_writer=True)
    return CheckpointManager(str(directory), **{**defaults, **kw})


class FlakyStorage:
    """A fault point that fails the first ``fails`` writes (mid state.pt, as EIO would)."""

    def __init__(self, fails: int) -> None:
        self.fails = fails

    def __call__(self, point: str, step: int | None = None, **_: Any) -> None:
        if self.fails > 0:
            self.fails -= 1
            raise OSError(5, "Input/output error")


def test_a_failed_write_is_retried_then_saved(tmp_path):
    events = Recorder()
    ckpt = _manager(tmp_path, emit=events, fault_point=FlakyStorage(1), retries=1)
    ckpt.save(10, _state(10))
    assert [f["attempt"] for f in events.of("ckpt_save_failed")] == [1]
    assert not events.of("ckpt_save_failed")[0]["abandoned"]
    assert [f["step"] for f in events.of("ckpt_save_end")] == [10] and ckpt.steps() == [10]


def test_an_abandoned_save_is_never_reported_as_saved(tmp_path):
    events = Recorder()
    ckpt = _manager(tmp_path, emit=events, fault_point=FlakyStorage(2), retries=1, max_failed_saves=3)
    ckpt.save(10, _state(10))  # both attempts fail: abandoned, training goes on
    assert [f["abandoned"] for f in events.of("ckpt_save_failed")] == [False, True]
    assert not events.of("ckpt_save_end") and ckpt.steps() == []
    assert not [e for e in os.listdir(tmp_path) if e.startswith(".tmp-")], "partial files left"
    ckpt.save(20, _state(20))
    assert [f["step"] for f in events.of("ckpt_save_end")] == [20]


def test_max_failed_saves_in_a_row_raise_the_storage_error(tmp_path):
    ckpt = _manager(tmp_path, fault_point=FlakyStorage(10), retries=0, max_failed_saves=2)
    ckpt.save(10, _state(10))
    with pytest.raises(OSError, match="Input/output error") as info:
        ckpt.save(20, _state(20))
    assert "2 save(s) in a row abandoned" in "".join(info.value.__notes__)


def test_async_save_skips_while_the_previous_write_runs(tmp_path):
    gate = threading.Event()
    events = Recorder()
    ckpt = _manager(tmp_path, mode="async", when_busy="skip", emit=events,
                    fault_point=lambda *a, **k: gate.wait(10))
    ckpt.save(10, _state(10))
    started = time.perf_counter()
    ckpt.save(20, _state(20))  # the step-10 write is held: skipped, not waited for
    assert time.perf_counter() - started < 1.0
    assert [f["step"] for f in events.of("ckpt_save_skipped")] == [20]
    gate.set()
    ckpt.close()
    assert ckpt.steps() == [10]


def test_the_save_deadline_names_the_stuck_save(tmp_path):
    gate = threading.Event()
    fired: list[tuple[int, float, str]] = []
    ckpt = _manager(tmp_path, mode="async", save_deadline_s=0.2, tier="shared",
                    on_deadline=lambda *args: fired.append(args), fault_point=lambda *a, **k: gate.wait(10))
    ckpt.save(10, _state(10))
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.02)
    gate.set()
    ckpt.close()
    assert len(fired) == 1 and fired[0][0] == 10 and fired[0][1] >= 0.2 and fired[0][2] == "shared"


def _tiers(tmp_path: Path, rank: int = 0, **kw: Any) -> TieredCheckpoints:
    shared = _manager(tmp_path / "shared", tier="shared", every_steps=20, is_writer=rank == 0, **kw)
    local = _manager(tmp_path / "local", tier="local", every_steps=5, fsync=False, is_writer=rank == 0, **kw)
    return TieredCheckpoints(shared, {"primary": local}, rank, share=None)


def test_tiers_save_by_their_own_interval_and_load_the_newest_verified(tmp_path):
    events = Recorder()
    tiers = _tiers(tmp_path, emit=events)
    for step in (5, 10, 15, 20, 25):
        assert tiers.should_save(step)
        tiers.save(step, _state(step))
    assert not tiers.should_save(7)
    assert tiers.shared.steps() == [20] and tiers.local.steps() == [15, 20, 25]
    tiers.save(27, _state(27))  # due in neither tier (a final save): the durable one
    assert tiers.shared.steps() == [20, 27]
    # The fast tier's newest checkpoint is torn: the shared tier's 27 wins, 25 is reported.
    (tmp_path / "local" / "step-00000025" / "state.pt").write_bytes(b"torn")
    state, info = tiers.load()
    assert info.step == 27 and state["step"] == 27 and info.skipped == []
    (tmp_path / "shared" / "step-00000027" / "MANIFEST.json").unlink()
    state, info = tiers.load()
    assert info.step == 20 and [os.path.basename(p) for p, _ in info.skipped] == ["step-00000027", "step-00000025"]
    load = events.of("ckpt_load")[-1]
    assert load["tier"] == "local" and load["step"] == 20  # a tie goes to the fast tier


def test_tiers_refuse_when_every_checkpoint_is_bad(tmp_path):
    tiers = _tiers(tmp_path)
    tiers.save(5, _state(5))
    (tmp_path / "local" / "step-00000005" / "state.pt").write_bytes(b"")
    with pytest.raises(CheckpointCorruptError):
        tiers.load()
    assert tiers.load(allow_fresh_start=True) is None


class _Group:
    """Collectives of ``n`` ranks played by threads: what the tiers' load needs (an
    all-gather and a broadcast from any rank)."""

    def __init__(self, n: int) -> None:
        self.barrier = threading.Barrier(n, timeout=10)
        self.slots: list[Any] = [None] * n

    def gather(self, rank: int) -> Any:
        def gather(obj: Any) -> list[Any]:
            self.slots[rank] = obj
            self.barrier.wait()
            out = list(self.slots)
            self.barrier.wait()
            return out
        return gather

    def share(self, rank: int) -> Any:
        def share(obj: Any, src: int) -> Any:
            if rank == src:
                self.slots[0] = obj
            self.barrier.wait()
            out = self.slots[0]
            self.barrier.wait()
            return out
        return share


def _load_on_all(ranks: list[TieredCheckpoints]) -> list[Any]:
    results: list[Any] = [None] * len(ranks)

    def run(i: int) -> None:
        results[i] = ranks[i].load()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return results


def test_other_ranks_take_the_holders_choice(tmp_path):
    writer = _tiers(tmp_path)
    writer.save(5, _state(5))
    writer.wait()
    group = _Group(2)
    rank0 = TieredCheckpoints(writer.shared, writer.copies, 0, group.share(0), group.gather(0), node="0")
    other = _manager(tmp_path / "node1", tier="local", every_steps=5, is_writer=False)
    rank1 = TieredCheckpoints(writer.shared, {"primary": other}, 1, group.share(1), group.gather(1), node="1")
    (state, info), (state1, info1) = _load_on_all([rank0, rank1])
    assert info1.step == info.step == 5 and torch.equal(state1["model"]["w"], state["model"]["w"])


def test_a_replica_on_another_node_is_found_when_rank_0s_disk_is_gone(tmp_path):
    """Placement replicated: the newest checkpoint sits on node 1's fast tier only (node 0's
    disk went with its power); node 1's rank reads it and every rank resumes from it, ahead
    of the older shared checkpoint."""
    events = Recorder()
    shared = _manager(tmp_path / "shared", tier="shared", every_steps=20, is_writer=True)
    shared.save(20, _state(20))
    shared.wait()
    replica = _manager(tmp_path / "node1" / "replica", tier="local", every_steps=5, is_writer=True,
                       emit=events)
    replica.save(25, _state(25))
    replica.wait()
    group = _Group(2)
    empty = _manager(tmp_path / "node0-new", tier="local", every_steps=5, is_writer=False)
    rank0 = TieredCheckpoints(shared, {"primary": empty}, 0, group.share(0), group.gather(0), node="0")
    rank1 = TieredCheckpoints(shared, {"primary": _manager(tmp_path / "node1", tier="local", every_steps=5,
                                                            is_writer=False), "replica": replica},
                              1, group.share(1), group.gather(1), node="1")
    (state0, info0), (state1, info1) = _load_on_all([rank0, rank1])
    assert info0.step == info1.step == 25 and state0["step"] == 25
    (load,) = events.of("ckpt_load")
    assert load["copy"] == "replica" and load["tier"] == "local"


def test_pick_replica_prefers_another_power_domain(monkeypatch):
    from harness.ckpt_tiers import pick_replica

    def gather_of(table):
        return lambda mine: table

    monkeypatch.setenv("TRAINCHAOS_NODE", "0")
    monkeypatch.setenv("TRAINCHAOS_FAILURE_DOMAIN", "pd-a")
    table = [(0, "0", "pd-a"), (1, "1", "pd-a"), (2, "2", "pd-b"), (3, "3", "pd-b")]
    assert pick_replica(0, gather_of(table)) == 2
    assert pick_replica(0, gather_of([(0, "0", ""), (1, "0", ""), (2, "1", "")])) == 2
    assert pick_replica(0, gather_of([(0, "0", "pd-a"), (1, "1", "pd-a")])) is None
    assert pick_replica(0, None) is None


def test_build_checkpoints_picks_one_or_two_tiers(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCHAOS_NODE_LOCAL_DIR", str(tmp_path / "node"))
    one = build_checkpoints(config_from_mapping({"run_dir": str(tmp_path)}), 0)
    assert isinstance(one, CheckpointManager) and one.directory == str(tmp_path / "checkpoints")
    two = build_checkpoints(config_from_mapping({"run_dir": str(tmp_path), "checkpoint": {
        "local_every_steps": 5, "local_fsync": False}}), 0)
    assert isinstance(two, TieredCheckpoints) and two.local.directory == str(tmp_path / "node" / "checkpoints")
    assert not two.local.fsync and two.shared.fsync


@pytest.mark.parametrize(("options", "fragment"), [
    ({"checkpoint": {"save_deadline_s": 40}}, "must be below failure.collective_timeout_s"),
    ({"checkpoint": {"save_retries": -1}}, "must be >= 0"),
    ({"checkpoint": {"when_busy": "later"}}, "allowed values: wait, skip"),
    ({"checkpoint": {"local_every_steps": -5}}, "must be >= 0"),
])
def test_bad_checkpoint_options(options, fragment):
    with pytest.raises(ConfigError, match=fragment):
        config_from_mapping(options)


def test_storage_metrics_from_events():
    events = [
        {"t": 1, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_end", "seconds": 0.1, "blocked_seconds": 0.01},
        {"t": 2, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_end", "seconds": 0.3, "blocked_seconds": 0.02},
        {"t": 3, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_end", "seconds": 0.2, "blocked_seconds": 0.5},
        {"t": 4, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_failed", "abandoned": False},
        {"t": 5, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_failed", "abandoned": True},
        {"t": 6, "src": "rank-0", "incarnation": 0, "kind": "ckpt_save_skipped"},
        # every rank reports the same rejected checkpoints: counted once
        {"t": 7, "src": "rank-1", "incarnation": 1, "kind": "ckpt_load", "step": 20,
         "skipped": [["/c/step-00000030", "sha256 mismatch"]]},
        {"t": 7, "src": "rank-0", "incarnation": 1, "kind": "ckpt_load", "step": 20,
         "skipped": [["/c/step-00000030", "sha256 mismatch"]]},
        {"t": 9, "src": "rank-0", "incarnation": 2, "kind": "ckpt_load", "step": 40, "skipped": []},
    ]
    m = storage_metrics(events)
    assert (m["ckpt_save_p50_s"], m["ckpt_save_p95_s"], m["ckpt_save_max_s"]) == (0.2, 0.3, 0.3)
    assert m["ckpt_blocked_s"] == pytest.approx(0.53)
    assert (m["failed_saves"], m["abandoned_saves"], m["skipped_saves"]) == (2, 1, 1)
    assert m["rejected_checkpoints"] == 1 and m["ckpt_lost_steps"] == 10
    empty = storage_metrics([])
    assert empty["ckpt_save_p50_s"] is None and empty["failed_saves"] == 0


def test_ranks_that_verified_differently_agree_on_the_older_step(tmp_path):
    events = Recorder()
    ckpt = _manager(tmp_path, emit=events)
    for step in (10, 20):
        ckpt.save(step, _state(step))
    mine = ckpt.load()
    assert mine[1].step == 20
    # Another rank rejected step 20 (corruption only its node saw) and loaded 10.
    state, info = agree_on_start(ckpt, mine, lambda step: [step, 10])
    assert info.step == 10 and state["step"] == 10
    assert info.skipped[0][0].endswith("step-00000020") and "another rank rejected it" in info.skipped[0][1]
    assert events.of("ckpt_load")[-1]["step"] == 10
    assert agree_on_start(ckpt, mine, lambda step: [step, step]) is mine
    assert agree_on_start(ckpt, mine, lambda step: [step, 0]) is None  # a rank starts fresh: all do


def test_lost_steps_follow_the_last_load_of_the_lowest_rank():
    events = [
        {"t": 1, "src": "rank-0", "incarnation": 1, "kind": "ckpt_load", "step": 40, "skipped": []},
        {"t": 1, "src": "rank-1", "incarnation": 1, "kind": "ckpt_load", "step": 30,
         "skipped": [["/c/step-00000040", "sha256 mismatch"]]},
        {"t": 2, "src": "rank-0", "incarnation": 1, "kind": "ckpt_load", "step": 30,
         "skipped": [["/c/step-00000040", "another rank rejected it"]]},
    ]
    m = storage_metrics(events)
    assert m["ckpt_lost_steps"] == 10 and m["rejected_checkpoints"] == 1
