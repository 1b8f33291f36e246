"""Scenario documents drawn from the project's own JSON Schema (``trainchaos schema``,
hypothesis-jsonschema), as they are and structurally mutated, each through what ``trainchaos
validate`` and ``run --dry-run`` do: exit 0 or 2 only, every rejection located, no
traceback, within 2 s. A fixed seed and a fixed count keep it in ``make test``; ``make
test-fuzz`` is the long soak (tests/fuzz_soak.py). Below: each escape the fuzzing found, as
the minimal document.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings

from chaos.errors import EXIT_BAD_INPUT, ChaosError, ScenarioError
from chaos.scenario.load import load_scenario
from tests.unit._fuzz_support import (
    SHIPPED,
    judge,
    problems,
    schema_hostile_documents,
    schema_pool,
    write,
)

POOL = 40
"""Schema-drawn documents the mutations start from (~70 ms each to draw)."""
DOCUMENTS = 1000
CLI_EVERY = 50
"""Every so many documents also go through the real CLI (CliRunner), whose exit code must agree."""


def setup_module() -> None:
    """One-time costs (torch's import, the generator's schema) before any clock starts."""
    load_scenario(str(SHIPPED[0]))
    schema_pool(POOL)


def _cli_code(args: list[str]) -> int:
    """The exit code ``trainchaos ARGS`` gives (chaos.cli.main maps exceptions so)."""
    from chaos.cli import cli

    result = CliRunner().invoke(cli, args, standalone_mode=False)
    exc = result.exception
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        return int(exc.code or 0)
    if isinstance(exc, ChaosError):
        return exc.exit_code
    raise AssertionError(f"trainchaos {' '.join(args)}: internal error {exc!r}") from exc


_seen = [0]


@settings(max_examples=DOCUMENTS, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(text=schema_hostile_documents(schema_pool(POOL)))
def test_schema_drawn_documents_end_in_exit_0_or_a_located_exit_2(text: str, tmp_path_factory) -> None:
    path = write(text, tmp_path_factory.mktemp("fuzz"))
    verdict = judge(path)
    assert not problems(verdict, path), (problems(verdict, path), text[:500])
    _seen[0] += 1
    if _seen[0] % CLI_EVERY == 0:
        assert _cli_code(["validate", path]) == verdict.code
        assert _cli_code(["run", "--dry-run", "--no-preflight", path]) == verdict.code


def test_the_pool_holds_valid_scenarios_and_each_section() -> None:
    """The fuzzing reaches past validation into the plan only if some drawn documents are
    valid; and the generator is no generator if it leaves sections out."""
    pool = schema_pool(POOL)
    assert {"workload", "topology", "faults", "targets", "backend"} <= {k for doc in pool for k in doc}
    assert {type(f["type"]) for doc in pool for f in doc.get("faults") or []} == {str}


# --------------------------------------------------------------------------- escapes found


def _refused(tmp_path: Path, text: str) -> ScenarioError:
    path = write(text, tmp_path)
    verdict = judge(path)
    assert not problems(verdict, path), problems(verdict, path)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.exit_code == EXIT_BAD_INPUT
    return info.value


def test_harness_options_whose_keys_mix_types_are_a_located_exit_2(tmp_path: Path) -> None:
    """Was ``internal error: TypeError: '<' not supported between instances of 'str' and
    'int'`` (exit 3): harness/config_load.py sorted the unknown keys."""
    exc = _refused(tmp_path, "name: x\nworkload: {harness: {checkpoint: {1: 2, foo: 3}}}\n")
    assert [i.location for i in exc.issues] == ["workload.harness.checkpoint.1"], str(exc)
    assert "allowed: bug_late_snapshot" in str(exc)


def test_a_nul_character_is_refused_at_its_line_and_column(tmp_path: Path) -> None:
    """Was refused with no location: the YAML reader's error carries a position, no mark."""
    exc = _refused(tmp_path, "name: x\ndescription: a\x00b\n")
    assert [i.location for i in exc.issues] == ["line 2, column 15"], str(exc)


def test_an_integer_beyond_pythons_digit_limit_is_refused_at_its_line(tmp_path: Path) -> None:
    """Was refused with no location: int() of 5,000 digits raises a ValueError naming no place."""
    exc = _refused(tmp_path, "name: x\nseed: " + "9" * 5000 + "\n")
    assert [i.location for i in exc.issues] == ["line 2, column 7"], str(exc)


def test_an_empty_key_is_refused_under_its_quoted_name(tmp_path: Path) -> None:
    """Was refused with an empty location: the key path of ``'': null`` joined to nothing."""
    exc = _refused(tmp_path, "name: x\n'': null\ntopology: {'': 1}\n")
    assert [i.location for i in exc.issues] == ["''", "topology.''"], str(exc)


# -- the escapes of the 100,000-document soak (docs/testing.md, "Fuzzing") -------------------


@pytest.mark.parametrize("duration", ["[12]", "{a: 1}"])
def test_a_power_outage_whose_duration_is_not_a_number_is_a_located_exit_2(tmp_path: Path, duration: str) -> None:
    """Was ``internal error: TypeError: '<' not supported between instances of 'list' and
    'int'`` (exit 3): the nodes-left cross-check compared the raw duration_s with the rejoin
    wait before the parameter's own type was judged."""
    exc = _refused(tmp_path, "name: x\ntopology: {nodes: 2, ranks_per_node: 1, power_domains: {pd: [1]}}\n"
                             "faults: [{type: power_outage, target: {power_domain: pd}, trigger: {at_step: 3}, "
                             f"params: {{duration_s: {duration}}}}}]\n")
    assert [i.location for i in exc.issues] == ["faults[0].params.duration_s"], str(exc)


def test_a_harness_float_option_given_an_integer_beyond_any_float_is_a_located_exit_2(tmp_path: Path) -> None:
    """Was ``internal error: OverflowError: int too large to convert to float`` (exit 3)."""
    exc = _refused(tmp_path, "name: x\nworkload: {harness: {slow_rank: {ratio: -" + "9" * 400 + "}}}\n")
    assert [i.location for i in exc.issues] == ["workload.harness.slow_rank.ratio"], str(exc)
    assert "an integer of 400 digits" in str(exc)
