"""The fault interface and the registry keyed by type name.

Every fault shares one envelope (id, type, target, trigger, probability, params); trigger
timing and probability are handled once by the runner, not by each fault (as in Toxiproxy).
A fault type declares its parameters so that scenarios are validated before anything starts,
and its *fidelity*: the real failure it stands for, the layer it exercises, what it does not
prove.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from chaos.runtime import InjectionContext

__all__ = [
    "FAILURE_CLASSES",
    "REQUIRED",
    "FaultType",
    "ParamSpec",
    "ResolvedTarget",
    "UnknownFaultType",
    "known_types",
    "lookup",
    "register",
]

FailureClass = Literal["crash", "hang", "device", "network", "storage", "corruption", "slow"]
FAILURE_CLASSES: tuple[str, ...] = ("crash", "hang", "device", "network", "storage", "corruption", "slow")
TargetKind = Literal["rank", "node"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class ParamSpec:
    """One type-specific parameter: its type, default (or REQUIRED), allowed range/choices."""

    name: str
    type: type | tuple[type, ...]
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def type_name(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        return " or ".join("null" if t is type(None) else t.__name__ for t in types)


@dataclass(frozen=True)
class ResolvedTarget:
    """Concrete ranks and nodes a fault hits, resolved from the scenario's target at plan time."""

    ranks: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()

    def srcs(self) -> list[str]:
        """Event sources blamed by a correct attribution (``rank-3``, ``node-1``)."""
        return [f"rank-{r}" for r in self.ranks] + [f"node-{n}" for n in self.nodes]

    def describe(self) -> str:
        parts = []
        if self.ranks:
            parts.append("rank " + ",".join(map(str, self.ranks)))
        if self.nodes:
            parts.append("node " + ",".join(map(str, self.nodes)))
        return " ".join(parts) or "job"


@dataclass
class FaultType(ABC):
    """A fault of one type, planned against a resolved target.

    Subclasses set the class attributes and implement ``inject``/``revert`` (external faults)
    or ``probe_actions`` (in-process faults, fired by the probe at an exact step).
    ``revert`` must be idempotent and safe to call when ``inject`` failed half-way: it runs
    in a ``finally``, on SIGINT/SIGTERM, and from ``trainchaos cleanup`` with only the
    journal record to go on (``revert_record``).
    """

    type_name: ClassVar[str]
    family: ClassVar[str]
    failure_class: ClassVar[FailureClass]
    fidelity: ClassVar[str]
    summary: ClassVar[str]
    params_spec: ClassVar[tuple[ParamSpec, ...]] = ()
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    # in-process faults are delivered by the probe and fire exactly at the step (at_step only)
    in_process: ClassVar[bool] = False

    fault_id: str
    target: ResolvedTarget
    params: dict[str, Any] = field(default_factory=dict)

    def probe_actions(self) -> list[dict[str, Any]]:
        """In-process faults: the probe's instructions ({action, point, params}); else none."""
        return []

    @abstractmethod
    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        """Put the fault in effect; returns details for the fault journal (pids, rules...).

        The fault counts as injected when ``inject`` was called (a signal acts at once);
        one that takes effect only later returns that moment as ``t_effective``.
        """

    @abstractmethod
    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """Undo the fault (idempotent). ``record`` is what ``inject`` returned."""

    @classmethod  # noqa: B027 (not abstract: most faults have nothing to undo)
    def revert_record(cls, record: dict[str, Any]) -> None:
        """Undo from a journal record alone (``trainchaos cleanup`` after a crashed controller)."""

    @classmethod
    def describe_params(cls) -> list[str]:
        lines = []
        for p in cls.params_spec:
            default = "required" if p.required else f"default {p.default!r}"
            extra = f", one of {list(p.choices)}" if p.choices else ""
            lines.append(f"{p.name} ({p.type_name()}, {default}{extra}): {p.doc}")
        return lines


class UnknownFaultType(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


_REGISTRY: dict[str, type[FaultType]] = {}


def register(cls: type[FaultType]) -> type[FaultType]:
    """Class decorator: make a fault type known by its ``type_name``."""
    if cls.type_name in _REGISTRY and _REGISTRY[cls.type_name] is not cls:
        raise ValueError(f"fault type {cls.type_name!r} registered twice")
    _REGISTRY[cls.type_name] = cls
    return cls


def _load_builtin() -> None:
    # Importing the package registers every built-in fault family.
    import chaos.faults  # noqa: F401


def lookup(name: str) -> type[FaultType]:
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownFaultType(name) from None


def known_types() -> dict[str, type[FaultType]]:
    _load_builtin()
    return dict(sorted(_REGISTRY.items()))
