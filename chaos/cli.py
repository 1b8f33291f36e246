"""``trainchaos``: the thin command line (parse, call, print, exit code).

Exit codes: 0 every target met (or missed as the scenario expects: XFAIL), 1 a target
missed (or, with --strict, an expected failure that passed: XPASS), 2 bad input or usage,
3 trainchaos itself failed, 130 interrupted (SIGINT/SIGTERM; every fault was reverted first).
"""

from __future__ import annotations

import os
import sys
import warnings

import click

from chaos import __version__
from chaos.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_TARGET_MISSED, EXIT_TOOL_FAILED, ChaosError

__all__ = ["main", "cli"]

EXIT_INTERRUPTED = 130


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainchaos")
def cli() -> None:
    """Chaos experiments on real distributed training runs: inject faults, measure detection,
    recovery and lost work against targets, and gate CI on them."""


@cli.command()
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
              help="Instead of the scenario's faults: one power loss (unfsynced writes lost) at each "
                   "durability boundary (fsync, rename) of one checkpoint save, each in a run of "
                   "its own; lists every boundary and its outcome (docs/checkers.md).")
@click.option("--crash-save-step", type=click.IntRange(1), default=None, metavar="N",
              help="With --crash-points: the save whose boundaries are swept [default: the "
                   "harness's second, 2 x checkpoint.every_steps].")
@click.option("--crash-after", "crash_after", default=None, metavar="K,K,...",
              help="With --crash-points: lose power only after these boundaries (0: before the "
                   "first), e.g. to re-check the ones a sweep found wrong [default: every one].")
def run(paths: tuple[str, ...], repeat: int | None, out_dir: str | None, seed: int | None,
        junit_path: str | None, fail_fast: bool, dry_run: bool, baseline_dir: str | None,
        update_baseline: bool, tolerances_path: str | None, compare_spec: str | None,
        check_host: bool, strict: bool, crash_points: bool, crash_save_step: int | None,
        crash_after: str | None) -> None:
    """Run scenarios (files, directories or suite files) and print a verdict table."""
    from chaos.scenario import load_suite
    from chaos.suite import preflight, run_suite
    from chaos.variants import VariationError, parse_variation

    if (update_baseline or tolerances_path) and not baseline_dir:
        raise click.UsageError("--update-baseline and --tolerances need --baseline-from DIR")
    for given, option in ((crash_save_step, "--crash-save-step"), (crash_after, "--crash-after")):
        if given is not None and not crash_points:
            raise click.UsageError(f"{option} needs --crash-points")
    if crash_points:
        _crash_points(paths, out_dir, crash_save_step, _boundaries(crash_after), dry_run)
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
    from chaos.interrupts import installed

    with installed():
        outcome = run_suite(scenarios, out_dir, suite_name, repeat=repeat, seed=seed,
                            junit_path=junit_path, fail_fast=fail_fast, strict=strict)
    code = _exit_code(outcome)
    if code in (EXIT_OK, EXIT_TARGET_MISSED) and gate is not None:
        code = max(code, gate.finish(out_dir, outcome.journals, suite_name, echo=click.echo))
    if variation is not None and outcome.journals:
        from chaos.report.comparison import print_comparison, write_comparison

        print_comparison(outcome.journals, variation)
        click.echo(f"comparison: {write_comparison(out_dir, outcome.journals, variation)}")
    if outcome.report_path:
        click.echo(f"HTML report: {outcome.report_path}")
    sys.exit(code)


def _boundaries(text: str | None) -> list[int] | None:
    """``--crash-after 0,3,4``: boundary numbers, 0 or more."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(item.isdigit() for item in items):
        raise click.UsageError(f"--crash-after {text!r}: give boundary numbers (0 or more) separated by "
                               "commas, e.g. 0,3,4")
    return [int(item) for item in items]


def _crash_points(paths: tuple[str, ...], out_dir: str | None, save_step: int | None,
                  points: list[int] | None, dry_run: bool) -> None:
    """``run --crash-points``: the durability sweep of each scenario (chaos.crashsweep)."""
    from chaos.crashsweep import run_sweeps
    from chaos.interrupts import installed

    out_dir = out_dir or os.path.join("reports", _suite_name(paths) + "-crash-points")
    with installed():
        sys.exit(run_sweeps(list(paths), out_dir, save_step, dry_run, click.echo, points))


def _exit_code(outcome: object) -> int:
    """A suite's exit code: interrupted, trainchaos failed, a target missed, or all well."""
    if outcome.interrupted:  # type: ignore[attr-defined]
        return EXIT_INTERRUPTED
    if outcome.tool_failed:  # type: ignore[attr-defined]
        click.echo("trainchaos: trainchaos itself failed in at least one run (status tool_error, "
                   "see its journal); that is no verdict on the training stack", err=True)
        return EXIT_TOOL_FAILED
    return EXIT_OK if outcome.passed else EXIT_TARGET_MISSED  # type: ignore[attr-defined]


@cli.command("bench-stacks")
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
    from chaos.stacks import load_stacks
    from chaos.suite import preflight, run_suite

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
    from chaos.interrupts import installed

    with installed():
        outcome = run_suite(matrix.scenarios, out_dir, suite_name, repeat=repeat, seed=seed,
                            junit_path=junit_path, strict=strict)
    code = _exit_code(outcome)
    if outcome.journals:
        print_stacks(matrix, outcome.journals, sustained)
        for path in write_stacks(out_dir, matrix, outcome.journals, sustained):
            click.echo(f"side by side: {path}")
        from chaos.report import write_suite_html

        write_suite_html(out_dir, outcome.journals, suite_name)  # now linking the tables
    if outcome.report_path:
        click.echo(f"HTML report: {outcome.report_path}")
    sys.exit(code)


def _print_plans(scenarios: list, seed: int | None, repeat: int | None) -> None:
    from chaos.plan import make_plan
    from chaos.triggers import form_of

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


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--preflight", is_flag=True,
              help="Also check this machine has what each scenario's backend needs (its engine, "
                   "capabilities), as run does before it starts anything.")
def validate(paths: tuple[str, ...], preflight: bool) -> None:
    """Check scenarios without starting anything; every problem is listed with its location."""
    from chaos.scenario import load_suite

    scenarios = load_suite(list(paths))
    if preflight:
        from chaos.suite import preflight as check_host

        check_host(scenarios)
    for sc in scenarios:
        click.echo(f"ok  {sc.name}  ({sc.path}): {len(sc.faults)} fault(s), "
                   f"{sc.topology.nodes}x{sc.topology.ranks_per_node} ranks, repeat {sc.repeat}")
    click.echo(f"{len(scenarios)} scenario(s) valid")


@cli.command()
@click.option("--verbose", "-v", is_flag=True, help="Also print each type's fidelity statement in full.")
def faults(verbose: bool) -> None:
    """List fault types: parameters, targets, and fidelity (what each does and does not prove)."""
    from chaos.faults.base import known_types

    for name, cls in known_types().items():
        click.secho(f"{name}", bold=True, nl=False)
        click.echo(f"  [{cls.family}; targets: {cls.describe_targets()}; class: {cls.failure_class}"
                   f"{'; in-process, at_step only' if cls.in_process else ''}]")
        click.echo(f"    {cls.summary}")
        click.echo(f"    mechanism: {cls.describe_mechanism()}")
        for line in cls.describe_params():
            click.echo(f"    param {line}")
        fidelity = cls.fidelity if verbose else cls.fidelity.split(". ")[0] + "."
        click.echo(f"    fidelity: {fidelity}")
        click.echo()


@cli.command()
@click.option("--markdown", is_flag=True,
              help="The Markdown reference (the generated part of docs/scenario.md) instead.")
@click.option("--journal", is_flag=True,
              help="The JSON Schema of a run's journal.json (the run record) instead.")
@click.option("--out", "out_path", default=None, metavar="FILE",
              help="Write to FILE instead of stdout. With --markdown, a FILE holding the reference "
                   "markers (docs/scenario.md) gets only that section replaced.")
def schema(markdown: bool, journal: bool, out_path: str | None) -> None:
    """Print the JSON Schema of scenario files (draft 2020-12), for editors and CI.

    \b
    Editors that use yaml-language-server complete and check a scenario file with a first line
      # yaml-language-server: $schema=<path to the file written by --out>
    With --journal: the schema of the journal.json every run writes, for tools that read it.
    """
    import json

    if markdown and journal:
        raise click.UsageError("--markdown and --journal exclude each other")
    if journal:
        from chaos.record import run_record_json_schema

        text = json.dumps(run_record_json_schema(), indent=2) + "\n"
    elif not markdown:
        from chaos.schema.jsonschema import scenario_json_schema

        text = json.dumps(scenario_json_schema(), indent=2) + "\n"
    else:
        from chaos.schema.markdown import reference_markdown, replace_reference

        text = reference_markdown()
        if out_path and os.path.exists(out_path):
            with open(out_path, encoding="utf-8") as fh:
                current = fh.read()
            try:
                text = replace_reference(current)
            except ValueError:
                pass  # no markers: the file is replaced by the reference alone
    if out_path is None:
        click.echo(text, nl=False)
        return
    with open(out_path, "w", encoding="utf-8") as fh:
        fh.write(text)
    click.echo(f"wrote {out_path}", err=True)


@cli.command()
@click.option("--run-dir", "run_dirs", multiple=True, help="A run directory to clean (default: every run whose controller is gone).")
@click.option("--force", is_flag=True, help="With --run-dir: clean a run whose controller is still alive too.")
@click.option("--check", is_flag=True, help="Only list what is left (processes, faults, resources); change nothing. Exit 0 when clean, 1 otherwise.")
def cleanup(run_dirs: tuple[str, ...], force: bool, check: bool) -> None:
    """Revert what a crashed controller left: its faults, processes and run-scoped resources."""
    from chaos.cleanup import cleanup_runs, find_leftovers

    if check:
        leftovers = find_leftovers()
        for line in leftovers:
            click.echo(line)
        click.echo(f"{len([x for x in leftovers if not x.startswith(' ')])} leftover(s)" if leftovers
                   else "clean: nothing left by any trainchaos run")
        sys.exit(EXIT_TARGET_MISSED if leftovers else EXIT_OK)
    report = cleanup_runs(list(run_dirs), force=force)
    for line in report.lines:
        click.echo(line)
    for line in report.failures:
        click.echo(f"FAILED: {line}", err=True)
    if not report.lines and not report.failures:
        click.echo("nothing to clean up")
    left = find_leftovers() if not run_dirs else []
    for line in left:
        click.echo(f"still left: {line}", err=True)
    if report.failures or left:
        sys.exit(EXIT_TOOL_FAILED)


@cli.command()
@click.argument("config_path", metavar="CONFIG")
@click.option("--from-runs", "from_runs", default=None, metavar="DIR",
              help="Take per-class detection and restart figures from the journals under DIR (medians).")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2,...",
              help="Also simulate each value (repeatable: every combination), e.g. checkpoint.interval_s=60,300,900.")
@click.option("--trials", type=click.IntRange(1, 100_000), default=None, help="Monte-Carlo trials [default: the config's, 1000].")
@click.option("--seed", type=click.IntRange(0), default=None, help="Override the config's seed.")
@click.option("--out", "out_dir", default=None, help="Also write <name>.json, <name>.md and <name>.png here.")
def simulate(config_path: str, from_runs: str | None, sweeps: tuple[str, ...], trials: int | None,
             seed: int | None, out_dir: str | None) -> None:
    """Model a large training job (N accelerators, D days): ETTR, goodput, lost GPU-hours, best checkpoint interval."""
    from chaos.scale.report import render_text, write_outputs
    from chaos.scale.simulate import run_simulation

    outcome = run_simulation(config_path, from_runs=from_runs, sweeps=list(sweeps), trials=trials, seed=seed)
    click.echo(render_text(outcome))
    for path in write_outputs(outcome, out_dir) if out_dir else ():
        click.echo(f"wrote {path}")


@cli.command()
@click.argument("path", metavar="RUN_DIR|SUITE_DIR")
def report(path: str) -> None:
    """Rebuild the HTML report (and summary.md, suite.md, suite.json) from the journal files."""
    from chaos.report import rebuild_reports

    paths = rebuild_reports(path)
    click.echo(f"rebuilt {len(paths)} file(s)")
    click.echo(f"HTML report: {paths[0]}")


@cli.command()
@click.argument("baseline", metavar="BASELINE")
@click.argument("current", metavar="CURRENT")
@click.option("--tolerances", "tolerances_path", default=None, metavar="FILE",
              help="Per-metric tolerances (YAML: metrics / scenarios) [default: BASELINE/tolerances.yaml, "
                   "else built in].")
@click.option("--out", "out_path", default=None, metavar="FILE",
              help="Also write the Markdown report to FILE (e.g. $GITHUB_STEP_SUMMARY is appended to by `>>`).")
def compare(baseline: str, current: str, tolerances_path: str | None, out_path: str | None) -> None:
    """Compare two suite outputs (each a directory with suite.json): every scenario's metric
    medians within tolerances. Prints a Markdown table; exit 1 on a regression, 0 otherwise,
    2 when the inputs cannot be compared (a scenario missing on one side)."""
    from chaos.gate import (
        compare_suites,
        load_suite_summary,
        load_tolerances,
        render_markdown,
        tolerances_for,
    )

    tolerances = load_tolerances(tolerances_for(baseline, tolerances_path))
    comparison = compare_suites(load_suite_summary(baseline), load_suite_summary(current), tolerances,
                                baseline, current)
    markdown = render_markdown(comparison)
    click.echo(markdown, nl=False)
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            fh.write(markdown)
    sys.exit(EXIT_OK if comparison.passed else EXIT_TARGET_MISSED)


@cli.command()
@click.argument("plan_path", metavar="PLAN.yaml")
@click.option("--dry-run", is_flag=True, help="Print what each step would touch, resolved against the "
              "live containers; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask before disruptive steps.")
@click.option("--out", "out_dir", default=None, help="Report directory [default: reports/gameday/<plan>-<time>].")
def gameday(plan_path: str, dry_run: bool, yes: bool, out_dir: str | None) -> None:
    """Run a game-day exercise (ordered steps, confirmation, stop conditions, revert, report)
    against a live run on the docker backend."""
    from chaos.gameday import run_gameday

    def ask(prompt: str) -> str:
        click.echo(prompt, nl=False)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    sys.exit(run_gameday(plan_path, out_dir, dry_run=dry_run, yes=yes, echo=click.echo, ask=ask))


def main() -> None:
    # nvidia-resiliency-ext (the nvrx extra) installs the pynvml shim, whose import hook warns
    # on every `import torch` that pynvml is deprecated; the controller never uses NVML, so
    # the line is noise above every run's output.
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.UsageError as exc:
        exc.show()
        sys.exit(EXIT_BAD_INPUT)
    except ChaosError as exc:
        click.echo(f"trainchaos: {exc}" if exc.exit_code != EXIT_BAD_INPUT else str(exc), err=True)
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except Exception as exc:  # the tool itself failed: say so, distinctly from a missed target
        import traceback

        traceback.print_exc()
        click.echo(f"trainchaos: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_TOOL_FAILED)


if __name__ == "__main__":
    main()
