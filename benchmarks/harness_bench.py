"""Harness and probe figures: medians over repeats, ratios against a reference from the same run.

    python benchmarks/harness_bench.py [--repeats 3] [--out reports/bench]

1. Step time of the default model at 2 nodes x 2 ranks, and launch -> first step.
2. Training time blocked per checkpoint save: async vs sync (goal: async <= 0.2 x sync).
3. SIGKILL of one rank -> next completed step, split into detection, restart + rendezvous
   (+ process start and init), checkpoint load, first step (goal: <= 10 s in total).
4. Probe overhead on step time: the same training loop with the probe attached vs detached,
   alternating A/B in one process (goal: <= 1 %).
5. Slow-rank detector overhead (harness/slowrank.py): its own work per step, timed alone
   (the comm-hook mark, the host time riding on the evidence all-reduce, the verdict over
   four ranks' windows), in % of the step time; and the same loop with it on vs off,
   alternating A/B in one process (goal: <= 1 %).
6. Warm vs cold starts (``harness.warm_start``): launch -> first step and SIGKILL of one rank
   -> next step, trainchaos cold, trainchaos warm, and plain torchrun (cold, no trainchaos
   controller, one agent with four workers, the rank killed by this script) as the reference
   of what a cold-starting job pays, in the same run.
7. Injection precision (``--only precision``): ``kill_rank`` planned at step N, repeated
   (goal: the killed rank's last step is N, journaled ``exact``, every repeat); the lag of
   100 time-triggered faults from their planned time to in effect (goal: p50 and p99
   <= 10 ms; p99 by nearest rank leaves the largest one out).

Timings on a shared 2-core machine are noisy: every figure is a median over repeats, and
the ratios compare measurements taken in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from chaos import contract
from chaos.runfiles.events import read_events
from chaos.runfiles.rollback import read_records
from chaos.runfiles.telemetry import EventTailer
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes, kill_pids


def _scenario(name: str, harness: dict, faults: list | None = None, timeout_s: float = 240,
              nodes: int = 2, ranks_per_node: int = 2) -> object:
    data = {
        "name": name,
        "seed": 1,
        "workload": {"harness": harness},
        "topology": {"nodes": nodes, "ranks_per_node": ranks_per_node},
        "faults": faults or [],
        "timeout_s": timeout_s,
    }
    return parse_scenario(data, f"<bench:{name}>")


def _rank0(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["src"] == "rank-0" and e["kind"] == kind]


def bench_steps_and_checkpoints(out: str, repeats: int) -> dict:
    step_times, first_step, blocked = [], [], {"async": [], "sync": []}
    for i in range(repeats):
        for mode in ("async", "sync"):
            sc = _scenario(f"steps-{mode}", {"steps": 100, "checkpoint": {"every_steps": 10, "mode": mode}})
            run_dir = os.path.join(out, f"steps-{mode}-{i}")
            journal = run_scenario_once(sc, run_dir, 1, with_faults=False)
            assert journal.status == "completed", journal.error
            events = read_events(os.path.join(run_dir, "events"))
            steps = _rank0(events, "step_end")
            saves = {e["step"] for e in _rank0(events, "ckpt_save_end")}
            # Steps right after a save carry its blocked time: leave them out of step time.
            gaps = [b["t"] - a["t"] for a, b in zip(steps, steps[1:], strict=False) if a["step"] not in saves]
            if mode == "async":
                step_times.append(statistics.median(gaps))
                job_start = next(e["t"] for e in events if e["kind"] == "job_start")
                first_step.append(steps[0]["t"] - job_start)
            blocked[mode].extend(e["blocked_seconds"] for e in _rank0(events, "ckpt_save_end"))
    med_async = statistics.median(blocked["async"])
    med_sync = statistics.median(blocked["sync"])
    return {
        "step_time_ms_median": round(statistics.median(step_times) * 1000, 2),
        "launch_to_first_step_s_median": round(statistics.median(first_step), 2),
        "ckpt_blocked_ms_async_median": round(med_async * 1000, 2),
        "ckpt_blocked_ms_sync_median": round(med_sync * 1000, 2),
        "ckpt_async_over_sync": round(med_async / med_sync, 3) if med_sync else None,
        "ckpt_saves_measured": {k: len(v) for k, v in blocked.items()},
    }


def bench_kill_recovery(out: str, repeats: int) -> dict:
    parts: dict[str, list[float]] = {"detection_s": [], "restart_rendezvous_s": [], "ckpt_load_s": [],
                                     "first_step_s": [], "total_s": []}
    for i in range(repeats):
        sc = _scenario("kill", {"steps": 100, "checkpoint": {"every_steps": 20}},
                       [{"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": 50}}])
        run_dir = os.path.join(out, f"kill-{i}")
        journal = run_scenario_once(sc, run_dir, 1)
        assert journal.status == "completed", journal.error
        events = read_events(os.path.join(run_dir, "events"))
        t_inject = journal.faults[0].t_inject
        t_detect = min(e["t"] for e in events if e["kind"] == "detected" and e["t"] >= t_inject)
        after = [e for e in events if e["t"] > t_detect and e["src"] == "rank-0"]
        load = next(e for e in after if e["kind"] == "ckpt_load")
        step = next(e for e in after if e["kind"] == "step_end")
        load_s = float(load.get("seconds") or 0.0)
        parts["detection_s"].append(t_detect - t_inject)
        parts["restart_rendezvous_s"].append(load["t"] - load_s - t_detect)
        parts["ckpt_load_s"].append(load_s)
        parts["first_step_s"].append(step["t"] - load["t"])
        parts["total_s"].append(step["t"] - t_inject)
    return {f"kill_{k}_median": round(statistics.median(v), 3) for k, v in parts.items()}


def bench_precision(out: str, repeats: int, kill_step: int = 8, time_faults: int = 100) -> dict:
    """Where external faults land: a kill at a step (the targeted rank holds there until
    it is in effect), and time-triggered faults (the controller wakes at their time)."""
    exact = 0
    kill_lags: list[float] = []
    last_steps: list[int] = []
    for i in range(repeats):
        # 2 nodes x 1 rank, a few steps: what is measured is the kill's landing, not training.
        sc = _scenario("precision-kill", {"steps": kill_step + 4, "model": {"name": "mlp"},
                                          "checkpoint": {"every_steps": 4}},
                       [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": kill_step}}],
                       nodes=2, ranks_per_node=1)
        run_dir = os.path.join(out, f"precision-kill-{i}")
        journal = run_scenario_once(sc, run_dir, 1)
        assert journal.status == "completed", journal.error
        (fault,) = journal.faults
        events = read_events(os.path.join(run_dir, "events"))
        # The killed process's own last step: its first incarnation's step_end events.
        last = max(e["step"] for e in events if e["src"] == "rank-1" and e["kind"] == "step_end"
                   and e["incarnation"] == 0)
        last_steps.append(last)
        exact += fault.precision == "exact" and last == kill_step
        kill_lags.append(fault.lag_ms)
    # Time triggers: one run, many short freezes of one rank (SIGSTOP for 20 ms, then
    # SIGCONT), each occurrence of a Poisson trigger planned at its own time. The run ends at
    # its timeout, the faults long done (about 15 s after the first step; the rest is start).
    sc = _scenario("precision-time", {"steps": 100_000, "model": {"name": "mlp"}, "step_delay_s": 0.02,
                                      "checkpoint": {"every_steps": 0}},
                   [{"type": "hang_rank", "target": {"rank": 1}, "params": {"duration_s": 0.02},
                     "trigger": {"poisson": {"mtbf_s": 0.15, "max_faults": time_faults}}}],
                   nodes=2, ranks_per_node=1, timeout_s=40)
    run_dir = os.path.join(out, "precision-time")
    journal = run_scenario_once(sc, run_dir, 1)
    fired = [f for f in journal.faults if f.lag_ms is not None]
    lags = sorted(f.lag_ms for f in fired)
    # ``lag_ms`` ends at the clock read right before the signal; the fault is in effect once
    # the signal was sent, when the ``applied`` record is stamped: the lag to that moment is
    # the figure (it adds the inject's own time).
    applied_at = {r["fault_id"]: r["t"] for r in read_records(os.path.join(run_dir, "fault_journal.jsonl"))
                  if r["op"] == "applied"}
    in_effect = sorted(f.lag_ms + (applied_at[f.fault_id] - f.t_inject) * 1000 for f in fired)
    return {
        "precision_kill_at_step": kill_step,
        "precision_kill_exact": f"{exact} of {repeats}",
        "precision_kill_last_steps": last_steps,
        "precision_kill_hold_ms_median": round(statistics.median(kill_lags), 2),
        "precision_time_faults": f"{len(fired)} of {time_faults}",
        "precision_time_lag_ms_p50": round(_percentile(in_effect, 50), 2) if fired else None,
        "precision_time_lag_ms_p99": round(_percentile(in_effect, 99), 2) if fired else None,
        "precision_time_lag_ms_max": round(in_effect[-1], 2) if fired else None,
        "precision_time_lag_to_inject_call_ms_p50": round(_percentile(lags, 50), 2) if fired else None,
        "precision_time_lag_to_inject_call_ms_p99": round(_percentile(lags, 99), 2) if fired else None,
    }


def _percentile(values: list[float], pct: float) -> float:
    """Nearest rank, no interpolation: of 60 samples, p99 is the largest (a claim on p99
    needs 100 samples to leave one out)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered), math.ceil(pct / 100 * len(ordered))) - 1)]


def _one_rank_trainer(**harness: object) -> tuple:
    """(a set-up harness Trainer of one rank in this process, its scratch directory)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", WORLD_SIZE="1")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    from harness.config_load import config_from_mapping
    from harness.dist import DistEnv
    from harness.train import Trainer

    tmp = tempfile.mkdtemp(prefix="trainchaos-bench-")
    cfg = config_from_mapping({"steps": 10_000, "run_dir": tmp, "checkpoint": {"every_steps": 0},
                               "failure": {"watchdog_s": 0}, **harness})
    trainer = Trainer(cfg, DistEnv.from_env())
    trainer.setup()
    return trainer, tmp


def bench_probe_overhead(repeats: int, steps: int = 60) -> dict:
    """Same process, same model: alternate probe attached / detached, compare median step time."""
    import torch.distributed as dist

    from chaos import probe

    trainer, tmp = _one_rank_trainer()
    attached = probe.Probe(os.path.join(tmp, "events"), "rank-0", 0)
    detached = probe.Probe(None, "rank-0", 0)
    def one_step(pr: probe.Probe) -> float:
        t0 = time.perf_counter()
        pr.fault_point("step_begin", step=trainer.step + 1)
        loss = trainer.train_step()
        trainer.step += 1
        pr.step_end(trainer.step, loss)
        return time.perf_counter() - t0

    for _ in range(20):
        one_step(detached)  # warm-up: the first steps of a process are slower, whatever runs them
    # Attached and detached alternate step by step, so that drifts in machine load (the
    # noise here is several % over a minute) hit both sides alike.
    samples: dict[str, list[float]] = {"attached": [], "detached": []}
    for i in range(repeats * 2 * steps):
        name = "attached" if i % 2 == 0 else "detached"
        samples[name].append(one_step(attached if name == "attached" else detached))
    medians = {name: [statistics.median(v[k:k + steps]) for k in range(0, len(v), steps)]
               for name, v in samples.items()}
    attached.close()
    dist.destroy_process_group()
    on, off = statistics.median(samples["attached"]), statistics.median(samples["detached"])
    # The probe's own cost, timed alone: far below the noise of a whole step.
    n = 20_000
    probe_file = probe.Probe(os.path.join(tmp, "events2"), "rank-0", 0)
    t0 = time.perf_counter()
    for s in range(n):
        probe_file.step_end(s, 1.0)
    per_call = (time.perf_counter() - t0) / n
    probe_file.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "probe_step_ms_attached_median": round(on * 1000, 3),
        "probe_step_ms_detached_median": round(off * 1000, 3),
        "probe_overhead_pct": round((on - off) / off * 100, 2),
        # Spread of per-block medians of the same side: a difference below it is noise.
        "probe_ab_noise_pct": round((max(medians["detached"]) - min(medians["detached"])) / off * 100, 2),
        "probe_step_end_us_per_call": round(per_call * 1e6, 2),
        "probe_step_end_pct_of_step": round(per_call / off * 100, 3),
    }


def bench_slow_rank_overhead(repeats: int, steps: int = 60) -> dict:
    """Same process, same model: the slow-rank detector on / off step by step, and its own
    per-step work timed alone (its verdict over four ranks' windows, as at 2 x 2)."""
    import torch.distributed as dist

    from harness.config import SlowRankConfig
    from harness.slowrank import SlowRankDetector

    trainer, tmp = _one_rank_trainer(slow_rank={"enabled": True})

    def one_step(enabled: bool) -> float:
        trainer.slow.cfg.enabled = enabled
        t0 = time.perf_counter()
        trainer.train_step()
        trainer.step += 1
        trainer.slow.observe(trainer.step, trainer.sdc.host_times)
        return time.perf_counter() - t0

    for _ in range(20):
        one_step(True)  # warm-up
    samples: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(repeats * 2 * steps):
        name = "on" if i % 2 == 0 else "off"
        samples[name].append(one_step(name == "on"))
    dist.destroy_process_group()
    shutil.rmtree(tmp, ignore_errors=True)
    on, off = statistics.median(samples["on"]), statistics.median(samples["off"])
    blocks = [statistics.median(samples["off"][k:k + steps]) for k in range(0, len(samples["off"]), steps)]
    # Its own work at world size 4, timed alone: a hook mark, host_s, observe with 4 ranks.
    detector = SlowRankDetector(SlowRankConfig(enabled=True), 0, 4, lambda *a, **k: None)
    hook = detector.timed(lambda state, bucket: None)
    n = 20_000
    t0 = time.perf_counter()
    for s in range(n):
        hook(None, None)
        detector.host_s()
        detector.observe(s, [0.10, 0.11, 0.10, 0.105])
    per_step = (time.perf_counter() - t0) / n
    return {
        "slow_rank_step_ms_on_median": round(on * 1000, 3),
        "slow_rank_step_ms_off_median": round(off * 1000, 3),
        "slow_rank_ab_overhead_pct": round((on - off) / off * 100, 2),
        "slow_rank_ab_noise_pct": round((max(blocks) - min(blocks)) / off * 100, 2),
        "slow_rank_us_per_step": round(per_step * 1e6, 2),
        "slow_rank_pct_of_step": round(per_step / off * 100, 3),
    }


_WARM_STEPS, _WARM_KILL_AT = 50, 30


def bench_warm_start(out: str, repeats: int) -> dict:
    """Launch -> first step and kill -> next step: trainchaos cold, trainchaos warm, plain
    torchrun; interleaved per repeat, so that drifts in machine load hit all three alike."""
    figures: dict[str, dict[str, list[float]]] = {
        mode: {"launch_to_first_step_s": [], "kill_to_next_step_s": []}
        for mode in ("torchrun", "cold", "warm")}
    for i in range(repeats):
        launch, recovery = _plain_torchrun(os.path.join(out, f"torchrun-{i}"))
        figures["torchrun"]["launch_to_first_step_s"].append(launch)
        figures["torchrun"]["kill_to_next_step_s"].append(recovery)
        for mode in ("cold", "warm"):
            sc = _scenario(f"start-{mode}", {"steps": _WARM_STEPS, "warm_start": mode == "warm",
                                             "checkpoint": {"every_steps": 10}},
                           [{"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": _WARM_KILL_AT}}])
            run_dir = os.path.join(out, f"start-{mode}-{i}")
            journal = run_scenario_once(sc, run_dir, 1)
            assert journal.status == "completed", journal.error
            assert journal.rank_launch == mode
            events = read_events(os.path.join(run_dir, "events"))
            job_start = next(e["t"] for e in events if e["kind"] == "job_start")
            first = min(e["t"] for e in events if e["kind"] == "step_end")
            figures[mode]["launch_to_first_step_s"].append(first - job_start)
            # recovery_s: kill -> first step of the restarted group (docs/metrics.md)
            figures[mode]["kill_to_next_step_s"].append(journal.metrics.faults[0].recovery_s)
    result: dict = {}
    for mode, values in figures.items():
        for key, samples in values.items():
            result[f"start_{mode}_{key}_median"] = round(statistics.median(samples), 3)
    for key in ("launch_to_first_step_s", "kill_to_next_step_s"):
        ref = result[f"start_torchrun_{key}_median"]
        for mode in ("cold", "warm"):
            result[f"start_{mode}_{key}_over_torchrun"] = round(result[f"start_{mode}_{key}_median"] / ref, 3)
    return result


def _plain_torchrun(run_dir: str, timeout_s: float = 240) -> tuple[float, float]:
    """``torchrun --standalone`` with four workers of the harness, no trainchaos controller:
    the probe only writes events (to time the steps), this script SIGKILLs rank 3 after its
    step _WARM_KILL_AT as the controller would. (launch -> first step, kill -> next step)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    events_dir = os.path.join(run_dir, "events")
    os.makedirs(events_dir)
    bench_id = f"bench-torchrun-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, contract.EVENTS_DIR_ENV: events_dir, contract.RUN_ID_ENV: bench_id,
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", "4", "--max-restarts", "3", "--monitor-interval", "0.1",
            "-m", "harness", "--steps", str(_WARM_STEPS), "--checkpoint-every-steps", "10",
            "--run-dir", run_dir, "--seed", "1"]
    tailer = EventTailer(events_dir)
    t_launch = time.time()
    with open(os.path.join(run_dir, "torchrun.log"), "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=run_dir,
                                start_new_session=True)
    first = t_kill = recovered = None
    pid3 = None
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            for e in tailer.poll():
                if e["kind"] == "rank_start" and e.get("rank") == 3:
                    pid3 = e["pid"]
                if e["kind"] != "step_end":
                    continue
                first = first or e["t"]
                if t_kill is None and e["src"] == "rank-3" and e["step"] == _WARM_KILL_AT and pid3:
                    os.kill(pid3, signal.SIGKILL)
                    t_kill = time.time()
                elif t_kill is not None and recovered is None and (e.get("incarnation") or 0) > 0:
                    # The restarted group's first step (as recovery_s is): ranks 0-2 end the
                    # step they were in after the kill, and that is not a recovery.
                    recovered = e["t"]
            time.sleep(0.01)
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, f"torchrun failed: {run_dir}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_pids([p.pid for p in find_run_processes(bench_id)])
    assert first is not None and t_kill is not None and recovered is not None, run_dir
    return first - t_launch, recovered - t_kill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="reports/bench")
    parser.add_argument("--only", choices=["steps", "kill", "probe", "slowrank", "warm", "precision"],
                        default=None)
    parser.add_argument("--precision-repeats", type=int, default=10,
                        help="runs of the kill at a step (section 7)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results: dict = {"repeats": args.repeats}
    if args.only in (None, "probe"):
        results.update(bench_probe_overhead(args.repeats))
    if args.only in (None, "slowrank"):
        results.update(bench_slow_rank_overhead(args.repeats))
    if args.only in (None, "steps"):
        results.update(bench_steps_and_checkpoints(args.out, args.repeats))
    if args.only in (None, "kill"):
        results.update(bench_kill_recovery(args.out, args.repeats))
    if args.only in (None, "warm"):
        results.update(bench_warm_start(args.out, args.repeats))
    if args.only in (None, "precision"):
        results.update(bench_precision(args.out, args.precision_repeats))
    path = os.path.join(args.out, "bench.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
