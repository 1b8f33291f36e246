"""The kernel's OOM record of a node's memory cgroup, as the job's platform reports it.

``python -m chaos.cluster.oomwatch --cgroup DIR --node N --events DIR`` runs beside a node
whose memory is limited by a run-scoped cgroup (the local backend's ``memory_mb``), as a
run-scoped helper process. It registers an eventfd for the cgroup's OOM notification
(cgroup v1 ``cgroup.event_control`` on ``memory.oom_control``), blocks on it, and on each
OOM writes one ``detected`` event (src ``kernel-node-N``, ``failure_class: oom``) naming the
rank the kernel's OOM killer picks: the member of the cgroup with the largest resident set
(every rank has the same ``oom_score_adj``, so the kernel's choice is the biggest). A
kubelet's ``OOMKilled`` or Slurm's ``oom-kill event`` is the same record in a real cluster:
what tells an OOM kill apart from any other SIGKILL, which the job itself cannot see.

Reads the cgroup through ``chaos.cluster.cgroups``; writes the event with ``chaos.probe``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from chaos.cluster.cgroups import cgroup_procs, oom_kills
from chaos.probe import Probe

__all__ = ["main"]


def _env_rank(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            for item in fh.read().split(b"\0"):
                if item.startswith(b"RANK="):
                    return int(item[5:])
    except (OSError, ValueError):
        return None
    return None


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return 0


class _Ranks:
    """pid -> (rank, last resident set) of the cgroup's members, refreshed in the background.

    Read ahead of the OOM, not at it: reading a process's environment takes its memory map's
    lock, which the process being killed may hold (a page fault in its leaking thread) while
    another of its threads waits to write it, so a read at the OOM blocks until the process
    is gone. Its status (the resident set) is read without that lock."""

    def __init__(self, cgroup: str) -> None:
        self.cgroup = cgroup
        self.known: dict[int, tuple[int, int]] = {}
        threading.Thread(target=self._refresh, daemon=True, name="oomwatch-ranks").start()

    def _refresh(self) -> None:
        while True:
            members = cgroup_procs(self.cgroup)
            known = {}
            for pid in members:
                rank = self.known[pid][0] if pid in self.known else _env_rank(pid)
                if rank is not None:
                    known[pid] = (rank, _rss_kb(pid))
            self.known = known
            time.sleep(0.2)

    def biggest(self) -> tuple[int, int, int] | None:
        """(pid, rank, rss_kb) of the rank worker with the largest resident set now (a
        rank's DataLoader workers inherit RANK but share its pages: the biggest is the rank)."""
        best = None
        for pid, (rank, last_rss) in self.known.items():
            rss = _rss_kb(pid) or last_rss
            if best is None or rss > best[2]:
                best = (pid, rank, rss)
        return best


def _count_after_kill(cgroup: str, before: int, wait_s: float = 0.1) -> int:
    """The cgroup's OOM-kill counter once this OOM's kill is counted: the notification comes
    when the kernel decides, a moment before it kills and counts (read at once, a fresh-clone
    CI run saw 0). Waits a few ms in practice, ``wait_s`` at most (an OOM the kernel resolved
    without a kill)."""
    deadline = time.monotonic() + wait_s
    while True:
        count = oom_kills(cgroup)
        if count > before or time.monotonic() >= deadline:
            return count
        time.sleep(0.002)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.cluster.oomwatch")
    parser.add_argument("--cgroup", required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--events", required=True)
    args = parser.parse_args(argv)
    probe = Probe(args.events, f"kernel-node-{args.node}", 0)
    efd = os.eventfd(0)
    control = os.open(os.path.join(args.cgroup, "memory.oom_control"), os.O_RDONLY)
    with open(os.path.join(args.cgroup, "cgroup.event_control"), "w", encoding="utf-8") as fh:
        fh.write(f"{efd} {control}")
    ranks = _Ranks(args.cgroup)
    limit_mb = 0
    try:
        with open(os.path.join(args.cgroup, "memory.limit_in_bytes"), encoding="utf-8") as fh:
            limit_mb = int(fh.read()) >> 20
    except (OSError, ValueError):
        pass
    killed = oom_kills(args.cgroup)
    while True:
        os.read(efd, 8)  # blocks until the cgroup runs out of memory
        victim = ranks.biggest()  # first: once the kill is counted, the victim is gone
        killed = _count_after_kill(args.cgroup, killed)
        if victim is None:
            continue  # not a rank (the agent itself): nothing the job's attribution needs
        pid, rank, rss_kb = victim
        # Within milliseconds of the kill (the wait above), before its peers can notice a
        # broken collective.
        probe.emit("detected", by=f"kernel-node-{args.node}", suspect=f"rank-{rank}", failure_class="oom",
                   reason=(f"the kernel's OOM killer killed pid {pid} (rank {rank}, {rss_kb >> 10} MiB resident) "
                           f"in node {args.node}'s memory cgroup (limit {limit_mb} MiB)"),
                   oom_kills=killed)


if __name__ == "__main__":
    sys.exit(main())
