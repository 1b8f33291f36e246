"""Checkpoint freshness (issue 22): the twin's digests, the reader of saved checkpoints, the
checker's verdict on each checkpoint."""

from __future__ import annotations

import pytest
import torch

from chaos import contract, probe
from chaos.metrics.families.freshness import freshness_metrics, stale_text
from chaos.metrics.records import BaselineInfo
from chaos.model.scenario import Workload as WorkloadSpec
from chaos.runner.freshness import CheckpointReader
from chaos.workload.base import CheckpointImage
from chaos.workload.harness import HarnessWorkload
from harness.checkpoint import MODEL, STEP, CheckpointManager


def _twin(**digests: str) -> BaselineInfo:
    return BaselineInfo(digest=None, losses={}, world_size=2, digests={int(k[1:]): v for k, v in digests.items()})


def _image(t: float, step: int, digest: str | None, **extra) -> dict:
    return {"t": t, "src": "injector", "kind": "ckpt_image", "step": step, "digest": digest,
            "path": f"/c/step-{step:08d}", "tier": "disk", **extra}


def test_a_checkpoint_holding_a_later_steps_state_is_stale_and_says_which():
    twin = _twin(s10="a", s11="b", s20="c", s21="d")
    m = freshness_metrics([_image(1, 10, "b"), _image(2, 20, "c")], twin)
    assert m["stale_checkpoints"] == 1 and m["checked_checkpoints"] == 2
    assert m["stale_checkpoint_list"][0]["holds_step"] == 11
    assert stale_text(m["stale_checkpoint_list"][0]) == "step 10 holds step 11's state"


def test_a_state_the_twin_never_had_is_stale_without_a_step():
    m = freshness_metrics([_image(1, 10, "zz")], _twin(s10="a"))
    assert m["stale_checkpoint_list"][0]["holds_step"] is None
    assert stale_text(m["stale_checkpoint_list"][0]) == "step 10 holds a state the twin never had"


def test_what_cannot_be_judged_is_unchecked_never_stale():
    events = [_image(1, 10, None, error="FileNotFoundError: gone"),  # pruned before it was read
              _image(2, 30, "x"),  # the twin has no digest at step 30
              {"t": 3, "src": "rank-0", "kind": "rank_start", "world_size": 1},  # elastic shrink
              _image(4, 20, "y")]
    m = freshness_metrics(events, _twin(s10="a", s20="c"))
    assert (m["stale_checkpoints"], m["checked_checkpoints"], m["unchecked_checkpoints"]) == (0, 0, 3)


def test_a_checkpoint_is_judged_by_the_world_it_was_trained_in_not_by_when_it_was_read():
    """The NVRx in-process restart (kill-mid-epoch-data.yaml): steps 10 and 20 saved in the
    twin's world of two but read after rank 1 died; the survivor restarted in place alone
    (world 1) and saved step 30; torchrun restarted both from step 20 (world 2 again) and
    saved step 40. All four were once unchecked ("read after the world changed"): 10, 20 and
    40 hold states the twin had and are judged; 30, trained alone, is not."""
    def start(t: float, world: int) -> dict:
        return {"t": t, "src": "rank-0", "kind": "rank_start", "world_size": world}

    def save(t: float, step: int) -> dict:
        return {"t": t, "src": "rank-0", "kind": "ckpt_save_end", "step": step}

    def load(t: float, step: int) -> dict:
        return {"t": t, "src": "rank-0", "kind": "ckpt_load", "step": step}

    def image(t: float, step: int, digest: str, saved_t: float) -> dict:
        return _image(t, step, digest, saved_by="rank-0", saved_t=saved_t)

    events = [start(0, 2), save(1, 10), save(2, 20), start(2.5, 1), load(2.6, 20),  # the survivor alone
              image(3.0, 10, "a", 1), image(3.1, 20, "b", 2), save(3.5, 30), image(3.6, 30, "x", 3.5),
              start(4, 2), load(4.1, 20), save(5, 40), image(5.1, 40, "d", 5)]
    twin = _twin(s10="a", s20="b", s30="c", s40="d")
    m = freshness_metrics(events, twin)
    assert (m["stale_checkpoints"], m["checked_checkpoints"], m["unchecked_checkpoints"]) == (0, 3, 1), m
    # resumed from the survivor's own step 30: step 40 then holds a world-1 lineage, unjudged
    events[-3] = load(4.1, 30)
    m = freshness_metrics(events, twin)
    assert (m["checked_checkpoints"], m["unchecked_checkpoints"]) == (2, 2), m
    # and a stale save in the twin's world is still stale, read late or not
    events[-1] = image(5.1, 40, "zz", 5)
    events[-3] = load(4.1, 20)
    assert freshness_metrics(events, twin)["stale_checkpoints"] == 1


def test_without_twin_digests_freshness_is_unknown():
    assert freshness_metrics([_image(1, 10, "a")], None)["stale_checkpoints"] is None
    assert freshness_metrics([_image(1, 10, "a")], _twin())["stale_checkpoints"] is None


def test_state_digest_is_reported_only_in_the_twin(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    monkeypatch.setattr(probe, "_record_digests", None)
    monkeypatch.delenv(contract.RECORD_DIGESTS_ENV, raising=False)
    assert probe.state_digest(1, model=model) is None
    monkeypatch.setattr(probe, "_record_digests", None)
    monkeypatch.setenv(contract.RECORD_DIGESTS_ENV, "1")
    # the digest of the live model is the digest of its state dict as a checkpoint holds it
    assert probe.state_digest(1, model=model) == probe.state_dict_digest(model.state_dict())
    wrapped = {f"module.{k}": v.clone() for k, v in model.state_dict().items()}
    assert probe.state_dict_digest(wrapped) == probe.state_dict_digest(model.state_dict())
    model.weight.data[0, 0] += 1e-6
    assert probe.state_digest(1, model=model) != probe.state_dict_digest(wrapped)


def test_the_harness_adapter_reads_what_a_checkpoint_holds_and_refuses_a_torn_one(tmp_path):
    model = torch.nn.Linear(3, 2)
    with CheckpointManager(str(tmp_path), keep=2, mode="sync", every_steps=1, every_seconds=0,
                           is_writer=True) as mgr:
        mgr.save(7, {MODEL: model.state_dict(), STEP: 7})
    workload = HarnessWorkload(WorkloadSpec(harness={}))
    path = tmp_path / "step-00000007"
    assert workload.read_checkpoint(str(path)) == CheckpointImage(7, probe.state_dict_digest(model.state_dict()))
    state = path / "state.pt"
    state.write_bytes(state.read_bytes()[:10])
    with pytest.raises(ValueError, match="truncated or torn"):
        workload.read_checkpoint(str(path))


class _Reads:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def read_checkpoint(self, path: str) -> CheckpointImage:
        self.paths.append(path)
        if path.endswith("gone"):
            raise FileNotFoundError(2, "No such file or directory")
        return CheckpointImage(int(path.rsplit("-", 1)[1]), "d")


def test_the_reader_reads_each_saved_checkpoint_once_off_the_loop():
    emitted: list[tuple[str, dict]] = []
    workload = _Reads()
    reader = CheckpointReader(workload, lambda kind, **f: emitted.append((kind, f)))  # type: ignore[arg-type]
    save = {"kind": "ckpt_save_end", "src": "rank-0", "incarnation": 0, "tier": "disk", "step": 10}
    reader.offer({**save, "path": "/c/step-10"})
    reader.offer({**save, "path": "/c/step-10"})  # the same save reported twice: read once
    reader.offer({**save, "step": 20, "path": "/c/gone"})
    reader.offer({**save, "kind": "ckpt_load", "path": "/c/step-30"})  # not a save
    assert reader.close(5.0)
    assert workload.paths == ["/c/step-10", "/c/gone"]
    assert emitted[0] == ("ckpt_image", {"path": "/c/step-10", "tier": "disk", "saved_by": "rank-0",
                                         "saved_incarnation": 0, "saved_t": None, "step": 10, "digest": "d"})
    assert emitted[1][1]["step"] == 20 and emitted[1][1]["error"].startswith("FileNotFoundError")


def test_the_run_report_marks_stale_and_torn_checkpoints():
    from chaos.report.runview import build_run_view
    from chaos.runfiles.record import RunRecord

    path = "/r/checkpoints/step-00000020"
    events = [{"t": 100.0, "src": "rank-0", "incarnation": 0, "kind": "rank_start", "rank": 0, "node": 0,
               "world_size": 1},
              {**_image(101.0, 20, "b"), "path": path, "saved_by": "rank-0"},
              {"t": 102.0, "src": "rank-0", "incarnation": 1, "kind": "ckpt_load", "step": 10, "verified": True,
               "skipped": [[path, "MANIFEST.json: unreadable"]]}]
    journal = RunRecord.from_dict({"schema_version": 2, "scenario": {"name": "s"}, "status": "completed", "metrics": {
        "t_start": 99.0, "stale_checkpoint_list": [{"step": 20, "holds_step": 21, "path": path}]}})
    marks = {m.kind: m for m in build_run_view(journal, events).marks}
    assert marks["stale_checkpoint"].label == f"STALE checkpoint: step 20 holds step 21's state ({path})"
    assert marks["stale_checkpoint"].lane == "rank-0"
    assert marks["torn_checkpoint"].label == "TORN checkpoint skipped on load: step-00000020: MANIFEST.json: unreadable"
