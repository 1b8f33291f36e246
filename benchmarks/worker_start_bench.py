"""What one warm worker costs torchrun to start: the thin client's interpreter and imports.

    python benchmarks/worker_start_bench.py [--repeats 30] [--ranks 64]

Under a warm start torchrun spawns one thin client per rank at every start and restart
(``harness/zygote_client.py``): 64 interpreters at once at 64 ranks, on 2 cores here. Each
way of starting it runs ``--repeats`` times, one after the other, with a mode the client
refuses (it prints its usage and exits 2 once its imports are done, so no zygote is needed);
its CPU (user + system, from the children's rusage) is reported as the median, and times
``--ranks`` for a whole launch. ``light`` is what the warm agent gives torchrun
(``light_worker_argv``: the file, without ``site``); ``module`` is ``python -u -m
harness.zygote``, what it gave before and what still works.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WAYS = {
    "light": [sys.executable, "-S", "-u", str(REPO / "harness" / "zygote_client.py"), "usage"],
    "module": [sys.executable, "-u", "-m", "harness.zygote", "usage"],
}


def cpu_ms(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 2 or "usage: " not in done.stderr:
        raise SystemExit(f"{argv}: expected its usage and exit 2, got {done.returncode}: {done.stderr[-300:]}")
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ranks", type=int, default=64)
    args = parser.parse_args()
    print(f"{'start':8} {'median ms':>9} {'min':>5} {'max':>5}  CPU-s for {args.ranks} ranks")
    for name, argv in WAYS.items():
        runs = [cpu_ms(argv) for _ in range(args.repeats)]
        median = statistics.median(runs)
        print(f"{name:8} {median:9.0f} {min(runs):5.0f} {max(runs):5.0f}  {median * args.ranks / 1000:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
