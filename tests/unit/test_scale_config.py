"""Scale-model configuration: every bad input is reported with its file and location, all of
them at once, in the words ``trainchaos validate`` uses; the reference names every field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.scale.config import (
    Checkpoint,
    ClassDefaults,
    FailureClass,
    Job,
    Maintenance,
    Recovery,
    ScaleConfig,
    Tier,
    load_config,
    validate_config,
)
from chaos.scale.issues import ScaleInputError
from chaos.scale.llama3 import LLAMA3_CLASSES

REPO = Path(__file__).resolve().parents[2]

GOOD: dict[str, Any] = {
    "name": "small",
    "job": {"devices": 64, "devices_per_node": 8, "days": 2},
    "classes": [
        {"name": "gpu", "rate_per_device_hour": 1e-4, "detection_s": 30, "restart_s": 120},
        {"name": "host", "rate_per_node_hour": 2e-4, "detection_s": 10, "restart_s": 300},
    ],
    "checkpoint": {"interval_s": 600, "blocking_s": 5},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is _DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return data


_DELETE = object()


def _issues(data: Any, **kwargs: Any) -> list[str]:
    with pytest.raises(ScaleInputError) as info:
        validate_config(data, "cfg.yaml", **kwargs)
    assert info.value.exit_code == 2
    return [str(i) for i in info.value.issues]


def test_the_good_config_is_valid():
    cfg = validate_config(copy.deepcopy(GOOD), "cfg.yaml")
    assert [c.name for c in cfg.classes] == ["gpu", "host"]
    assert cfg.classes[1].failures_per_hour(cfg.job) == pytest.approx(2e-4 * 8)


BAD = [
    ("classes.0.rate_per_device_hour", -1, "cfg.yaml: classes[0].rate_per_device_hour: -1 is out of range: must be >= 0"),
    ("checkpoint.interval_s", 0, "cfg.yaml: checkpoint.interval_s: 0 is out of range: must be > 0"),
    ("classes.1.detection_s", _DELETE,
     "cfg.yaml: classes[1]: class 'host' has no recovery figures (detection_s): set them here or in "
     "class_defaults, or name the trainchaos fault types that measure it (fault_types) and give --from-runs DIR"),
    ("job.devices", "many", "cfg.yaml: job.devices: expected int, got str 'many'"),
    ("job.days", True, "cfg.yaml: job.days: expected int or float, got bool true"),
    ("job.devices", 60, "cfg.yaml: job.devices: 60 devices do not fill whole nodes of 8"),
    ("checkpoint.intervall_s", 5, "cfg.yaml: checkpoint.intervall_s: unknown key 'intervall_s'; did you mean 'interval_s'?"),
    ("checkpoint.mode", "asynch", "cfg.yaml: checkpoint.mode: unknown value 'asynch'; did you mean 'async'? allowed: sync, async"),
    ("checkpoint.persist_s", 30, "cfg.yaml: checkpoint.persist_s: a sync checkpoint is durable when training resumes"),
    ("classes.0.rate_per_node_hour", 1e-3, "cfg.yaml: classes[0].rate_per_node_hour: set exactly one failure rate; "
     "rate_per_device_hour is set already"),
    ("classes.0.rate_per_device_hour", _DELETE, "cfg.yaml: classes[0]: no failure rate: set one of"),
    ("classes.0.domain_nodes", 4, "cfg.yaml: classes[0].domain_nodes: only with rate_per_domain_hour"),
    ("classes.0.scope", "rack", "cfg.yaml: classes[0].scope: unknown value 'rack'; allowed: process, device, node, domain"),
    ("classes.0.fault_types", ["kil_rank"], "cfg.yaml: classes[0].fault_types[0]: unknown fault type 'kil_rank'; "
     "did you mean 'kill_rank'?"),
    ("classes.0.lost_work", "fixed", "cfg.yaml: classes[0].lost_work_s: lost_work_s is the fixed loss of lost_work: fixed"),
    ("classes.0.lost_work", "measured", "cfg.yaml: classes[0].lost_work: lost_work: measured needs --from-runs DIR"),
    ("classes.1.name", "gpu", "cfg.yaml: classes[1].name: class 'gpu' is defined twice"),
    ("classes.1.name", "Bad Name", "cfg.yaml: classes[1].name: 'Bad Name' is not a valid name"),
    ("classes", [], "cfg.yaml: classes: expected a non-empty list"),
    ("recovery", {"mode": "spares"}, "cfg.yaml: recovery.spare_nodes: mode spares needs spare_nodes (>= 1)"),
    ("recovery", {"mode": "restart", "spare_nodes": 3}, "cfg.yaml: recovery.spare_nodes: spare_nodes is for mode spares"),
    ("maintenance", {"count": 3, "every_h": 5}, "cfg.yaml: maintenance.every_h: set exactly one of count and every_h"),
    ("checkpoint.tiers", [{"name": "memory", "survives": ["process"]}],
     "cfg.yaml: checkpoint.blocking_s: set it per tier when tiers are given"),
    ("checkpoint", {"interval_s": 60, "tiers": [{"name": "memory", "survives": ["process"]}]},
     "cfg.yaml: checkpoint.tiers: no tier survives a device failure (classes[0] gpu)"),
    ("checkpoint.interval_s", 0.01, "cfg.yaml: checkpoint.interval_s: 0.01 s gives more than 5,000,000 checkpoints"),
    ("job", {"devices": 64}, "cfg.yaml: job.days: required (Length of the simulated window in days (wall clock))"),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD, ids=[f"{p}={v!r}"[:40] for p, v, _ in BAD])
def test_bad_input_is_located(path, value, expected):
    issues = _issues(_with(path, value))
    assert any(line.startswith(expected) for line in issues), issues


def test_every_problem_is_reported_at_once():
    data = _with("checkpoint.interval_s", 0)
    data["classes"][0]["rate_per_device_hour"] = -1
    del data["classes"][1]["restart_s"]
    data["recovery"] = {"mode": "elastik"}
    issues = _issues(data)
    assert [i.split(": ")[1] for i in issues] == [
        "classes[0].rate_per_device_hour", "classes[1]", "checkpoint.interval_s", "recovery.mode"]


def test_class_defaults_or_a_measurement_supply_missing_figures():
    data = copy.deepcopy(GOOD)
    for c in data["classes"]:
        del c["detection_s"], c["restart_s"]
    assert len(_issues(data)) == 2
    validate_config({**data, "class_defaults": {"detection_s": 1, "restart_s": 2}}, "cfg.yaml")
    data["classes"][0]["fault_types"] = ["kill_rank"]
    issues = _issues(data, measured_types={"kill_rank"}, from_runs="reports/x")
    assert len(issues) == 1 and issues[0].startswith("cfg.yaml: classes[1]: class 'host'")
    data["classes"][1]["fault_types"] = ["kill_node"]
    issues = _issues(data, measured_types={"kill_rank"}, from_runs="reports/x")
    assert "--from-runs reports/x holds no fault of type kill_node" in issues[0]


def test_omitted_classes_are_the_llama3_table_and_say_so(tmp_path):
    data = {k: v for k, v in GOOD.items() if k != "classes"}
    issues = _issues(data)
    assert len(issues) == len(LLAMA3_CLASSES)
    assert issues[0].startswith("cfg.yaml: classes[0]: the built-in Llama 3 class 'faulty_gpu' has no "
                                "recovery figures (detection_s, restart_s)")
    assert "--from-runs DIR (journals of runs with a fault of type device_error or kill_rank)" in issues[0]
    cfg = validate_config({**data, "class_defaults": {"detection_s": 60, "restart_s": 300}}, "cfg.yaml")
    assert len(cfg.classes) == 18 and "Llama 3" in (cfg.source or "")
    assert sum(c.failures_per_hour(cfg.job) for c in cfg.classes) == pytest.approx(419 / 16_384 * 64 / (54 * 24))


def test_yaml_exponents_are_numbers_and_duplicate_keys_are_errors(tmp_path):
    path = tmp_path / "cfg.yaml"
    text = yaml.safe_dump(GOOD).replace("0.0001", "1e-4")
    assert "1e-4" in text
    path.write_text(text)
    assert load_config(str(path)).classes[0].rate_per_device_hour == 1e-4
    path.write_text(text + "name: again\n")
    with pytest.raises(ScaleInputError, match=r"cfg.yaml: line \d+, column 1: invalid YAML: found duplicate key 'name'"):
        load_config(str(path))
    with pytest.raises(ScaleInputError, match="no-such.yaml: no such file"):
        load_config(str(tmp_path / "no-such.yaml"))


def test_docs_name_every_field():
    doc = (REPO / "docs" / "scale.md").read_text()
    for model in (ScaleConfig, Job, FailureClass, ClassDefaults, Maintenance, Tier, Checkpoint, Recovery):
        for name in model.model_fields:
            assert f"`{name}`" in doc or f"{name}:" in doc, f"docs/scale.md does not document {model.__name__}.{name}"
