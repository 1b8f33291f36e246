"""The toy family's fault type: ``toy_ballast``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from chaos.faults.base import FaultParams, FaultType, register
from toy_family.resources import PREFIX, BallastFile

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["ToyBallast"]


class ToyBallastParams(FaultParams):
    mb: int = Field(1, ge=1, le=64)
    """MiB of ballast."""


@register
@dataclass
class ToyBallast(FaultType):
    type_name: ClassVar[str] = "toy_ballast"
    family: ClassVar[str] = "toy"
    failure_class: ClassVar[str] = "slow"
    summary: ClassVar[str] = "A ballast file on a node (the toy family of the tests)."
    fidelity: ClassVar[str] = "None: a test of the family seam; it takes nothing from the job."
    mechanism: ClassVar[str] = "a run-scoped ballast file"
    params_model: ClassVar[type[FaultParams]] = ToyBallastParams
    target_kinds: ClassVar[tuple[str, ...]] = ("node",)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        path = os.path.join(ctx.run_dir, f"{PREFIX}{self.fault_id}.bin")
        assert ctx.resources is not None, "the runner hands every fault the run's resources"
        ctx.resources.acquire(BallastFile.kind, {"path": path, "mb": self.params["mb"]})
        return {"path": path, "ballast_mb": self.params["mb"]}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        if record.get("path"):
            BallastFile.destroy({"path": record["path"]}, {})
