"""``trainchaos simulate --from-runs`` on the journals of a real run, end to end.

One short smoke scenario runs for real (as ``make demo`` runs it: the installed command,
its own report folder; the session's ``smoke_device_error`` run, which test_process_faults
reads too), then the Llama 3 model takes that run's measured detection and
restart for the classes mapped to its fault type, and the defaults for the rest.
"""

from __future__ import annotations

import json
import sys

import pytest

from chaos.cli import main
from tests.integration._support import REPO


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_simulate_from_the_journals_of_a_real_run(smoke_device_error, tmp_path, monkeypatch, capsys):
    runs = smoke_device_error.out
    measured = smoke_device_error.journal["metrics"]["faults"][0]
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
