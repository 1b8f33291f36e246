"""What the machine gave a test session (``--timeline``, as ``make test`` runs): its wall time,
how busy the cores were (and how much the hypervisor took: steal), and how long a fixed
Python loop took at the start and at the end.

Why: the same commit's ``make test`` took 16 min on this host one hour and 19.5 the next,
with no change to the code (an A/B of the changes between them measured none). A wall time
alone cannot tell a slower suite from a slower host; the loop's time, measured in the same
run, can, and the busy share tells a suite that waits (idle cores) from one that computes."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pytest

CALIBRATION_LOOP = 400_000
"""Iterations of the fixed loop: ~25 ms of one core here, short enough to repeat."""
CALIBRATION_REPEATS = 5
"""The loop's time is the least of these: the repeat least disturbed by the rest of the host."""


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time by state, in seconds summed over its cores (``/proc/stat``)."""

    busy: float
    idle: float  # idle and waiting on IO: a core nothing ran on
    steal: float  # taken by the hypervisor for other guests

    @property
    def total(self) -> float:
        return self.busy + self.idle + self.steal

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.busy - other.busy, self.idle - other.idle, self.steal - other.steal)


def parse_cpu_line(line: str, ticks_per_s: float) -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``: user nice system idle iowait irq softirq
    steal [guest guest_nice] (guest time is already inside user time)."""
    name, *fields = line.split()
    if name != "cpu" or len(fields) < 8:
        raise ValueError(f"not the aggregate cpu line of /proc/stat: {line!r}")
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) / ticks_per_s for v in fields[:8])
    return CpuTimes(busy=user + nice + system + irq + softirq, idle=idle + iowait, steal=steal)


def read_cpu_times() -> CpuTimes:
    with open("/proc/stat", encoding="ascii") as fh:
        return parse_cpu_line(fh.readline(), os.sysconf("SC_CLK_TCK"))


def calibration_ms() -> float:
    """CPU milliseconds of a fixed pure-Python loop, the least of CALIBRATION_REPEATS: what
    the host's speed is for the interpreters that make up most of a suite's CPU."""
    best = float("inf")
    for _ in range(CALIBRATION_REPEATS):
        start, total = time.process_time(), 0
        for i in range(CALIBRATION_LOOP):
            total += i * i
        best = min(best, time.process_time() - start)
    return best * 1000


def summary(wall_s: float, used: CpuTimes, loop_start_ms: float, loop_end_ms: float) -> str:
    cores = used.total / wall_s if wall_s > 0 else 0.0
    total = used.total or 1.0  # nothing counted: every share 0 %
    return (f"machine: {wall_s:.0f} s wall on {cores:.1f} cores: busy {used.busy:.0f} CPU-s "
            f"({100 * used.busy / total:.1f} %), idle {100 * used.idle / total:.1f} %, "
            f"steal {100 * used.steal / total:.1f} %; "
            f"a fixed Python loop took {loop_start_ms:.1f} ms at the start, {loop_end_ms:.1f} ms at the end")


class MachineLoad:
    """Registered in the main process only (one per session, not per worker)."""

    def __init__(self) -> None:
        self.loop_start_ms = calibration_ms()
        self.start = time.monotonic()
        self.cpu = read_cpu_times()

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        used, wall = read_cpu_times() - self.cpu, time.monotonic() - self.start
        terminalreporter.write_line(summary(wall, used, self.loop_start_ms, calibration_ms()))
