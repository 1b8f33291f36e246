"""A small Accelerate job: an Accelerator on CPU (gloo under torchrun), synthetic data,
``save_state`` every few steps into ``step_<N>`` folders, resumed from the newest with
``load_state`` when it restarts, mid-epoch as Accelerate's examples resume: the epoch from
the step, and ``accelerator.skip_first_batches`` for the batches of it already trained.

    torchrun --nproc-per-node 2 examples/accelerate/train.py --steps 40 --ckpt-dir /tmp/ckpt
    python examples/accelerate/train.py --steps 40 --ckpt-dir /tmp/ckpt          # one process

Its one line for trainchaos is ``instrument(accelerator, ...)`` (``--no-adapter`` leaves it
out, for the test that the adapter changes nothing). Without TRAINCHAOS_EVENTS_DIR the
adapter's reports are no-ops, so the script runs the same outside trainchaos.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from datetime import timedelta

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, InitProcessGroupKwargs, set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

_STEP_DIR = re.compile(r"^step_(\d+)$")


def synthetic(seed: int, samples: int, features: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=gen)
    w = torch.randn(features, 1, generator=gen)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(samples, 1, generator=gen))


def newest_checkpoint(ckpt_dir: str) -> tuple[int, str] | None:
    """The newest ``step_<N>`` folder, as Accelerate's examples pick where to resume."""
    found = [(int(m.group(1)), os.path.join(ckpt_dir, name))
             for name in (os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else ())
             if (m := _STEP_DIR.match(name))]
    return max(found) if found else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go and resume from")
    p.add_argument("--every", type=int, default=5, help="save_state every N steps")
    p.add_argument("--keep", type=int, default=2, help="checkpoint folders kept (older ones removed)")
    p.add_argument("--epoch-steps", type=int, default=None,
                   help="steps in one pass over the data (default: --every, so each resume starts "
                        "a pass; otherwise checkpoints fall mid-epoch)")
    p.add_argument("--shuffle", action="store_true",
                   help="shuffle each epoch (Accelerate's seedable sampler: the order follows the epoch)")
    p.add_argument("--batch", type=int, default=16, help="batch per process")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds of extra work per step (a slower job, for scenarios)")
    p.add_argument("--pg-timeout", type=float, default=None,
                   help="seconds a collective waits for a peer before failing (torch's default "
                        "for gloo: 30 min, so a frozen or cut-off peer blocks the job that long)")
    p.add_argument("--no-adapter", action="store_true", help="leave the trainchaos adapter out")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> str | None:
    """Train; the final model's digest on the main process (None on the others)."""
    args = parse_args(argv)
    handlers = [] if args.pg_timeout is None else [InitProcessGroupKwargs(timeout=timedelta(seconds=args.pg_timeout))]
    accelerator = Accelerator(cpu=True, kwargs_handlers=handlers,
                              dataloader_config=DataLoaderConfiguration(use_seedable_sampler=args.shuffle))
    set_seed(args.seed)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    epoch_steps = args.epoch_steps or args.every
    data = synthetic(args.seed, args.batch * accelerator.num_processes * epoch_steps, args.features)
    loader = DataLoader(data, batch_size=args.batch, shuffle=args.shuffle)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if not args.no_adapter:
        from chaos.adapters.accelerate import instrument

        instrument(accelerator, model=model, optimizer=optimizer)

    step = 0
    if (newest := newest_checkpoint(args.ckpt_dir)) is not None:
        step, path = newest
        accelerator.load_state(path)
        accelerator.print(f"resumed from {path} at step {step}")
    # Where the resumed step falls in the data, as Accelerate's examples (complete_nlp_example)
    # compute it: the epoch, and the batches of it trained before the checkpoint.
    starting_epoch, skip = divmod(step, len(loader))
    model.train()
    epoch = starting_epoch
    while step < args.steps:
        active = accelerator.skip_first_batches(loader, skip) if epoch == starting_epoch and skip else loader
        for x, y in active:
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            accelerator.print(f"step {step} loss {loss.item():.6f}")
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if step % args.every == 0:
                accelerator.save_state(os.path.join(args.ckpt_dir, f"step_{step}"))
                if accelerator.is_main_process:
                    for old in sorted(int(n[5:]) for n in os.listdir(args.ckpt_dir)
                                      if _STEP_DIR.match(n))[:-args.keep]:
                        _remove_tree(os.path.join(args.ckpt_dir, f"step_{old}"))
            if step >= args.steps:
                break
        epoch += 1
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if not accelerator.is_main_process:
        return None
    from chaos.probe import model_digest

    digest = model_digest(accelerator.unwrap_model(model))
    print(f"final step {step} digest {digest}", flush=True)
    return digest


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
