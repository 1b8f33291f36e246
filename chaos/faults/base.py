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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from chaos.model.types import StrictModel
from chaos.util.registry import Registry

if TYPE_CHECKING:
    # Not at run time: chaos.cluster.base imports chaos.model.scenario, whose targets load the plugin
    # registries, and a plugin imports this module back (it must find FaultType defined).
    from chaos.cluster.base import InjectionContext
    from chaos.model.scenario import FaultSpec, Scenario
    from chaos.model.targets import ResolvedTarget
    from chaos.workload import Workload

__all__ = [
    "FAULT_TYPES",
    "FailureClass",
    "FaultParams",
    "FaultType",
    "NoParams",
    "ParamNeed",
    "ParamsContext",
    "TargetKind",
    "UnknownFaultType",
    "example_of",
    "known_types",
    "lookup",
    "param_gaps",
    "register",
    "types_standing_for",
]

FailureClass = Literal["crash", "hang", "device", "network", "storage", "corruption", "slow", "stalled", "oom"]
TargetKind = Literal["rank", "node", "link", "job"]


class FaultParams(StrictModel):
    """Base of a fault type's parameter model (``FaultType.params_model``): one field per
    parameter, its docstring the documentation, bounds as ``Field(ge=..., le=...)``, choices
    as ``Literal``. A field without a default is required. Unknown keys and wrong types are
    errors (``true`` is not a number, ``"3"`` not an int); scenarios are validated with it,
    and the JSON Schema, docs/scenario.md and ``trainchaos faults`` are generated from it."""


class NoParams(FaultParams):
    """Takes no parameters."""


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
    params_model: ClassVar[type[FaultParams]] = NoParams
    """The type's parameters; the fault receives them as ``params``, a plain dict with the
    defaults filled in (``params_model(...).model_dump()``)."""
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    target_keys: ClassVar[tuple[str, ...] | None] = None
    """The only target forms the type takes (``("power_domain",)``: ``{power_domain: NAME}``
    or ``{random: power_domain}``); None: every form of its ``target_kinds``."""
    also_detected_as: ClassVar[tuple[FailureClass, ...]] = ()
    """Other classes a correct detection may name besides ``failure_class``: what the fault
    looks like from the survivors when they cannot know more (a node without power on a
    fabric is silent: unreachable, a ``network`` failure to its peers)."""
    cuts_nodes: ClassVar[bool] = False
    """Takes whole nodes out for good (or for ``duration_s``): validation checks that enough
    nodes are left for the job (``min_nodes``, spares) unless it is expected to stop."""
    # in-process faults are delivered by the probe and fire exactly at the step (at_step only)
    in_process: ClassVar[bool] = False
    mechanism: ClassVar[str] = ""
    """How the fault is put in effect, in a few words (``trainchaos faults``); empty: "the
    probe, in-process" or "the injector", from ``in_process``."""
    requires: ClassVar[tuple[type, ...]] = ()
    """The backend capabilities the fault acts through (``chaos.cluster.capabilities``:
    ``(Fabric,)`` for nftables inside node namespaces, ``(Scheduler,)`` for scontrol).
    Validation refuses a backend that does not declare every one; ``inject`` gets them with
    ``ctx.require(...)``."""
    stands_for: ClassVar[tuple[str, ...]] = ()
    """Interruption classes of ``trainchaos simulate`` (by name: the Llama 3 table's,
    ``chaos.scale.llama3``) whose recovery this type's runs measure: ``--from-runs`` pools
    its samples into each class's figures (``types_standing_for``)."""
    also_stands_for: ClassVar[tuple[str, ...]] = ()
    """Classes where the type is a second way the same failure shows (it is listed after the
    types of ``stands_for``)."""
    example_of_class: ClassVar[bool] = False
    """The type messages name as the example of its failure class (one type per class)."""

    fault_id: str
    target: ResolvedTarget
    """Planned from the topology; replaced by the runner with the live resolution (which
    processes hold the ranks, which ranks live on the nodes) right before ``inject``."""
    params: dict[str, Any] = field(default_factory=dict)
    target_spec: dict[str, Any] = field(default_factory=dict)
    """The target as planned (``{rank: 3}``, ``{rack: r1}``; random picks already drawn)."""
    seed: int = 0
    """Drawn from the plan's seed for this fault: what a fault picks at random (an element,
    a byte offset) it picks from this, so a repeat of the plan picks the same."""

    @classmethod
    def describe_mechanism(cls) -> str:
        if cls.mechanism:
            return cls.mechanism
        return "in-process, by the probe at the exact step" if cls.in_process else "by the injector"

    @classmethod
    def supported_backends(cls) -> tuple[str, ...]:
        """The registered backends the type runs on: those with every capability it requires."""
        from chaos.cluster import known_backends
        from chaos.cluster.capabilities import providers

        return tuple(providers(cls.requires, known_backends()))

    @classmethod
    def describe_targets(cls) -> str:
        """What the type takes as a target, in a few words: ``rank``, ``node``, ``rack``."""
        return ", ".join(cls.target_keys or cls.target_kinds)

    @classmethod
    def check_params(cls, params: Any, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        """Checks of the params that need more than one field or the workload (a tensor
        name against the harness's model); ``(location under params, message)`` each.
        Run by ``trainchaos validate`` after ``params_model`` accepted them: ``params`` is an
        instance of the type's own ``params_model``, as an override declares it (``Any`` here:
        no annotation says "this class's params_model")."""
        return []

    @classmethod
    def param_requires(cls, params: Any) -> list[ParamNeed]:
        """Capabilities that some values of the params need beyond ``requires`` (a power
        outage whose power returns needs a backend that can start a node again), each with
        its location under params and what to do instead. ``params``: an instance of the
        type's ``params_model``."""
        return []

    @classmethod
    def preflight(cls, fault: FaultSpec, scenario: Scenario) -> list[str]:
        """What keeps ``fault`` from running with the scenario's backend as it is configured
        (its options), said before anything starts (``chaos.runner.suite.preflight``, beside the
        backend's own); empty: nothing."""
        return []

    @classmethod
    def device_needed(cls, params: dict[str, Any]) -> str | None:
        """Why a fault with ``params`` needs its target rank on a CUDA device (validation
        refuses it on a workload that trains elsewhere), in a few words; None: it does not."""
        return None

    @classmethod
    def param_hint(cls, word: str) -> str | None:
        """What to tell a user who wrote the unknown parameter ``word`` when a plain
        did-you-mean would mislead (a word the type uses in another sense); None: nothing."""
        return None

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
        """One line per parameter, derived from ``params_model``:
        ``signal (string, default 'SIGKILL', one of [...]): doc``."""
        from chaos.model.types import literal_values, type_text, unwrap

        lines = []
        for name, info in cls.params_model.model_fields.items():
            default = "required" if info.is_required() else f"default {_yaml(info.get_default(call_default_factory=True))}"
            choices = literal_values(unwrap(info.annotation)[0])
            extra = f", one of {list(choices)}" if choices else ""
            doc = " ".join((info.description or "").split())
            lines.append(f"{name} ({type_text(info.annotation, list(info.metadata))}, "
                         f"{default}{extra}): {doc}")
        return lines


class ParamNeed(NamedTuple):
    """What ``FaultType.param_requires`` names: params that need more of the backend."""

    where: tuple[str | int, ...]
    """The param's location under ``params``."""
    capabilities: tuple[type, ...]
    instead: str
    """What to do on a backend without them."""


def param_gaps(fault_type: type[FaultType], params: Any, backend: type) -> list[tuple[tuple[str | int, ...], str]]:
    """``(location under params, message)`` for each of the params' needs that ``backend``
    (a class) does not declare: the same words for validation and a game day's attach."""
    from chaos.cluster import known_backends
    from chaos.cluster.capabilities import describe, has, providers

    out = []
    for need in fault_type.param_requires(params):
        lacks = [c for c in need.capabilities if not has(backend, c)]
        if lacks:
            fits = providers(need.capabilities, known_backends())
            out.append((need.where, f"{fault_type.type_name} with {'.'.join(map(str, need.where))} needs "
                                    f"{' and '.join(describe(c) for c in lacks)}, which the {getattr(backend, 'name', backend.__name__)} "
                                    f"backend has not; {need.instead} ({' or '.join(fits) or 'none'})"))
    return out


@dataclass(frozen=True)
class ParamsContext:
    """What ``FaultType.check_params`` may consult besides the params."""

    workload: Workload | None = None
    """The scenario's ``chaos.workload.Workload`` (its tensors, its storage layout); None
    when its section is invalid."""
    world_size: int | None = None
    total_nodes: int | None = None
    """Nodes of the topology, spares included (node lists in params are checked against it)."""


def _yaml(value: Any) -> str:
    """A default as a scenario author writes it: null, true, 'SIGKILL', 2.0."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


class UnknownFaultType(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


FAULT_TYPES: Registry[type[FaultType]] = Registry(
    "fault type", key=lambda cls: cls.type_name, group="trainchaos.faults", unknown=UnknownFaultType,
    builtins=("chaos.faults.family:load_fault_types",))
"""Every fault type by name: the registered fault families' (``chaos.faults.family``), then
the modules of ``TRAINCHAOS_PLUGINS`` and the ``trainchaos.faults`` entry point group (a
team's own types register on import)."""

register = FAULT_TYPES.register
"""Class decorator: make a fault type known by its ``type_name``."""


def lookup(name: str) -> type[FaultType]:
    return FAULT_TYPES.lookup(name)


def known_types() -> dict[str, type[FaultType]]:
    return FAULT_TYPES.known()


def types_standing_for(interruption: str) -> tuple[str, ...]:
    """The fault types whose runs measure the interruption class ``interruption``
    (``FaultType.stands_for``, then ``also_stands_for``; each group in name order)."""
    types = known_types()
    return (tuple(sorted(n for n, cls in types.items() if interruption in cls.stands_for))
            + tuple(sorted(n for n, cls in types.items() if interruption in cls.also_stands_for)))


def example_of(failure_class: str) -> str | None:
    """The fault type messages name as the example of ``failure_class`` (``example_of_class``)."""
    return next((n for n, cls in known_types().items()
                 if cls.example_of_class and cls.failure_class == failure_class), None)
