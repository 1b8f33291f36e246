"""A plain ``torch.save`` training loop with the classic checkpoint bugs, for
``benchmarks/ckpt_chaos_compare.py``: the ``latest`` pointer is written *before* the data, the
data goes straight to its final name (no temporary name, no rename) and nothing is fsynced.
The resume trusts the pointer: no fallback to an older checkpoint.

Runs unchanged under both tools: ``ckpt-chaos run -- python plain_loop.py --out {out}`` (a
single process) and a trainchaos ``command`` workload (torchrun, one rank; the probe reports
progress, saves, the load and the final digest, and is a no-op outside trainchaos)."""

from __future__ import annotations

import argparse
import os
import time

import torch

from chaos import probe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.05)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    probe.emit("rank_start", rank=0, world_size=1, pid=os.getpid(), node=int(os.environ.get("TRAINCHAOS_NODE", 0)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    pointer = os.path.join(args.out, "latest")
    if os.path.exists(pointer):
        with open(pointer, encoding="utf-8") as fh:
            named = int(fh.read())  # an empty or torn pointer raises: the job is down
        state = torch.load(os.path.join(args.out, f"step-{named}.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
        probe.emit("ckpt_load", step=step, tier="shared", verified=False, path=pointer)
    print(f"resumed from step {step}", flush=True)
    while step < args.steps:
        step += 1
        gen = torch.Generator().manual_seed(1000 * step)
        x = torch.randn(16, 8, generator=gen)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        probe.step_end(step, loss.item())
        probe.state_digest(step, model=model)
        if step % args.every == 0:
            path = os.path.join(args.out, f"step-{step}.pt")
            probe.emit("ckpt_save_start", step=step, tier="shared", path=path)
            with open(pointer, "w", encoding="utf-8") as fh:  # bug 1: the pointer first
                fh.write(str(step))
            # bug 2: the final name at once, no fsync, no rename
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, path)
            probe.emit("ckpt_save_end", step=step, tier="shared", path=path)
        time.sleep(args.sleep)
    torch.save(model.state_dict(), os.path.join(args.out, "final.pt"))
    probe.final_state(step, model=model)


if __name__ == "__main__":
    main()
