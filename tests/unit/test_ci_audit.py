"""``make audit`` (.ci/audit.py) tells a vulnerability (exit 1) from a service that audited
nothing (exit 0, said in capitals), from pip-audit's JSON report as it writes it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

AUDIT = Path(__file__).resolve().parents[2] / ".ci" / "audit.py"


def _audit_with(monkeypatch: pytest.MonkeyPatch, deps: list[dict[str, Any]] | None, stderr: str = "") -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_audit", AUDIT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if deps is not None:
            Path(argv[argv.index("--output") + 1]).write_text(json.dumps({"dependencies": deps, "fixes": []}))
        return subprocess.CompletedProcess(argv, 1, "", stderr)

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    return module


def test_a_known_vulnerability_fails(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    deps = [{"name": "requests", "version": "2.19.0", "vulns": [{"id": "PYSEC-2018-28", "fix_versions": ["2.20.0"]}]},
            {"name": "click", "version": "8.1.7", "vulns": []}]
    assert _audit_with(monkeypatch, deps).main() == 1
    assert "requests 2.19.0: PYSEC-2018-28 (fixed in: 2.20.0)" in capsys.readouterr().out


def test_nothing_audited_is_said_and_passes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    deps = [{"name": "torch", "skip_reason": "Dependency not found on PyPI and could not be audited: torch (2.13.0)"}]
    assert _audit_with(monkeypatch, deps).main() == 0
    assert "NOTHING AUDITED" in capsys.readouterr().out


def test_a_service_that_cannot_be_reached_is_said_and_passes(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _audit_with(monkeypatch, None, stderr="requests.exceptions.ConnectionError: ...").main() == 0
    assert "NOT AUDITED: pip-audit failed (exit 1): requests.exceptions.ConnectionError" in capsys.readouterr().out
