"""The commands that help write scenarios: ``trainchaos validate``, ``faults`` and ``schema``
(``chaos.cli``).
"""

from __future__ import annotations

import os

import click

__all__ = ["faults", "schema", "validate"]


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--preflight", is_flag=True,
              help="Also check this machine has what each scenario's backend needs (its engine, "
                   "capabilities), as run does before it starts anything.")
def validate(paths: tuple[str, ...], preflight: bool) -> None:
    """Check scenarios without starting anything; every problem is listed with its location."""
    from chaos.scenario.load import load_suite

    scenarios = load_suite(list(paths))
    if preflight:
        from chaos.runner.suite import preflight as check_host

        check_host(scenarios)
    for sc in scenarios:
        click.echo(f"ok  {sc.name}  ({sc.path}): {len(sc.faults)} fault(s), "
                   f"{sc.topology.nodes}x{sc.topology.ranks_per_node} ranks, repeat {sc.repeat}")
    click.echo(f"{len(scenarios)} scenario(s) valid")


@click.command()
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


@click.command()
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
        from chaos.runfiles.record import run_record_json_schema

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
