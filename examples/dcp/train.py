"""A small DDP (or FSDP2) job on CPU (gloo) checkpointing with torch.distributed.checkpoint.

    torchrun --nproc-per-node 2 examples/dcp/train.py --steps 40 --ckpt-dir /tmp/ckpt
    torchrun --nproc-per-node 2 examples/dcp/train.py --parallel fsdp2 --ckpt-dir /tmp/ckpt
    python examples/dcp/train.py --steps 40 --ckpt-dir /tmp/ckpt          # one process

Every ``--every`` steps each rank writes its part of a DCP checkpoint into
``<ckpt-dir>/step-<8 digits>/``; once DCP returns (its metadata written), rank 0 points the
file ``latest`` at it (written aside, fsynced, renamed: a crash leaves the old marker or the
new one, never half of one) and removes all but the two newest. On start every rank reads
``latest`` and resumes from it. The data of step N on rank r is drawn from a generator seeded
by (seed, N, r), so a resumed run trains on exactly what an uninterrupted one would have:
with the same world size the final weights are bitwise equal.

Its one line for trainchaos is ``chaos.adapters.dcp`` standing in for ``dcp.save`` and
``dcp.load`` (``--no-adapter`` calls DCP directly, for the test that the adapter changes
nothing). Without TRAINCHAOS_EVENTS_DIR the adapter reports nothing, so the script runs the
same outside trainchaos.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from chaos import probe
from chaos.adapters.dcp import state_digest

LATEST = "latest"
"""The marker file naming the newest complete checkpoint directory."""
KEEP = 2
"""Checkpoints kept: the newest may be the one a crash interrupted, the one before is whole."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go and resume from")
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--parallel", choices=("ddp", "fsdp2"), default="ddp",
                   help="DistributedDataParallel, or FSDP2 (fully_shard) with sharded checkpoints")
    p.add_argument("--batch", type=int, default=16, help="batch per rank")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--pg-timeout", type=float, default=30.0,
                   help="seconds a gloo collective waits for a missing peer")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds of extra work per step (a slower job, for scenarios)")
    p.add_argument("--no-adapter", action="store_true", help="call DCP directly, report nothing")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


class _Plain:
    """The script without its trainchaos line: DCP called directly, nothing reported."""

    @staticmethod
    def started() -> None:
        pass

    @staticmethod
    def watch(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        pass

    @staticmethod
    def save(state: dict[str, Any], *, checkpoint_id: str, step: int) -> Any:
        return dcp.save(state, checkpoint_id=checkpoint_id)

    @staticmethod
    def load(state: dict[str, Any], *, checkpoint_id: str, step: int) -> Any:
        return dcp.load(state, checkpoint_id=checkpoint_id)

    @staticmethod
    def step_begin(step: int) -> None:
        pass

    @staticmethod
    def after_backward(step: int) -> None:
        pass

    @staticmethod
    def step_end(step: int, loss: Any = None, model: nn.Module | None = None) -> None:
        pass

    @staticmethod
    def final_state(step: int, model: nn.Module, loss: Any = None) -> str | None:
        return state_digest(model)


def build(args: argparse.Namespace) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(),
                          nn.Linear(args.hidden, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))
    if args.parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    return model, torch.optim.AdamW(model.parameters(), lr=args.lr)


def batch(args: argparse.Namespace, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s data on ``rank``: a fixed random linear target plus noise."""
    target = torch.randn(args.features, 1, generator=torch.Generator().manual_seed(args.seed))
    gen = torch.Generator().manual_seed((args.seed * 1_000_003 + step) * 1009 + rank)
    x = torch.randn(args.batch, args.features, generator=gen)
    return x, x @ target + 0.1 * torch.randn(args.batch, 1, generator=gen)


def sample_ids(args: argparse.Namespace, step: int, rank: int, world: int) -> range:
    """The indices of the samples ``batch`` draws: step ``step``'s global batch is slots
    ``(step - 1) * world * batch`` on, each rank a contiguous run. DCP has no data loader to
    hook, so the example reports them itself (one line, ``probe.samples``): the data position
    is the step, and the data checker judges the step DCP's restore resumed from."""
    first = ((step - 1) * world + rank) * args.batch
    return range(first, first + args.batch)


def checkpoint_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:08d}")


def latest_step(root: str) -> int | None:
    try:
        with open(os.path.join(root, LATEST), encoding="utf-8") as fh:
            name = fh.read().strip()
    except FileNotFoundError:
        return None
    return int(name.removeprefix("step-"))


def mark_latest(root: str, step: int) -> None:
    """Point ``latest`` at step's checkpoint (atomically), then drop all but the newest KEEP."""
    tmp = os.path.join(root, f".{LATEST}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(os.path.basename(checkpoint_dir(root, step)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(root, LATEST))
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    steps = sorted(int(n.removeprefix("step-")) for n in os.listdir(root)
                   if n.startswith("step-") and n.removeprefix("step-").isdigit())
    for old in steps[:-KEEP]:
        shutil.rmtree(checkpoint_dir(root, old), ignore_errors=True)


def resume(ckpt: Any, model: nn.Module, optimizer: torch.optim.Optimizer, root: str) -> int:
    """Load the checkpoint ``latest`` names into ``model`` and ``optimizer`` (through
    ``ckpt``: the adapter or DCP itself); the step it holds, 0 when there is none."""
    os.makedirs(root, exist_ok=True)
    step = latest_step(root) or 0
    if step:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        ckpt.load(state, checkpoint_id=checkpoint_dir(root, step), step=step)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return step


def save(ckpt: Any, model: nn.Module, optimizer: torch.optim.Optimizer, root: str, step: int) -> None:
    """Every rank writes its part of step's checkpoint; then rank 0 points ``latest`` at it."""
    model_state, optim_state = get_state_dict(model, optimizer)
    ckpt.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint_dir(root, step), step=step)
    if dist.get_rank() == 0:
        mark_latest(root, step)


def init_distributed(timeout_s: float, store: dist.Store | None = None) -> None:
    timeout = datetime.timedelta(seconds=timeout_s)
    if store is not None:  # a caller's own (an in-process restart needs a fresh one each time)
        dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    elif "RANK" in os.environ:  # torchrun's environment
        dist.init_process_group("gloo", timeout=timeout)
    else:  # alone: a world of one
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)


def reporter(no_adapter: bool) -> Any:
    """What stands for DCP's save and load: the trainchaos adapter, or DCP itself."""
    if no_adapter:
        return _Plain
    from chaos.adapters import dcp as chaos_dcp  # the one line: DCP's calls, reported

    return chaos_dcp


def train(args: argparse.Namespace, ckpt: Any, store: dist.Store | None = None) -> str | None:
    """Train from the latest checkpoint to ``args.steps``; the final digest (rank 0)."""
    init_distributed(args.pg_timeout, store)
    rank = dist.get_rank()
    ckpt.started()
    model, optimizer = build(args)
    ckpt.watch(model=model, optimizer=optimizer)  # the tensors a bit flip may reach
    step = resume(ckpt, model, optimizer, args.ckpt_dir)
    loss = None
    while step < args.steps:
        step += 1
        x, y = batch(args, step, rank)
        probe.samples(sample_ids(args, step, rank, dist.get_world_size()))  # the data checker's input
        ckpt.step_begin(step)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        ckpt.after_backward(step)
        optimizer.step()
        ckpt.step_end(step, loss, model=model)  # model: the twin's per-step digest
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step % args.every == 0 or step == args.steps:
            save(ckpt, model, optimizer, args.ckpt_dir, step)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    digest = ckpt.final_state(step, model, loss)
    if rank == 0:
        print(f"final step {step} digest {digest}", flush=True)
    dist.destroy_process_group()
    return digest


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    train(args, reporter(args.no_adapter))


if __name__ == "__main__":
    main()
