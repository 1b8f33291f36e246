"""What a run prints: the verdict table at the end, and a progress display while it runs.

On a terminal the progress display is a live rich bar; anywhere else (CI logs, pipes) it
prints plain, timestamped lines and never animates, so that logs stay readable and grep-able.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from chaos.report._format import attribution_text, final_state_text, fmt_metric, outcome_counts
from chaos.runfiles.record import RunRecord, blocks

__all__ = ["ProgressDisplay", "print_verdict_table", "verdict_table"]

_WRONG_STATE = ("differs", "not finite", "unhealthy")
_OUTCOME_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold yellow", "xfail": "bold cyan",
                  "xpass": "bold magenta"}


def verdict_table(records: Iterable[RunRecord], title: str | None = "trainchaos verdict") -> Table:
    """One row per scenario × repeat: status, headline metrics, attribution, correctness
    (final state), false alarms, PASS/FAIL, reasons."""
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("scenario", style="bold", overflow="fold")
    table.add_column("repeat", justify="right")
    table.add_column("status")
    table.add_column("detection", justify="right")
    table.add_column("recovery", justify="right")
    table.add_column("lost steps", justify="right")
    table.add_column("goodput", justify="right")
    table.add_column("attribution")
    table.add_column("final state")
    table.add_column("false alarms", justify="right")
    table.add_column("verdict", justify="center")
    table.add_column("reasons", overflow="fold")
    for record in records:
        kind = record.outcome
        status = record.status
        state = final_state_text(record)
        table.add_row(
            Text(record.scenario.name),
            str(record.repeat_index),
            Text(status, style="" if status == "completed" else "yellow"),
            fmt_metric(record, "detection_s"),
            fmt_metric(record, "recovery_s"),
            fmt_metric(record, "lost_steps"),
            fmt_metric(record, "goodput"),
            Text(attribution_text(record)),
            Text(state, style="red" if state.startswith(_WRONG_STATE) else ""),
            fmt_metric(record, "false_detections"),
            Text(record.outcome_label, style=_OUTCOME_STYLE[kind]),
            Text("\n".join(record.reasons())),
        )
    return table


def print_verdict_table(records: Iterable[RunRecord], console: Console | None = None,
                        strict: bool = False) -> None:
    """Print the verdict table and a one-line total (``2/3 runs passed``); ``strict``: an
    unexpected pass (XPASS) fails the suite too."""
    runs = list(records)
    if console is None:
        console = Console()
        if not console.is_terminal:
            # CI logs have no terminal width: rich's 80-column default would fold every cell.
            console = Console(width=160)
    console.print(verdict_table(runs))
    outcomes = [r.outcome for r in runs]
    passed = sum(r.met_targets for r in runs)
    green = bool(runs) and not any(blocks(kind, strict) for kind in outcomes)
    line = Text(f"{passed}/{len(runs)} runs passed", style="bold green" if green else "bold red")
    line.append(outcome_counts(outcomes, sep=", "))
    console.print(line)


class ProgressDisplay:
    """Progress of the running scenario, and its notable events as they happen.

    ``live`` (default: whether the console is a terminal) picks the animated bar; without
    it every call prints at most one plain line, and ``update`` prints only every
    ``plain_every_s`` seconds (or when its note changes) so CI logs stay short.
    """

    def __init__(self, console: Console | None = None, *, live: bool | None = None,
                 plain_every_s: float = 10.0) -> None:
        self.console = console or Console(width=None if Console().is_terminal else 160)
        self.live = self.console.is_terminal if live is None else live
        self.plain_every_s = plain_every_s
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._label = ""
        self._started = time.monotonic()
        self._last_plain = float("-inf")
        self._last_note = ""

    # ------------------------------------------------------------------ the scenario's life

    def start_scenario(self, name: str, repeat: int, total: int) -> None:
        """``repeat`` is 0-based; ``total`` the number of repeats of this scenario."""
        self._finish_live()
        self._label = f"{name}[{repeat}]"
        self._started = time.monotonic()
        self._last_plain = float("-inf")
        self._last_note = ""
        header = Text.assemble(("▶ ", "bold"), (name, "bold"), f"  repeat {repeat + 1}/{total}")
        if self.live:
            self.console.print(header)
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                console=self.console, transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self._label, total=None, note="")
        else:
            self.console.print(header, soft_wrap=True)

    def update(self, step: int, steps_target: int | None = None, note: str = "") -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=step, total=steps_target, note=note)
            return
        if self.live:
            return
        now = time.monotonic()
        finished = steps_target is not None and step >= steps_target
        changed = bool(note) and note != self._last_note
        if not (finished or changed or now - self._last_plain >= self.plain_every_s):
            return
        self._last_plain, self._last_note = now, note or self._last_note
        target = f"/{steps_target}" if steps_target is not None else ""
        text = f"step {step}{target}" + (f"  {note}" if note else "")
        self._plain(text, style="dim")

    def event(self, text: str) -> None:
        """A notable moment: ``fault f0-kill_rank injected at step 101``."""
        self._plain(text)

    def end_scenario(self, passed: bool | None, detail: str = "", word: str | None = None) -> None:
        """``passed`` None: the run ended without a verdict (error or interrupt); ``word``
        names an expected outcome instead (``XFAIL``, ``XPASS``)."""
        self._finish_live()
        label, style = {True: ("PASS", "bold green"), False: ("FAIL", "bold red"),
                        None: ("NO VERDICT", "bold yellow")}[passed]
        if word in ("XFAIL", "XPASS"):
            label, style = word, _OUTCOME_STYLE[word.lower()]
        word = label
        elapsed = time.monotonic() - self._started
        line = Text.assemble((word, style), f" {self._label} in {elapsed:.1f} s")
        if detail:
            line.append(f": {detail}")
        self.console.print(line, soft_wrap=True)

    def close(self) -> None:
        self._finish_live()

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ helpers

    def _plain(self, text: str, style: str = "") -> None:
        elapsed = time.monotonic() - self._started
        line = Text.assemble((f"  [{elapsed:7.1f}s] ", "dim"), (self._label + " ", "dim"), (text, style))
        # With a live bar running, Progress's console prints above the bar.
        self.console.print(line, soft_wrap=True)

    def _finish_live(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None
