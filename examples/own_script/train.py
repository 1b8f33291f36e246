"""A plain DDP training job with its own checkpoints and its own sampler: your script.

    torchrun --nproc-per-node 2 examples/own_script/train.py --ckpt-dir /tmp/ckpt
    python examples/own_script/train.py --ckpt-dir /tmp/ckpt                 # one process

Nothing here is trainchaos's except the few ``probe`` lines, each marked ``# probe:`` with
what it buys; outside trainchaos they are no-ops and the script trains the same.

How a careful user writes it:

* **Deterministic.** The model is built from ``--seed``, the data is a fixed synthetic set,
  and the sampler's order is a permutation seeded by (seed, epoch): the same run twice gives
  bitwise the same weights, which is what lets trainchaos compare a faulted run with a
  fault-free twin.
* **Its own sampler, resumable mid-epoch.** Each step trains one *global* batch: the next
  ``--global-batch`` indices of this epoch's permutation, each rank taking its contiguous
  share. The position (epoch, offset) goes into every checkpoint and comes back on resume, so
  a restart neither repeats nor skips a sample, even in the middle of an epoch (the epoch is
  6 steps by default and a checkpoint every 10: most checkpoints are mid-epoch). The global
  batch does not depend on the world size, so a job that shrinks to fewer ranks after a lost
  node goes on with the same samples.
* **Atomic and durable saves.** Rank 0 writes ``step-N.pt.tmp``, fsyncs it, renames it to
  ``step-N.pt`` and fsyncs the directory: a crash leaves the previous checkpoint or the new
  one, never a half-written file under a finished name (``os.replace`` alone is not durable:
  after a power loss the renamed file can be empty). It keeps the ``--keep`` newest.
* **A failed save is not fatal.** An error while saving (a full or failing disk) is logged
  and training goes on; the previous checkpoints are still there.
* **A careful load.** On start every rank takes the newest ``step-N.pt`` that loads whole
  and passes over one that does not (torn by a crash it did not cause).
* **A finite process-group timeout** (``--pg-timeout``): torch's default for gloo is 30
  minutes, during which a job with a frozen or cut-off peer does nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from chaos import probe  # imports only the standard library; a no-op outside trainchaos


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go and resume from")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to train")
    p.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--keep", type=int, default=3, help="checkpoints kept (the newest N)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset-size", type=int, default=96, help="samples in one epoch")
    p.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks together")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--pg-timeout", type=float, default=30.0,
                   help="seconds a collective waits for a missing peer before the rank exits")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds of extra work per step (a slower job)")
    return p.parse_args()


class ResumableSampler:
    """Epoch-by-epoch permutations of ``range(size)``, one global batch per step; its
    position is part of the checkpoint."""

    def __init__(self, size: int, global_batch: int, seed: int) -> None:
        if size % global_batch:
            raise ValueError(f"dataset size {size} must be a multiple of the global batch {global_batch}: "
                             "a short last batch would change the step's gradient scale")
        self.size, self.global_batch, self.seed = size, global_batch, seed
        self.epoch, self.offset = 0, 0

    def next_batch(self, rank: int, world_size: int) -> tuple[int, list[int]]:
        """(epoch, this rank's indices) of the next global batch; advances the position."""
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))
        batch = order[self.offset:self.offset + self.global_batch].tolist()
        share = self.global_batch // world_size
        epoch = self.epoch
        self.offset += self.global_batch
        if self.offset == self.size:
            self.epoch, self.offset = self.epoch + 1, 0
        return epoch, batch[rank * share:(rank + 1) * share]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])


def synthetic_data(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 8, generator=gen)
    y = (x[:, :4].sin().sum(dim=1, keepdim=True) + 0.1 * torch.randn(size, 1, generator=gen))
    return x, y


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoints(root: str) -> list[tuple[int, str]]:
    """(step, path) of every finished checkpoint in ``root``, newest first."""
    found = []
    for name in os.listdir(root):
        if name.startswith("step-") and name.endswith(".pt") and name[5:-3].isdigit():
            found.append((int(name[5:-3]), os.path.join(root, name)))
    return sorted(found, reverse=True)


def save(root: str, step: int, state: dict, keep: int) -> None:
    path = os.path.join(root, f"step-{step}.pt")
    probe.emit("ckpt_save_start", step=step, tier="shared", path=path)  # probe: what storage faults trigger on
    started = time.monotonic()
    try:
        torch.save(state, path + ".tmp")
        fsync_path(path + ".tmp")
        os.replace(path + ".tmp", path)
        fsync_path(root)
    except (OSError, RuntimeError) as exc:
        # RuntimeError too: torch.save reports an EIO on its write as "RuntimeError:
        # basic_ios::clear: iostream error", not as an OSError (found by eio-checkpoint.yaml:
        # with OSError alone the failed save killed rank 0 and restarted the job).
        print(f"step {step}: checkpoint failed, training on: {exc}", file=sys.stderr, flush=True)
        probe.emit("ckpt_save_failed", step=step, tier="shared", error=str(exc))  # probe: failed saves counted
        return
    seconds = time.monotonic() - started  # the save is synchronous: training waits all of it
    # probe: time blocked in saves (a storage stall's cost); the freshness checker reads the path
    probe.emit("ckpt_save_end", step=step, tier="shared", path=path, seconds=seconds, blocked_seconds=seconds)
    for _, old in checkpoints(root)[keep:]:
        os.remove(old)


def load_newest(root: str) -> dict | None:
    for step, path in checkpoints(root):
        try:
            state = torch.load(path, weights_only=True)
        except Exception as exc:  # torn or truncated: take the one before
            print(f"skipping {path}: {exc}", file=sys.stderr, flush=True)
            continue
        probe.emit("ckpt_load", step=step, tier="shared", path=path)  # probe: resumed-from step, lost steps, data lineage
        return state
    return None


def main() -> None:
    args = parse_args()
    if "RANK" not in os.environ:  # started without torchrun: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # probe: which rank runs where, so faults aimed at a node or rank are measured on the right one
    probe.emit("rank_start", rank=rank, node=int(os.environ.get("TRAINCHAOS_NODE", 0)),
               pid=os.getpid(), world_size=world_size)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = ResumableSampler(args.dataset_size, args.global_batch, args.seed)
    x, y = synthetic_data(args.dataset_size, args.seed)
    probe.watch(model=model, optimizer=optimizer)  # probe: the tensors a bit-flip fault may corrupt

    os.makedirs(args.ckpt_dir, exist_ok=True)
    step, loss = 0, None
    state = load_newest(args.ckpt_dir)
    if state is not None:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        step = state["step"]

    while step < args.steps:
        step += 1
        probe.fault_point("step_begin", step=step)  # probe: where in-process faults (bit flips) land
        epoch, ids = sampler.next_batch(rank, world_size)
        probe.samples(ids, epoch=epoch)  # probe: the exactly-once data checker
        loss = nn.functional.mse_loss(model(x[ids]), y[ids])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # The loss of the whole global batch, not this rank's share: the same number at any
        # world size, so a run that lost a node can be compared with one that did not.
        loss = loss.detach()
        dist.all_reduce(loss)
        loss /= world_size
        probe.step_end(step, loss.item())  # probe: progress (recovery, lost steps, goodput)
        if rank == 0:
            probe.state_digest(step, model=model)  # probe: the fault-free twin's reference for freshness
            if step % args.every == 0:
                save(args.ckpt_dir, step, {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                           "sampler": sampler.state_dict(), "step": step}, args.keep)
        time.sleep(args.step_sleep)
    if rank == 0:
        final_loss = None if loss is None else loss.item()
        probe.final_state(step, model=model, loss=final_loss)  # probe: final weights against the twin's
        print(f"done: step {step}, loss {final_loss}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
