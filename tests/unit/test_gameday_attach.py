"""A game day attaches to a live run through a capability (``Attachable``), asked of the
backend the run's record names: the docker backend declares it, any backend that declares
it can be attached to, and a run on one without it is refused naming those that have it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

import chaos.cluster as clusters
import chaos.gameday.attach as attach
from chaos.cluster import lookup_backend
from chaos.cluster.base import ClusterBackend
from chaos.cluster.capabilities import Attachable, has
from chaos.errors import ScenarioError, ToolError


class _Stand(ClusterBackend):
    """A stand-in backend that can be attached to (as a plugin's could)."""

    name: ClassVar[str] = "stand"
    capabilities: ClassVar[tuple[type, ...]] = (Attachable,)
    attached: ClassVar[list[Any]] = []

    @classmethod
    def attach(cls, spec: Any) -> _Stand:
        cls.attached.append(spec)
        return cls(spec, None)  # type: ignore[arg-type]

    def rescan(self) -> dict[int, str]:
        return {0: "running", 1: "paused"}

    def start(self) -> None: ...
    def poll(self) -> dict: return {}
    def stop(self, grace_s: float = 3.0) -> list[int]: return []
    def node_address(self, node: int) -> str: return "127.0.0.1"
    def node_logs(self) -> dict[int, str]: return {}
    def process_alive(self, pid: int) -> bool: return False
    def find_rank(self, rank: int) -> None: return None
    def signal_pid(self, pid: int, sig: int) -> bool: return False
    def signal_node(self, node: int, sig: int) -> list[int]: return []


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> type[_Stand]:
    clusters.BACKENDS.load()
    monkeypatch.setattr(clusters.BACKENDS, "items", dict(clusters.BACKENDS.items))
    clusters.register_backend(_Stand)
    _Stand.attached.clear()
    return _Stand


def _entry(tmp_path: Path, backend: str) -> dict[str, Any]:
    (tmp_path / "run" / "events").mkdir(parents=True)
    record = {"run_id": "trainchaos-att", "backend": {"name": backend, "options": {}},
              "scenario": {"topology": {"nodes": 2, "ranks_per_node": 1}}}
    return {"run_id": "trainchaos-att", "run_dir": str(tmp_path / "run"), "record": record}


def test_docker_declares_attachable_and_is_the_one_builtin_that_does() -> None:
    assert has(lookup_backend("docker"), Attachable)
    assert attach.attachable_backends() == ["docker"]


def test_the_run_is_attached_through_the_backend_its_record_names(tmp_path: Path, stand: type[_Stand]) -> None:
    run = attach.AttachedRun(_entry(tmp_path, "stand"), hosts=[])
    assert isinstance(run.backend, _Stand) and stand.attached[0].run_id == "trainchaos-att"
    assert run.states == {0: "running", 1: "paused"} and run.containers_running() == 1
    assert "stand" in attach.attachable_backends()


def test_a_run_on_a_backend_without_it_is_refused_naming_those_with_it(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"run trainchaos-att runs on the local backend, which a game day "
                                        r"cannot attach to: local has no Attachable \(.*\); backends "
                                        r"that have it: docker"):
        attach.AttachedRun(_entry(tmp_path, "local"), hosts=[])


def test_find_run_refuses_a_live_run_it_cannot_attach_to_and_skips_it_for_latest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"run_id": "trainchaos-loc", "run_dir": str(tmp_path), "started": 1}
    start = SimpleNamespace(backend=SimpleNamespace(name="local"), model_dump=lambda **_: {})
    monkeypatch.setattr(attach, "active_runs", lambda: [entry])
    monkeypatch.setattr(attach, "run_is_live", lambda e: True)
    monkeypatch.setattr(attach, "load_run_start", lambda run_dir: start)
    with pytest.raises(ScenarioError) as info:
        attach.find_run("trainchaos-loc", "plan.yaml")
    assert str(info.value).startswith("plan.yaml: run: run trainchaos-loc runs on the local backend, "
                                      "which a game day cannot attach to")
    with pytest.raises(ScenarioError, match=r"plan.yaml: run: no live docker run 'latest' \(live runs: "
                                            r"trainchaos-loc\)"):
        attach.find_run("latest", "plan.yaml")
