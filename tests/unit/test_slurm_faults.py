"""Scheduler node faults that fail half-way leave no node out of service (the record a
failed inject never returns cannot be reverted later)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.cluster.base import InjectionContext
from chaos.cluster.capabilities import Scheduler
from chaos.errors import ToolError
from chaos.faults.scheduler.faults import DrainNode, NodeDown
from chaos.model.targets import ResolvedTarget


class _HalfBrokenSlurm:
    """Takes node 0 out, then fails on node 1's processes."""

    name = "slurm"
    capabilities = (Scheduler,)

    def __init__(self) -> None:
        self.lost: set[int] = set()

    def take_node_out(self, node: int, state: str, why: str) -> dict[str, Any]:
        return {"slurm_node": f"n{node + 1}", "state": state, "reason": f"trainchaos:r:{why}", "slurm_conf": None}

    def signal_node(self, node: int, sig: int) -> list[int]:
        if node == 1:
            raise ToolError("srun: error: Unable to create step")
        return [100 + node]


@pytest.mark.parametrize(("fault_type", "taken_out"), [
    (NodeDown, ["n1"]),  # kills node 1's processes before taking it out: only n1 was out
    (DrainNode, ["n1", "n2"]),  # drains node 1 before warning its processes: both were out
])
def test_a_half_done_inject_resumes_what_it_took_out(monkeypatch: pytest.MonkeyPatch, fault_type: type,
                                                     taken_out: list[str]) -> None:
    resumed: list[str] = []
    monkeypatch.setattr("chaos.cluster.slurm.resume_node", lambda name, conf=None: resumed.append(name))
    fault = fault_type(fault_id="f0", target=ResolvedTarget(nodes=(0, 1)), params={})
    ctx = InjectionContext(run_dir="unused", cluster=_HalfBrokenSlurm(), injector=None)  # type: ignore[arg-type]
    with pytest.raises(ToolError, match="Unable to create step"):
        fault.inject(ctx)
    assert resumed == taken_out, "what was taken out before the failure must be resumed"
