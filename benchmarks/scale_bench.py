"""Scale: the scale model's wall time, and the cost of an emulated cluster against its size.

    python benchmarks/scale_bench.py [--repeats 5] [--trials 1000]
    python benchmarks/scale_bench.py --cluster [--ranks 4,8,16,32,64,128] [--modes warm,cold]
                                     [--cold-max 32] [--repeats 1] [--out reports/scale-bench]

The scale model (16,384 devices x 54 days x 1,000 trials, the Llama 3 case):

1. The Monte-Carlo engine alone: draw every trial's interruptions and cost them
   (``chaos.scale.engine.simulate``), on ``scenarios/scale/llama3.yaml`` (goal: <= 10 s).
2. ``trainchaos simulate`` without printing: validation, the engine, statistics, and the
   search for the best checkpoint interval (which re-costs the same failures ~23 times).

Imports are excluded (they are the same for any size); figures are medians over repeats.

``--cluster``: one kill-rank run of the harness (40 steps of the tiny MLP, the last rank
SIGKILLed at step 25, a checkpoint every 10 steps) per size and start mode, on the local
backend, 4 ranks a node (2 x 2 at 4 ranks). Per run: launch -> first step (``job_start`` to
the first ``step_end``), kill -> next step (the fault's ``recovery_s``), the controller's
CPU-s (this process, which is the controller, report writing included) and the agent
zygote's, the controller's peak RSS, and the peak memory of everything the run started (a
memory cgroup around this process and its descendants: shared pages counted once, page
cache included), also per rank. Each run forks its agents from a new agent zygote, as a
``trainchaos run`` does. Cold runs stop at ``--cold-max`` ranks: every cold rank imports
torch on 2 cores (~65 s to the first step at 32 ranks), so the sizes above it measure the
machine's CPU, not trainchaos. Results go to ``<out>/cluster.json`` (merged with earlier
sizes, so the sweep may run in pieces).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import sys
import time
from typing import TYPE_CHECKING

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from chaos.scale.config import load_config  # noqa: E402
from chaos.scale.engine import simulate  # noqa: E402
from chaos.scale.simulate import build_model, run_simulation  # noqa: E402

if TYPE_CHECKING:
    from chaos.model.scenario import Scenario

CONFIG = os.path.join(REPO, "scenarios", "scale", "llama3.yaml")
GOAL_S = 10.0


def _median_time(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


# --------------------------------------------------------------------- the emulated cluster

CLUSTER_STEPS = 40
CLUSTER_KILL_AT = 25
RANKS_PER_NODE = 4


def cluster_shape(ranks: int) -> tuple[int, int]:
    """(nodes, ranks per node): 4 ranks a node, at least 2 nodes (a rendezvous across nodes)."""
    nodes = max(2, ranks // RANKS_PER_NODE)
    if ranks % nodes:
        raise SystemExit(f"{ranks} ranks do not fill {nodes} nodes evenly")
    return nodes, ranks // nodes


def _cluster_scenario(ranks: int, mode: str) -> Scenario:
    from chaos.scenario.load import parse_scenario

    nodes, per_node = cluster_shape(ranks)
    return parse_scenario({
        "name": f"size-{ranks}-{mode}", "seed": 1,
        "workload": {"harness": {"steps": CLUSTER_STEPS, "global_batch": ranks, "warm_start": mode == "warm",
                                 "model": {"name": "mlp"}, "checkpoint": {"every_steps": 10}}},
        "topology": {"nodes": nodes, "ranks_per_node": per_node},
        "faults": [{"type": "kill_rank", "target": {"rank": ranks - 1}, "trigger": {"at_step": CLUSTER_KILL_AT}}],
        "timeout_s": 900,
    }, f"<scale_bench:{ranks}-{mode}>")


class _RunCgroup:
    """A memory cgroup (v1) around this process, which every process a run starts inherits:
    its peak usage is the run's memory, shared pages once. None of it where no v1 memory
    hierarchy can be written (the figure is then left out)."""

    def __init__(self) -> None:
        from chaos.cluster.cgroups import own_cgroup

        self.parent = own_cgroup("memory")
        self.path: str | None = None
        if self.parent is None:
            return
        path = os.path.join(self.parent, f"trainchaos-scalebench-{os.getpid()}")
        try:
            os.mkdir(path)
            self._write(path, "cgroup.procs", str(os.getpid()))
        except OSError as exc:
            print(f"no memory cgroup for the run ({exc}): peak memory left out", file=sys.stderr)
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return
        self.path = path

    @staticmethod
    def _write(path: str, name: str, value: str) -> None:
        with open(os.path.join(path, name), "w", encoding="utf-8") as fh:
            fh.write(value)

    def reset(self) -> None:
        if self.path is not None:
            self._write(self.path, "memory.max_usage_in_bytes", "0")

    def peak_bytes(self) -> int | None:
        if self.path is None:
            return None
        with open(os.path.join(self.path, "memory.max_usage_in_bytes"), encoding="utf-8") as fh:
            return int(fh.read())

    def close(self) -> None:
        if self.path is None or self.parent is None:
            return
        self._write(self.parent, "cgroup.procs", str(os.getpid()))
        for _ in range(50):  # the run's last processes may still be leaving
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)
        print(f"could not remove {self.path}", file=sys.stderr)


def _cpu_s(pid: int | None = None) -> float:
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _zygote_cpu_s() -> float:
    """CPU of this controller's agent zygotes (forking the agents), read before they close."""
    from chaos.workload import agent_forks

    return sum(_cpu_s(s.proc.pid) for s in agent_forks._servers.values() if s.proc is not None)


def _controller_hwm_bytes() -> int:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def cluster_run(ranks: int, mode: str, run_dir: str, cgroup: _RunCgroup) -> dict:
    from chaos.runfiles.events import read_events
    from chaos.runner.run import run_scenario_once
    from chaos.workload import agent_forks

    scenario = _cluster_scenario(ranks, mode)
    shutil.rmtree(run_dir, ignore_errors=True)
    with open("/proc/self/clear_refs", "w", encoding="utf-8") as fh:
        fh.write("5")  # resets VmHWM: the controller's peak of this run alone
    cgroup.reset()
    cpu0, wall0 = _cpu_s(), time.monotonic()
    journal = run_scenario_once(scenario, run_dir, 1)
    wall = time.monotonic() - wall0
    controller_cpu = _cpu_s() - cpu0
    zygote_cpu = _zygote_cpu_s()
    agent_forks._close_servers()  # the next run starts its own, as a new `trainchaos run` does
    if journal.status != "completed":
        raise SystemExit(f"{ranks} ranks {mode}: {journal.status} {journal.error} ({run_dir})")
    if journal.rank_launch != mode:
        raise SystemExit(f"{ranks} ranks: asked {mode}, ran {journal.rank_launch}")
    events = read_events(os.path.join(run_dir, "events"))
    job_start = next(e["t"] for e in events if e["kind"] == "job_start")
    first = min(e["t"] for e in events if e["kind"] == "step_end")
    peak = cgroup.peak_bytes()
    recovery_s = journal.metrics.faults[0].recovery_s if journal.metrics is not None else None
    if recovery_s is None:
        raise SystemExit(f"{ranks} ranks {mode}: the kill was never recovered from ({run_dir})")
    return {
        "ranks": ranks, "mode": mode, "nodes": scenario.topology.nodes,
        "launch_to_first_step_s": round(first - job_start, 3),
        "kill_to_next_step_s": round(float(recovery_s), 3),
        "run_wall_s": round(wall, 3),
        "controller_cpu_s": round(controller_cpu, 3),
        "agent_zygote_cpu_s": round(zygote_cpu, 3),
        "controller_peak_rss_mib": round(_controller_hwm_bytes() / 2**20, 1),
        "run_peak_mem_mib": None if peak is None else round(peak / 2**20, 1),
        "run_peak_mem_per_rank_mib": None if peak is None else round(peak / 2**20 / ranks, 1),
        "load_before": _load,
    }


_load: float | None = None


def _medians(samples: list[dict]) -> dict:
    row = dict(samples[0])
    for key, value in samples[0].items():
        if isinstance(value, float) and key != "load_before":
            row[key] = round(statistics.median(s[key] for s in samples), 3)
    row["repeats"] = len(samples)
    row["samples"] = samples
    return row


def run_sizes(sizes: list[int], modes: list[str], cold_max: int, repeats: int, out: str) -> int:
    global _load
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "cluster.json")
    rows: dict[str, dict] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            rows = {f"{r['ranks']}-{r['mode']}": r for r in json.load(fh)["rows"]}
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cgroup = _RunCgroup()
    try:
        for ranks in sizes:
            for mode in modes:
                if mode == "cold" and ranks > cold_max:
                    continue
                samples = []
                for i in range(repeats):
                    _load = os.getloadavg()[0]
                    samples.append(cluster_run(ranks, mode, os.path.join(out, f"{ranks}-{mode}-{i}"), cgroup))
                    print(json.dumps(samples[-1]), flush=True)
                rows[f"{ranks}-{mode}"] = _medians(samples)
                with open(path, "w", encoding="utf-8") as fh:
                    json.dump({"rows": sorted(rows.values(), key=lambda r: (r["mode"], r["ranks"]))}, fh, indent=1)
    finally:
        cgroup.close()
    _print_table(list(rows.values()))
    for key in ("launch_to_first_step_s", "kill_to_next_step_s"):
        print(ascii_chart(list(rows.values()), key))
    return 0


def ascii_chart(rows: list[dict], key: str = "launch_to_first_step_s", width: int = 50) -> str:
    """One bar per size and mode, ``key`` in seconds: the curve as docs/scale.md draws it."""
    rows = sorted(rows, key=lambda r: (r["ranks"], r["mode"]))
    top = max(r[key] for r in rows) or 1.0
    lines = [f"{key} (each # = {top / width:.2f} s)"]
    for r in rows:
        lines.append(f"{r['ranks']:>4} {r['mode']:4} |{'#' * max(1, round(r[key] / top * width)):<{width}} {r[key]:.1f}")
    return "\n".join(lines)


def _print_table(rows: list[dict]) -> None:
    print(f"{'ranks':>5} {'mode':4} {'launch s':>9} {'kill s':>7} {'ctl CPU-s':>9} {'zyg CPU-s':>9} "
          f"{'ctl RSS MiB':>11} {'run MiB':>8} {'MiB/rank':>8} {'n':>2}")
    for r in sorted(rows, key=lambda r: (r["mode"], r["ranks"])):
        print(f"{r['ranks']:>5} {r['mode']:4} {r['launch_to_first_step_s']:>9.2f} {r['kill_to_next_step_s']:>7.2f} "
              f"{r['controller_cpu_s']:>9.2f} {r['agent_zygote_cpu_s']:>9.2f} {r['controller_peak_rss_mib']:>11.0f} "
              f"{r['run_peak_mem_mib'] or 0:>8.0f} {r['run_peak_mem_per_rank_mib'] or 0:>8.1f} {r['repeats']:>2}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="default: 5 (model), 1 (--cluster)")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--cluster", action="store_true", help="the emulated cluster's cost against its size")
    parser.add_argument("--ranks", default="4,8,16,32,64,128")
    parser.add_argument("--modes", default="warm,cold")
    parser.add_argument("--cold-max", type=int, default=32)
    parser.add_argument("--out", default="reports/scale-bench")
    args = parser.parse_args()
    if args.cluster:
        return run_sizes([int(r) for r in args.ranks.split(",")], args.modes.split(","), args.cold_max,
                         args.repeats or 1, args.out)
    args.repeats = args.repeats or 5

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
