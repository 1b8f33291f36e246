"""A fault type whose ``inject`` raises: trainchaos failing, not the training stack.

Loaded through ``TRAINCHAOS_PLUGINS=broken_fault`` (the way a team adds its own fault types),
so that a real ``trainchaos run`` meets a tool failure in the middle of a real job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from chaos.faults.base import FaultType, register


@register
@dataclass
class BrokenFault(FaultType):
    type_name: ClassVar[str] = "broken_for_test"
    family: ClassVar[str] = "test"
    failure_class: ClassVar[str] = "crash"
    summary: ClassVar[str] = "Raises in inject (tests the tool-error path)."
    fidelity: ClassVar[str] = "None: it never reaches the job."
    target_kinds: ClassVar[tuple[str, ...]] = ("rank",)

    def inject(self, ctx: Any) -> dict[str, Any]:
        raise RuntimeError("injector exploded on purpose")

    def revert(self, ctx: Any, record: dict[str, Any]) -> None:
        """Nothing was applied."""
