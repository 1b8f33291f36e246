"""chaos.adapters.dcp: DCP's save and load, called as given and reported; the digest helper.

In one process without a process group (DCP saves and loads a world of one then), with the
probe attached to a temporary events directory.
"""

from __future__ import annotations

import json

import pytest
import torch

from chaos import probe
from chaos.adapters import dcp as chaos_dcp


@pytest.fixture
def events(tmp_path, monkeypatch):
    """The probe of this process, attached to a fresh events directory; its lines, read back."""
    events_dir = tmp_path / "events"
    monkeypatch.setenv(probe.ENV_EVENTS_DIR, str(events_dir))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(probe, "_probe", None)

    def read() -> list[dict]:
        probe.get()._file.flush()
        return [json.loads(line) for path in sorted(events_dir.glob("*.jsonl"))
                for line in path.read_text().splitlines()]

    yield read
    probe.get().close()


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


def test_save_and_load_reach_dcp_unchanged_and_are_reported(events, tmp_path):
    saved, other = _model(0), _model(1)
    path = tmp_path / "ckpt" / "step-00000010"
    chaos_dcp.save({"model": saved.state_dict()}, checkpoint_id=path, step=10)
    state = {"model": other.state_dict()}
    chaos_dcp.load(state, checkpoint_id=path, step=10)
    other.load_state_dict(state["model"])
    assert probe.model_digest(other) == probe.model_digest(saved)

    kinds = [(e["kind"], e.get("step")) for e in events()]
    assert kinds == [("ckpt_save_start", 10), ("ckpt_save_end", 10), ("ckpt_load", 10)]
    end = events()[1]
    assert end["bytes"] == sum(f.stat().st_size for f in path.iterdir()) > 0
    assert end["seconds"] >= 0 and end["path"] == str(path)
    assert events()[2]["verified"] is False


def test_final_state_reports_the_digest_of_the_model(events):
    model = _model(0)
    chaos_dcp.step_end(3, torch.tensor(0.25))
    digest = chaos_dcp.final_state(3, model, loss=torch.tensor(0.25))
    assert digest == chaos_dcp.state_digest(model) == probe.model_digest(model)
    step, end, exit_ = events()
    assert step["kind"] == "step_end" and step["loss"] == 0.25
    assert end["kind"] == "run_end" and end["digest"] == digest and end["weights_finite"] is True
    assert exit_["kind"] == "rank_exit" and exit_["code"] == 0


def test_detached_probe_reports_nothing_and_still_saves(tmp_path, monkeypatch):
    monkeypatch.delenv(probe.ENV_EVENTS_DIR, raising=False)
    monkeypatch.setattr(probe, "_probe", None)
    chaos_dcp.save({"model": _model(0).state_dict()}, checkpoint_id=tmp_path / "c", step=1)
    assert (tmp_path / "c" / ".metadata").exists()
    assert not probe.attached()


def test_the_twin_publishes_the_digest_each_checkpoint_is_read_back_to(events, tmp_path, monkeypatch):
    """What the freshness checker compares: the twin's per-step digest (step_end with the
    model) and the dcp kind's reading of a checkpoint saved at that step, equal when the
    saved weights are those of the step; a torn checkpoint is refused, not misread."""
    from chaos import contract
    from chaos.model.scenario import Workload as WorkloadSpec
    from chaos.workload.base import CheckpointImage
    from chaos.workload.dcp import DcpWorkload

    model = _model(0)
    chaos_dcp.step_end(1, model=model)  # outside the twin: nothing recorded
    monkeypatch.setattr(probe, "_record_digests", None)
    monkeypatch.setenv(contract.RECORD_DIGESTS_ENV, "1")
    chaos_dcp.step_end(2, model=model)
    path = tmp_path / "ckpt" / "step-00000002"
    chaos_dcp.save({"model": model.state_dict(), "optim": {}}, checkpoint_id=path, step=2)
    published = [e for e in events() if e["kind"] == "state_digest"]
    assert [e["step"] for e in published] == [2]

    workload = DcpWorkload(WorkloadSpec(kind="dcp", options={}))
    assert workload.read_checkpoint(str(path)) == CheckpointImage(2, published[0]["digest"])
    assert workload.read_checkpoint(str(tmp_path / "elsewhere")) is None  # not the example's layout
    (path / ".metadata").unlink()
    with pytest.raises((ValueError, FileNotFoundError)):
        workload.read_checkpoint(str(path))
