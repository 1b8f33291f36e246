"""``workload: {torchft: {...}}``: a torchft job, launched torchft's way.

torchft's recovery model is not a restart of the job: each replica group (a topology node
here) trains a full replica; a lighthouse forms a quorum of the live groups every step; a
group that dies is dropped and the others train on without restarting; a group that comes
back heals from a live peer's state and joins the next quorum. So the run has:

- a lighthouse, a run-scoped resource (``lighthouse.py``) the runner starts before the job
  and always stops;
- one torchrun per replica group (``launcher.py``), each with a rendezvous store of its own
  (its agent's, shared with its workers: torchft's Manager needs it) and restarts of its own, on the node of the group's number: node faults and every backend act
  on replica groups unchanged, and ``{replica_group: G}`` targets name them;
- per group: ``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``, ``TORCHFT_LIGHTHOUSE`` and the
  offset that makes the group's ranks global ranks for trainchaos.

Progress, quorums, heals and the final digest come from ``chaos.adapters.torchft`` (one line
in the script; the bundled example, ``examples/torchft/train.py``, has it behind ``--chaos``,
which trainchaos passes); a script without it is read by ``progress_regex`` like a command.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from chaos import contract
from chaos.model.types import describe_value
from chaos.runfiles.rundir import RunDir
from chaos.workload import register_workload
from chaos.workload.base import Launch, Location, StorageLayout, Workload, WorkloadSection
from chaos.workload.command import fill_placeholders
from chaos.workload.script import ScriptOptions, ScriptWorkload
from chaos.workload.torchft.launcher import TorchrunPerGroup
from chaos.workload.torchft.lighthouse import free_port, lighthouse_resource

if TYPE_CHECKING:
    from chaos.model import scenario as records

__all__ = ["EXAMPLE", "LighthouseOptions", "TorchftOptions", "TorchftWorkload"]


@dataclass(frozen=True)
class LighthouseOptions:
    min_replicas: int = 1
    heartbeat_timeout_ms: int = 5000
    join_timeout_ms: int = 10000
    quorum_tick_ms: int = 100


@dataclass(frozen=True)
class TorchftOptions(ScriptOptions):
    pg_timeout_s: float = 5.0
    timeout_s: float = 10.0
    step_sleep_s: float = 0.0
    lighthouse: LighthouseOptions = field(default_factory=LighthouseOptions)


_OWN = ("pg_timeout_s", "timeout_s", "step_sleep_s", "lighthouse")
"""The options torchft adds to the shared ones (``ScriptOptions``)."""

_DOCS: dict[type, dict[str, str]] = {
    TorchftOptions: {
        "script": "The training script torchrun runs on each rank of each replica group; null: "
                  "the bundled example (examples/torchft/train.py), which trainchaos gives "
                  "--steps, --seed, --pg-timeout, --timeout, --step-sleep and --chaos. A relative "
                  "path is taken from the directory trainchaos runs in.",
        "args": "Arguments after the script (after the bundled example's own); {run_dir}, {seed}, "
                "{steps}, {ckpt_dir}, {pg_timeout_s} and {timeout_s} are replaced by the run's values.",
        "checkpoint_dir": "Where your script saves checkpoints, relative to the run directory (null: "
                          "`checkpoints`; the bundled example keeps none, so storage faults need "
                          "a script that does): given to it as {ckpt_dir} in args and in "
                          "$" + contract.CKPT_DIR_ENV + "; storage faults (tier: shared) and "
                          "`trainchaos run --crash-points` act on it.",
        "pg_timeout_s": "The bundled example's ProcessGroupGloo timeout: how long a collective "
                        "waits for a dead group before the step is abandoned (the survivors' "
                        "stall is bounded below by it).",
        "timeout_s": "The bundled example's Manager timeout (should_commit, the checkpoint "
                     "transfer that heals a group).",
        "step_sleep_s": "The bundled example's simulated compute per step (seconds).",
        "lighthouse": "The lighthouse's options.",
    },
    LighthouseOptions: {
        "min_replicas": "Replica groups a quorum needs (torchft_lighthouse --min_replicas).",
        "heartbeat_timeout_ms": "Silence after which the lighthouse holds a group dead "
                                "(--heartbeat_timeout_ms); a quorum waits up to this long "
                                "for a group that died without leaving.",
        "join_timeout_ms": "How long a quorum waits for heartbeating stragglers (--join_timeout_ms).",
        "quorum_tick_ms": "How often the lighthouse re-checks a pending quorum (--quorum_tick_ms).",
    },
}

_BOUNDS: dict[str, tuple[float, float]] = {
    "pg_timeout_s": (0.01, 3600), "timeout_s": (0.1, 3600), "step_sleep_s": (0, 60),
    "min_replicas": (1, 10_000), "heartbeat_timeout_ms": (10, 3_600_000),
    "join_timeout_ms": (0, 3_600_000), "quorum_tick_ms": (1, 60_000),
}


def _lighthouse_program() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")
    return beside if os.access(beside, os.X_OK) else shutil.which("torchft_lighthouse")


def _numbers(cls: type, raw: dict[str, Any], where: Location) -> tuple[dict[str, Any], list[tuple[Location, str]]]:
    """The numeric options of ``cls`` given in ``raw`` (unknown keys are the caller's)."""
    problems: list[tuple[Location, str]] = []
    values: dict[str, Any] = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in raw.items():
        if key not in fields:
            continue
        if key == "lighthouse":
            if value is None:
                continue
            if not isinstance(value, dict):
                problems.append(((*where, key), f"expected a mapping of lighthouse options "
                                 f"({', '.join(_DOCS[LighthouseOptions])}), got {describe_value(value)}"))
                continue
            unknown = [k for k in value if k not in _DOCS[LighthouseOptions]]
            problems += [((*where, key, k), f"unknown lighthouse option {k!r}; allowed: "
                          f"{', '.join(_DOCS[LighthouseOptions])}") for k in unknown]
            nested, more = _numbers(LighthouseOptions, value, (*where, key))
            problems += more
            values[key] = LighthouseOptions(**nested)
            continue
        integral = fields[key].type in ("int", int)
        low, high = _BOUNDS[key]
        ok = isinstance(value, int) if integral else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or not low <= value <= high:
            problems.append(((*where, key), f"expected {'an integer' if integral else 'a number'} "
                             f"from {_num(low)} to {_num(high)}, got {describe_value(value)}"))
            continue
        values[key] = value
    return values, problems


@register_workload
class TorchftWorkload(ScriptWorkload):
    kind: ClassVar[str] = "torchft"
    stack: ClassVar[str] = "torchft"
    adapter_line: ClassVar[str] = "manager = chaos.adapters.torchft.instrument(manager, model=model)"
    node_loss_seen: ClassVar[bool] = False  # the other groups train on: no worker of theirs exits
    extra: ClassVar[str] = "torchft"
    warm_capable: ClassVar[bool] = False  # one torchrun per replica group (TorchrunPerGroup): cold
    options_class: ClassVar[type[ScriptOptions]] = TorchftOptions
    summary: ClassVar[str] = ("a torchft job: a lighthouse and one torchrun per replica group (a "
                              "node); groups drop out and heal from a live peer, the others train on")
    options_intro: ClassVar[str] = (
        "Replica group i runs on node i (`topology.nodes` groups of `ranks_per_node` ranks); "
        "`{replica_group: G}` targets a group. The lighthouse is a run-scoped resource.")
    options_description: ClassVar[str] = "Options of the torchft workload ({section})."
    key_doc: ClassVar[str] = ("A torchft job: a lighthouse, and one torchrun per replica group (a "
                              "topology node); null or {} runs the bundled example (examples/torchft/train.py).")
    replica_groups: ClassVar[bool] = True
    resource_modules: ClassVar[tuple[str, ...]] = ("chaos.workload.torchft.lighthouse",)

    def __init__(self, spec: records.Workload) -> None:
        Workload.__init__(self, spec)
        options = dict(spec.options or {})
        lighthouse = LighthouseOptions(**(options.pop("lighthouse", None) or {}))
        self.options: TorchftOptions = TorchftOptions(**options, lighthouse=lighthouse)

    # -- validation and documentation ---------------------------------------------------------
    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        workload, problems = super().validate(doc, world_size)
        if _lighthouse_program() is None and importlib_ok():
            problems.append((("workload", cls.kind), "torchft_lighthouse is not installed beside this "
                             "Python; pip install 'trainchaos[torchft]'"))
        return workload, problems

    @classmethod
    def _options(cls, raw: Any) -> tuple[ScriptOptions | None, list[tuple[Location, str]]]:
        """The shared options as ``ScriptWorkload`` reads them, and torchft's own."""
        if not isinstance(raw, dict):
            return super()._options(raw)
        options, problems = super()._options({k: v for k, v in raw.items() if k not in _OWN})
        own, more = _numbers(TorchftOptions, {k: v for k, v in raw.items() if k in _OWN}, ())
        if options is None or more:
            return None, problems + more
        return dataclasses.replace(options, **own), problems

    @classmethod
    def option_docs(cls, section: type) -> dict[str, str]:
        shared = super().option_docs(section) if section is TorchftOptions else {}
        return {**shared, **_DOCS.get(section, {})}

    def storage(self) -> StorageLayout | None:
        """None for the bundled example, which keeps no checkpoint (a group heals from a live
        peer); a user's script, or one given ``checkpoint_dir``, keeps them where declared."""
        if self.bundled and self.options.checkpoint_dir is None:
            return None
        return super().storage()

    def storage_refusal(self, tier: str) -> str:
        if self.storage() is not None:
            return super().storage_refusal(tier)
        return ("the bundled torchft example keeps no checkpoint (a group heals from a live peer): "
                "give workload.torchft.script, a script that checkpoints, and its "
                "workload.torchft.checkpoint_dir")

    # -- the run ------------------------------------------------------------------------------
    def launch(self, run_dir: str, seed: int) -> Launch:
        opts = self.options
        values = {**self.run_values(run_dir, seed),
                  "{pg_timeout_s}": f"{opts.pg_timeout_s:g}", "{timeout_s}": f"{opts.timeout_s:g}"}
        args = [fill_placeholders(a, values) for a in opts.args or ()]
        given = (["--steps", str(self.steps), "--seed", str(seed), "--pg-timeout", f"{opts.pg_timeout_s:g}",
                  "--timeout", f"{opts.timeout_s:g}", "--step-sleep", f"{opts.step_sleep_s:g}", "--chaos"]
                 if self.bundled else [])
        script = os.path.abspath(opts.script or self.example())
        port = free_port()
        light = opts.lighthouse
        resource = lighthouse_resource(
            os.path.join(RunDir(run_dir).logs, "lighthouse.log"), port,
            min_replicas=light.min_replicas, heartbeat_timeout_ms=light.heartbeat_timeout_ms,
            join_timeout_ms=light.join_timeout_ms, quorum_tick_ms=light.quorum_tick_ms,
            program=_lighthouse_program() or "torchft_lighthouse")
        launcher = TorchrunPerGroup((script, *given, *args), tee_output=opts.progress_regex is not None,
                                    lighthouse_port=port)
        return Launch(launcher, steps_target=self.steps or 0, env={**self.env, **self.ckpt_env(run_dir)},
                      resources=(resource,))

    def progress_agent(self) -> bool:
        """Every worker exit the agents report counts only for a script read by
        ``progress_regex`` (one without the adapter line). With the line, the adapter reports
        torchft's own view: the quorum that drops a group is the detection, not the dead
        group's agent noticing its worker (the survivors learn of a death only from it)."""
        return self.options.progress_regex is not None


def importlib_ok() -> bool:
    """torchft itself imports (its absence is the shared validation's to report)."""
    import importlib.util

    return importlib.util.find_spec("torchft") is not None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


EXAMPLE = TorchftWorkload.example()
"""The bundled example: torchft's train_ddp shape, tiny, CPU, gloo, seeded."""
