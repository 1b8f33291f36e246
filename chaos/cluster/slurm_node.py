"""What ``srun`` runs on each node of a ``slurm`` run: one torchrun agent, with the node's
identity and environment, its exit code written where the controller reads it.

    python -m chaos.cluster.slurm_node RUN_DIR

The node index is ``SLURM_NODEID`` (its place in the job's node list), not the host name:
on the local testbed every emulated node is ``localhost``. What to run and with which
environment is in ``RUN_DIR/slurm/launch.json``, written by the controller (the run
directory is on a filesystem every node sees). The wrapper stays the agent's parent so
that it can write the agent's exit code (``node-<i>.rc``) and forward the signals Slurm
sends the step (SIGTERM on ``scancel``, a drain's or a preemption's warning) to the agent.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

__all__ = ["main", "node_file", "rdzv_id_for_restart"]

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)


def node_file(run_dir: str, node: int, suffix: str) -> str:
    return os.path.join(run_dir, "slurm", f"node-{node}.{suffix}")


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def rdzv_id_for_restart(argv: list[str], restart: int) -> list[str]:
    """``argv`` with its rendezvous id suffixed ``-r<restart>``: the torchrun option in any
    spelling it accepts (``--rdzv-id X``, ``--rdzv-id=X``, ``--rdzv_id``), the first one
    only (the launcher's, ahead of the worker's own arguments). Unchanged without one."""
    out = list(argv)
    for i, arg in enumerate(out):
        name, eq, _ = arg.partition("=")
        if name not in ("--rdzv-id", "--rdzv_id"):
            continue
        if eq:
            out[i] = f"{arg}-r{restart}"
        elif i + 1 < len(out):
            out[i + 1] = f"{out[i + 1]}-r{restart}"
        break
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run_dir = args[0]
    node = int(os.environ["SLURM_NODEID"])
    with open(os.path.join(run_dir, "slurm", "launch.json"), encoding="utf-8") as fh:
        launch = json.load(fh)
    entry = launch["nodes"][str(node)]
    rc_path = node_file(run_dir, node, "rc")
    if os.path.exists(rc_path):  # a requeued job starts afresh
        os.unlink(rc_path)
    if entry.get("wait_for"):
        # A spare: its agent joins once the job's first round formed (the controller says so).
        while not os.path.exists(entry["wait_for"]):
            time.sleep(0.2)
    env = {**os.environ, **entry["env"]}
    argv = list(entry["argv"])
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if restart:
        # A requeued job rendezvouses afresh: the old round's state is still in the store.
        argv = rdzv_id_for_restart(argv, restart)
    log = open(entry["log"], "ab")  # noqa: SIM115 (the agent's, closed once it started)
    agent = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=run_dir)
    log.close()
    _write_atomic(node_file(run_dir, node, "json"), json.dumps({
        "node": node, "wrapper_pid": os.getpid(), "agent_pid": agent.pid, "host": socket.gethostname(),
        "slurm_node": os.environ.get("SLURMD_NODENAME", ""), "job_id": os.environ.get("SLURM_JOB_ID", ""),
        "restart_count": restart,
    }))

    def forward(signum: int, frame: object) -> None:
        try:
            agent.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    rc = agent.wait()
    _write_atomic(rc_path, f"{rc} {restart}")
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
