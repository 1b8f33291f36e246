"""What the stack tests share (test_stack_*.py): a stack's suite scenario run by the CLI
without its fault-free twin, and the bundled example's final digest trained straight through
by torchrun without its adapter, which the fault run's digest is compared with instead."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.integration._support import REPO, TRAINCHAOS, cli_env

__all__ = ["run_without_baseline", "straight_digest"]


def run_without_baseline(scenario: Path, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """``trainchaos run`` of ``scenario`` less its baseline and final-state target: the
    document, the run's journal (completed, exit 0) and its report directory."""
    doc = yaml.safe_load(scenario.read_text())
    doc["baseline"] = False
    doc["targets"].pop("final_state", None)
    (tmp_path / scenario.name).write_text(yaml.safe_dump(doc))
    res = subprocess.run([*TRAINCHAOS, "run", scenario.name, "--out", "reports"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    run = tmp_path / "reports" / doc["name"] / "0"
    journal = json.loads((run / "journal.json").read_text())
    assert journal["status"] == "completed", journal["error"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return doc, journal, run


def straight_digest(tmp_path: Path, kind: str, doc: dict[str, Any], seed: int) -> str:
    """The final digest of ``examples/<kind>/train.py`` with the scenario's options, on two
    ranks by torchrun, without a fault and without the adapter (``--no-adapter``)."""
    options = doc["workload"][kind]
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / kind / "train.py"), "--steps", str(options["steps"]), "--seed", str(seed),
         "--ckpt-dir", str(tmp_path / "straight"), *options["args"], "--no-adapter"],
        # TMPDIR: torchrun leaves a torchelastic_* folder there
        env={**cli_env(tmp_path / "state"), "TMPDIR": str(tmp_path), "TORCH_CPP_LOG_LEVEL": "error"},
        cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    found = re.search(r"final step (\d+) digest ([0-9a-f]{64})", out.stdout)
    assert out.returncode == 0 and found, out.stdout[-2000:] + out.stderr[-2000:]
    assert int(found.group(1)) == options["steps"]
    return found.group(2)
