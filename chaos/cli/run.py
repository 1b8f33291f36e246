"""``trainchaos run`` and ``trainchaos bench-stacks``: run scenarios, print the verdict table,
exit with the suite's code (``chaos.cli``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from chaos.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TARGET_MISSED, EXIT_TOOL_FAILED

if TYPE_CHECKING:
    from chaos.runner.suite import SuiteOutcome

__all__ = ["bench_stacks", "run"]


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--repeat", type=click.IntRange(1, 100), default=None, help="Override every scenario's repeat.")
@click.option("--out", "out_dir", default=None, help="Report directory [default: reports/<suite>].")
@click.option("--seed", type=click.IntRange(0), default=None, help="Override every scenario's seed.")
@click.option("--junit", "junit_path", default=None, help="Also write JUnit XML here.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first run that misses a target.")
@click.option("--dry-run", is_flag=True, help="Print each scenario's resolved plan; start nothing.")
@click.option("--baseline-from", "baseline_dir", default=None, metavar="DIR",
              help="Gate on a stored baseline too: compare each scenario's medians with DIR's "
                   "(as `trainchaos compare`); exit 1 on a regression, 2 if DIR lists other scenarios.")
@click.option("--update-baseline", is_flag=True,
              help="With --baseline-from: store this run's results in DIR as the new baseline "
                   "instead of comparing (as snapshot tools do).")
@click.option("--tolerances", "tolerances_path", default=None, metavar="FILE",
              help="Tolerances for --baseline-from [default: DIR/tolerances.yaml, else built in].")
@click.option("--compare", "compare_spec", default=None, metavar="KEY=V1,V2,...",
              help="Run each scenario once per value of one option and print them side by side, "
                   "e.g. checkpoint.placement=local,replicated (a key not starting with a "
                   "scenario key is under workload.harness).")
@click.option("--preflight/--no-preflight", "check_host", default=True,
              help="With --dry-run: check this machine has what each scenario's backend needs "
                   "(engine, capabilities) [default: on; run always checks].")
@click.option("--strict", is_flag=True,
              help="A scenario that expects to fail (expect: {fail: ...}) but met every target "
                   "(XPASS) fails the run too (exit 1), as pytest's xfail_strict.")
@click.option("--crash-points", is_flag=True,
              help="Instead of the scenario's faults: one crash at each point of one checkpoint save, "
                   "each in a run of its own (--crash-model: a power loss, unfsynced writes lost, "
                   "at each durability boundary, fsync or rename; a process crash before and after "
                   "each file operation and half-way through each file); lists every point and its "
                   "outcome (docs/checkers.md).")
@click.option("--crash-save-step", type=click.IntRange(1), default=None, metavar="N",
              help="With --crash-points: the save whose boundaries are swept [default: the "
                   "workload's second, 2 x its declared cadence: the harness's "
                   "checkpoint.every_steps, checkpoint_every_steps of the others].")
@click.option("--crash-after", "crash_after", default=None, metavar="K,K,...",
              help="With --crash-points: crash only at these points: power losses after these "
                   "boundaries (0: before the first), process crashes at bK, aK, tK (before, after, "
                   "torn at file operation K), e.g. to re-check the ones a sweep found wrong "
                   "[default: every one].")
@click.option("--crash-model", "crash_model", type=click.Choice(["power", "process", "both"]), default=None,
              help="With --crash-points: power (a power loss at each durability boundary), process "
                   "(a process crash at each file operation: for a checkpointer with no fsync or "
                   "rename), or both, from one trace [default: power].")
def run(paths: tuple[str, ...], repeat: int | None, out_dir: str | None, seed: int | None,
        junit_path: str | None, fail_fast: bool, dry_run: bool, baseline_dir: str | None,
        update_baseline: bool, tolerances_path: str | None, compare_spec: str | None,
        check_host: bool, strict: bool, crash_points: bool, crash_save_step: int | None,
        crash_after: str | None, crash_model: str | None) -> None:
    """Run scenarios (files, directories or suite files) and print a verdict table."""
    from chaos.runner.suite import preflight, run_suite
    from chaos.scenario.load import load_suite
    from chaos.scenario.variants import VariationError, parse_variation

    if (update_baseline or tolerances_path) and not baseline_dir:
        raise click.UsageError("--update-baseline and --tolerances need --baseline-from DIR")
    for given, option in ((crash_save_step, "--crash-save-step"), (crash_after, "--crash-after"),
                          (crash_model, "--crash-model")):
        if given is not None and not crash_points:
            raise click.UsageError(f"{option} needs --crash-points")
    if crash_points:
        _crash_points(paths, out_dir, crash_save_step, _boundaries(crash_after), dry_run, check_host,
                      crash_model or "power")
        return
    try:
        variation = parse_variation(compare_spec) if compare_spec else None
    except VariationError as exc:
        raise click.UsageError(str(exc)) from None
    scenarios = load_suite(list(paths), variation)
    if dry_run:
        if check_host:
            preflight(scenarios)  # what `run` would refuse, said before the plan, not after
        _print_plans(scenarios, seed, repeat)
        return
    preflight(scenarios)
    gate = None
    if baseline_dir:
        from chaos.gate import BaselineGate

        gate = BaselineGate.prepare(baseline_dir, [sc.name for sc in scenarios], update_baseline,
                                    tolerances_path)
    suite_name = _suite_name(paths)
    out_dir = out_dir or os.path.join("reports", suite_name)
    from chaos.util.interrupts import installed

    with installed():
        outcome = run_suite(scenarios, out_dir, suite_name, repeat=repeat, seed=seed,
                            junit_path=junit_path, fail_fast=fail_fast, strict=strict)
    code = _exit_code(outcome)
    if code in (EXIT_OK, EXIT_TARGET_MISSED) and gate is not None:
        code = max(code, gate.finish(out_dir, outcome.records, suite_name, echo=click.echo))
    if variation is not None and outcome.records:
        from chaos.report.comparison import print_comparison, write_comparison

        print_comparison(outcome.records, variation)
        click.echo(f"comparison: {write_comparison(out_dir, outcome.records, variation)}")
    if outcome.report_path:
        click.echo(f"HTML report: {outcome.report_path}")
    sys.exit(code)


def _boundaries(text: str | None) -> list[int | str] | None:
    """``--crash-after 0,3,b4``: boundary numbers, 0 or more, and process points (bK, aK, tK)."""
    from chaos.runner.crashsweep import parse_points

    if text is None:
        return None
    try:
        return parse_points(text)
    except ValueError:
        raise click.UsageError(f"--crash-after {text!r}: give boundary numbers (0 or more) or process points "
                               "(bK, aK, tK: before, after, torn at file operation K) separated by commas, "
                               "e.g. 0,3,4 or b1,t2") from None


def _crash_points(paths: tuple[str, ...], out_dir: str | None, save_step: int | None,
                  points: list[int | str] | None, dry_run: bool, check_host: bool, model: str) -> None:
    """``run --crash-points``: the durability sweep of each scenario (chaos.runner.crashsweep)."""
    from chaos.runner.crashsweep import run_sweeps
    from chaos.util.interrupts import installed

    out_dir = out_dir or os.path.join("reports", _suite_name(paths) + "-crash-points")
    with installed():
        sys.exit(run_sweeps(list(paths), out_dir, save_step, dry_run, click.echo, points, check_host, model))


def _exit_code(outcome: SuiteOutcome) -> int:
    """A suite's exit code: interrupted, trainchaos failed, a target missed, or all well."""
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    if outcome.tool_failed:
        click.echo("trainchaos: trainchaos itself failed in at least one run (status tool_error, "
                   "see its journal); that is no verdict on the training stack", err=True)
        return EXIT_TOOL_FAILED
    return EXIT_OK if outcome.passed else EXIT_TARGET_MISSED


@click.command("bench-stacks")
@click.argument("root", default=os.path.join("scenarios", "stacks"), required=False)
@click.option("--stacks", "stacks_spec", default=None, metavar="A,B,...",
              help="The stack folders to run [default: every one; torchrun, the reference, first].")
@click.option("--faults", "faults_spec", default=None, metavar="F,G,...",
              help="The faults (scenario file names without .yaml) to run [default: all].")
@click.option("--sustained", is_flag=True,
              help="Run each stack's sustained/ scenarios instead (many failures at a fixed mean "
                   "interval over a long run) and report training efficiency.")
@click.option("--repeat", type=click.IntRange(1, 100), default=None, help="Override every scenario's repeat.")
@click.option("--seed", type=click.IntRange(0), default=None, help="Override every scenario's seed.")
@click.option("--out", "out_dir", default=None, help="Report directory [default: reports/stacks or "
              "reports/stacks-sustained].")
@click.option("--junit", "junit_path", default=None, help="Also write JUnit XML here.")
@click.option("--strict", is_flag=True, help="An expected failure that met every target (XPASS) fails the run.")
@click.option("--dry-run", is_flag=True, help="Print which scenario runs each fault on each stack; start nothing.")
def bench_stacks(root: str, stacks_spec: str | None, faults_spec: str | None, sustained: bool,
                 repeat: int | None, seed: int | None, out_dir: str | None, junit_path: str | None,
                 strict: bool, dry_run: bool) -> None:
    """The same faults on several training stacks, side by side: ROOT/<stack>/<fault>.yaml
    [default ROOT: scenarios/stacks], one table per fault (detection, the survivors' stall,
    recovery, lost steps, goodput, final state, verdict) with torchrun restart as reference.
    Exit codes as `run`."""
    from chaos.report.stacks import print_stacks, write_stacks
    from chaos.runner.suite import preflight, run_suite
    from chaos.scenario.stacks import load_stacks

    def names(spec: str | None) -> list[str] | None:
        return [n.strip() for n in spec.split(",") if n.strip()] if spec else None

    matrix = load_stacks(root, names(stacks_spec), names(faults_spec), sustained)
    if dry_run:
        for fault in matrix.faults:
            cells = [f"{s}: {matrix.cells[(fault, s)]}" if (fault, s) in matrix.cells else f"{s}: n/a"
                     for s in matrix.stacks]
            click.echo(f"{fault}  " + "; ".join(cells))
        _print_plans(matrix.scenarios, seed, repeat)
        return
    preflight(matrix.scenarios)
    suite_name = "stacks-sustained" if sustained else "stacks"
    out_dir = out_dir or os.path.join("reports", suite_name)
    from chaos.util.interrupts import installed

    with installed():
        outcome = run_suite(matrix.scenarios, out_dir, suite_name, repeat=repeat, seed=seed,
                            junit_path=junit_path, strict=strict)
    code = _exit_code(outcome)
    if outcome.records:
        print_stacks(matrix, outcome.records, sustained)
        for path in write_stacks(out_dir, matrix, outcome.records, sustained):
            click.echo(f"side by side: {path}")
        from chaos.report import write_suite_html

        write_suite_html(out_dir, outcome.records, suite_name)  # now linking the tables
    if outcome.report_path:
        click.echo(f"HTML report: {outcome.report_path}")
    sys.exit(code)


def _print_plans(scenarios: list, seed: int | None, repeat: int | None) -> None:
    from chaos.model.triggers import form_of
    from chaos.runner.plan import make_plan

    for sc in scenarios:
        run_seed = sc.seed if seed is None else seed
        topo = sc.topology
        click.secho(f"{sc.name}", bold=True, nl=False)
        click.echo(f"  seed {run_seed}, {topo.nodes} node(s) x {topo.ranks_per_node} rank(s), "
                   f"repeat {repeat or sc.repeat}, timeout {sc.timeout_s:g} s"
                   f"{', with a fault-free baseline' if sc.baseline else ''}")
        for planned in make_plan(sc, run_seed):
            trig = planned.spec.trigger
            when = form_of(trig).describe(trig, planned.offset_s)
            fires = "" if planned.fires else "  [skipped: probability draw]"
            pick = " (seeded pick)" if "random" in planned.spec.target else ""
            click.echo(f"  {planned.fault_id}: {planned.spec.type} on {planned.fault.target.describe()}"
                       f"{pick}, {when}{fires}")
            if planned.spec.params:
                click.echo("      params: " + ", ".join(
                    f"{k}={_plain(v)}" for k, v in planned.spec.params.items()))
    click.echo("dry run: nothing was started")


def _plain(value: object) -> str:
    """A resolved parameter as a scenario would write it: null, true, [read, write]."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _suite_name(paths: tuple[str, ...]) -> str:
    first = os.path.normpath(paths[0])
    name = os.path.basename(first) if os.path.isdir(first) else os.path.splitext(os.path.basename(first))[0]
    return name if len(paths) == 1 else f"{name}+{len(paths) - 1}"
