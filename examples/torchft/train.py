"""A tiny torchft job in the shape of torchft's own ``train_ddp.py``: one torchrun per replica
group, a lighthouse that forms a quorum each step, DDP across the groups through the
Manager, gloo on CPU, synthetic data from a seed.

Alone (two replica groups of one rank, on this machine)::

    torchft_lighthouse --min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 10000 &
    export TORCHFT_LIGHTHOUSE=http://localhost:29510
    REPLICA_GROUP_ID=0 NUM_REPLICA_GROUPS=2 torchrun --standalone --nproc-per-node 1 \\
        examples/torchft/train.py --steps 40 &
    REPLICA_GROUP_ID=1 NUM_REPLICA_GROUPS=2 torchrun --master-port 29601 --nnodes 1 \\
        --nproc-per-node 1 examples/torchft/train.py --steps 40

Under trainchaos (``workload: {torchft: {...}}``) the same script runs unchanged; the one
line ``--chaos`` turns on (``chaos.adapters.torchft.instrument``) reports its progress,
quorums, heals and final digest. Every replica group starts from the same seeded weights
(``init_sync=False``, as torchft's docs advise when weights are seeded) and each step's
batch is drawn from (seed, step, replica group), so a run is the same run each time as long
as the same groups take part in each step.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from datetime import timedelta

import torch
from torch import nn, optim
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

from chaos import probe


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="steps the job trains (committed steps)")
    parser.add_argument("--seed", type=int, default=0, help="weights and data seed")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pg-timeout", type=float, default=5.0,
                        help="seconds a gloo collective may wait for a peer before the step is "
                             "abandoned (ProcessGroupGloo(timeout=...)): how long survivors stall "
                             "when a replica group dies mid-step")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds for the Manager's own calls (should_commit, checkpoint "
                             "transfer to a healing group)")
    parser.add_argument("--quorum-timeout", type=float, default=30.0,
                        help="seconds a quorum request may wait for the lighthouse")
    parser.add_argument("--min-replicas", type=int, default=1,
                        help="replica groups a step needs to commit")
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds of simulated compute per step (keeps CPU load low)")
    parser.add_argument("--digest-out", default=None,
                        help="write the final model's SHA-256 here (group rank 0 of each group)")
    parser.add_argument("--chaos", action="store_true",
                        help="report to trainchaos through chaos.adapters.torchft")
    return parser.parse_args(argv)


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def batch(seed: int, step: int, group: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + group)
    x = torch.randn(size, 32, generator=gen)
    return x, (x[:, :4].sum(dim=1) > 0).long() + 2 * (x[:, 4:8].sum(dim=1) > 0).long()


def sample_ids(step: int, group: int, groups: int, size: int) -> range:
    """The indices of the samples ``batch`` draws: step ``step``'s data is slots
    ``step * groups * size`` on, each replica group's share a contiguous run (as
    ``torchft.data.DistributedSampler`` shards by replica group). torchft hands its Manager no
    data, so the example reports them itself (one line, ``probe.samples``); a detached probe
    (outside trainchaos) ignores the call."""
    first = (step * groups + group) * size
    return range(first, first + size)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    group = int(os.environ.get("REPLICA_GROUP_ID", "0"))
    groups = int(os.environ.get("NUM_REPLICA_GROUPS", "1"))
    torch.manual_seed(args.seed)
    model = TinyNet()
    inner = optim.SGD(model.parameters(), lr=0.05)

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=args.pg_timeout)),
        min_replica_size=args.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_ddp_{group}",
        timeout=timedelta(seconds=args.timeout),
        quorum_timeout=timedelta(seconds=args.quorum_timeout),
        connect_timeout=timedelta(seconds=args.timeout),
        init_sync=False,
    )
    if args.chaos:
        from chaos.adapters import torchft as chaos_torchft

        manager = chaos_torchft.instrument(manager, model=model)
    ddp = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, inner)
    loss_fn = nn.CrossEntropyLoss()
    while manager.current_step() < args.steps:
        optimizer.zero_grad()  # starts the quorum for this step
        x, y = batch(args.seed, manager.current_step(), group, args.batch)
        probe.samples(sample_ids(manager.current_step(), group, groups, args.batch))  # the data checker's input
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optimizer.step()  # commits (steps the optimizer) only if every group's step went through
        if args.step_sleep:
            import time

            time.sleep(args.step_sleep)
    if args.digest_out and int(os.environ.get("RANK", "0")) == 0:
        with open(args.digest_out, "w", encoding="utf-8") as fh:
            fh.write(digest(model) + "\n")
    manager.shutdown(wait=False)
    return 0


def digest(model: nn.Module) -> str:
    """SHA-256 over every tensor of the model, in name order: equal exactly when bitwise equal."""
    sha = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        sha.update(name.encode())
        sha.update(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
