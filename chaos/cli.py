"""``trainchaos``: the thin command line (parse, call, print, exit code).

Exit codes: 0 every target met, 1 a target missed, 2 bad input or usage, 3 trainchaos itself
failed, 130 interrupted (SIGINT/SIGTERM; every fault was reverted first).
"""

from __future__ import annotations

import os
import sys

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
def run(paths: tuple[str, ...], repeat: int | None, out_dir: str | None, seed: int | None,
        junit_path: str | None, fail_fast: bool, dry_run: bool) -> None:
    """Run scenarios (files, directories or suite files) and print a verdict table."""
    from chaos.scenario import load_suite
    from chaos.suite import run_suite

    scenarios = load_suite(list(paths))
    if dry_run:
        _print_plans(scenarios, seed, repeat)
        return
    suite_name = _suite_name(paths)
    out_dir = out_dir or os.path.join("reports", suite_name)
    from chaos.interrupts import installed

    with installed():
        outcome = run_suite(scenarios, out_dir, suite_name, repeat=repeat, seed=seed,
                            junit_path=junit_path, fail_fast=fail_fast)
    if outcome.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_OK if outcome.passed else EXIT_TARGET_MISSED)


def _print_plans(scenarios: list, seed: int | None, repeat: int | None) -> None:
    from chaos.plan import make_plan

    for sc in scenarios:
        run_seed = sc.seed if seed is None else seed
        topo = sc.topology
        click.secho(f"{sc.name}", bold=True, nl=False)
        click.echo(f"  seed {run_seed}, {topo.nodes} node(s) x {topo.ranks_per_node} rank(s), "
                   f"repeat {repeat or sc.repeat}, timeout {sc.timeout_s:g} s"
                   f"{', with a fault-free baseline' if sc.baseline else ''}")
        for planned in make_plan(sc, run_seed):
            trig = planned.spec.trigger
            when = {
                "at_step": f"at step {trig.at_step}",
                "after_event": f"after {trig.event} #{trig.count} + {trig.delay_s:g} s",
            }.get(trig.kind, f"{planned.offset_s:.1f} s after the first step ({trig.kind})"
                  if planned.offset_s is not None else trig.kind)
            fires = "" if planned.fires else "  [skipped: probability draw]"
            click.echo(f"  {planned.fault_id}: {planned.spec.type} on {planned.fault.target.describe()}, "
                       f"{when}{fires}")
    click.echo("dry run: nothing was started")


def _suite_name(paths: tuple[str, ...]) -> str:
    first = os.path.normpath(paths[0])
    name = os.path.basename(first) if os.path.isdir(first) else os.path.splitext(os.path.basename(first))[0]
    return name if len(paths) == 1 else f"{name}+{len(paths) - 1}"


@cli.command()
@click.argument("paths", nargs=-1, required=True)
def validate(paths: tuple[str, ...]) -> None:
    """Check scenarios without starting anything; every problem is listed with its location."""
    from chaos.scenario import load_suite

    scenarios = load_suite(list(paths))
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
        click.echo(f"  [{cls.family}; targets: {', '.join(cls.target_kinds)}; class: {cls.failure_class}"
                   f"{'; in-process, at_step only' if cls.in_process else ''}]")
        click.echo(f"    {cls.summary}")
        for line in cls.describe_params():
            click.echo(f"    param {line}")
        fidelity = cls.fidelity if verbose else cls.fidelity.split(". ")[0] + "."
        click.echo(f"    fidelity: {fidelity}")
        click.echo()


@cli.command()
@click.option("--run-dir", "run_dirs", multiple=True, help="A run directory to clean (default: every active run).")
@click.option("--force", is_flag=True, help="Clean runs whose controller is still alive too.")
def cleanup(run_dirs: tuple[str, ...], force: bool) -> None:
    """Revert what a crashed controller left: faults from its journal, and its processes."""
    from chaos.cleanup import cleanup_runs

    report = cleanup_runs(list(run_dirs), force=force)
    for line in report:
        click.echo(line)
    if not report:
        click.echo("nothing to clean up")


def main() -> None:
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
