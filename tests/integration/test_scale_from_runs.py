"""``trainchaos simulate --from-runs`` on the journals of a real run, end to end.

One short smoke scenario runs for real (as ``make demo`` runs it: the installed command,
its own report folder), then the Llama 3 model takes that run's measured detection and
restart for the classes mapped to its fault type, and the defaults for the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chaos.cli import main
from tests.integration._support import REPO, TRAINCHAOS, cli_env


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_simulate_from_the_journals_of_a_real_run(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "reports"
    done = subprocess.run([*TRAINCHAOS, "run", str(REPO / "scenarios" / "smoke" / "device-error.yaml"),
                           "--out", str(runs)], cwd=REPO, env=cli_env(tmp_path / "state"), capture_output=True,
                          text=True, timeout=220)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # a missed timing target still measures
    (journal_path,) = runs.glob("**/journal.json")
    measured = json.loads(journal_path.read_text())["metrics"]["faults"][0]
    assert measured["type"] == "device_error" and measured["detection_s"] is not None

    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["trainchaos", "simulate", str(REPO / "scenarios" / "scale" / "llama3.yaml"),
                                      "--from-runs", str(runs), "--trials", "200", "--out", str(out)])
    code: object = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    printed, err = capsys.readouterr()
    assert not code, err
    assert f"--from-runs {runs}: 1 journal(s), 1 measured fault(s) of type device_error" in printed
    result = json.loads((out / "llama3-405b-54d.json").read_text())
    classes = {c["name"]: c for c in result["summary"]["classes"]}
    gpu = classes["gpu_hbm3_memory"]  # maps to device_error only
    assert gpu["sources"]["detection_s"] == "measured (median of 1: device_error)"
    assert gpu["detection_s"] == pytest.approx(measured["detection_s"])
    assert gpu["restart_s"] == pytest.approx(measured["recovery_s"] - measured["detection_s"])
    assert classes["software_bug"]["sources"]["detection_s"] == "class_defaults"  # kill_rank: not run
    # seconds-scale recovery measured on 4 ranks beats the minutes assumed at 16k GPUs
    assert result["summary"]["ettr"]["mean"] > 0.92
