"""ckpt-chaos's ``hf_trainer`` target as a script trainchaos can run, for
``benchmarks/ckpt_chaos_compare.py``: the same training and checkpointing, written here, not
copied. A tiny GPT-2 (vocabulary 100, one layer of width 32) trained by ``transformers.Trainer``
on the CPU, batch 4 of a 64-sample dataset, ``save_steps`` 5, 30 steps; the Trainer's own
``checkpoint-N/`` folders (no pruning), and the resume is its own
``train(resume_from_checkpoint=True)`` (the highest ``checkpoint-N``, no completeness check).
The one difference: the target stops at step 10 and a second process resumes; here one job
trains 30 steps and trainchaos's crash and torchrun's restart make the resume.

A callback reports progress, the saves (``ckpt_save_start`` before the Trainer saves a step,
``ckpt_save_end`` from ``on_save``, after it), the load and the final digest through the
probe (a no-op outside trainchaos). GPT-2's ``lm_head.weight`` is tied to the token
embedding and left out of ``model.safetensors``; trainchaos's ``hf`` format puts it back
(``chaos/ckptformat/hf.py``), so the live model's plain ``state_digest`` is what each
checkpoint is compared with.
"""

from __future__ import annotations

import os

from chaos import probe

# One process, as the target runs it: torchrun's RANK/LOCAL_RANK/WORLD_SIZE would make the
# Trainer start a one-rank process group and wrap the model in DDP, which the target's single
# process does not do. Dropped before transformers reads them, once the probe has taken its
# name from them (rank-0, as trainchaos's checks know the writer).
if os.environ.get("WORLD_SIZE", "1") == "1":
    probe.get()
    for _name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"):
        os.environ.pop(_name, None)

import torch  # noqa: E402
from _cli import cadence_parser  # noqa: E402  (this folder: the script's own, on sys.path)
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint  # noqa: E402


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(i)
        x = torch.randint(0, 100, (16,), generator=gen)
        return {"input_ids": x, "labels": x.clone()}


class Report(TrainerCallback):
    def __init__(self, save_steps: int) -> None:
        self.save_steps = save_steps

    def on_train_begin(self, args, state, control, model=None, **kw):
        probe.emit("rank_start", rank=0, world_size=1, pid=os.getpid(),
                   node=int(os.environ.get("TRAINCHAOS_NODE", 0)))
        if state.global_step:  # already restored from the checkpoint
            probe.emit("ckpt_load", step=state.global_step, tier="shared", verified=False,
                       path=f"checkpoint-{state.global_step}")

    def on_step_end(self, args, state, control, model=None, **kw):
        step = state.global_step
        probe.step_end(step)
        probe.state_digest(step, model=model)
        if step % self.save_steps == 0:  # the Trainer saves right after this callback
            probe.emit("ckpt_save_start", step=step, tier="shared", path=f"checkpoint-{step}")

    def on_save(self, args, state, control, **kw):
        probe.emit("ckpt_save_end", step=state.global_step, tier="shared",
                   path=f"checkpoint-{state.global_step}")

    def on_train_end(self, args, state, control, model=None, **kw):
        probe.final_state(state.global_step, model=model)


def main() -> None:
    parser = cadence_parser()
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=1, n_head=2))
    targs = TrainingArguments(output_dir=args.out, max_steps=args.steps, save_steps=args.every,
                              per_device_train_batch_size=4, use_cpu=True, report_to=[], logging_steps=1000,
                              seed=0, data_seed=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=Data(), callbacks=[Report(args.every)])
    trainer.train(resume_from_checkpoint=get_last_checkpoint(args.out) is not None or None)


if __name__ == "__main__":
    main()
