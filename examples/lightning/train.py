"""A small Lightning job: DDP on CPU (gloo), synthetic data, a checkpoint every few steps,
resumed from the last one when it restarts.

    torchrun --nproc-per-node 2 examples/lightning/train.py --steps 40 --ckpt-dir /tmp/ckpt
    python examples/lightning/train.py --steps 40 --ckpt-dir /tmp/ckpt        # one process

Its one line for trainchaos is the ``ChaosCallback`` (``--no-adapter`` leaves it out, for
the test that the adapter changes nothing). Without TRAINCHAOS_EVENTS_DIR the callback is a
no-op, so the script runs the same outside trainchaos.
"""

from __future__ import annotations

import argparse
import os
import warnings
from datetime import timedelta

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(pl.LightningModule):
    """A two-layer MLP on a fixed random linear target."""

    def __init__(self, features: int, hidden: int, lr: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.lr = lr

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.print(f"step {self.global_step + 1} loss {loss.item():.6f}") if self.global_rank == 0 else None
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def synthetic(seed: int, samples: int, features: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=gen)
    w = torch.randn(features, 1, generator=gen)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(samples, 1, generator=gen))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go and resume from")
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--epoch-steps", type=int, default=None,
                   help="steps in one pass over the data (default: --every, so each checkpoint ends "
                        "an epoch; otherwise checkpoints fall mid-epoch)")
    p.add_argument("--batch", type=int, default=16, help="batch per rank")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds of extra work per step (a slower job, for scenarios)")
    p.add_argument("--pg-timeout", type=float, default=None,
                   help="seconds a collective waits for a peer before failing (Lightning's "
                        "default: 30 min, so a frozen or cut-off peer blocks the job that long)")
    p.add_argument("--no-adapter", action="store_true", help="leave the trainchaos callback out")
    return p.parse_args(argv)


class _Sleep(pl.Callback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: object) -> None:
        import time

        time.sleep(self.seconds)


def _timeout(seconds: float | None) -> timedelta:
    from torch.distributed.constants import default_pg_timeout

    return default_pg_timeout if seconds is None else timedelta(seconds=seconds)


def main(argv: list[str] | None = None) -> str | None:
    """Train; the final model's digest on global rank 0 (None on the others)."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    pl.seed_everything(args.seed, workers=True)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    model = Regressor(args.features, args.hidden, args.lr)
    # By default one epoch is one checkpoint interval: with a plain DataLoader (not resumable:
    # no state_dict) Lightning restarts an interrupted epoch's data from its first batch, so a
    # resume lands on the data an uninterrupted run saw next only when checkpoints fall on
    # epoch ends. --epoch-steps puts them mid-epoch (scenarios/stacks/lightning/kill-mid-epoch-data.yaml).
    data = synthetic(args.seed, args.batch * world * (args.epoch_steps or args.every), args.features)
    loader = DataLoader(data, batch_size=args.batch, shuffle=False)
    callbacks: list[pl.Callback] = [ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.every,
                                                    save_top_k=1, save_last=True)]
    if args.step_sleep:
        callbacks.append(_Sleep(args.step_sleep))
    if not args.no_adapter:
        from chaos.adapters.lightning import ChaosCallback

        callbacks.append(ChaosCallback())
    trainer = pl.Trainer(
        accelerator="cpu", devices=local_world, num_nodes=world // local_world,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=_timeout(args.pg_timeout))
        if world > 1 else "auto",
        max_steps=args.steps, max_epochs=-1, callbacks=callbacks, logger=False,
        enable_progress_bar=False, enable_model_summary=False, deterministic=True,
        use_distributed_sampler=world > 1,
    )
    last = os.path.join(args.ckpt_dir, "last.ckpt")
    trainer.fit(model, loader, ckpt_path=last if os.path.exists(last) else None)
    if trainer.global_rank != 0:
        return None
    from chaos.probe import model_digest

    digest = model_digest(model)
    print(f"final step {trainer.global_step} digest {digest}", flush=True)
    return digest


if __name__ == "__main__":
    main()
