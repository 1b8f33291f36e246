"""What the silent-corruption detectors cost: an A/B per detector, in one run.

    python benchmarks/sdc_bench.py [--repeats 5] [--steps 50] [--out reports/bench]

Two ranks of the harness (the default model, DDP over gloo, async checkpoints every 20 steps,
as a scenario runs it) train one job; the detector settings change between blocks of
``--steps`` steps: each detector alone at its default frequency, and all of them (the
default), each block between two reference blocks with every detector off, ``--repeats``
times. A block's cost is its mean step time (a mean, not a median: the golden self-test and
the digest run every N steps, and a median would hide them); each figure is the median over
repeats of (block mean / mean of the two reference blocks around it - 1). The detectors'
own timing (``run_end.detector_s``: time inside each detector) is reported beside it.

Goal: all detectors together <= 5 % of step time. The machine is shared and noisy: how much two
reference blocks in a row differ (median) is reported as the noise floor.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import replace

VARIANTS = {
    "off": {"nonfinite": False, "spike": False, "digest_every": 0, "golden_every": 0, "ckpt_checksum": False},
    "nonfinite": {"nonfinite": True, "spike": False, "digest_every": 0, "golden_every": 0, "ckpt_checksum": False},
    "spike": {"nonfinite": False, "spike": True, "digest_every": 0, "golden_every": 0, "ckpt_checksum": False},
    "digest": {"nonfinite": False, "spike": False, "golden_every": 0, "ckpt_checksum": False},
    "golden": {"nonfinite": False, "spike": False, "digest_every": 0, "ckpt_checksum": False},
    "ckpt_checksum": {"nonfinite": False, "spike": False, "digest_every": 0, "golden_every": 0},
    "all": {},
}
"""Each variant's changes to the default ``detect`` settings (left out: the default)."""


def _worker(rank: int, world: int, port: int, run_dir: str, repeats: int, steps: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), TRAINCHAOS_NODE=str(rank),
                      OMP_NUM_THREADS="1")
    import torch

    torch.set_num_threads(1)
    from harness.config import config_from_mapping
    from harness.dist import DistEnv
    from harness.sdc import SdcMonitor
    from harness.train import Trainer

    cfg = config_from_mapping({"steps": 1_000_000, "run_dir": run_dir,
                               "checkpoint": {"every_steps": 20, "mode": "async", "keep": 2},
                               "failure": {"watchdog_s": 0}})
    trainer = Trainer(cfg, DistEnv.from_env())
    trainer.setup()
    golden = trainer.sdc.golden
    names = list(VARIANTS)
    results: dict[str, list[float]] = {name: [] for name in names}
    own: dict[str, dict[str, float]] = {name: {} for name in names}

    def block(name: str) -> float:
        detect = replace(cfg.detect, **VARIANTS[name])
        trainer.sdc = SdcMonitor(detect, rank, world, trainer.raw_model, trainer.step,
                                 golden if detect.golden_every else None)
        trainer.checkpoints.verify_checksum = detect.ckpt_checksum
        t0 = time.perf_counter()
        for _ in range(steps):
            step = trainer.step + 1
            saving = trainer.checkpoints.should_save(step)
            trainer.train_step(verify=saving)
            trainer.step = step
            if saving:
                trainer.checkpoints.save(step, trainer._state(), verified=trainer.sdc.checkpoint_record(step))
        trainer.checkpoints.wait()
        elapsed = (time.perf_counter() - t0) / steps
        for key, value in trainer.sdc.detector_seconds().items():
            own[name][key] = own[name].get(key, 0.0) + value
        return elapsed

    for _ in range(2):
        block("all")  # warm-up: first steps of a process are slower, whatever runs them
    tested = [n for n in names if n != "off"]
    for r in range(repeats):
        # off, A, off, B, off, ...: each block is compared with the references around it,
        # so that drifts in machine load hit both sides alike.
        order = tested[r % len(tested):] + tested[:r % len(tested)]
        before = block("off")
        results["off"].append(before)
        for name in order:
            results[name].append(block(name))
            after = block("off")
            results["off"].append(after)
            results.setdefault(f"ref:{name}", []).append((before + after) / 2)
            before = after
    if rank == 0:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"block_mean_s": results, "detector_s": own, "steps_per_block": steps,
                       "repeats": repeats}, fh)
    import torch.distributed as dist

    dist.barrier()
    os._exit(0)


def bench(repeats: int, steps: int) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir = tempfile.mkdtemp(prefix="trainchaos-sdc-bench-")
    out = os.path.join(run_dir, "result.json")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, 2, port, run_dir, repeats, steps, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=3600)
        if p.exitcode is None:
            p.kill()
    try:
        with open(out, encoding="utf-8") as fh:
            raw = json.load(fh)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    blocks = raw["block_mean_s"]
    ref = blocks["off"]
    figures: dict = {"sdc_step_ms_detectors_off": round(statistics.median(ref) * 1000, 2)}
    for name in VARIANTS:
        if name == "off":
            continue
        ratios = [b / a - 1 for a, b in zip(blocks[f"ref:{name}"], blocks[name], strict=True)]
        figures[f"sdc_overhead_pct_{name}"] = round(statistics.median(ratios) * 100, 2)
        total_steps = raw["steps_per_block"] * len(blocks[name])
        own = sum(raw["detector_s"][name].values()) / total_steps
        figures[f"sdc_own_ms_per_step_{name}"] = round(own * 1000, 3)
    # Two reference blocks in a row differ by this much (median): smaller figures are noise.
    figures["sdc_ab_noise_pct"] = round(statistics.median(abs(b / a - 1) for a, b in zip(ref, ref[1:])) * 100, 2)
    figures["sdc_goal_all_le_5pct"] = figures["sdc_overhead_pct_all"] <= 5.0
    figures["sdc_blocks"] = {"repeats": raw["repeats"], "steps_per_block": raw["steps_per_block"]}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50, help="steps per block (default 50: one golden self-test)")
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = bench(args.repeats, args.steps)
    with open(os.path.join(args.out, "sdc_bench.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
