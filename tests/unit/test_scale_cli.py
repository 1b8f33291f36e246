"""``trainchaos simulate`` through the command line: results, output files, sweeps, and bad
input (located errors on stderr, nothing simulated, exit code 2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.cli import cli, main
from chaos.errors import EXIT_BAD_INPUT, EXIT_OK

CONFIG = """\
name: small-job
job: {devices: 512, devices_per_node: 8, days: 7}
classes:
  - {name: gpu, rate_per_device_hour: 2.0e-5, detection_s: 30, restart_s: 240}
  - {name: power, rate_per_domain_hour: 1.0e-4, domain_nodes: 16, detection_s: 5, restart_s: 600}
  - {name: sw, rate_per_node_hour: 1.0e-4, scope: process, detection_s: 10, restart_s: 120}
maintenance: {every_h: 48, duration_s: 900}
checkpoint: {interval_s: 900, mode: async, blocking_s: 4, persist_s: 30}
recovery: {mode: spares, spare_nodes: 4, repair_h: 24}
"""


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["trainchaos", *argv])
    code: object = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(CONFIG)
    return path


def test_simulate_prints_the_results(config: Path):
    result = CliRunner().invoke(cli, ["simulate", str(config), "--trials", "200", "--seed", "1"])
    assert result.exit_code == EXIT_OK, result.output
    out = result.output
    assert "small-job: 512 devices (64 nodes x 8), 7 days, 200 trials, seed 1" in out
    assert "ETTR " in out and "[95 % CI" in out and "single runs p5-p95" in out
    assert "lost GPU-hours per run:" in out
    assert "checkpoint interval: configured 900 s | Young" in out and "simulation search" in out


def test_sweep_and_out_write_json_markdown_and_png(config: Path, tmp_path: Path, monkeypatch, capsys):
    out_dir = tmp_path / "out"
    code, out, err = _main(["simulate", str(config), "--trials", "100", "--out", str(out_dir),
                            "--sweep", "checkpoint.interval_s=60,300,900",
                            "--sweep", "classes.gpu.detection_s=30,28"], monkeypatch, capsys)
    assert code == EXIT_OK, err
    assert "sweep (checkpoint.interval_s, classes.gpu.detection_s" in out
    data = json.loads((out_dir / "small-job.json").read_text())
    rows = data["sweep"]["rows"]
    assert [r["values"] for r in rows][:2] == [
        {"checkpoint.interval_s": 60, "classes.gpu.detection_s": 30},
        {"checkpoint.interval_s": 60, "classes.gpu.detection_s": 28}]
    # the same seed for every row: the same failures, so the rows differ by the policy only
    assert len({r["summary"]["interruptions"]["unplanned"]["mean"] for r in rows}) == 1
    # 2 s faster detection: 2 s x 512 GPUs less downtime per gpu-class interruption
    fast, slow = rows[5]["summary"]["classes"][0], rows[4]["summary"]["classes"][0]
    saved = slow["lost_gpu_h"]["detection"] - fast["lost_gpu_h"]["detection"]
    # (a little less: a failure while the job is already down only adds what extends the outage)
    assert saved == pytest.approx(fast["interruptions"]["mean"] * 2 * 512 / 3600, rel=0.05)
    md = (out_dir / "small-job.md").read_text()
    assert "| checkpoint.interval_s | classes.gpu.detection_s | interruptions | ETTR |" in md
    assert (out_dir / "small-job.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


BAD_CASES = [
    ("negative-rate", CONFIG.replace("rate_per_device_hour: 2.0e-5", "rate_per_device_hour: -2.0e-5"),
     "classes[0].rate_per_device_hour: -2e-05 is out of range: must be >= 0"),
    ("zero-interval", CONFIG.replace("interval_s: 900", "interval_s: 0"),
     "checkpoint.interval_s: 0 is out of range: must be > 0"),
    ("no-figures", CONFIG.replace(", detection_s: 30, restart_s: 240", ""),
     "classes[0]: class 'gpu' has no recovery figures (detection_s, restart_s): set them here or in "
     "class_defaults, or name the trainchaos fault types that measure it (fault_types) and give --from-runs DIR"),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_is_located_and_exits_2(name, text, expected, tmp_path: Path, monkeypatch, capsys):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    out_dir = tmp_path / "out"
    code, out, err = _main(["simulate", str(path), "--out", str(out_dir)], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT
    assert f"{path}: {expected}" in err.splitlines()
    assert out == "" and not out_dir.exists()  # nothing simulated, nothing written


def test_all_three_problems_in_one_file_are_reported_together(tmp_path: Path, monkeypatch, capsys):
    text = (CONFIG.replace("rate_per_device_hour: 2.0e-5", "rate_per_device_hour: -2.0e-5")
            .replace("interval_s: 900", "interval_s: 0")
            .replace("scope: process, detection_s: 10, restart_s: 120", "scope: process"))
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = _main(["simulate", str(path)], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT and out == ""
    assert [line.split(": ")[1] for line in err.splitlines()] == [
        "classes[0].rate_per_device_hour", "classes[2]", "checkpoint.interval_s"]


def test_bad_sweeps_and_missing_runs_are_bad_input(config: Path, tmp_path: Path, monkeypatch, capsys):
    code, _, err = _main(["simulate", str(config), "--sweep", "checkpoint.interval_s=0,60"], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT
    assert f"{config} (--sweep checkpoint.interval_s=0): checkpoint.interval_s: 0 is out of range: must be > 0" in err
    code, _, err = _main(["simulate", str(config), "--sweep", "interval"], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT and "--sweep: interval: expected KEY=V1,V2,..." in err
    code, _, err = _main(["simulate", str(config), "--from-runs", str(tmp_path / "none")], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT and f"{tmp_path / 'none'}: --from-runs: no such directory" in err
    code, _, err = _main(["simulate", str(tmp_path / "missing.yaml")], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT and "missing.yaml: no such file" in err
    code, _, err = _main(["simulate", str(config), "--trials", "0"], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT


def test_a_job_without_failures_writes_valid_json(tmp_path: Path, monkeypatch, capsys):
    path = tmp_path / "calm.yaml"
    path.write_text(CONFIG.replace("2.0e-5", "0").replace("1.0e-4", "0"))
    code, out, err = _main(["simulate", str(path), "--trials", "20", "--out", str(tmp_path / "o"),
                            "--sweep", "seed=1,2"], monkeypatch, capsys)
    assert code == EXIT_OK, err
    assert "no failures: checkpoints only cost" in out
    data = json.loads((tmp_path / "o" / "small-job.json").read_text())  # no Infinity in it
    assert data["summary"]["intervals"]["mtbf_s"] is None
    assert [r["summary"]["seed"] for r in data["sweep"]["rows"]] == [1, 2]  # a swept seed is used
