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
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.logprogress import LogProgress
from chaos.rundir import RunDir
from chaos.schema.types import close_match, describe_value
from chaos.workload import register_workload
from chaos.workload.base import Launch, Location, Workload
from chaos.workload.torchft.launcher import TorchrunPerGroup
from chaos.workload.torchft.lighthouse import free_port, lighthouse_resource

if TYPE_CHECKING:
    from chaos import model as records
    from chaos.schema.models import WorkloadDoc

__all__ = ["EXAMPLE", "LighthouseOptions", "TorchftOptions", "TorchftWorkload"]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "torchft" / "train.py"
"""The bundled example: torchft's train_ddp shape, tiny, CPU, gloo, seeded."""
EXAMPLE_STEPS = 40


@dataclass(frozen=True)
class LighthouseOptions:
    min_replicas: int = 1
    heartbeat_timeout_ms: int = 5000
    join_timeout_ms: int = 10000
    quorum_tick_ms: int = 100


@dataclass(frozen=True)
class TorchftOptions:
    script: str | None = None
    steps: int | None = None
    args: list[str] = field(default_factory=list)
    pg_timeout_s: float = 5.0
    timeout_s: float = 10.0
    step_sleep_s: float = 0.0
    progress_regex: str | None = None
    lighthouse: LighthouseOptions = field(default_factory=LighthouseOptions)


_DOCS: dict[type, dict[str, str]] = {
    TorchftOptions: {
        "script": "The training script torchrun runs on each rank of each replica group; null: "
                  "the bundled example (examples/torchft/train.py), which trainchaos gives "
                  "--steps, --seed, --pg-timeout, --timeout, --step-sleep and --chaos.",
        "steps": "The committed step the job trains to; null: 40 for the bundled example, "
                 "unknown for your own script.",
        "args": "Arguments after the script (after the bundled example's own); {seed}, "
                "{steps}, {pg_timeout_s}, {timeout_s} and {run_dir} are filled in.",
        "pg_timeout_s": "The bundled example's ProcessGroupGloo timeout: how long a collective "
                        "waits for a dead group before the step is abandoned (the survivors' "
                        "stall is bounded by it).",
        "timeout_s": "The bundled example's Manager timeout (should_commit, the checkpoint "
                     "transfer that heals a group).",
        "step_sleep_s": "The bundled example's simulated compute per step (seconds).",
        "progress_regex": "For a script without the adapter line (chaos.adapters.torchft): a "
                          "regular expression on its log lines, with a named group `step`.",
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
    "steps": (1, 10_000_000), "pg_timeout_s": (0.01, 3600), "timeout_s": (0.1, 3600),
    "step_sleep_s": (0, 60), "min_replicas": (1, 10_000), "heartbeat_timeout_ms": (10, 3_600_000),
    "join_timeout_ms": (0, 3_600_000), "quorum_tick_ms": (1, 60_000),
}


def _lighthouse_program() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")
    return beside if os.access(beside, os.X_OK) else shutil.which("torchft_lighthouse")


def _read(cls: type, raw: Any, where: Location) -> tuple[Any, list[tuple[Location, str]]]:
    """``raw`` as the options dataclass ``cls``, with every problem located."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return None, [(where, f"expected a mapping of options, got {describe_value(raw)}")]
    problems: list[tuple[Location, str]] = []
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            problems.append(((*where, key), f"unknown option {key!r}{close_match(key, fields)} "
                             f"known: {', '.join(fields)}"))
            continue
        if key == "lighthouse":
            values[key], more = _read(LighthouseOptions, value, (*where, key))
            problems += more
            continue
        default = fields[key].default
        if value is None and (default is None or key in ("script", "progress_regex", "steps")):
            continue
        if key == "args":
            if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) for a in value):
                problems.append(((*where, key), f"expected a list of strings, got {describe_value(value)}"))
                continue
            values[key] = [str(a) for a in value]
        elif key in ("script", "progress_regex"):
            if not isinstance(value, str) or not value:
                problems.append(((*where, key), f"expected a non-empty string, got {describe_value(value)}"))
                continue
            values[key] = value
        else:
            integral = isinstance(default, int) and not isinstance(default, float) or key == "steps"
            ok = isinstance(value, int) if integral else isinstance(value, (int, float))
            low, high = _BOUNDS[key]
            if isinstance(value, bool) or not ok or not low <= value <= high:
                problems.append(((*where, key), f"expected {'an integer' if integral else 'a number'} "
                                 f"from {_num(low)} to {_num(high)}, got {describe_value(value)}"))
                continue
            values[key] = value
    return cls(**values), problems


@register_workload
class TorchftWorkload(Workload):
    kind: ClassVar[str] = "torchft"
    summary: ClassVar[str] = ("a torchft job: a lighthouse and one torchrun per replica group (a "
                              "node); groups drop out and heal from a live peer, the others train on")
    options_intro: ClassVar[str] = (
        "Replica group i runs on node i (`topology.nodes` groups of `ranks_per_node` ranks); "
        "`{replica_group: G}` targets a group. The lighthouse is a run-scoped resource.")
    options_description: ClassVar[str] = "Options of the torchft workload ({section})."

    def __init__(self, spec: records.Workload) -> None:
        super().__init__(spec)
        options = dict(spec.options or {})
        lighthouse = LighthouseOptions(**options.pop("lighthouse", {}) or {})
        self.options = TorchftOptions(**options, lighthouse=lighthouse)

    # -- validation and documentation ---------------------------------------------------------
    @classmethod
    def validate(cls, doc: WorkloadDoc | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        from chaos import model as records

        assert doc is not None and cls.kind in doc.model_fields_set
        where: Location = ("workload", cls.kind)
        problems: list[tuple[Location, str]] = [
            (("workload", key), f"only for 'command': the torchft workload's is workload.torchft.{key}")
            for key in ("steps", "progress_regex") if key in doc.model_fields_set]
        options, more = _read(TorchftOptions, doc.torchft, where)
        problems += more
        if importlib.util.find_spec("torchft") is None or _lighthouse_program() is None:
            problems.append((where, "torchft (and its torchft_lighthouse) is not installed in this "
                             "Python; pip install 'trainchaos[torchft]'"))
        if options is None:
            return None, problems
        if options.script is not None and not os.path.isfile(options.script):
            problems.append(((*where, "script"), f"no such file {options.script!r} (a relative path "
                             "is taken from the directory trainchaos runs in)"))
        elif options.script is None and not EXAMPLE.is_file():
            problems.append(((*where, "script"), "the bundled example is missing (a trainchaos "
                             "installed without its examples/ folder): give script"))
        record = dataclasses.asdict(options)
        return cls(records.Workload(kind=cls.kind, options=record)), problems

    @classmethod
    def options_type(cls) -> type:
        return TorchftOptions

    @classmethod
    def option_docs(cls, section: type) -> dict[str, str]:
        return _DOCS.get(section, {})

    # -- what the engine may know before the run ------------------------------------------
    @property
    def steps(self) -> int | None:
        if self.options.steps is not None:
            return self.options.steps
        return EXAMPLE_STEPS if self.options.script is None else None

    def steps_text(self) -> str:
        return f"the torchft job trains {self.steps} steps (workload.torchft.steps)"

    # -- the run ------------------------------------------------------------------------------
    def launch(self, run_dir: str, seed: int) -> Launch:
        opts = self.options
        fill = {"{seed}": str(seed), "{steps}": str(self.steps or ""), "{run_dir}": run_dir,
                "{pg_timeout_s}": f"{opts.pg_timeout_s:g}", "{timeout_s}": f"{opts.timeout_s:g}"}
        args = [_fill(a, fill) for a in opts.args]
        if opts.script is None:
            argv = [str(EXAMPLE), "--steps", str(self.steps), "--seed", str(seed),
                    "--pg-timeout", f"{opts.pg_timeout_s:g}", "--timeout", f"{opts.timeout_s:g}",
                    "--step-sleep", f"{opts.step_sleep_s:g}", "--chaos", *args]
        else:
            argv = [os.path.abspath(opts.script), *args]
        port = free_port()
        light = opts.lighthouse
        resource = lighthouse_resource(
            os.path.join(RunDir(run_dir).logs, "lighthouse.log"), port,
            min_replicas=light.min_replicas, heartbeat_timeout_ms=light.heartbeat_timeout_ms,
            join_timeout_ms=light.join_timeout_ms, quorum_tick_ms=light.quorum_tick_ms,
            program=_lighthouse_program() or "torchft_lighthouse")
        launcher = TorchrunPerGroup(tuple(argv), tee_output=opts.progress_regex is not None,
                                    lighthouse_port=port)
        return Launch(launcher, steps_target=self.steps or 0, resources=(resource,))

    def progress(self, events_dir: str) -> LogProgress:
        """Step lines by ``progress_regex`` when given, with every worker exit the agents
        report as a detection. Without it, the adapter reports torchft's own view: the quorum
        that drops a group is the detection, not the dead group's agent noticing its worker
        (the survivors learn of a death only from the quorum)."""
        regex = self.options.progress_regex
        return LogProgress(regex, events_dir, report_exit_codes=True, agent_detections=regex is not None)

    def finished(self, reported_end: bool) -> bool:
        """The groups end by their exit codes (a group dropped for good is a lost node)."""
        return True


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _fill(arg: str, fill: dict[str, str]) -> str:
    for key, value in fill.items():
        arg = arg.replace(key, value)
    return arg

