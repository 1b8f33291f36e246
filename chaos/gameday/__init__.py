"""``trainchaos gameday PLAN.yaml``: a guided exercise against a live run on a backend that
can be attached to (docker, slurm): ordered steps, a dry run, the operator's confirmation,
stop conditions, guaranteed revert and a report. ``run_gameday`` is what the CLI calls."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["run_gameday"]


def run_gameday(plan_path: str, out_dir: str | None, *, dry_run: bool = False, yes: bool = False,
                echo: Callable[[str], None] = print, ask: Callable[[str], str] = input) -> int:
    """Validate the plan, attach to its run, resolve every target (the blast-radius guard),
    then print (``dry_run``) or run the exercise; returns the exit code. On a terminal the
    exercise shows a live panel (``chaos.gameday.view``); elsewhere plain lines."""
    import os
    import sys
    import time

    from chaos.gameday.plan import load_plan
    from chaos.gameday.session import GameDay

    plan = load_plan(plan_path)
    out = out_dir or os.path.join("reports", "gameday", f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    gd = GameDay(plan, plan_path, out, yes=yes, echo=echo, ask=ask, live=not dry_run and sys.stdout.isatty())
    gd.attach()
    if dry_run:
        return gd.dry_run()
    return gd.execute()
