"""Backend capabilities (chaos.cluster.capabilities): a fault type lists what it acts
through, a backend declares what it has, validation refuses the pair that does not fit (a
located error, exit 2, nothing started) and ``ctx.require`` hands the ability over."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chaos.cluster import known_backends
from chaos.cluster.base import ClusterBackend, InjectionContext
from chaos.cluster.capabilities import (
    CAPABILITIES,
    ContainerHost,
    Fabric,
    PowerControl,
    PowerReturn,
    Scheduler,
    StorageLayer,
    describe,
    missing,
)
from chaos.errors import EXIT_BAD_INPUT, ScenarioError, ToolError
from chaos.faults.base import known_types, lookup
from chaos.model.targets import ResolvedTarget
from chaos.scenario.load import parse_scenario

REPO = Path(__file__).resolve().parents[2]
BASE = {"name": "s", "workload": {"harness": {"steps": 20, "model": {"name": "mlp"}}},
        "topology": {"nodes": 2, "ranks_per_node": 1}}


def _refusal(fault: dict[str, Any], backend: str = "local") -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({**BASE, "backend": backend, "faults": [fault]}, "s.yaml")
    assert info.value.exit_code == EXIT_BAD_INPUT
    (issue,) = info.value.issues
    return f"{issue.location}: {issue.message}"


def test_a_container_fault_on_local_names_the_capability_and_the_backends_that_have_it() -> None:
    text = _refusal({"type": "container_pause", "target": {"node": 1}, "trigger": {"at_step": 5},
                     "params": {"duration_s": 5}})
    assert text == ("faults[0].type: container_pause acts through the docker backend; this scenario "
                    f"runs on local (set backend: docker): local has no {describe(ContainerHost)}")


@pytest.mark.parametrize(("fault", "backend", "capability", "fits"), [
    ({"type": "bandwidth", "target": {"node": 1}, "params": {"rate_mbit": 10}}, "docker", Fabric, "netns"),
    ({"type": "io_stall", "target": {"node": 1}}, "netns", StorageLayer, "local"),
    ({"type": "preempt_job", "target": {"job": True}}, "netns", Scheduler, "slurm"),
])
def test_every_family_is_refused_where_its_capability_is_missing(fault: dict[str, Any], backend: str,
                                                                 capability: type, fits: str) -> None:
    text = _refusal({**fault, "trigger": {"at_step": 5}}, backend)
    assert f"acts through the {fits} backend; this scenario runs on {backend} (set backend: {fits})" in text
    assert f"{backend} has no {capability.__name__} (" in text


def test_the_same_fault_is_accepted_where_the_capability_is() -> None:
    fault = {"type": "container_pause", "target": {"node": 1}, "trigger": {"at_step": 5}, "params": {"duration_s": 5}}
    assert parse_scenario({**BASE, "backend": "docker", "faults": [fault]}, "s.yaml").faults[0].type == "container_pause"


def test_run_of_a_container_fault_on_local_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    bad = REPO / "tests" / "scenarios" / "bad" / "container_fault_on_local.yaml"
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "TRAINCHAOS_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "chaos.cli", "run", str(bad), "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert f"{bad}: faults[0].type: container_pause acts through the docker backend" in result.stderr
    assert "ContainerHost" in result.stderr
    assert not out.exists() and not (tmp_path / "state" / "active").exists()


def test_every_declared_capability_is_implemented_and_every_fault_type_has_a_backend() -> None:
    for name, backend in known_backends().items():
        for capability in backend.capabilities:
            assert capability in CAPABILITIES, f"{name}: {capability} is not a known capability"
            assert not missing(backend, capability), f"{name} lacks {missing(backend, capability)}"
    for name, cls in known_types().items():
        assert cls.supported_backends(), f"{name} requires {cls.requires}: no backend has them all"


def test_a_backend_that_declares_what_it_does_not_implement_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="declares PowerReturn but does not implement power_on"):
        class _HalfPowered(ClusterBackend):  # noqa: F841 (defining it is the test)
            name: ClassVar[str] = "half"
            capabilities: ClassVar[tuple[type, ...]] = (PowerControl, PowerReturn)

            def power_off(self, nodes: tuple[int, ...]) -> Any: ...


class _Bare:
    name = "bare"
    capabilities: tuple[type, ...] = ()


def test_require_refuses_a_backend_without_the_capability_and_names_it() -> None:
    ctx = InjectionContext("/nonexistent", _Bare(), None)  # type: ignore[arg-type]
    with pytest.raises(ToolError, match=r"backend bare has no Scheduler \(a batch scheduler"):
        ctx.require(Scheduler)
    # A fault reaching it anyway (a type that forgot `requires`) fails the same way, not by
    # an AttributeError deep inside.
    fault = lookup("node_down")(fault_id="f0", target=ResolvedTarget(nodes=(1,)), params={})
    with pytest.raises(ToolError, match="has no Scheduler"):
        fault.inject(ctx)


def test_no_fault_probes_the_backend_or_imports_a_concrete_one() -> None:
    """The issue's grep, kept: capabilities replace every hasattr/getattr on the cluster."""
    import re

    text = "\n".join(p.read_text() for p in (REPO / "chaos" / "faults").rglob("*.py"))
    assert not re.search(r"(hasattr|getattr)\((ctx\.)?cluster\b", text)
    assert not re.search(r"chaos\.cluster\.(local|netns|docker|docker_engine|slurm)\b", text)
