"""chaos.ckptformat: each checkpoint format read from real files written by torch, DCP and
safetensors in the layouts their libraries write; detection that tells the layouts apart;
the auditors; the hook; the workload kinds that read by format."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from safetensors.torch import save_file

from chaos import ckptformat, probe
from chaos.ckptformat import (
    FORMAT_ENV,
    CheckpointAudit,
    CheckpointImage,
    detect_format,
)
from chaos.errors import ScenarioError
from chaos.model.scenario import Workload as WorkloadSpec
from chaos.workload.command import CommandWorkload


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _digest(model: torch.nn.Module) -> str:
    """What the twin publishes: ``probe.state_digest(step, model=)`` hashes this."""
    return probe.state_dict_digest(model.state_dict())


def _truncate(path, keep: int = 60) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _read(path) -> CheckpointImage | None:
    return ckptformat.read_checkpoint(str(path))


def _detected(path) -> str | None:
    found = detect_format(str(path))
    return found.name if found is not None else None


def _audit(directory) -> CheckpointAudit:
    audit = ckptformat.audit_checkpoints(str(directory))
    assert audit is not None, f"no format audits {directory}"
    return audit


def _command() -> CommandWorkload:
    return CommandWorkload(WorkloadSpec(command="python train.py", steps=10))


# -- torch.save ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("content", "name", "step"), [
    (lambda m: {"model": m.state_dict(), "optimizer": {}, "step": 7}, "ckpt.pt", 7),
    (lambda m: {"state_dict": m.state_dict(), "global_step": 8}, "ckpt.pth", 8),
    (lambda m: {"model_state_dict": m.state_dict(), "iteration": torch.tensor(9)}, "whatever", 9),
    (lambda m: m.state_dict(), "step-00000012.pt", 12),  # a bare state dict: the name's step
    (lambda m: {"model": m.state_dict()}, "epoch=1-step=15.pt", 15),
    (lambda m: m.state_dict(), "weights.bin", None),  # no step anywhere: the saver's claim is taken
    (lambda m: {"model": m, "step": 4}, "whole-module.pt", 4),  # torch.save(model): its state_dict
])
def test_a_torch_save_file_is_read_under_its_conventional_key_with_its_step(tmp_path, content, name, step):
    model = _model()
    torch.save(content(model), tmp_path / name)
    assert _read(tmp_path / name) == CheckpointImage(step, _digest(model))


def test_a_ddp_state_dict_reads_as_the_unwrapped_model_the_twin_hashes(tmp_path):
    model = _model()
    torch.save({"model": {f"module.{k}": v for k, v in model.state_dict().items()}, "step": 3}, tmp_path / "c.pt")
    assert _read(tmp_path / "c.pt") == CheckpointImage(3, _digest(model))
    model[0].weight.data[0, 0] += 1e-6  # type: ignore[index]  # one bit of difference shows
    assert _read(tmp_path / "c.pt") != CheckpointImage(3, _digest(model))


def test_a_torn_or_modelless_torch_save_file_is_refused_with_why(tmp_path):
    path = tmp_path / "step-5.pt"
    torch.save({"model": _model().state_dict(), "step": 5}, path)
    _truncate(path)
    with pytest.raises(ValueError, match="not a complete torch.save checkpoint"):
        _read(path)
    torch.save({"optimizer": {"lr": 0.1}, "step": 5}, path)
    with pytest.raises(ValueError, match="holds no model state"):
        _read(path)
    with pytest.raises(FileNotFoundError):
        _read(tmp_path / "gone.pt")


def test_a_directory_of_torch_save_files_reads_the_model_file_and_every_file(tmp_path):
    model = _model()
    ckpt = tmp_path / "checkpoint-30"
    ckpt.mkdir()
    torch.save({"exp_avg": torch.zeros(2)}, ckpt / "optim.pt")
    torch.save(model.state_dict(), ckpt / "model.pt")
    torch.save({"step": 31}, ckpt / "meta.pt")
    assert _read(ckpt) == CheckpointImage(31, _digest(model))  # a recorded step beats the name's
    (ckpt / "meta.pt").unlink()
    assert _read(ckpt) == CheckpointImage(30, _digest(model))  # checkpoint-N
    _truncate(ckpt / "optim.pt")  # one torn file: the job's own load would fail
    with pytest.raises(ValueError, match="not a complete torch.save checkpoint"):
        _read(ckpt)


# -- DCP ----------------------------------------------------------------------------------------

def _dcp_save(path, state) -> None:
    import torch.distributed.checkpoint as dcp

    with pytest.warns(UserWarning):  # no process group: DCP saves a world of one and says so
        dcp.save(state, checkpoint_id=str(path))


def test_a_dcp_checkpoint_is_read_whole_without_a_process_group(tmp_path):
    model = _model()
    _dcp_save(tmp_path / "step-00000004", {"model": model.state_dict(), "optim": {}})
    assert _read(tmp_path / "step-00000004") == CheckpointImage(4, _digest(model))
    _dcp_save(tmp_path / "anywhere", {"model": model.state_dict(), "step": 6})
    assert _read(tmp_path / "anywhere") == CheckpointImage(6, _digest(model))


def test_a_dcp_checkpoint_without_metadata_or_with_a_truncated_shard_is_torn(tmp_path):
    path = tmp_path / "step-00000004"
    _dcp_save(path, {"model": _model().state_dict()})
    shard = next(path.glob("*.distcp"))
    _truncate(shard, 10)
    with pytest.raises(ValueError, match="not a complete DCP checkpoint"):
        _read(path)
    (path / ".metadata").unlink()  # still DCP's by its shards: torn, not "unknown"
    assert _detected(path) == "dcp"
    with pytest.raises(ValueError, match="not a complete DCP checkpoint"):
        _read(path)


# -- safetensors --------------------------------------------------------------------------------

def test_a_safetensors_file_and_its_metadata_step(tmp_path):
    model = _model()
    save_file(model.state_dict(), tmp_path / "step-40.safetensors")
    assert _read(tmp_path / "step-40.safetensors") == CheckpointImage(40, _digest(model))
    save_file(model.state_dict(), tmp_path / "w.safetensors", metadata={"format": "pt", "global_step": "41"})
    assert _read(tmp_path / "w.safetensors") == CheckpointImage(41, _digest(model))
    _truncate(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="not a complete safetensors checkpoint"):
        _read(tmp_path / "w.safetensors")


def _sharded(directory, model: torch.nn.Module) -> None:
    """Two shards and their index, as save_pretrained writes a sharded model."""
    directory.mkdir()
    state = model.state_dict()
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, directory / shard, metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
             "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


def test_sharded_safetensors_are_merged_by_their_index_and_a_missing_shard_is_named(tmp_path):
    model = _model()
    _sharded(tmp_path / "step-50", model)
    assert _read(tmp_path / "step-50") == CheckpointImage(50, _digest(model))
    (tmp_path / "step-50" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match="missing shard model-00002-of-00002.safetensors"):
        _read(tmp_path / "step-50")
    (tmp_path / "step-50" / "model.safetensors.index.json").write_text('{"weight_map": ')  # torn index
    with pytest.raises(ValueError, match="not a complete safetensors index"):
        _read(tmp_path / "step-50")


# -- Lightning ----------------------------------------------------------------------------------

def test_a_lightning_ckpt_keeps_the_lightning_modules_own_names(tmp_path):
    """The LightningModule's state dict (``model.`` prefix and all) is what the adapter's twin
    hashes: read as it is, no prefix dropped."""
    model = torch.nn.Module()
    model.model = _model()
    path = tmp_path / "epoch=0-step=6.ckpt"
    torch.save({"state_dict": model.state_dict(), "global_step": 7, "loops": {}}, path)
    assert _read(path) == CheckpointImage(7, _digest(model))
    assert _read(path) != CheckpointImage(7, _digest(model.model))
    torch.save({"epoch": 0}, path)
    with pytest.raises(ValueError, match="holds no Lightning state_dict"):
        _read(path)
    torch.save({"state_dict": model.state_dict(), "global_step": 7}, path)
    _truncate(path)
    with pytest.raises(ValueError, match="not a complete Lightning checkpoint"):
        _read(path)


# -- HF Trainer and Accelerate folders ----------------------------------------------------------

def _trainer_checkpoint(directory, model: torch.nn.Module, step: int, *, safetensors: bool = True,
                        state: bool = True) -> None:
    """A transformers Trainer ``checkpoint-N`` folder, as ``_save_checkpoint`` leaves it."""
    directory.mkdir(parents=True)
    if safetensors:
        save_file(model.state_dict(), directory / "model.safetensors", metadata={"format": "pt"})
    else:
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    (directory / "config.json").write_text("{}")
    torch.save({"state": {}, "param_groups": []}, directory / "optimizer.pt")
    torch.save({"last_epoch": step}, directory / "scheduler.pt")
    torch.save({"python": None, "cpu": torch.get_rng_state()}, directory / "rng_state.pth")
    torch.save({"output_dir": str(directory.parent)}, directory / "training_args.bin")
    if state:
        (directory / "trainer_state.json").write_text(json.dumps({
            "global_step": step, "epoch": 1.0, "log_history": [],
            "best_model_checkpoint": str(directory.parent / "checkpoint-10")}))


def _accelerate_folder(directory, model: torch.nn.Module, *, last: bool = True) -> None:
    """An ``Accelerator.save_state`` folder, in the order it writes it."""
    directory.mkdir(parents=True)
    save_file(model.state_dict(), directory / "model.safetensors", metadata={"format": "pt"})
    torch.save({"state": {}, "param_groups": []}, directory / "optimizer.bin")
    torch.save({"last_epoch": 1}, directory / "scheduler.bin")
    if last:
        torch.save({"step": 0, "torch_manual_seed": torch.get_rng_state()}, directory / "random_states_0.pkl")


def test_an_hf_trainer_checkpoint_reads_its_weights_and_global_step(tmp_path):
    model = _model()
    _trainer_checkpoint(tmp_path / "checkpoint-20", model, 20)
    assert _read(tmp_path / "checkpoint-20") == CheckpointImage(20, _digest(model))
    _trainer_checkpoint(tmp_path / "bin" / "checkpoint-25", model, 25, safetensors=False)
    assert _read(tmp_path / "bin" / "checkpoint-25") == CheckpointImage(25, _digest(model))
    _trainer_checkpoint(tmp_path / "cut" / "checkpoint-30", model, 30, state=False)
    with pytest.raises(ValueError, match="no trainer_state.json"):
        _read(tmp_path / "cut" / "checkpoint-30")
    _truncate(tmp_path / "checkpoint-20" / "model.safetensors")
    with pytest.raises(ValueError, match="not a complete safetensors checkpoint"):
        _read(tmp_path / "checkpoint-20")


def test_an_hf_trainer_checkpoint_with_sharded_weights(tmp_path):
    model = _model()
    _sharded(tmp_path / "checkpoint-8", model)
    (tmp_path / "checkpoint-8" / "trainer_state.json").write_text('{"global_step": 8}')
    assert _detected(tmp_path / "checkpoint-8") == "hf"
    assert _read(tmp_path / "checkpoint-8") == CheckpointImage(8, _digest(model))


class _Tied(torch.nn.Module):
    """A language model's head tied to its token embedding, as GPT-2's is."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wte = torch.nn.Embedding(5, 3)
        self.lm_head = torch.nn.Linear(3, 5, bias=False)
        self.lm_head.weight = self.wte.weight


def test_a_tied_weight_save_pretrained_left_out_is_put_back_as_the_live_model_holds_it(tmp_path, monkeypatch):
    """save_pretrained writes one of two tied names; the live state dict (the twin's digest)
    has both: without the tie put back every checkpoint of such a model read as stale."""
    from chaos.ckptformat import hf

    model = _Tied()
    monkeypatch.setattr(hf, "_tied_keys", lambda arch: {"lm_head.weight": "wte.weight"} if arch == "TiedLM" else {})
    _trainer_checkpoint(tmp_path / "checkpoint-5", _model(), 5)  # its weights replaced by the tied model's:
    save_file({"wte.weight": model.wte.weight.detach().clone()}, tmp_path / "checkpoint-5" / "model.safetensors")
    (tmp_path / "checkpoint-5" / "config.json").write_text('{"architectures": ["TiedLM"]}')
    assert _read(tmp_path / "checkpoint-5") == CheckpointImage(5, _digest(model))
    (tmp_path / "checkpoint-5" / "config.json").write_text('{"architectures": ["TiedLM"], "tie_word_embeddings": false}')
    assert _read(tmp_path / "checkpoint-5") != CheckpointImage(5, _digest(model))


def test_what_save_pretrained_really_writes_of_a_tied_model_reads_as_the_live_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=11, n_positions=4, n_embd=8,
                                                                 n_layer=1, n_head=2))
    model.save_pretrained(str(tmp_path / "checkpoint-3"))
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
    assert _read(tmp_path / "checkpoint-3") == CheckpointImage(3, _digest(model))


def test_an_accelerate_save_state_folder_takes_its_step_from_its_name_or_the_saver(tmp_path):
    model = _model()
    _accelerate_folder(tmp_path / "step_40", model)
    assert _read(tmp_path / "step_40") == CheckpointImage(40, _digest(model))
    _accelerate_folder(tmp_path / "checkpoint_3", model)  # automatic naming counts saves, not steps
    assert _read(tmp_path / "checkpoint_3") == CheckpointImage(None, _digest(model))
    _accelerate_folder(tmp_path / "step_45", model, last=False)
    with pytest.raises(ValueError, match="no random_states_0.pkl"):
        _read(tmp_path / "step_45")


def test_what_accelerate_save_state_really_writes_is_read(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state(str(tmp_path / "step_12"))
    assert _detected(tmp_path / "step_12") == "hf"
    assert _read(tmp_path / "step_12") == CheckpointImage(12, probe.state_dict_digest(
        accelerator.unwrap_model(model).state_dict()))


# -- detection ----------------------------------------------------------------------------------

def _layouts(tmp_path) -> dict[str, str]:
    """One checkpoint of each format's layout: path -> the format that must claim it alone."""
    model = _model()
    torch.save({"model": model.state_dict()}, tmp_path / "file.pt")
    (tmp_path / "dir").mkdir()
    torch.save(model.state_dict(), tmp_path / "dir" / "model.pt")
    _dcp_save(tmp_path / "dcp", {"model": model.state_dict()})
    save_file(model.state_dict(), tmp_path / "one.safetensors")
    _sharded(tmp_path / "shards", model)
    torch.save({"state_dict": model.state_dict(), "global_step": 1}, tmp_path / "x.ckpt")
    _trainer_checkpoint(tmp_path / "checkpoint-5", model, 5)
    _accelerate_folder(tmp_path / "step_5", model)
    return {"file.pt": "torch_save", "dir": "torch_save", "dcp": "dcp", "one.safetensors": "safetensors",
            "shards": "safetensors", "x.ckpt": "lightning", "checkpoint-5": "hf", "step_5": "hf"}


def test_each_layout_is_claimed_by_its_own_format_alone(tmp_path):
    for name, expected in _layouts(tmp_path).items():
        claimed = [cls.name for cls in ckptformat.known_formats() if cls().detect(str(tmp_path / name))]
        assert claimed == [expected], name
    (tmp_path / "notes.txt").write_text("step 3")
    assert _detected(tmp_path / "notes.txt") is None
    assert _detected(tmp_path / "missing-dir") is None


# -- auditors -----------------------------------------------------------------------------------

def test_the_torch_save_audit_reads_each_file_and_the_latest_pointer(tmp_path):
    for step in (10, 20):
        torch.save({"model": _model(step).state_dict(), "step": step}, tmp_path / f"step-{step}.pt")
    (tmp_path / "step-30.pt.tmp").write_bytes(b"PK\x03\x04half")  # a write in progress: not counted
    (tmp_path / "latest").write_text("step-20.pt\n")
    assert ckptformat.audit_checkpoints(str(tmp_path)) == CheckpointAudit(complete=(10, 20), pointer=20)
    _truncate(tmp_path / "step-20.pt")
    audit = _audit(tmp_path)
    assert audit.complete == (10,) and "not a complete torch.save" in audit.torn[20] and audit.dangling
    (tmp_path / "latest").write_text("step-99.pt")
    assert _audit(tmp_path).pointer == -1  # names nothing there


def test_the_dcp_audit_follows_the_examples_latest_marker(tmp_path):
    model = _model()
    _dcp_save(tmp_path / "step-00000002", {"model": model.state_dict()})
    _dcp_save(tmp_path / "step-00000004", {"model": model.state_dict()})
    (tmp_path / "latest").write_text("step-00000004\n")
    assert ckptformat.audit_checkpoints(str(tmp_path)) == CheckpointAudit(complete=(2, 4), pointer=4)
    (tmp_path / "step-00000004" / ".metadata").unlink()  # what a crash before DCP's finish leaves
    audit = _audit(tmp_path)
    assert audit.complete == (2,) and 4 in audit.torn and audit.pointer == 4 and audit.dangling


def test_the_safetensors_audit_has_no_pointer(tmp_path):
    save_file(_model().state_dict(), tmp_path / "step-1.safetensors")
    save_file(_model().state_dict(), tmp_path / "step-2.safetensors")
    _truncate(tmp_path / "step-2.safetensors")
    audit = _audit(tmp_path)
    assert audit.complete == (1,) and list(audit.torn) == [2] and audit.pointer is None


def test_the_lightning_audit_takes_last_ckpt_as_its_pointer(tmp_path):
    model = _model()
    for step in (5, 10):
        torch.save({"state_dict": model.state_dict(), "global_step": step}, tmp_path / f"epoch=0-step={step}.ckpt")
    os.symlink("epoch=0-step=10.ckpt", tmp_path / "last.ckpt")
    assert ckptformat.audit_checkpoints(str(tmp_path)) == CheckpointAudit(complete=(5, 10), pointer=10)
    _truncate(tmp_path / "epoch=0-step=10.ckpt")
    audit = _audit(tmp_path)
    assert audit.complete == (5,) and 10 in audit.torn and audit.dangling
    # save_last as a copy, the file it copied pruned: the copy is the complete checkpoint
    (tmp_path / "last.ckpt").unlink()
    (tmp_path / "epoch=0-step=10.ckpt").unlink()
    torch.save({"state_dict": model.state_dict(), "global_step": 10}, tmp_path / "last.ckpt")
    assert ckptformat.audit_checkpoints(str(tmp_path)) == CheckpointAudit(complete=(5, 10), pointer=10)
    _truncate(tmp_path / "last.ckpt")
    assert ckptformat.audit_checkpoints(str(tmp_path)) == CheckpointAudit(complete=(5,), pointer=-1)


def test_the_hf_audit_keeps_no_pointer_and_ignores_best_model_checkpoint(tmp_path):
    model = _model()
    _trainer_checkpoint(tmp_path / "checkpoint-10", model, 10)
    _trainer_checkpoint(tmp_path / "checkpoint-20", model, 20, state=False)  # cut before trainer_state.json
    audit = _audit(tmp_path)
    assert audit.complete == (10,) and "no trainer_state.json" in audit.torn[20] and audit.pointer is None


def test_a_command_workload_audits_by_the_format_its_entries_show(tmp_path):
    torch.save({"model": _model().state_dict(), "step": 10}, tmp_path / "step-10.pt")
    (tmp_path / "LATEST").write_text("10")
    (tmp_path / "train.log").write_text("step 10")
    assert _command().audit_checkpoints(str(tmp_path)) == CheckpointAudit(complete=(10,), pointer=10)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _command().audit_checkpoints(str(empty)) is None


# -- the hook and the format's name ----------------------------------------------------------------

HOOK = textwrap.dedent(
    """
    import json, torch

    def read(path):
        with open(path) as fh:
            doc = json.load(fh)
        if "weights" not in doc:
            raise ValueError("no weights in it")
        return doc["step"], {"w": torch.tensor(doc["weights"])}

    def wrong(path):
        return {"w": 1}

    NOT_A_FUNCTION = 3
    """
)


@pytest.fixture
def hook_module(tmp_path, monkeypatch):
    (tmp_path / "my_ckpt_hook.py").write_text(HOOK)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_ckpt_hook"


def test_a_hook_reads_what_no_built_in_format_knows(tmp_path, hook_module, monkeypatch):
    path = tmp_path / "ckpt.json"
    path.write_text(json.dumps({"step": 4, "weights": [1.0, 2.0]}))
    assert _command().read_checkpoint(str(path)) is None  # no format knows it
    monkeypatch.setenv(FORMAT_ENV, f"{hook_module}:read")
    assert _command().read_checkpoint(str(path)) == CheckpointImage(
        4, probe.state_dict_digest({"w": torch.tensor([1.0, 2.0])}))
    path.write_text(json.dumps({"step": 4}))
    with pytest.raises(ValueError, match="no weights in it"):
        _command().read_checkpoint(str(path))
    monkeypatch.setenv(FORMAT_ENV, f"{hook_module}:wrong")
    with pytest.raises(ValueError, match="returned dict, not"):
        _command().read_checkpoint(str(path))


@pytest.mark.parametrize(("spec", "why"), [
    ("no_such_module_here:read", "cannot be imported"),
    ("my_ckpt_hook:nope", "'nope' in module 'my_ckpt_hook': not found"),
    ("my_ckpt_hook:NOT_A_FUNCTION", "not callable"),
    (":read", "is not module:function"),
    ("protobuf", "unknown checkpoint format 'protobuf'"),
])
def test_a_bad_hook_or_format_name_is_a_located_error_listing_the_allowed(hook_module, monkeypatch, spec, why):
    from chaos.runner.suite import preflight

    monkeypatch.setenv(FORMAT_ENV, spec)
    with pytest.raises(ScenarioError, match=why) as caught:
        preflight([])  # before anything starts, not at the first save
    issue = caught.value.issues[0]
    assert issue.location == FORMAT_ENV and caught.value.exit_code == 2
    assert "allowed: dcp, deepspeed, lightning, hf, safetensors, torch_save, or module:function" in issue.message


def test_a_declared_format_is_tried_first_and_the_layout_decides_otherwise(tmp_path):
    model = _model()
    torch.save({"model": model.state_dict(), "step": 2}, tmp_path / "step-2.pt")
    # a lightning kind whose script saves torch.save files is still read
    assert ckptformat.read_checkpoint(str(tmp_path / "step-2.pt"), "lightning") == CheckpointImage(2, _digest(model))
    with pytest.raises(KeyError):  # a kind declaring a format nobody registered: its bug
        ckptformat.read_checkpoint(str(tmp_path / "step-2.pt"), "nope")


def test_a_format_registered_by_a_plugin_is_detected(tmp_path):
    from chaos.ckptformat.base import CheckpointFormat
    from chaos.ckptformat.records import LoadedState

    class Npz(CheckpointFormat):
        name = "test_npz"
        precedence = 5

        def detect(self, path: str) -> bool:
            return path.endswith(".npz")

        def load(self, path: str) -> LoadedState:
            return LoadedState(step=1, model={"w": torch.ones(1)})

    ckptformat.register_format(Npz)
    try:
        assert _read(tmp_path / "x.npz") == CheckpointImage(1, probe.state_dict_digest({"w": torch.ones(1)}))
    finally:
        ckptformat.FORMATS.unregister("test_npz")


# -- the freshness reader and the kinds ----------------------------------------------------------

def test_the_reader_takes_the_save_events_step_for_a_checkpoint_that_records_none(tmp_path):
    from chaos.runner.freshness import CheckpointReader

    model = _model()
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    emitted: list[tuple[str, dict]] = []
    reader = CheckpointReader(_command(), lambda kind, **f: emitted.append((kind, f)))
    reader.offer({"kind": "ckpt_save_end", "step": 6, "path": str(tmp_path / "weights.pt"), "src": "rank-0"})
    reader.offer({"kind": "ckpt_save_end", "step": 7, "path": str(tmp_path / "notes.txt"), "src": "rank-0"})
    assert reader.close()
    assert [(kind, f["step"], f.get("digest")) for kind, f in emitted] == [("ckpt_image", 6, _digest(model))]


def test_accelerate_torchft_and_nvrx_read_by_format(tmp_path):
    from chaos.workload import lookup_workload

    model = _model()
    _accelerate_folder(tmp_path / "step_40", model)
    torch.save({"model": model.state_dict(), "step": 3}, tmp_path / "step-3.pt")
    for kind in ("accelerate", "torchft", "nvrx_inprocess"):
        workload = lookup_workload(kind)(WorkloadSpec(kind=kind, options={}))
        assert workload.read_checkpoint(str(tmp_path / "step_40")) == CheckpointImage(40, _digest(model)), kind
        assert workload.read_checkpoint(str(tmp_path / "step-3.pt")) == CheckpointImage(3, _digest(model)), kind


def test_trainchaos_run_refuses_a_bad_format_before_anything_starts(tmp_path, monkeypatch):
    import yaml
    from click.testing import CliRunner

    from chaos.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"name": "s", "workload": {"command": "python train.py", "steps": 5},
                                        "topology": {"nodes": 1, "ranks_per_node": 1}, "faults": []}))
    monkeypatch.setenv(FORMAT_ENV, "no_such_module_here:read")
    result = CliRunner().invoke(cli, ["run", str(scenario), "--out", str(tmp_path / "out")])
    # main() prints a ScenarioError as it is and exits with its code, 2
    assert isinstance(result.exception, ScenarioError) and result.exception.exit_code == 2, result.output
    assert "TRAINCHAOS_CHECKPOINT_FORMAT: checkpoint hook 'no_such_module_here:read'" in str(result.exception)
    assert not (tmp_path / "out").exists()


def test_a_whole_file_under_a_temporary_name_is_no_complete_checkpoint_so_a_pointer_to_it_dangles(tmp_path):
    """``step-20.pt.tmp`` reads whole (the save wrote it all, the rename never came): the
    job's loader never takes it, so it is not complete, and ``latest`` naming step 20 dangles."""
    model = _model()
    torch.save({"model": model.state_dict(), "step": 10}, tmp_path / "step-10.pt")
    torch.save({"model": model.state_dict(), "step": 20}, tmp_path / "step-20.pt.tmp")
    (tmp_path / "latest").write_text("20")
    audit = _audit(tmp_path)
    assert (audit.complete, audit.torn, audit.pointer, audit.dangling) == ((10,), {}, 20, True)
    os.rename(tmp_path / "step-20.pt.tmp", tmp_path / "step-20.pt")
    audit = _audit(tmp_path)
    assert (audit.complete, audit.pointer, audit.dangling) == ((10, 20), 20, False)
