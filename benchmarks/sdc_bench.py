"""What the silent-corruption detectors cost, as the default configuration runs them.

    python benchmarks/sdc_bench.py [--rounds 15] [--block 50] [--each [PAIRS]] [--out reports/bench]

Two ranks of the harness (the default model, DDP over gloo, as a scenario runs it) train one
job while the detector settings change from block to block: ``--block`` steps with every
detector off (A), then as many with the default detectors (B), in rounds A B B A, so that a
drift of the machine's load over a round (several % over a minute on a shared machine) hits
both sides alike. B runs the detectors on its own step count, as a run does: the every-step
part on every step, the parameter digest every ``digest_every`` steps (with its exchange of
the full evidence row after the update), the golden self-test every ``golden_every``, and on
every ``checkpoint.every_steps``-th step what a checkpoint step adds (the fingerprint of
everything the update reads and the digest, ``verify``). A block of 50 steps holds one golden
period, five digests and two or three checkpoint steps, so every B block carries the same
work, amortised as in a run; a step after a digest's extra collective counts too.

A round's figure is its B steps' mean time over its A steps' (wall and the process's CPU
time); the overhead is the median over the rounds. The checkpoint checksum (the read-back of
one checkpoint file after writing, in the background writer of a run) is timed alone on
rank 0, with and without, and added divided by the checkpoint period, all of it, as if it
sat on the step's critical path. ``null``: the A blocks of one round against each other
(the same work three blocks apart): how far from 0 a figure can be by chance.

Goal: all detectors together <= 3 % of step time (issue 25). Run it on a quiet machine
(the load average is recorded), one at a time (``flock /tmp/trainchaos-integ.lock``).

``--each``: also the single detectors, an A/B alternating *every step* (median over the
pairs of B step - A step): ``off -> X`` for each detector alone (its every-step work),
``every-step -> +digest`` and ``every-step -> +golden`` with the periodic detector forced on
every B step (the cost of one digest step, one golden self-test). Per-step alternation
pairs steps a few ms apart but a B step's extra collective also speeds the A step after it
up, so these read a periodic detector high; the headline figure does not come from them.
"""

from __future__ import annotations

import argparse
import collections
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

OFF = {"nonfinite": False, "spike": False, "digest_every": 0, "golden_every": 0, "fingerprint": "off"}
NEVER = 10**9
"""A period no run reaches: the detector is on (its every-step part runs) but never fires."""
SETTINGS = {
    "off": OFF,
    "default": {},
    "nonfinite": {**OFF, "nonfinite": True},
    "spike": {**OFF, "spike": True},
    "digest": {**OFF, "digest_every": NEVER},
    "golden": {**OFF, "golden_every": NEVER},
    "fingerprint": {**OFF, "fingerprint": "params"},
    "fingerprint_update": {**OFF, "fingerprint": "update"},
    "every_step": {"digest_every": NEVER, "golden_every": NEVER},
    "every_step+digest": {"digest_every": 1, "golden_every": NEVER},
    "every_step+golden": {"digest_every": NEVER, "golden_every": 1},
}
COMPARISONS = [("off", "off"), ("off", "nonfinite"), ("off", "spike"), ("off", "digest"), ("off", "golden"),
               ("off", "fingerprint"), ("off", "fingerprint_update"),
               ("off", "every_step"), ("every_step", "every_step+digest"),
               ("every_step", "every_step+golden")]
"""``--each``: the single detectors, alternating every step."""
ROUND = ("off", "default", "default", "off")
WARM_UP_BLOCKS = 2
"""Blocks of each setting run before anything is timed: the first steps of a process are slower."""


def _worker(rank: int, world: int, port: int, run_dir: str, rounds: int, block: int, pairs: int,
            out: str, device: str = "cpu") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), TRAINCHAOS_NODE=str(rank),
                      OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from harness.ckpt_writer import write_files
    from harness.config_load import config_from_mapping
    from harness.dist import DistEnv
    from harness.sdc import SdcMonitor
    from harness.train import Trainer

    cfg = config_from_mapping({"steps": 1_000_000, "run_dir": run_dir, "device": device,
                               "checkpoint": {"every_steps": 0, "mode": "sync", "keep": 2},
                               "failure": {"watchdog_s": 0}})
    # the checkpoint period a run has by default (the bench itself saves nothing while timed)
    ckpt_every = config_from_mapping({"steps": 1, "run_dir": run_dir}).checkpoint.every_steps
    trainer = Trainer(cfg, DistEnv.from_env())
    trainer.setup()
    golden = trainer.sdc.golden
    names = ["off", "default"] + ([n for c in COMPARISONS for n in c] if pairs else [])
    monitors = {}
    for name in dict.fromkeys(names):
        detect = replace(cfg.detect, **SETTINGS[name])
        # every setting's evidence rides on the gradient gather, as in a run (harness.sdc);
        # with every detector off, the loss and nothing else does
        monitors[name] = SdcMonitor(detect, rank, world, trainer.raw_model, 0,
                                    golden if detect.golden_every else None, gather=trainer.gather)
    counters = dict.fromkeys(monitors, 0)
    """Each setting's own step count: its periodic detectors run on it, as in a run."""
    hook_norm_s = dict.fromkeys(monitors, 0.0)  # the gather is shared: its norm time, by monitor

    def step(name: str) -> tuple[float, float]:
        trainer.sdc = monitors[name]
        trainer.step = counters[name]
        verify = name == "default" and (trainer.step + 1) % ckpt_every == 0
        c0, t0, n0 = time.process_time(), time.perf_counter(), trainer.gather.seconds
        trainer.train_step(verify=verify)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        hook_norm_s[name] += trainer.gather.seconds - n0
        counters[name] += 1
        return wall, cpu

    def run_block(name: str) -> tuple[float, float]:
        """The block's mean step time, wall and CPU (every step counts: the periodic ones too)."""
        walls, cpus = zip(*(step(name) for _ in range(block)), strict=True)
        return statistics.fmean(walls), statistics.fmean(cpus)

    for _ in range(WARM_UP_BLOCKS):
        for name in ("default", "off"):
            run_block(name)
    own_before = {n: dict(m.seconds) for n, m in monitors.items()}
    steps_before, norm_before = dict(counters), dict(hook_norm_s)
    blocks = [[run_block(name) for name in ROUND] for _ in range(rounds)]
    own = {n: {k: v - own_before[n].get(k, 0.0) for k, v in m.seconds.items()} for n, m in monitors.items()}
    own["default"]["grad_norm"] = own["default"].get("grad_norm", 0.0) + hook_norm_s["default"] - norm_before["default"]
    timed = range(steps_before["default"] + 1, counters["default"] + 1)
    runs = {"digest": sum(1 for s in timed if s % cfg.detect.digest_every == 0 or s % ckpt_every == 0),
            "golden": sum(1 for s in timed if s % cfg.detect.golden_every == 0)}

    diffs: dict[str, list[float]] = {f"{a}->{b}": [] for a, b in COMPARISONS}
    each_cpu: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(repeats_of(pairs)):
        for a, b in COMPARISONS[r % len(COMPARISONS):] + COMPARISONS[:r % len(COMPARISONS)]:
            for _ in range(pairs):
                (ta, ca), (tb, cb) = step(a), step(b)
                diffs[f"{a}->{b}"].append(tb - ta)
                each_cpu[f"{a}->{b}"].append(cb - ca)
                if a == "off":
                    diffs.setdefault("off", []).append(ta)
    checksum = []
    if rank == 0:
        # The checksum on save: the read-back of one checkpoint file, with and without.
        state = trainer._state()
        manager = trainer.checkpoints
        for _ in range(25):
            for verify in (False, True):
                c0, t0 = time.process_time(), time.perf_counter()
                write_files(_fresh(run_dir), 1, state, verified=None, durable=not manager.pointer_before_fsync,
                            fsync_enabled=manager.fsync, verify_checksum=verify, fault_point=None)
                checksum.append((verify, time.perf_counter() - t0, time.process_time() - c0))
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"blocks": blocks, "block": block, "ckpt_every": ckpt_every, "checksum": checksum,
                       "own": own["default"], "timed_steps": len(timed), "runs": runs,
                       "diffs": diffs, "each_cpu": each_cpu, "pairs": pairs,
                       "own_each": {n: {**m.seconds, "grad_norm": m.seconds.get("grad_norm", 0.0) + hook_norm_s[n]}
                                    for n, m in monitors.items()},
                       "steps_run": counters}, fh)
    dist.barrier()
    os._exit(0)


def repeats_of(pairs: int) -> int:
    """``--each``: rounds of ``pairs`` pairs per comparison (5 rounds: 150 pairs with 30)."""
    return 5 if pairs else 0


def _fresh(run_dir: str) -> str:
    path = tempfile.mkdtemp(dir=run_dir, prefix="write-")
    return path


def bench(rounds: int, block: int, each: int, device: str = "cpu") -> dict:
    """``each``: pairs per comparison and round of the single detectors' A/B (0: none);
    ``device``: where both ranks train (cuda: both share the GPU, as scenarios/gpu/ does)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir = tempfile.mkdtemp(prefix="trainchaos-sdc-bench-")
    out = os.path.join(run_dir, "result.json")
    load_before = os.getloadavg()[0]
    ctx = multiprocessing.get_context("spawn")
    pairs = each
    procs = [ctx.Process(target=_worker, args=(r, 2, port, run_dir, rounds, block, pairs, out, device))
             for r in range(2)]
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
    figures = _headline(raw)
    figures["sdc_load_average_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    figures["sdc_device"] = device
    if each:
        figures.update(_each(raw, figures))
    return figures


def _headline(raw: dict) -> dict:
    """Detectors off vs the default detectors, blocks of steps in rounds A B B A."""
    wall = {"off": [], "default": [], "ratio": [], "null": []}
    cpu = {"off": [], "default": [], "ratio": []}
    for (a1, b1, b2, a2) in raw["blocks"]:
        wall["off"] += [a1[0], a2[0]]
        cpu["off"] += [a1[1], a2[1]]
        wall["ratio"].append((b1[0] + b2[0]) / (a1[0] + a2[0]) - 1)
        cpu["ratio"].append((b1[1] + b2[1]) / (a1[1] + a2[1]) - 1)
        wall["null"].append(a2[0] / a1[0] - 1)
    base, base_cpu = statistics.median(wall["off"]), statistics.median(cpu["off"])
    # the read-back on save, amortised over the checkpoint period (wall and CPU of rank 0)
    plain = [(t, c) for v, t, c in raw["checksum"] if not v]
    checked = [(t, c) for v, t, c in raw["checksum"] if v]
    readback_s = statistics.median(t for t, _ in checked) - statistics.median(t for t, _ in plain)
    readback_cpu = statistics.median(c for _, c in checked) - statistics.median(c for _, c in plain)
    per_step = raw["ckpt_every"]
    in_steps = statistics.median(wall["ratio"])
    in_steps_cpu = statistics.median(cpu["ratio"])
    all_pct = (in_steps + readback_s / per_step / base) * 100
    all_cpu_pct = (in_steps_cpu + readback_cpu / per_step / base_cpu) * 100
    rounds_pct = sorted(round((r + readback_s / per_step / base) * 100, 2) for r in wall["ratio"])
    n = raw["timed_steps"]
    own = raw["own"]
    figures = {
        "sdc_step_ms_detectors_off": round(base * 1000, 2),
        "sdc_overhead_pct_all": round(all_pct, 2),
        "sdc_overhead_pct_all_cpu": round(all_cpu_pct, 2),
        "sdc_overhead_pct_in_steps": round(in_steps * 100, 2),
        "sdc_overhead_pct_ckpt_checksum": round(readback_s / per_step / base * 100, 2),
        # every round's figure, sorted: the spread of this run
        "sdc_overhead_pct_rounds": rounds_pct,
        "sdc_overhead_pct_rounds_cpu": sorted(round((r + readback_cpu / per_step / base_cpu) * 100, 2)
                                              for r in cpu["ratio"]),
        "sdc_null_pct": round(statistics.median(wall["null"]) * 100, 2),
        "sdc_null_pct_abs_median": round(statistics.median(abs(x) for x in wall["null"]) * 100, 2),
        "sdc_cpu_ms_step_detectors_off": round(base_cpu * 1000, 3),
        "sdc_one_checkpoint_read_back_ms": round(readback_s * 1000, 3),
        # Timed inside the default detectors' blocks (as run_end.detector_s does): per step
        # for the every-step parts, per run for the periodic ones.
        "sdc_own_ms_per_step": {k: round(v / n * 1000, 3) for k, v in sorted(own.items())},
        "sdc_one_digest_own_ms": round(own.get("digest", 0.0) / max(1, raw["runs"]["digest"]) * 1000, 3),
        "sdc_one_golden_self_test_ms": round(own.get("golden", 0.0) / max(1, raw["runs"]["golden"]) * 1000, 3),
        "sdc_rounds": len(raw["blocks"]),
        "sdc_block_steps": raw["block"],
    }
    figures["sdc_goal_all_le_3pct"] = figures["sdc_overhead_pct_all"] <= 3.0  # issue 25
    return figures


def _each(raw: dict, headline: dict) -> dict:
    """``--each``: the single detectors' A/B, alternating every step."""
    base = statistics.median(raw["diffs"].pop("off"))
    d = {key: statistics.median(values) for key, values in raw["diffs"].items()}
    figures = {f"each_pct_{b}": round(d[f"off->{b}"] / base * 100, 2) for a, b in COMPARISONS if a == "off" and b != "off"}
    figures.update({
        "each_null_ab_pct": round(d["off->off"] / base * 100, 2),
        "each_every_step_ms_all": round(d["off->every_step"] * 1000, 3),
        "each_every_step_cpu_ms_all": round(statistics.median(raw["each_cpu"]["off->every_step"]) * 1000, 3),
        "each_one_digest_step_ms": round(d["every_step->every_step+digest"] * 1000, 3),
        "each_one_golden_self_test_ms": round(d["every_step->every_step+golden"] * 1000, 3),
        "each_one_fingerprint_params_ms": _own_ms(raw, "fingerprint"),
        "each_one_fingerprint_update_ms": _own_ms(raw, "fingerprint_update"),
        "each_one_grad_norm_ms": _own_ms(raw, "nonfinite", "grad_norm"),
        "each_pairs_per_comparison": raw["pairs"] * repeats_of(raw["pairs"]),
    })
    return figures


def _own_ms(raw: dict, monitor: str, part: str = "fingerprint") -> float:
    return round(raw["own_each"][monitor].get(part, 0.0) / max(1, raw["steps_run"][monitor]) * 1000, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="rounds of blocks A B B A")
    parser.add_argument("--block", type=int, default=50, help="steps per block")
    parser.add_argument("--each", type=int, nargs="?", const=30, default=0, metavar="PAIRS",
                        help="also the single detectors, step by step (PAIRS per comparison and round, 30)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the two ranks train (cuda: both on the one GPU, over gloo; docs/gpu.md)")
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = bench(args.rounds, args.block, args.each, args.device)
    with open(os.path.join(args.out, "sdc_bench.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
