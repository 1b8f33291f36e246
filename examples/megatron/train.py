"""A small Megatron-Core GPT on a CUDA device, data parallel over gloo, checkpointing with
torch.distributed.checkpoint.

    torchrun --nproc-per-node 1 examples/megatron/train.py --steps 30 --ckpt-dir /tmp/ckpt

Needs megatron-core (``pip install 'trainchaos[megatron]'``, pinned 0.16.1) and a CUDA device:
Megatron-Core builds its parallel state on whatever group torch.distributed has (gloo here,
tensor and pipeline parallel size 1: one GPU cannot hold two NCCL ranks), but its models
allocate CUDA buffers. Every rank of a node shares the node's GPU ``LOCAL_RANK`` modulo the
GPUs it has; the gradients are averaged by torch's DDP over gloo.

The data of step N on rank r is drawn from a generator seeded by (seed, N, r), so a resumed
run trains on what an uninterrupted one would have. Checkpoints, ``latest`` and resuming are
the DCP example's (examples/dcp/train.py, loaded from beside this file), and so is the one
line for trainchaos: ``chaos.adapters.dcp`` standing in for DCP's save and load and
reporting steps, bit-flip fault points and the final digest.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from chaos import probe
from chaos.adapters import dcp as chaos_dcp  # the one line: DCP's calls, reported


def _dcp_example() -> Any:
    """examples/dcp/train.py as a module: its checkpoint directory layout and ``latest``."""
    path = Path(__file__).resolve().parent.parent / "dcp" / "train.py"
    spec = importlib.util.spec_from_file_location("trainchaos_dcp_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="optimizer steps to train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go and resume from")
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--pg-timeout", type=float, default=60.0,
                   help="seconds a gloo collective waits for a missing peer")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds of extra host time per step (a slower job, for scenarios)")
    return p


def build(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    """A Megatron-Core GPTModel (local layer spec: no Transformer Engine) on ``device``."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    torch.manual_seed(args.seed)
    model_parallel_cuda_manual_seed(args.seed)
    config = TransformerConfig(num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                               use_cpu_initialization=True, pipeline_dtype=torch.float32)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=args.vocab,
                     max_sequence_length=args.seq_len)
    return model.to(device)


def batch(args: argparse.Namespace, step: int, rank: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Step ``step``'s sequences on ``rank`` (next-token labels, a causal mask), on ``device``."""
    gen = torch.Generator().manual_seed((args.seed * 1_000_003 + step) * 1009 + rank)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=gen)
    positions = torch.arange(args.seq_len).unsqueeze(0).expand(args.batch, -1)
    # True where attention is masked out: every later position
    mask = torch.triu(torch.ones(args.seq_len, args.seq_len, dtype=torch.bool), diagonal=1)[None, None]
    return {"input_ids": tokens[:, :-1].to(device), "position_ids": positions.to(device),
            "attention_mask": mask.to(device), "labels": tokens[:, 1:].to(device)}


def train(args: argparse.Namespace) -> str | None:
    layout = _dcp_example()
    layout.init_distributed(args.pg_timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    chaos_dcp.started(device=str(device))
    core = build(args, device)
    model = torch.nn.parallel.DistributedDataParallel(core, device_ids=[device])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    chaos_dcp.watch(model=core, optimizer=optimizer)  # the tensors a bit flip may reach, on the GPU
    step = layout.resume(chaos_dcp, model, optimizer, args.ckpt_dir)
    loss = None
    while step < args.steps:
        step += 1
        inputs = batch(args, step, rank, device)
        first = ((step - 1) * world + rank) * args.batch
        probe.samples(range(first, first + args.batch))  # the data checker's input
        chaos_dcp.step_begin(step)
        loss = model(**inputs).float().mean()  # GPTModel with labels: the loss of each token
        optimizer.zero_grad()
        loss.backward()
        chaos_dcp.after_backward(step)
        optimizer.step()
        chaos_dcp.step_end(step, loss, model=core)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step % args.every == 0 or step == args.steps:
            layout.save(chaos_dcp, model, optimizer, args.ckpt_dir, step)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    digest = chaos_dcp.final_state(step, core, loss)
    if rank == 0:
        print(f"final step {step} digest {digest}", flush=True)
    dist.destroy_process_group()
    return digest


def main(argv: list[str] | None = None) -> None:
    train(parser().parse_args(argv))


if __name__ == "__main__":
    main()
