"""The DeepSpeed checkpoint format (``chaos.ckptformat.deepspeed``) on tag folders laid out as
``engine.save_checkpoint`` writes them: complete only with every data-parallel rank's ZeRO
partition, the step its model states record, ``latest`` naming a tag. (What DeepSpeed itself
writes, ZeRO-3 included, is read in tests/integration/test_stack_deepspeed.py.)"""

from __future__ import annotations

import os

import pytest
import torch

from chaos import ckptformat, probe
from chaos.ckptformat import CheckpointImage, detect_format
from chaos.ckptformat.deepspeed import missing_partitions


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _zero2_tag(directory, model: torch.nn.Module, step: int, ranks: int = 2, written: int | None = None) -> None:
    """A ZeRO-2 tag folder: the whole model in mp_rank_00_model_states.pt, one optimizer
    partition per rank (``written`` of them)."""
    os.makedirs(directory)
    torch.save({"module": model.state_dict(), "global_steps": step, "dp_world_size": ranks, "ds_version": "0.19.8"},
               directory / "mp_rank_00_model_states.pt")
    for rank in range(ranks if written is None else written):
        torch.save({"optimizer_state_dict": {"zero_stage": 2, "partition_count": [ranks]}},
                   directory / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")


def test_a_zero2_tag_folder_reads_its_module_and_recorded_step(tmp_path):
    model = _model()
    _zero2_tag(tmp_path / "global_step10", model, 10)
    assert detect_format(str(tmp_path / "global_step10")).name == "deepspeed"  # type: ignore[union-attr]
    image = ckptformat.read_checkpoint(str(tmp_path / "global_step10"), "deepspeed")
    assert image == CheckpointImage(10, probe.state_dict_digest(model.state_dict()))


def test_a_tag_folder_missing_a_ranks_partition_is_torn_and_names_it(tmp_path):
    _zero2_tag(tmp_path / "global_step10", _model(), 10, written=1)
    with pytest.raises(ValueError, match="1 of the 2 ranks' ZeRO partition files missing "
                                         r"\(zero_pp_rank_1_mp_rank_00_optim_states.pt\)"):
        ckptformat.read_checkpoint(str(tmp_path / "global_step10"), "deepspeed")


def test_zero3_needs_every_ranks_model_states_too(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").touch()
    (tmp_path / "zero_pp_rank_0_mp_rank_00_model_states.pt").touch()
    assert missing_partitions(str(tmp_path), 2, zero3=True) == ["zero_pp_rank_1_mp_rank_00_model_states.pt"]
    assert missing_partitions(str(tmp_path), 2, zero3=False) == []


def test_the_audit_follows_deepspeeds_latest_and_a_torn_newest_tag(tmp_path):
    model = _model()
    _zero2_tag(tmp_path / "global_step5", model, 5)
    _zero2_tag(tmp_path / "global_step10", model, 10)
    (tmp_path / "latest").write_text("global_step10")
    (tmp_path / "zero_to_fp32.py").write_text("# DeepSpeed copies its converter beside the tags\n")
    audit = ckptformat.audit_checkpoints(str(tmp_path), "deepspeed")
    assert audit is not None and audit.complete == (5, 10) and audit.pointer == 10 and not audit.dangling
    # Rank 1's partition of the newest tag never written (killed mid-save), `latest` already
    # naming it: DeepSpeed's rank 0 writes `latest` without waiting for the other ranks.
    (tmp_path / "global_step10" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    audit = ckptformat.audit_checkpoints(str(tmp_path), "deepspeed")
    assert audit is not None and audit.complete == (5,) and set(audit.torn) == {10} and audit.dangling
    # A power loss that kept the files' names but not their data: an empty `latest` names nothing.
    (tmp_path / "latest").write_text("")
    assert ckptformat.audit_checkpoints(str(tmp_path), "deepspeed").pointer == -1  # type: ignore[union-attr]
    (tmp_path / "global_step5" / "mp_rank_00_model_states.pt").write_bytes(b"")
    assert set(ckptformat.audit_checkpoints(str(tmp_path), "deepspeed").torn) == {5, 10}  # type: ignore[union-attr]
