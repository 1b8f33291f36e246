"""A small DeepSpeed job on CPU (gloo): ZeRO stage 1, 2 or 3 chosen by ``--zero-stage``,
``save_checkpoint`` every few steps (tag ``global_step<N>`` and DeepSpeed's ``latest`` file),
resumed with ``load_checkpoint`` when it restarts.

    torchrun --nproc-per-node 2 examples/deepspeed/train.py --zero-stage 3 --steps 40 --ckpt-dir /tmp/ckpt
    python examples/deepspeed/train.py --steps 40 --ckpt-dir /tmp/ckpt          # one process

The data position is what DeepSpeed does not save: the script derives it from the step the
engine restores (``engine.global_steps``). Step N trains on the global batch of sample
indices ``[(N-1)*G, N*G)`` modulo the dataset's size (G: ``--global-batch``), split evenly
between the ranks, so a resumed run trains on exactly what an uninterrupted one would have
(at the same world size the final weights are bitwise equal), and a run resumed at another
data-parallel size (``--universal``: from a universal checkpoint) trains on the same samples.

Its one line for trainchaos is ``instrument(engine)`` (``--no-adapter`` leaves it out, for
the test that the adapter changes nothing). Without TRAINCHAOS_EVENTS_DIR the adapter
reports nothing, so the script runs the same outside trainchaos.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from typing import Any

# DeepSpeed picks its accelerator at import: CPU here (gloo), whatever CUDA the host has.
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from deepspeed.utils import logger as ds_logger  # noqa: E402
from torch import nn  # noqa: E402

# DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce kernel when it starts (a C++
# compiler and seconds per start) that only inference_all_reduce uses; training's collectives
# are gloo's. Left out, so a restart costs what DeepSpeed's training needs and nothing more.
setattr(sys.modules["deepspeed.comm.torch"], "build_shm_op", lambda: None)  # (the attribute deepspeed.comm.torch is torch)
# torch deprecates the collectives DeepSpeed's ZeRO calls, once per call: noise in every log line.
warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")

KEEP = 2
"""Checkpoint tags kept: the newest may be the one a crash interrupted, the one before is whole."""
UNIVERSAL_SUFFIX = "_universal"
"""ds_to_universal's output beside its tag, as DeepSpeed's docs name it."""
TAG_PREFIX = "global_step"
"""DeepSpeed's own default tag (``global_step<N>``)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go and resume from")
    p.add_argument("--every", type=int, default=5, help="save_checkpoint every N steps")
    p.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), default=2, help="ZeRO stage")
    p.add_argument("--global-batch", type=int, default=32,
                   help="samples per step over all ranks (DeepSpeed's train_batch_size)")
    p.add_argument("--samples", type=int, default=1000, help="the dataset's size (an epoch)")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw",
                   help="the client's torch optimizer (ds_to_universal converts only Adam's states)")
    p.add_argument("--universal", action="store_true",
                   help="resume from a universal checkpoint (ds_to_universal's output, tag "
                        "<tag>_universal), e.g. at another data-parallel size")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds of extra work per step (a slower job, for scenarios)")
    p.add_argument("--pg-timeout", type=float, default=30.0,
                   help="seconds a gloo collective waits for a missing peer")
    p.add_argument("--no-adapter", action="store_true", help="leave the trainchaos adapter out")
    return p.parse_args(argv)


def dataset(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression set: a random linear target plus noise."""
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=gen)
    w = torch.randn(args.features, 1, generator=gen)
    return x, x @ w + 0.1 * torch.randn(args.samples, 1, generator=gen)


def batch_indices(args: argparse.Namespace, step: int, rank: int, world: int) -> tuple[torch.Tensor, int]:
    """Step ``step``'s sample indices on ``rank`` (of ``world``) and the epoch they are in."""
    first = (step - 1) * args.global_batch
    micro = args.global_batch // world
    start = first + rank * micro
    return torch.arange(start, start + micro) % args.samples, start // args.samples


def config(args: argparse.Namespace, world: int) -> dict[str, Any]:
    return {
        "train_batch_size": args.global_batch,
        "train_micro_batch_size_per_gpu": args.global_batch // world,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.zero_stage},
        # The client's torch optimizer (DeepSpeed's own Adam needs a compiled op on CPU).
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "checkpoint": {"load_universal": args.universal},
    }


def newest_tag(ckpt_dir: str) -> str | None:
    try:
        with open(os.path.join(ckpt_dir, "latest"), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except FileNotFoundError:
        return None


def universal_tag(ckpt_dir: str, tag: str, rank: int) -> str:
    """The universal checkpoint of ``tag`` (``<tag>_universal``), converted by DeepSpeed's
    ds_to_universal on rank 0 if it is not there yet (into a temporary folder, renamed into
    place: a conversion cut short is never taken for one), the other ranks waiting."""
    universal = f"{tag}{UNIVERSAL_SUFFIX}"
    target = os.path.join(ckpt_dir, universal)
    if rank == 0 and not os.path.isdir(target):
        partial = f"{target}.tmp"
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                        os.path.join(ckpt_dir, tag), "--output_folder", partial,
                        "--num_extract_workers", "1", "--num_merge_workers", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        os.replace(partial, target)
    dist.barrier()
    return universal


def drop_old_tags(ckpt_dir: str) -> None:
    """Remove all but the newest KEEP ``global_step<N>`` folders, and their universal
    conversions (rank 0, after a save)."""
    steps = sorted(int(n[len(TAG_PREFIX):]) for n in os.listdir(ckpt_dir)
                   if n.startswith(TAG_PREFIX) and n[len(TAG_PREFIX):].isdigit())
    for old in steps[:-KEEP]:
        for name in (f"{TAG_PREFIX}{old}", f"{TAG_PREFIX}{old}{UNIVERSAL_SUFFIX}"):
            shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)


def main(argv: list[str] | None = None) -> str | None:
    """Train from the newest checkpoint to ``args.steps``; the final digest (rank 0)."""
    args = parse_args(argv)
    ds_logger.setLevel(logging.WARNING)
    if "RANK" not in os.environ:  # alone: a world of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29531"))
    deepspeed.init_distributed("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(),
                          nn.Linear(args.hidden, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))
    optimizer: torch.optim.Optimizer = (
        torch.optim.AdamW(model.parameters(), lr=args.lr) if args.optimizer == "adamw"
        else torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config(args, world))
    report_samples = None
    if not args.no_adapter:
        from chaos.adapters import deepspeed as chaos_ds  # the one line (and the data position)

        chaos_ds.instrument(engine)
        report_samples = chaos_ds.samples

    os.makedirs(args.ckpt_dir, exist_ok=True)
    if (tag := newest_tag(args.ckpt_dir)) is not None:
        if args.universal:
            tag = universal_tag(args.ckpt_dir, tag, rank)
        path, _ = engine.load_checkpoint(args.ckpt_dir, tag=tag)
        if path is None:
            raise SystemExit(f"load_checkpoint found nothing to load in {args.ckpt_dir} (tag {tag})")
    step = engine.global_steps
    loss = None
    if rank == 0 and step:
        print(f"resumed from {path} at step {step}", flush=True)
    x_all, y_all = dataset(args)
    engine.train()
    while step < args.steps:
        ids, epoch = batch_indices(args, step + 1, rank, world)
        if report_samples is not None:
            report_samples(ids, epoch)
        loss = nn.functional.mse_loss(engine(x_all[ids]), y_all[ids])
        engine.backward(loss)
        engine.step()
        step = engine.global_steps
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if step % args.every == 0:
            engine.save_checkpoint(args.ckpt_dir, tag=f"{TAG_PREFIX}{step}")
            if rank == 0:
                drop_old_tags(args.ckpt_dir)
    if args.no_adapter:
        from chaos.adapters.deepspeed import full_state_digest

        digest = full_state_digest(engine)
    else:
        digest = chaos_ds.final_state(engine, loss)
    if rank == 0:
        print(f"final step {step} digest {digest}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return digest


if __name__ == "__main__":
    main()
