"""Hostile scenario files never crash, hang or flood validation (property-based).

Hypothesis mutates the shipped scenarios: values replaced by other types, deep nesting, huge
numbers, NaN/Inf, unicode, oversized keys and strings, unknown keys, removed keys, shared
(aliased) values, and raw text damage. Every example must end like ``trainchaos validate`` /
``run --dry-run`` would: a Scenario (and its plan) or a ScenarioError (exit 2), within 2 s
and 200 MB, with a bounded message. A fixed example budget keeps it in ``make test``.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.scenario.load import load_scenario, parse_scenario
from tests.unit._fuzz_support import (
    DOCUMENTS,
    SHIPPED,
    hostile_documents,
    judge,
    paths_of,
    problems,
    write,
)
from tests.unit._fuzz_support import leaf as _leaf


def setup_module() -> None:
    """Pay one-time costs (importing torch for checks that build the harness model) before
    the clock starts: the 2 s bound is on validation, not on a cold interpreter."""
    for path in SHIPPED:
        load_scenario(str(path))


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=hostile_documents())
def test_hostile_scenarios_end_in_a_scenario_or_a_located_error(text: str, tmp_path_factory) -> None:
    path = write(text, tmp_path_factory.mktemp("fuzz"))
    verdict = judge(path)
    assert not problems(verdict, path), (problems(verdict, path), text[:500])


# --------------------------------------------------------------------------- the four classes
# A malformed-input corpus written outside the team found these four ways past validation;
# each is now a class of its own, drawn over every place it can occur.


def _load_text(tmp_path_factory, text: str) -> tuple[ScenarioError | None, float]:
    path = tmp_path_factory.mktemp("fuzz") / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    t0 = time.perf_counter()
    try:
        load_scenario(str(path))
    except ScenarioError as exc:
        return exc, time.perf_counter() - t0
    return None, time.perf_counter() - t0


def _mappings(doc: Any) -> list[tuple]:
    """Paths of every mapping in a document (the top level included)."""
    out = []
    for path in paths_of(doc):
        node = doc
        for part in path:
            node = node[part]
        if isinstance(node, dict):
            out.append(path)
    return out


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_non_string_key_anywhere_is_a_located_error(data: st.DataObject, tmp_path_factory) -> None:
    doc = copy.deepcopy(data.draw(st.sampled_from(DOCUMENTS)))
    path = data.draw(st.sampled_from(_mappings(doc)))
    node = doc
    for part in path:
        node = node[part]
    key = data.draw(st.one_of(st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False)))
    node[key] = data.draw(_leaf)
    exc, _ = _load_text(tmp_path_factory, yaml.dump(doc, allow_unicode=True, sort_keys=False))
    assert exc is not None, f"a key {key!r} under {path} validated"
    assert exc.exit_code == EXIT_BAD_INPUT
    assert all(issue.location for issue in exc.issues), str(exc)


def test_harness_options_with_a_non_string_key_are_a_located_exit_2(tmp_path_factory) -> None:
    exc, _ = _load_text(tmp_path_factory, "name: x\nworkload:\n  harness:\n    checkpoint: {1: 2}\n")
    assert exc is not None and exc.exit_code == EXIT_BAD_INPUT
    assert [i.location for i in exc.issues] == ["workload.harness.checkpoint.1"], str(exc)


@pytest.mark.parametrize("section", ["workload", "topology", "trigger", "target"])
def test_a_section_written_as_null_is_refused(section: str, tmp_path_factory) -> None:
    doc: dict[str, Any] = {"name": "x", "faults": [
        {"type": "kill_rank", "target": {"rank": 0}, "trigger": {"at_step": 5}}]}
    if section in ("trigger", "target"):
        doc["faults"][0][section] = None
        where = f"faults[0].{section}"
    else:
        doc[section] = None
        where = section
    exc, _ = _load_text(tmp_path_factory, yaml.dump(doc, sort_keys=False))
    assert exc is not None, f"{section}: null validated"
    assert where in [i.location for i in exc.issues], str(exc)


def _numeric_params() -> list[tuple[str, str]]:
    from chaos.faults.base import known_types
    from chaos.model.types import unwrap

    out = []
    for name, fault_type in known_types().items():
        for field, info in fault_type.params_model.model_fields.items():
            annotation = str(unwrap(info.annotation, list(info.metadata))[0])
            if "int" in annotation or "float" in annotation:
                out.append((name, field))
    return out


@pytest.mark.parametrize(("fault_type", "param"), _numeric_params())
@pytest.mark.parametrize("huge", [10**30, 1e300])
def test_a_huge_number_in_any_numeric_parameter_is_refused(fault_type: str, param: str, huge: float,
                                                           tmp_path_factory) -> None:
    """Every numeric parameter has a documented range: a typo's 10**30 never reaches a plan."""
    value: Any = huge
    if param in ("groups", "links"):
        value = [[huge, 0]]
    elif param == "attributes":
        value = {"latency": huge}
    doc = {"name": "x", "faults": [{"type": fault_type, "target": {"node": 0},
                                    "trigger": {"at_step": 5}, "params": {param: value}}]}
    exc, _ = _load_text(tmp_path_factory, yaml.dump(doc, sort_keys=False))
    assert exc is not None
    assert any(i.location.startswith(f"faults[0].params.{param}") for i in exc.issues), str(exc)


def test_thousands_of_faults_of_an_unknown_type_are_bounded(tmp_path_factory) -> None:
    from chaos.scenario.load import MAX_PROBLEMS_PER_FILE

    faults = "".join(f"  - {{type: corrupt_checkpoint{i % 3}, target: {{rank: 0}}, "
                     "trigger: {at_step: 5}}\n" for i in range(2000))
    doc = yaml.safe_load(f"name: x\nfaults:\n{faults}")
    load_scenario(str(SHIPPED[0]))  # warm: the bound is on validation, not on imports or YAML
    # CPU time of this process, not wall time: the bound is on validation's own work (no
    # blow-up over 2000 faults), which a host busy with other processes must not fail.
    t0 = time.process_time()
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc, "scenario.yaml")
    elapsed = time.process_time() - t0
    exc = info.value
    assert exc.exit_code == EXIT_BAD_INPUT
    assert len(exc.issues) == MAX_PROBLEMS_PER_FILE + 1
    assert "and 1970 more problems not shown" in exc.issues[-1].message
    assert "'io_corrupt'" in exc.issues[0].message
    assert elapsed < 2.0, f"validation took {elapsed:.1f} s"
