"""``trainchaos``: the thin command line (parse, call, print, exit code).

Exit codes: 0 every target met (or missed as the scenario expects: XFAIL), 1 a target
missed (or, with --strict, an expected failure that passed: XPASS), 2 bad input or usage,
3 trainchaos itself failed, 130 interrupted (SIGINT/SIGTERM; every fault was reverted first).

The commands live by group: ``chaos.cli.run`` (run, bench-stacks), ``chaos.cli.scenario``
(validate, faults, schema); cleanup, simulate, report, compare and gameday, each a call
into its package, are here with the group and ``main``.
"""

from __future__ import annotations

import sys
import warnings

import click

from chaos import __version__
from chaos.cli.run import bench_stacks, run
from chaos.cli.scenario import faults, schema, validate
from chaos.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET_MISSED,
    EXIT_TOOL_FAILED,
    ChaosError,
)

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainchaos")
def cli() -> None:
    """Chaos experiments on real distributed training runs: inject faults, measure detection,
    recovery and lost work against targets, and gate CI on them."""


for _command in (run, bench_stacks, validate, faults, schema):
    cli.add_command(_command)


@cli.command()
@click.option("--run-dir", "run_dirs", multiple=True, help="A run directory to clean (default: every run whose controller is gone).")
@click.option("--force", is_flag=True, help="With --run-dir: clean a run whose controller is still alive too.")
@click.option("--check", is_flag=True, help="Only list what is left (processes, faults, resources); change nothing. Exit 0 when clean, 1 otherwise.")
def cleanup(run_dirs: tuple[str, ...], force: bool, check: bool) -> None:
    """Revert what a crashed controller left: its faults, processes and run-scoped resources."""
    from chaos.runner.cleanup import cleanup_runs, find_leftovers

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
@click.option("--from-stacks", "from_stacks", default=None, metavar="DIR",
              help="Cost each recovery design of a bench-stacks report (DIR, e.g. reports/stacks) with "
                   "its own measured figures: one row per stack.")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2,...",
              help="Also simulate each value (repeatable: every combination), e.g. checkpoint.interval_s=60,300,900.")
@click.option("--trials", type=click.IntRange(1, 100_000), default=None, help="Monte-Carlo trials [default: the config's, 1000].")
@click.option("--seed", type=click.IntRange(0), default=None, help="Override the config's seed.")
@click.option("--out", "out_dir", default=None, help="Also write <name>.json, <name>.md and <name>.png here.")
def simulate(config_path: str, from_runs: str | None, from_stacks: str | None, sweeps: tuple[str, ...],
             trials: int | None, seed: int | None, out_dir: str | None) -> None:
    """Model a large training job (N accelerators, D days): ETTR, goodput, lost GPU-hours, best checkpoint interval."""
    from chaos.scale.report import render_text, write_outputs
    from chaos.scale.simulate import run_simulation

    outcome = run_simulation(config_path, from_runs=from_runs, sweeps=list(sweeps), trials=trials, seed=seed,
                             from_stacks=from_stacks)
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
        load_suite_record,
        load_tolerances,
        render_markdown,
        tolerances_for,
    )

    tolerances = load_tolerances(tolerances_for(baseline, tolerances_path))
    comparison = compare_suites(load_suite_record(baseline), load_suite_record(current), tolerances,
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
              "run's live nodes (containers, Slurm tasks); change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask before disruptive steps.")
@click.option("--out", "out_dir", default=None, help="Report directory [default: reports/gameday/<plan>-<time>].")
def gameday(plan_path: str, dry_run: bool, yes: bool, out_dir: str | None) -> None:
    """Run a game-day exercise (ordered steps, confirmation, stop conditions, revert, report)
    against a live run on a backend that can be attached to (docker, slurm)."""
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

