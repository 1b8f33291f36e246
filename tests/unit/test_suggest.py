"""Did-you-mean by meaning: the nine-spec exercise's unknown names lead to the right fault.

The inputs are what a new user wrote from the docs alone; spelling sent three of them to the
wrong fault (``crash_during_checkpoint``, the network ``latency``, ``packet_loss``) and one
nowhere. Each row asserts the suggested types and that the wrong one is not suggested.
"""

from __future__ import annotations

import pytest

from chaos.errors import ScenarioError
from chaos.faults.base import known_types
from chaos.scenario.load import parse_scenario
from chaos.schema.suggest import meanings, meant_types, suggest_param, suggest_type


def _type_message(fault_type: str, **extra: object) -> str:
    doc = {"name": "x", "faults": [{"type": fault_type, "target": {"node": 0},
                                    "trigger": {"at_time": 5}, **extra}]}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc, "s.yaml")
    return str(info.value)


@pytest.mark.parametrize(("written", "meant", "not_meant"), [
    ("corrupt_checkpoint", ["io_corrupt", "checkpoint_bitrot"], "crash_during_checkpoint"),
    ("storage_latency", ["io_slow"], "'latency'"),
    ("power_loss", ["power_outage"], "packet_loss"),
    ("cpu_stress", ["container_limits", "straggler"], None),
    ("noisy_neighbour", ["container_limits"], None),
    ("network_partition", ["partition"], None),
    ("bit_flip", ["bitflip"], None),
    ("node_drain", ["drain_node"], None),
    ("preemption", ["preempt_job"], None),
    ("OOM", ["container_limits"], None),
    ("disk_latency", ["io_slow"], "'latency'"),
    ("checkpointCorruption", ["io_corrupt", "checkpoint_bitrot"], "crash_during_checkpoint"),
])
def test_unknown_type_suggests_by_meaning_with_a_why(written: str, meant: list[str],
                                                      not_meant: str | None) -> None:
    message = _type_message(written)
    head = message.split(" known: ")[0]
    assert f"faults[0].type: unknown fault type {written!r}; did you mean" in head
    for name in meant:
        assert f"{name!r} (" in head, head  # each suggestion comes with its why
    if not_meant is not None:
        assert not_meant not in head, head


def test_spelling_still_answers_what_the_table_does_not_know() -> None:
    assert suggest_type("kil_rank", known_types()) == "; did you mean 'kill_rank'?"
    assert suggest_type("zzzz", known_types()) == ";"


def test_every_type_the_table_names_is_registered() -> None:
    known = set(known_types())
    named = {name for _, types in meanings() for name, _ in types}
    assert named <= known, named - known


def test_meaning_prefers_the_more_specific_phrase() -> None:
    # "storage latency" is io_slow alone, not also the network latency a bare "latency" is
    assert [t for t, _ in meant_types("storage_latency", known_types())] == ["io_slow"]


@pytest.mark.parametrize(("owner", "written", "fragment", "absent"), [
    ("bitflip", "bits", "'bit' is that bit's index", "did you mean 'bit'"),
    ("io_slow", "delay", "did you mean 'latency_ms' (milliseconds)?", None),
    ("latency", "latency", "did you mean 'delay_ms' (milliseconds)?", None),
    ("io_slow", "errno", "'errno' is a parameter of io_error, not of io_slow", None),
    ("kill_rank", "signl", "did you mean 'signal'?", None),
])
def test_unknown_parameter_suggests_by_meaning(owner: str, written: str, fragment: str,
                                               absent: str | None) -> None:
    allowed = list(known_types()[owner].params_model.model_fields)
    text = suggest_param(written, allowed, owner)
    assert fragment in text
    if absent:
        assert absent not in text


def test_a_fault_parameter_under_target_or_the_envelope_says_it_belongs_in_params() -> None:
    doc = {"name": "x", "faults": [{"type": "io_error", "target": {"path": "step-*/state.pt"},
                                    "trigger": {"at_time": 5}, "signal": "SIGTERM"}]}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc, "s.yaml")
    message = str(info.value)
    assert "faults[0].target.path: unknown target key 'path'; 'path' is a parameter of" in message
    assert "it belongs in the fault's params ({params: {path: ...}}), not in target" in message
    assert "faults[0].signal: unknown key 'signal'; 'signal' is a parameter of kill_node" in message


@pytest.mark.parametrize(("errno", "problem"), [
    (5, None), ("EIO", None), (28, None),
    (99999, "99999 is not an errno number of this platform; give a name: EIO (5)"),
    ("EIOO", "unknown errno name 'EIOO'"),
])
def test_errno_by_number_or_name(errno: object, problem: str | None) -> None:
    from chaos.faults.storage.faults import IoError, IoErrorParams
    from chaos.schema.build import build_scenario  # noqa: F401  (the path the runner takes)

    doc = {"name": "x", "faults": [{"type": "io_error", "target": {"rank": 0},
                                    "trigger": {"at_step": 5}, "params": {"errno": errno}}]}
    if problem is None:
        scenario = parse_scenario(doc, "s.yaml")
        name = scenario.faults[0].params["errno"]
        assert name == ("ENOSPC" if errno == 28 else "EIO")
        assert IoErrorParams.model_validate({"errno": errno}).errno == name
        assert IoError.type_name == "io_error"
        return
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc, "s.yaml")
    assert "faults[0].params.errno: " + problem in str(info.value)
