"""pytest plugin: resilience assertions inside the test runner a team already uses.

Installed with trainchaos (entry point ``pytest11: trainchaos``), so it is active in every
pytest session of the environment; it does nothing until asked:

``trainchaos`` fixture
    Runs a scenario and returns its typed result::

        def test_recovers_fast(trainchaos):
            result = trainchaos("scenarios/smoke/kill-rank.yaml", repeat=1)
            assert result.passed, result.reasons
            assert result.metrics.recovery_s < 12
            assert result.metrics.digest_match

    ``trainchaos.suite(path)`` runs every scenario of a directory or suite file. Runs write
    under the test's ``tmp_path`` (``trainchaos_<name>/``), with their HTML reports.

``pytest --trainchaos PATH``
    Collects each scenario of PATH (a file, a directory or a suite file, as ``trainchaos
    run`` reads them) as a test item, marked ``trainchaos``; a missed target fails the item
    with the verdict's reasons as the message, a run trainchaos itself broke fails it as a
    tool error. A scenario that expects to fail (``expect: {fail: REASON, issue: URL}``) is
    marked ``xfail`` (raising only on a missed target): pytest reports it ``xfailed`` with
    the reason, and an unexpected pass ``XPASS`` (a failure under ``xfail_strict``); a tool
    error still fails it. Runs write under ``--trainchaos-out`` (default ``reports/pytest`` under the
    rootdir), with one suite page for the session (``index.html``). Each item records its
    headline metrics as JUnit properties (``--junitxml``).

Imports of the engine are deferred to first use: the plugin costs nothing in a session that
does not use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from chaos.model.scenario import Scenario
    from chaos.runfiles.record import MetricsRecord, Outcome, RunRecord, Verdict

__all__ = ["RunResult", "ScenarioFailed", "ScenarioMissedTarget", "ScenarioResult", "TrainchaosRunner",
           "run_scenarios"]




def _properties() -> list[str]:
    """The metrics recorded as JUnit properties: the gated ones of the catalogue (what
    `trainchaos compare` follows), without those the gate only shows (wall time)."""
    from chaos.metrics.catalogue import gated

    return [s.key for s in gated() if s.tolerance is not None and s.tolerance.gate]


# ----------------------------------------------------------------------------- typed results


@dataclass(frozen=True)
class RunResult:
    """One repeat of a scenario: its run record, and where its files are."""

    record: RunRecord
    journal_path: Path
    report_path: Path | None
    """The run's HTML page."""

    @property
    def scenario(self) -> str:
        return self.record.scenario.name

    @property
    def repeat(self) -> int:
        return self.record.repeat_index

    @property
    def status(self) -> str:
        """completed, failed, hung, timeout, interrupted or tool_error."""
        return self.record.status

    @property
    def outcome(self) -> Outcome:
        """error: no verdict (trainchaos failed, or the run was interrupted); xfail / xpass: the
        scenario expects to fail (``expect``) and missed / met its targets."""
        return self.record.outcome

    @property
    def reasons(self) -> list[str]:
        """Why it is not a pass (each missed target's sentence); empty for a pass."""
        return self.record.reasons()

    @property
    def metrics(self) -> MetricsRecord | None:
        """``result.metrics.recovery_s``; a metric family's own values are attributes too."""
        return self.record.metrics

    @property
    def verdict(self) -> Verdict | None:
        return self.record.verdict

    @property
    def passed(self) -> bool:
        """Every target was met (an unexpected pass of an expected failure too)."""
        return self.record.met_targets

    @classmethod
    def of(cls, record: RunRecord) -> RunResult:
        """The result of the run ``record`` describes, its files where the record says."""
        from chaos.report import RUN_HTML
        from chaos.runfiles.rundir import RunDir

        run_dir = Path(str(record.run_dir or "."))
        page = run_dir / RUN_HTML
        return cls(record=record, journal_path=Path(RunDir(str(run_dir)).run_record),
                   report_path=page if page.exists() else None)


@dataclass(frozen=True)
class ScenarioResult:
    """Every repeat of one scenario. ``metrics``, ``verdict``, ``journal_path`` and
    ``report_path`` are those of its only run (use ``runs`` when it repeats)."""

    name: str
    runs: list[RunResult]

    @property
    def passed(self) -> bool:
        return bool(self.runs) and all(r.passed for r in self.runs)

    @property
    def outcome(self) -> Outcome:
        """The worst of its runs: error, fail, xfail (an expected failure happened at least
        once), xpass, pass."""
        kinds = {r.outcome for r in self.runs}
        order: tuple[Outcome, ...] = ("error", "fail", "xfail", "xpass", "pass")
        return next((k for k in order if k in kinds), "error")

    @property
    def reasons(self) -> list[str]:
        return [f"{self.name}[{r.repeat}]: {reason}" for r in self.runs for reason in r.reasons]

    def _only(self) -> RunResult:
        if len(self.runs) != 1:
            raise ValueError(f"{self.name} ran {len(self.runs)} times: pick one of .runs")
        return self.runs[0]

    @property
    def metrics(self) -> MetricsRecord | None:
        return self._only().metrics

    @property
    def verdict(self) -> Verdict | None:
        return self._only().verdict

    @property
    def journal_path(self) -> Path:
        return self._only().journal_path

    @property
    def report_path(self) -> Path | None:
        return self._only().report_path


def run_scenarios(scenarios: list[Scenario], out_dir: str | os.PathLike[str], *, suite_name: str = "pytest",
                  repeat: int | None = None, seed: int | None = None,
                  suite_reports: bool = True) -> list[ScenarioResult]:
    """Run scenarios as ``trainchaos run`` does (baselines, repeats, reports, faults reverted
    on Ctrl-C) and return one typed result per scenario."""
    from chaos.runner.suite import preflight, run_suite
    from chaos.util.interrupts import installed

    preflight(scenarios)
    with installed():
        outcome = run_suite(scenarios, os.fspath(out_dir), suite_name, repeat=repeat, seed=seed,
                            suite_reports=suite_reports)
    if outcome.interrupted:
        raise KeyboardInterrupt("trainchaos run interrupted (every fault was reverted)")
    results = []
    for scenario in scenarios:
        runs = [RunResult.of(r) for r in outcome.records if r.scenario.name == scenario.name]
        results.append(ScenarioResult(scenario.name, runs))
    return results


# ----------------------------------------------------------------------------------- fixture


class TrainchaosRunner:
    """What the ``trainchaos`` fixture returns: call it with a scenario file."""

    def __init__(self, out_root: Path) -> None:
        self.out_root = out_root
        self._calls = 0

    def __call__(self, path: str | os.PathLike[str], *, repeat: int | None = None,
                 seed: int | None = None) -> ScenarioResult:
        """Run the one scenario of ``path`` and return its result."""
        results = self.suite(path, repeat=repeat, seed=seed)
        if len(results) != 1:
            raise ValueError(f"{path} holds {len(results)} scenarios; trainchaos(...) runs one "
                             "(use trainchaos.suite(...) for several)")
        return results[0]

    def suite(self, path: str | os.PathLike[str], *, repeat: int | None = None,
              seed: int | None = None) -> list[ScenarioResult]:
        """Run every scenario of a file, directory or suite file."""
        from chaos.scenario.load import load_suite

        scenarios = load_suite([os.fspath(path)])
        self._calls += 1
        out = self.out_root / f"trainchaos_{self._calls}"
        return run_scenarios(scenarios, out, suite_name=out.name, repeat=repeat, seed=seed)


@pytest.fixture
def trainchaos(tmp_path: Path) -> TrainchaosRunner:
    """Run a trainchaos scenario: ``trainchaos("scenario.yaml")`` returns a ``ScenarioResult``
    (``.passed``, ``.reasons``, ``.metrics``, ``.verdict``, ``.journal_path``, ``.report_path``)."""
    return TrainchaosRunner(tmp_path)


# ------------------------------------------------------------------------- --trainchaos PATH


_PATHS = pytest.StashKey[list[Path]]()
_RECORDS = pytest.StashKey[list["RunRecord"]]()
_PAGE = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trainchaos", "trainchaos: chaos scenarios as tests")
    group.addoption("--trainchaos", action="append", default=[], metavar="PATH",
                    help="Collect each scenario of PATH (file, directory or suite file) as a test item.")
    group.addoption("--trainchaos-out", default=None, metavar="DIR",
                    help="Where --trainchaos runs write [default: reports/pytest under the rootdir].")
    group.addoption("--trainchaos-repeat", type=int, default=None, metavar="N",
                    help="Override every collected scenario's repeat.")
    group.addoption("--trainchaos-seed", type=int, default=None, metavar="SEED",
                    help="Override every collected scenario's seed.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "trainchaos: a trainchaos scenario collected by --trainchaos PATH")
    paths = [Path(p) for p in config.getoption("trainchaos") or []]
    config.stash[_PATHS] = [p.resolve() for p in paths]
    config.stash[_RECORDS] = []
    if paths:
        # Collected like any argument, so -k, -m, --collect-only and reports treat them alike.
        present = {Path(a.split("::")[0]).resolve() for a in config.args}
        config.args.extend(str(p) for p in paths if p.resolve() not in present)


def _wanted(config: pytest.Config, path: Path) -> bool:
    return path.resolve() in config.stash.get(_PATHS, [])


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _wanted(parent.config, path):
        return ScenarioDirectory.from_parent(parent, path=path)
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix in (".yaml", ".yml") and _wanted(parent.config, file_path):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class _ScenarioCollector:
    """Both collectors: load the scenarios of ``self.path`` as ``trainchaos run`` would
    (bad input is a collection error naming the file and the location)."""

    path: Path

    def collect(self) -> Iterator[ScenarioItem]:
        from chaos.scenario.load import load_suite

        for scenario in load_suite([str(self.path)]):
            # ignore: the parent is a pytest.Directory or pytest.File (the classes below mix
            # this one in), which mypy cannot see from the mixin alone.
            yield ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)  # type: ignore[arg-type]


class ScenarioDirectory(_ScenarioCollector, pytest.Directory):
    pass


class ScenarioFile(_ScenarioCollector, pytest.File):
    pass


class ScenarioFailed(Exception):
    """A scenario missed a target, or reached no verdict."""


class ScenarioMissedTarget(ScenarioFailed):
    """Every run reached a verdict and at least one missed a target: the only failure an
    expected failure (``expect``) turns into an xfail."""


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.result: ScenarioResult | None = None
        self.add_marker("trainchaos")
        expect = scenario.expect
        if expect is not None:
            # pytest's own xfail: xfailed / XPASS in its summary and junitxml, xfail_strict
            # and --runxfail honoured. Only a missed target is the expected failure.
            reason = expect.fail + (f" ({expect.issue})" if expect.issue else "")
            self.add_marker(pytest.mark.xfail(reason=reason, raises=ScenarioMissedTarget))

    def runtest(self) -> None:
        config = self.config
        out = config.getoption("trainchaos_out") or os.path.join(str(config.rootpath), "reports", "pytest")
        [result] = run_scenarios([self.scenario], out, repeat=config.getoption("trainchaos_repeat"),
                                 seed=config.getoption("trainchaos_seed"), suite_reports=False)
        self.result = result
        config.stash[_RECORDS].extend(r.record for r in result.runs)
        for run in result.runs:
            suffix = f"[{run.repeat}]" if len(result.runs) > 1 else ""
            for key in _properties():
                value = getattr(run.metrics, key, None) if run.metrics else None
                if value is not None:
                    self.user_properties.append((f"{key}{suffix}", value))
            self.user_properties.append((f"report{suffix}", str(run.report_path or run.journal_path)))
        if result.passed:
            return
        lines = []
        for run in result.runs:
            if run.passed:
                continue
            head = "TOOL ERROR" if run.status == "tool_error" else ("missed a target" if run.outcome in ("fail", "xfail")
                                                                    else f"no verdict ({run.status})")
            first, *more = run.reasons or ["(no reason recorded)"]
            # The first line is what `pytest -rf` shows: it names the first reason.
            lines.append(f"{self.name}[{run.repeat}] {head}: {first}")
            lines += [f"  {reason}" for reason in more]
            lines.append(f"  report: {run.report_path or run.journal_path}")
        verdicts = all(run.outcome != "error" for run in result.runs)
        raise (ScenarioMissedTarget if verdicts else ScenarioFailed)("\n".join(lines))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"trainchaos scenario {self.name}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    records = session.config.stash.get(_RECORDS, [])
    if not records:
        return
    from chaos.report import write_suite_reports

    config = session.config
    out = config.getoption("trainchaos_out") or os.path.join(str(config.rootpath), "reports", "pytest")
    paths = write_suite_reports(out, records, "pytest")
    page = next((p for p in paths if p.endswith(".html")), None)
    if page:
        config.stash[_PAGE] = page


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    page = config.stash.get(_PAGE, None)
    if page:
        terminalreporter.write_line(f"trainchaos HTML report: {page}")
