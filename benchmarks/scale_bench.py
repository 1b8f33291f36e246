"""Scale-model wall time: 16,384 devices x 54 days x 1,000 trials (the Llama 3 case).

    python benchmarks/scale_bench.py [--repeats 5] [--trials 1000]

1. The Monte-Carlo engine alone: draw every trial's interruptions and cost them
   (``chaos.scale.engine.simulate``), on ``scenarios/scale/llama3.yaml`` (goal: <= 10 s).
2. ``trainchaos simulate`` without printing: validation, the engine, statistics, and the
   search for the best checkpoint interval (which re-costs the same failures ~23 times).

Imports are excluded (they are the same for any size); figures are medians over repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from chaos.scale.config import load_config  # noqa: E402
from chaos.scale.engine import simulate  # noqa: E402
from chaos.scale.simulate import build_model, run_simulation  # noqa: E402

CONFIG = os.path.join(REPO, "scenarios", "scale", "llama3.yaml")
GOAL_S = 10.0


def _median_time(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=1000)
    args = parser.parse_args()

    cfg = load_config(CONFIG)
    model, _ = build_model(cfg, None)
    simulate(model, trials=10, seed=0)  # warm up numpy
    result = simulate(model, trials=args.trials, seed=0)
    events = int(result.interruptions.sum())
    engine, engine_all = _median_time(lambda: simulate(model, trials=args.trials, seed=0), args.repeats)
    full, full_all = _median_time(lambda: run_simulation(CONFIG, trials=args.trials), args.repeats)

    size = f"{model.devices:,} devices x {cfg.job.days:g} days x {args.trials:,} trials"
    print(f"scale model, {size} ({events:,} interruptions in all), median of {args.repeats}:")
    print(f"  engine (draw + cost every trial)      {engine:6.2f} s   "
          f"[{', '.join(f'{t:.2f}' for t in engine_all)}]  goal <= {GOAL_S:g} s")
    print(f"  simulate, with the interval search    {full:6.2f} s   "
          f"[{', '.join(f'{t:.2f}' for t in full_all)}]")
    print(f"  {events / engine / 1e6:.1f} M interruptions costed per second")
    return 0 if engine <= GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
