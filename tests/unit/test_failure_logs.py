"""tests/failure_logs: which node-log lines a failed integration test's report carries."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from tests import failure_logs


def _log(root: Path, run: str, node: int, lines: list[str], mtime: float) -> Path:
    path = root / "reports" / run / "0" / "logs" / f"node-{node}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (mtime, mtime))
    return path


def test_errors_restarts_and_rounds_are_kept_and_step_lines_and_warnings_noise_are_not(tmp_path: Path) -> None:
    log = _log(tmp_path, "r", 0, [
        "step 1 loss 0.5",
        "/x/torch/cuda/__init__.py:64: FutureWarning: The pynvml package is deprecated.",
        "ERROR wrap rank=0 fn_ex: DistNetworkError('... code: -98, name: EADDRINUSE ...')",
        "I api.py:962] [default] Detected 1 new nodes from group_rank=0; will restart worker group",
        "I dynamic_rendezvous.py:1191] The node 'n' has joined round 2 of the rendezvous 'r'",
        "step 2 loss 0.4",
    ], 1.0)
    assert failure_logs.telling_lines(log) == [
        "ERROR wrap rank=0 fn_ex: DistNetworkError('... code: -98, name: EADDRINUSE ...')",
        "I api.py:962] [default] Detected 1 new nodes from group_rank=0; will restart worker group",
        "I dynamic_rendezvous.py:1191] The node 'n' has joined round 2 of the rendezvous 'r'",
    ]


def test_a_long_log_gives_its_last_lines_each_cut_short(tmp_path: Path) -> None:
    lines = [f"RuntimeError number {i} " + "x" * 1000 for i in range(100)]
    kept = failure_logs.telling_lines(_log(tmp_path, "r", 0, lines, 1.0))
    assert len(kept) == failure_logs.LINES_PER_FILE
    assert kept[-1].startswith("RuntimeError number 99 ") and len(kept[-1]) == failure_logs.LINE_CHARS


def test_the_section_names_each_log_newest_first_and_skips_quiet_ones(tmp_path: Path) -> None:
    _log(tmp_path, "old", 0, ["Traceback (most recent call last):"], 1.0)
    _log(tmp_path, "new", 1, ["RendezvousClosedError"], 2.0)
    _log(tmp_path, "quiet", 0, ["step 1 loss 0.5"], 3.0)
    section = failure_logs.run_logs_section(tmp_path)
    assert section == ("== reports/new/0/logs/node-1.log\nRendezvousClosedError\n"
                       "== reports/old/0/logs/node-0.log\nTraceback (most recent call last):")
    assert failure_logs.run_logs_section(tmp_path / "nothing-here") == ""


def test_a_test_without_a_tmp_path_of_its_own_is_given_the_base_temp_dir(tmp_path: Path) -> None:
    class Factory:
        def getbasetemp(self) -> Path:
            return tmp_path / "base"

    own = SimpleNamespace(funcargs={"tmp_path": tmp_path / "own"}, config=SimpleNamespace(_tmp_path_factory=Factory()))
    assert failure_logs._roots(own) == [tmp_path / "own", tmp_path / "base"]
    fixture_only = SimpleNamespace(funcargs={}, config=SimpleNamespace(_tmp_path_factory=Factory()))
    assert failure_logs._roots(fixture_only) == [tmp_path / "base"]
    assert failure_logs._roots(SimpleNamespace(config=SimpleNamespace())) == []
