"""A rank that slows down gradually and recovers: ``thermal_throttle``.

Part of the process family (docs/process.md). A GPU that overheats lowers its clocks
step by step, holds them down while hot and recovers as it cools: a straggler whose factor
ramps rather than jumps. The slowdown is the probe's straggler mechanism (``chaos.probe``,
action ``slowdown``) with the factor a function of time; the harness's slow-rank detector
(harness/slowrank.py) is what should notice it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from chaos.faults.base import FailureClass, FaultParams, TargetKind, register
from chaos.faults.process.faults import _ProbeFault
from chaos.model.types import MAX_SECONDS

__all__ = ["ThermalThrottle"]


class ThermalThrottleParams(FaultParams):
    factor: float = Field(2.0, gt=1.0, le=100.0)
    """Step time multiplier at the peak of the throttle."""
    ramp_s: float = Field(20.0, ge=0, le=MAX_SECONDS)
    """Seconds from the fault's step for the factor to climb linearly from 1 to factor."""
    hold_s: float | None = Field(None, ge=0, le=MAX_SECONDS)
    """Seconds the factor is held at its peak; null: until the end of the run."""
    recover_s: float = Field(0.0, ge=0, le=MAX_SECONDS)
    """Seconds for the factor to fall back linearly to 1 after the hold (0: at once)."""


@register
@dataclass
class ThermalThrottle(_ProbeFault):
    type_name: ClassVar[str] = "thermal_throttle"
    family: ClassVar[str] = "process"
    failure_class: ClassVar[FailureClass] = "slow"
    summary: ClassVar[str] = ("From step N a rank slows down by a factor that ramps from 1 to F over "
                              "ramp_s, holds, then recovers.")
    mechanism: ClassVar[str] = ("in-process, by the probe from the exact step: each step of the rank is "
                                "stretched by (factor - 1) x its pre-fault step time, factor following the ramp")
    fidelity: ClassVar[str] = (
        "Stands for thermal or power throttling of one device (clocks lowered as it heats, "
        "held, raised as it cools): a straggler that appears gradually. Exercises slow-rank "
        "detection against peers and shows what a synchronous job loses to one slow rank. "
        "The delay is added on the host after each step, not inside kernels, and the ramp "
        "follows wall time, not a thermal model.")
    params_model: ClassVar[type[FaultParams]] = ThermalThrottleParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    probe_action: ClassVar[str] = "slowdown"
