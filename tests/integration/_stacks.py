"""What the stack tests share (test_stack_*.py): a stack's suite scenario run by the CLI
without its fault-free twin, and the bundled example's final digest trained straight through
by torchrun without its adapter, which the fault run's digest is compared with instead; the
shipped kill-rank scenario run and judged with its twin (lightning, accelerate), and the
bundled example trained in this process with and without its adapter."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from chaos import probe
from chaos.runfiles.events import read_events
from chaos.util.procs import find_run_processes
from chaos.workload.script import EXAMPLES_DIR
from tests.integration._support import REPO, cli_env, run_trainchaos

__all__ = ["BATCH", "assert_adapter_changes_nothing", "assert_data_exactly_once", "load_example", "run_kill_rank",
           "run_without_baseline", "straight_digest"]


def run_without_baseline(scenario: Path, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """``trainchaos run`` of ``scenario`` less its baseline and final-state target: the
    document, the run's journal (completed, exit 0) and its report directory."""
    doc = yaml.safe_load(scenario.read_text())
    doc["baseline"] = False
    doc["targets"].pop("final_state", None)
    (tmp_path / scenario.name).write_text(yaml.safe_dump(doc))
    res = run_trainchaos(["run", scenario.name, "--out", "reports"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=300)
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
        # TMPDIR: torchrun leaves a torchelastic_* folder there. The agent's store not shared,
        # as trainchaos's backends launch (chaos/cluster/local.py): rank 0 hosts the job's.
        env={**cli_env(tmp_path / "state"), "TMPDIR": str(tmp_path), "TORCH_CPP_LOG_LEVEL": "error",
             "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    found = re.search(r"final step (\d+) digest ([0-9a-f]{64})", out.stdout)
    assert out.returncode == 0 and found, out.stdout[-2000:] + out.stderr[-2000:]
    assert int(found.group(1)) == options["steps"]
    return found.group(2)


CHECKPOINT_EVERY = 5
"""The interval the shipped kill-rank scenarios give the examples (--every 5)."""


def run_kill_rank(stack: str, tmp_path: Path, data_exactly_once: bool = True) -> dict[str, Any]:
    """Run ``scenarios/stacks/<stack>/kill-rank.yaml`` through ``trainchaos run`` and check
    what every stack's kill must show; the fault run's journal. ``data_exactly_once``: the
    data checker finds every sample once (else the caller judges the data figures)."""
    scenario = REPO / "scenarios" / "stacks" / stack / "kill-rank.yaml"
    out = tmp_path / "out"
    result = run_trainchaos(["run", str(scenario), "--out", str(out)],
                            env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=280)
    output = result.stdout + result.stderr
    run_dir = out / f"{stack}-kill-rank" / "0"
    journal = json.loads((run_dir / "journal.json").read_text())
    assert result.returncode == 0, output[-3000:]
    assert journal["status"] == "completed", journal.get("error")
    assert journal["verdict"]["passed"], journal["verdict"]

    fault = journal["faults"][0]
    metrics = journal["metrics"]["faults"][0]
    # Detected: neither stack reports a failure itself; torchrun's agent does, and names
    # the rank it lost.
    assert metrics["detected_by"].startswith("node-"), metrics
    assert metrics["attribution"] == "correct", metrics.get("attribution_detail")
    assert metrics["detection_s"] is not None and metrics["recovery_s"] is not None
    # Recovered from the stack's own checkpoint, reported by its adapter on the restart.
    events = read_events(str(run_dir / "events"))
    loads = [e for e in events if e["kind"] == "ckpt_load" and e["incarnation"] > 0]
    assert {e["src"] for e in loads} == {"rank-0", "rank-1"}, loads
    assert {e["step"] for e in loads} == {metrics["resumed_from"]}
    assert metrics["resumed_from"] % CHECKPOINT_EVERY == 0
    assert 0 < metrics["resumed_from"] <= fault["step_at_inject"]
    assert metrics["lost_steps"] < CHECKPOINT_EVERY
    assert metrics["lost_steps"] == metrics["last_step_before"] - metrics["resumed_from"]
    # Judged: the restarted job ended bitwise equal to its fault-free twin (the digest the
    # adapter published), and the report was written.
    final = journal["metrics"]
    assert final["digest_match"] is True and final["final_digest"] == final["baseline_digest"], final
    if data_exactly_once:
        assert_data_exactly_once(final, steps=final["final_step"], ranks=2)
    assert (run_dir / "summary.md").is_file() and (out / "index.html").is_file()
    assert not find_run_processes(journal["run_id"])
    return journal


BATCH = 16
"""The examples' batch per rank (--batch's default)."""


def assert_data_exactly_once(metrics: dict[str, Any], steps: int, ranks: int) -> None:
    """The data checker found the adapter's sample reports for every step of every rank that
    the surviving training holds, each sample once (against the twin where the run had one)."""
    assert metrics["data_samples"] == steps * ranks * BATCH, metrics.get("data_epochs")
    assert metrics["data_lost"] == 0 and metrics["data_duplicated"] == 0, metrics.get("data_epochs")


def load_example(stack: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_example_{stack}", EXAMPLES_DIR / stack / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_adapter_changes_nothing(stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   saves: list[tuple[int, str]], steps: int = 12) -> None:
    """Train the example in this process twice, the probe attached both times: without its
    adapter line, then with it. The digests must be equal, and the adapter must have reported
    every step (with its loss), the checkpoint files ``saves`` (step, file name) and the end."""
    example = load_example(stack)
    events_dir = tmp_path / "events"
    monkeypatch.setenv(probe.ENV_EVENTS_DIR, str(events_dir))
    monkeypatch.setattr(probe, "_probe", None)
    try:
        plain = example.main(["--steps", str(steps), "--ckpt-dir", str(tmp_path / "a"), "--no-adapter"])
        adapted = example.main(["--steps", str(steps), "--ckpt-dir", str(tmp_path / "b")])
    finally:
        probe.get().close()
    events = read_events(str(events_dir))
    assert plain == adapted, f"the {stack} adapter changed what was trained"
    reported = [e for e in events if e["kind"] == "step_end"]
    assert [e["step"] for e in reported] == list(range(1, steps + 1))
    assert all(isinstance(e["loss"], float) for e in reported)
    # Each step carries the indices of the one batch it trained, with its epoch.
    assert all(sum(b - a for a, b in e["samples"]) == BATCH and isinstance(e.get("epoch"), int)
               for e in reported), reported
    written = [e for e in events if e["kind"] == "ckpt_save_end"]
    assert [(e["step"], Path(e["path"]).name) for e in written] == saves
    assert all(e["bytes"] > 0 for e in written)
    ends = [(e["step"], e["digest"], e["weights_finite"]) for e in events if e["kind"] == "run_end"]
    assert ends == [(steps, adapted, True)]
