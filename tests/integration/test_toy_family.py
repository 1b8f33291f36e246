"""A fault family from another package, end to end: the toy family
(``tests/integration/plugins/toy_family/``: one fault type, one resource kind, one metric with
a target) is found through the ``trainchaos.families`` entry point of a dist-info this test
writes (no install, no edit of trainchaos), and runs for real. Its type is listed and
validated like a built-in one, its resource journaled and released, and its metric reaches
the journal, the verdict, JUnit, the HTML report and ``trainchaos compare``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration._support import cli_env, run_trainchaos

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory holding only the toy's distribution metadata: on PYTHONPATH, its entry
    point is seen by importlib.metadata as an installed package's."""
    dist = tmp_path / "site" / "toy_family-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[trainchaos.families]\ntoy = toy_family\n")
    return dist.parent


def _cli(tmp_path: Path, site: Path, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    # COLUMNS: the verdict table wide enough that a reason is not folded across lines
    return run_trainchaos(list(argv), env=cli_env(tmp_path / "state", site, PLUGINS, COLUMNS="300"),
                          cwd=tmp_path, timeout=timeout)


@pytest.mark.timeout(300)
def test_a_family_from_an_entry_point_runs_and_is_reported_everywhere(tmp_path: Path, site: Path) -> None:
    listed = _cli(tmp_path, site, "faults", timeout=60)
    assert listed.returncode == 0 and "toy_ballast" in listed.stdout, listed.stdout + listed.stderr

    scenario = tmp_path / "toy.yaml"
    scenario.write_text("""\
name: toy
workload:
  harness:
    steps: 30
    model: {name: mlp}
    checkpoint: {every_steps: 10}
topology: {nodes: 2, ranks_per_node: 1}
faults:
  - type: toy_ballast
    target: {node: 0}
    trigger: {at_step: 5}
    params: {mb: 3}
targets:
  toy_ballast_mb: {max: 2}
timeout_s: 150
""")
    # Its params and its target are checked like a built-in's (exit 2, located).
    bad = tmp_path / "bad.yaml"
    bad.write_text(scenario.read_text().replace("mb: 3", "mb: 100").replace("max: 2", "maxx: 2"))
    refused = _cli(tmp_path, site, "validate", str(bad), timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "faults[0].params.mb" in refused.stderr and "targets.toy_ballast_mb" in refused.stderr, refused.stderr

    out = tmp_path / "out"
    result = _cli(tmp_path, site, "run", str(scenario), "--out", str(out), "--junit", str(out / "junit.xml"))
    output = result.stdout + result.stderr
    # The family's target is judged like any: 3 MiB held, 2 allowed, the run misses it.
    assert result.returncode == 1, output
    assert "toy ballast 3 MiB > target 2 MiB" in result.stdout, "the verdict table gives the family's reason"

    run_dir = out / "toy" / "0"
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "completed"
    assert journal["metrics"]["toy_ballast_mb"] == 3
    [check] = [c for c in journal["verdict"]["checks"] if c["name"] == "toy_ballast_mb"]
    assert check["ok"] is False and check["value"] == 3 and journal["verdict"]["passed"] is False

    # The family's resource: journaled before it existed, released at the end of the run.
    records = [json.loads(line) for line in (run_dir / "resources.jsonl").read_text().splitlines()]
    ballast = [r for r in records if r.get("kind") == "toy_ballast_file"]
    assert len(ballast) == 1, records
    assert any(r["op"] == "destroyed" and r["id"] == ballast[0]["id"] for r in records), records
    assert not list(run_dir.glob("toy-ballast-*.bin"))

    junit = (out / "junit.xml").read_text()
    assert "toy ballast: 3" in junit and "toy ballast 3 MiB &gt; target 2 MiB" in junit
    assert "Toy ballast" in (run_dir / "report.html").read_text()
    compared = _cli(tmp_path, site, "compare", str(out), str(out), timeout=60)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "toy_ballast_mb" in compared.stdout, compared.stdout

    check = _cli(tmp_path, site, "cleanup", "--check", timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
