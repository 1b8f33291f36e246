"""The machine's account of a test session (tests/machine_load.py): what the cores did, in
/proc/stat's terms, and the summary line a `make test` ends with."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.machine_load import CpuTimes, calibration_ms, parse_cpu_line, read_cpu_times, summary

ONE_TEST = "tests/unit/test_machine_load.py::test_the_cpu_line_is_read_by_state"


def test_the_cpu_line_is_read_by_state() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice, in ticks of 1/100 s
    times = parse_cpu_line("cpu  1000 10 200 3000 40 0 50 60 500 0", 100)
    assert times == CpuTimes(busy=12.6, idle=30.4, steal=0.6)  # guest is inside user already
    assert times.total == pytest.approx(43.6)
    assert (times - CpuTimes(2.6, 0.4, 0.1)) == CpuTimes(busy=10.0, idle=30.0, steal=0.5)


@pytest.mark.parametrize("line", ["cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "intr 1 2 3 4 5 6 7 8"])
def test_anything_but_the_aggregate_line_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="aggregate cpu line"):
        parse_cpu_line(line, 100)


def test_this_machine_counts_forward_and_the_loop_takes_time() -> None:
    before = read_cpu_times()
    assert calibration_ms() > 0
    used = read_cpu_times() - before
    assert used.busy > 0 and used.idle >= 0 and used.steal >= 0


def test_the_summary_gives_shares_of_the_cores_and_both_loop_times() -> None:
    line = summary(100.0, CpuTimes(busy=150.0, idle=45.0, steal=5.0), 25.0, 31.25)
    assert line == ("machine: 100 s wall on 2.0 cores: busy 150 CPU-s (75.0 %), idle 22.5 %, steal 2.5 %; "
                    "a fixed Python loop took 25.0 ms at the start, 31.2 ms at the end")


def test_a_session_with_a_timeline_ends_with_the_machine_line(tmp_path) -> None:
    """A real pytest session, as `make test` runs it (--timeline), on one quick test."""
    timeline = tmp_path / "timeline.tsv"
    proc = subprocess.run([sys.executable, "-m", "pytest", ONE_TEST, "-q", "-p", "no:cacheprovider",
                           "--timeline", str(timeline)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("machine: ")]
    assert " cores: busy " in line and "a fixed Python loop took " in line
    assert timeline.read_text().splitlines()[1].endswith(ONE_TEST)
    plain = subprocess.run([sys.executable, "-m", "pytest", ONE_TEST, "-q", "-p", "no:cacheprovider"],
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "machine: " not in plain.stdout  # only where asked for
