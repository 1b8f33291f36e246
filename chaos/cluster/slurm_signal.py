"""Signal a run's processes on one Slurm node, from inside the job: what the ``slurm``
backend runs with ``srun --jobid=J --overlap -w NODE`` when the processes live on another
host than the controller (a real cluster), where a pid means nothing to the controller.

    python -m chaos.cluster.slurm_signal --run RUN_ID --signal SIGTERM --node 1 [--rank 3] [--pid P ...]

Only processes whose environment carries the run's ``TRAINCHAOS_RUN_ID`` are ever signalled
(a recycled pid, anyone else's process, is left alone). ``--pid``: these processes (the
node's agent and task wrapper, a rank's worker); ``--node``: every process of the run on
that node index; ``--rank``: the worker of that rank (not its DataLoader children, which
share its RANK). Prints ``{"pids": [...]}``, the pids signalled, for the controller.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys

from chaos.util.procs import find_run_processes

__all__ = ["main", "select_pids"]


def select_pids(run_id: str, node: int | None, rank: int | None, pids: list[int]) -> list[int]:
    """The run's processes to signal, in order: the named pids, the rank's worker, the node's
    processes (each once)."""
    procs = find_run_processes(run_id)
    mine = {p.pid for p in procs}
    order = [pid for pid in pids if pid in mine]
    if rank is not None:
        same = [p for p in procs if p.rank == rank]
        same_pids = {p.pid for p in same}
        order += [p.pid for p in same if p.ppid not in same_pids]
    if node is not None and rank is None:
        order += [p.pid for p in procs if p.node == node]
    return list(dict.fromkeys(order))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.cluster.slurm_signal")
    parser.add_argument("--run", required=True)
    parser.add_argument("--signal", required=True, help="a signal name, SIGTERM")
    parser.add_argument("--node", type=int)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--pid", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    sig = signal.Signals[args.signal]
    hit = []
    for pid in select_pids(args.run, args.node, args.rank, args.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            hit.append(pid)
    print(json.dumps({"pids": hit, "host": os.uname().nodename}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
