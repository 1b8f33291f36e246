"""A controller SIGKILLed at random moments, then ``trainchaos cleanup``: is anything left?

    python benchmarks/sigkill_bench.py [--trials 50] [--seed 0] [--window 18] [--out reports/bench]

Each trial starts a real ``trainchaos run`` of a 1 x 2 harness job (the mlp model, warm
ranks, 50 ms steps) with two freezes (``hang_rank``: SIGSTOP, the worst thing to leak): rank 1
at step 10 for 2 s, rank 0 at step 30 until the run ends, which it does at its 15 s timeout.
The controller is SIGKILLed at a moment drawn uniformly from ``[0, --window]`` seconds
after its start: while it imports, registers, starts the job, injects, holds a fault,
reverts, times out, tears down or writes its record. Then ``trainchaos cleanup`` (as a user
runs it after a crash: no arguments), and the trial's leftovers are counted:

- processes of the run (its run id in their environment) or of the trial (its state
  directory in their environment: the agent zygote too), and the stopped ones among them;
- registry entries left in the trial's state directory;
- faults the fault journal still calls pending, resources the resource journal still holds;
- ``trainchaos cleanup --check``'s exit code (0: nothing left by any run).

Every trial has its own state directory, so other runs on the machine are neither counted
nor touched; ``cleanup`` itself sweeps the machine, so run this alone (under the
integration lock where several people share the machine). Not part of ``make test``: 50
trials take about 15 minutes on two busy cores (``make bench-sigkill``). Prints a summary
and writes every trial to ``<out>/sigkill_bench.json``; exits 1 when any trial left
anything.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from chaos.contract import STATE_DIR_ENV  # noqa: E402
from chaos.runfiles.resources import pending_resources  # noqa: E402
from chaos.runfiles.rollback import FaultJournal  # noqa: E402
from chaos.runfiles.rundir import RunDir  # noqa: E402
from chaos.util.procs import ProcInfo, find_run_processes, kill_pids  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCENARIO = """\
name: sigkill
seed: 7
workload:
  harness:
    steps: 400
    step_delay_s: 0.05
    warm_start: true
    model: {name: mlp}
    checkpoint: {every_steps: 20}
    failure: {watchdog_s: 0, collective_timeout_s: 0}
topology: {nodes: 1, ranks_per_node: 2}
faults:
  - {type: hang_rank, target: {rank: 1}, trigger: {at_step: 10}, params: {duration_s: 2}}
  - {type: hang_rank, target: {rank: 0}, trigger: {at_step: 30}, params: {duration_s: null}}
timeout_s: 15
"""
TRAINCHAOS = [sys.executable, "-c", "import sys; from chaos.cli import main; sys.argv[0] = 'trainchaos'; main()"]


def _env(state: Path) -> dict[str, str]:
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, STATE_DIR_ENV: str(state), "PYTHONPATH": python_path}


def _trial_processes(state: Path) -> list[ProcInfo]:
    """Live processes of any run started with this trial's state directory."""
    needle = f"{STATE_DIR_ENV}={state}".encode()
    mine = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state_letter = fh.read().rsplit(b")", 1)[1].split()[0].decode()
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state_letter != "Z":
            mine.append(ProcInfo(pid=pid, session=0, state=state_letter, cmdline=cmd, ppid=0))
    return mine


def _phase(run_dir: RunDir, state: Path) -> str:
    """Where the run was when the controller died, from what it had written."""
    if not os.path.exists(run_dir.run_start):
        return "before run.json"
    if run_dir.has_run_record():
        return "record written"
    journal = FaultJournal(run_dir.fault_journal)
    applied = [r for r in journal.records() if r["op"] == "applied"]
    pending = [f for f in journal.pending() if f["details"]]
    if pending:
        return f"{len(pending)} fault(s) in effect"
    if applied:
        return "faults reverted, job on"
    if not list((state / "active").glob("*.json")):
        return "run.json, not registered"
    return "job starting or stepping"


def _run_id(run_dir: RunDir) -> str | None:
    try:
        return str(json.loads(Path(run_dir.run_start).read_text())["run_id"])
    except (OSError, ValueError, KeyError):
        return None


def trial(index: int, kill_at: float, root: Path) -> dict[str, Any]:
    tmp = root / f"trial-{index:03d}"
    state = tmp / "state"
    tmp.mkdir(parents=True)
    (tmp / "sigkill.yaml").write_text(SCENARIO)
    env = _env(state)
    run_dir = RunDir(str(tmp / "out" / "sigkill" / "0"))
    controller = subprocess.Popen([*TRAINCHAOS, "run", "sigkill.yaml", "--out", str(tmp / "out")], env=env,
                                  cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(kill_at)
    exited = controller.poll()
    if exited is None:
        os.kill(controller.pid, signal.SIGKILL)
    controller.wait()
    phase = "exited before the kill" if exited is not None else _phase(run_dir, state)
    run_id = _run_id(run_dir)
    before = len(_trial_processes(state))
    cleanup = subprocess.run([*TRAINCHAOS, "cleanup"], env=env, cwd=tmp, capture_output=True, text=True,
                             timeout=300)
    # What cleanup left: the processes a moment later (a SIGKILL is not instant).
    time.sleep(0.5)
    left = _trial_processes(state) + (find_run_processes(run_id) if run_id else [])
    left_pids = sorted({p.pid for p in left})
    stopped = sorted({p.pid for p in left if p.state == "T"})
    registered = sorted(p.name for p in (state / "active").glob("*.json")) if (state / "active").exists() else []
    pending_faults = [f["fault_id"] for f in FaultJournal(run_dir.fault_journal).pending()]
    pending_res = [r["kind"] for r in pending_resources(run_dir.resources_journal)]
    check = subprocess.run([*TRAINCHAOS, "cleanup", "--check"], env=env, cwd=tmp, capture_output=True, text=True,
                           timeout=300)
    kill_pids(left_pids)  # never leave the trial's leftovers to the next one
    leftovers = len(left_pids) + len(registered) + len(pending_faults) + len(pending_res)
    return {"trial": index, "kill_at_s": round(kill_at, 2), "phase": phase, "run_id": run_id,
            "processes_before_cleanup": before, "cleanup_rc": cleanup.returncode,
            "cleanup_out": (cleanup.stdout + cleanup.stderr).strip()[-2000:],
            "left_processes": left_pids, "left_stopped": stopped, "left_registered": registered,
            "left_pending_faults": pending_faults, "left_resources": pending_res,
            "check_rc": check.returncode, "check_out": check.stdout.strip()[-2000:],
            "leftovers": leftovers, "clean": leftovers == 0 and check.returncode == 0 and cleanup.returncode == 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=float, default=18.0,
                        help="kill moments are drawn from [0, WINDOW] s after the controller starts")
    parser.add_argument("--out", default=os.path.join("reports", "bench"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sigkill-bench-") as root:
        for index in range(args.trials):
            row = trial(index, rng.uniform(0.0, args.window), Path(root))
            rows.append(row)
            print(f"trial {index + 1:3d}/{args.trials}: killed at {row['kill_at_s']:5.2f} s ({row['phase']}); "
                  f"{row['processes_before_cleanup']} process(es) before cleanup; cleanup rc {row['cleanup_rc']}; "
                  f"left {row['leftovers']}; check rc {row['check_rc']}", flush=True)
    phases = collections.Counter(r["phase"] for r in rows)
    clean = sum(r["clean"] for r in rows)
    summary = {
        "trials": len(rows), "seed": args.seed, "window_s": args.window, "clean": clean,
        "leftovers": sum(r["leftovers"] for r in rows),
        "cleanup_rc": dict(collections.Counter(r["cleanup_rc"] for r in rows)),
        "check_rc": dict(collections.Counter(r["check_rc"] for r in rows)),
        "processes_before_cleanup": sum(r["processes_before_cleanup"] for r in rows),
        "phases": dict(phases), "wall_s": round(time.monotonic() - started, 1),
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "sigkill_bench.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"summary": summary, "trials": rows}, fh, indent=1)
    print(json.dumps(summary, indent=1))
    print(f"{clean}/{len(rows)} trials clean after `trainchaos cleanup`; every trial in {path}")
    return 0 if clean == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
