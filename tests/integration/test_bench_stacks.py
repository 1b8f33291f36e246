"""``trainchaos bench-stacks`` for real: one fault (kill-rank) on two stacks of the kinds that
exist here, the bundled harness (the torchrun-restart reference) and a user's own command,
then the side-by-side table and the expected-failure outcomes of real runs, and ``simulate
--from-stacks`` costing each of the two designs from those real journals.

The command stack ships a finding it cannot meet (a recovery bound no restart meets): XFAIL,
no failure of the suite. The reference declares one it does meet: XPASS, which fails the run
under --strict (exit 1) and only then; the unit tests (test_expect.py) cover the exit codes
without --strict. A JUnit report shows both as CI sees them.
"""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.util.procs import find_run_processes
from tests.integration._support import cli_env, run_trainchaos

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HARNESS = """\
name: harness-kill-rank
workload: {harness: {model: {name: mlp}, steps: 24, step_delay_s: 0.05, checkpoint: {every_steps: 5}}}
topology: {nodes: 2, ranks_per_node: 1}
faults: [{type: kill_rank, target: {rank: 1}, trigger: {at_step: 10}}]
targets: {detection_s: {max: 30}, lost_steps: {max: 10}}
expect: {fail: "a test's own claim, to see an XPASS"}
timeout_s: 150
"""

SCRIPT = textwrap.dedent("""
    import os, sys, time
    rank = int(os.environ["RANK"])
    state = os.path.join(sys.argv[1], f"resume-{rank}.txt")
    step = int(open(state).read()) if os.path.exists(state) else 0
    while step < 24:
        step += 1
        time.sleep(0.05)
        print(f"step {step} loss {3.0 / step:.4f}", flush=True)
        if step % 5 == 0:
            with open(state + ".tmp", "w") as fh:
                fh.write(str(step))
            os.replace(state + ".tmp", state)
""")

COMMAND = """\
name: command-kill-rank
workload:
  command: "python {script} {state}"
  progress_regex: 'step (?P<step>\\d+) loss (?P<loss>[\\d.]+)'
  steps: 24
topology: {{nodes: 1, ranks_per_node: 2}}
faults: [{{type: kill_rank, target: {{rank: 1}}, trigger: {{at_step: 10}}}}]
targets: {{recovery_s: {{max: 0.01}}}}
expect: {{fail: "no restart recovers in 10 ms", issue: "https://example.org/findings/1"}}
timeout_s: 150
"""


def test_two_stacks_one_fault_side_by_side_with_xfail_and_strict_xpass(tmp_path: Path) -> None:
    root = tmp_path / "stacks"
    (root / "torchrun").mkdir(parents=True)
    (root / "command").mkdir()
    (root / "torchrun" / "kill-rank.yaml").write_text(HARNESS)
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "resume").mkdir()
    (root / "command" / "kill-rank.yaml").write_text(
        COMMAND.format(script=tmp_path / "train.py", state=tmp_path / "resume"))

    res = run_trainchaos(["bench-stacks", str(root), "--out", "out", "--strict", "--junit", "junit.xml"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=280)
    output = res.stdout + res.stderr
    # Only the strict XPASS of the reference fails the run; the command's XFAIL does not.
    assert res.returncode == 1, output
    assert "XPASS" in res.stdout and "XFAIL" in res.stdout, output
    assert "1 expected failure (XFAIL), 1 unexpectedly passed (XPASS)" in res.stdout, output

    # One table for the fault: the reference first, every row measured on both stacks.
    table = (tmp_path / "out" / "stacks.md").read_text()
    assert "## kill-rank" in table and "| metric | torchrun (reference) | command |" in table, table
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in table.splitlines() if line.startswith("| ") and not line.startswith("| metric")}
    for metric in ("detection", "survivor stall", "recovery", "lost steps", "goodput"):
        assert all(value.endswith(("s", "%", ")")) or value.isdigit() for value in rows[metric]), (metric, rows)
    assert rows["recovery"][1].endswith("×)"), rows  # the ratio to the reference, same run
    assert rows["verdict"] == ["XPASS (a test's own claim, to see an XPASS)",
                               "XFAIL (no restart recovers in 10 ms (https://example.org/findings/1))"], rows
    assert (tmp_path / "out" / "stacks.html").is_file() and (tmp_path / "out" / "index.html").is_file()

    suite = ET.parse(tmp_path / "junit.xml").getroot()
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["kill-rank--command[0]"].find("skipped").get("type") == "xfail"
    assert cases["kill-rank--torchrun[0]"].find("failure").get("type") == "XPASS"
    for run in ("kill-rank--torchrun", "kill-rank--command"):
        journal = json.loads((tmp_path / "out" / run / "0" / "journal.json").read_text())
        assert journal["status"] == "completed", journal["error"]
        assert not find_run_processes(journal["run_id"]), f"processes of {run} left behind"

    # The 16k-GPU question per design, from these real journals (seconds: no run).
    config = tmp_path / "scale.yaml"
    config.write_text("name: designs\njob: {devices: 16384, days: 7}\n"
                      "class_defaults: {detection_s: 60, restart_s: 300}\ncheckpoint: {interval_s: 600, blocking_s: 5}\n"
                      "classes: [{name: crash, rate_per_device_hour: 1.0e-5, fault_types: [kill_rank]}]\n")
    sim = run_trainchaos(["simulate", str(config), "--from-stacks", "out", "--trials", "50"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=120)
    assert sim.returncode == 0, sim.stderr
    rows = {line.split()[0]: line for line in sim.stdout.splitlines() if line.startswith(("command ", "torchrun "))}
    assert set(rows) == {"command", "torchrun"}, sim.stdout
    assert all("1 (kill_rank)" in row for row in rows.values()), sim.stdout
