"""``workload: {command: ...}``: a user's own training script, run per rank by torchrun.

What trainchaos knows of it is what the scenario says: the command line, the step it trains
to (``steps``), how its log lines show progress (``progress_regex``), and where and how often
it checkpoints (``checkpoint_dir``, default the run's ``checkpoints``; ``checkpoint_every_steps``).
The job learns that directory through ``{ckpt_dir}`` in its command line and
``TRAINCHAOS_CKPT_DIR``; storage faults and the crash-point sweep act on it. The job runs in
the run directory; a relative script path is taken from the directory trainchaos runs in. Its tensors stay
inside it; it reports through ``chaos.probe`` where it calls it, and its end is told by its
exit code.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from chaos import contract
from chaos.metrics.records import DetectionSources
from chaos.workload import register_workload
from chaos.workload.base import Launch, Location, StorageLayout, Workload, WorkloadSection
from chaos.workload.logprogress import LogProgress
from chaos.workload.torchrun import SCRIPT_PREIMPORTS, TorchrunPerNode, warm_start_from_env

__all__ = ["MAX_COMMAND_STEPS", "PLACEHOLDERS", "PROBE_DETECTION_CALL", "CommandWorkload", "check_checkpoint_dir",
           "check_progress_regex", "fill_placeholders", "python_args", "script_from_here", "warm_program"]

MAX_COMMAND_STEPS = 10_000_000
"""More steps than any run of this tool could train in its timeout; a bound keeps a typo
from turning into a number the progress display and metrics would carry around."""


PROBE_DETECTION_CALL = ('report what the script notices through the probe: `chaos.probe.emit("detected", '
                        'by=chaos.probe.src(), suspect="rank-N", failure_class=..., reason=...)` '
                        '(docs/metrics.md, "Unknown")')
"""The fix for a command whose detections trainchaos cannot see (``DetectionSources.fix``)."""


def check_progress_regex(value: str) -> str:
    """``value`` if it compiles and has a named group ``step``; ValueError saying what is wrong."""
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    if "step" not in compiled.groupindex:
        raise ValueError("needs a named group 'step', e.g. 'step (?P<step>\\d+)' "
                         "(optionally also 'loss': '(?P<loss>[\\d.]+)')")
    return value


PLACEHOLDERS = ("{run_dir}", "{seed}", "{steps}", "{ckpt_dir}")
"""What a command line (or a stack script's ``args``) may name; each is replaced by the run's
value at launch."""


def check_checkpoint_dir(value: str) -> str:
    """``value`` if it is a directory inside the run directory (relative to it); ValueError
    saying why else."""
    parts = value.replace("\\", "/").split("/")
    if not value.strip() or os.path.isabs(value) or ".." in parts:
        raise ValueError(
            f"{value!r} is not inside the run directory: give a path relative to it (e.g. "
            "checkpoints or ckpt/shared) and let the job write there through {ckpt_dir} or "
            f"${contract.CKPT_DIR_ENV}. Each run (the twin, each repeat, each power loss of a "
            "crash-point sweep) then has its own, which the storage fault layer mounts over and "
            "a restart resumes from")
    return value


def fill_placeholders(arg: str, values: dict[str, str]) -> str:
    """``arg`` with each of ``PLACEHOLDERS`` in ``values`` replaced."""
    for name, value in values.items():
        arg = arg.replace(name, value)
    return arg


def python_args(argv: list[str]) -> list[str]:
    """``argv`` without its interpreter: torchrun runs the script with its own."""
    if argv and os.path.basename(argv[0]).startswith("python"):
        return argv[1:]
    return argv


def warm_program(argv: list[str]) -> tuple[str, ...] | None:
    """What a warm rank's client asks its zygote for (``harness.zygote``'s ``script <path>
    <args>`` or ``run <module> <args>``), for the arguments torchrun would run cold; None
    where they are not a Python script or module (interpreter options first, another
    program): that command starts cold."""
    if argv[:1] == ["-u"]:  # unbuffered: the launch's PYTHONUNBUFFERED does it for a forked rank
        argv = argv[1:]
    if len(argv) >= 2 and argv[0] == "-m":
        return ("run", *argv[1:])
    if argv and argv[0].endswith(".py"):
        return ("script", *argv)
    return None


def script_from_here(argv: list[str]) -> list[str]:
    """``argv`` with its script made absolute where it is a relative path to a file in the
    directory trainchaos runs in.

    torchrun starts the workers in the run's own directory, where ``python train.py`` (as a
    user writes it, in the directory holding train.py) names nothing: every rank would exit
    with "can't open file". A path that names no file here (one the job creates, a module
    after ``-m``) is left as written."""
    script = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if script is None or (script > 0 and argv[script - 1] == "-m"):
        return argv
    path = argv[script]
    if os.path.isabs(path) or not os.path.isfile(path):
        return argv
    return [*argv[:script], os.path.abspath(path), *argv[script + 1:]]


@register_workload
class CommandWorkload(Workload):
    kind: ClassVar[str] = "command"
    summary: ClassVar[str] = ("your own training command, started per node by torchrun; progress "
                              "through chaos.probe or log lines (progress_regex)")
    kind_hint: ClassVar[str] = "your own training command"

    @classmethod
    def section_fields(cls) -> dict[str, Any]:
        """``command`` and, beside it, ``progress_regex`` and ``steps`` (the form scenarios
        have always written: ``workload: {command: ..., steps: N}``)."""
        return {
            "command": (str, Field(None, min_length=1, description=(
                "Your own training command, started on each node by torchrun; it reports "
                "progress through chaos.probe or, with progress_regex, through its log lines. "
                "{run_dir}, {seed}, {steps} and {ckpt_dir} in it are replaced by the run's "
                "directory, seed, steps and checkpoint directory (checkpoint_dir)."))),
            "progress_regex": (Annotated[str, AfterValidator(check_progress_regex)], Field(None, description=(
                "Only with command: a regular expression applied to its log lines, with a named "
                "group `step` (required) and `loss` (optional)."))),
            "steps": (int, Field(None, ge=1, le=MAX_COMMAND_STEPS, description=(
                "Only with command: the step the command trains to. The run is complete when it "
                "is reached; progress shows it, and at_step triggers are checked against it."))),
            "checkpoint_dir": (Annotated[str, AfterValidator(check_checkpoint_dir)], Field(None, description=(
                "Only with command: where it saves checkpoints, relative to the run directory "
                "(null: `checkpoints`). The command learns it as {ckpt_dir} in its command line "
                "and in $" + contract.CKPT_DIR_ENV + "; storage faults (tier: shared) and "
                "`trainchaos run --crash-points` act on it."))),
            "checkpoint_every_steps": (int, Field(None, ge=1, le=MAX_COMMAND_STEPS, description=(
                "Only with command: how often it saves, in steps; `run --crash-points` then "
                "sweeps its second save by default (else give --crash-save-step)."))),
            "warm_start": (bool, Field(None, description=(
                "Only with command, one that runs a Python script or module (`python train.py ...`, "
                "`python -m pkg ...`): start its ranks from a per-node zygote that has imported torch "
                "once (null: $" + contract.WARM_START_ENV + ", else false); a launch or restart then "
                "pays no imports, so its measured time leaves them out (the run record says "
                "rank_launch: warm)."))),
        }

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        from chaos.model import scenario as records

        assert doc is not None and "command" in doc.model_fields_set
        problems: list[tuple[Location, str]] = []
        try:
            argv = shlex.split(doc.command)
        except ValueError as exc:  # an unclosed quote: torchrun could never be started
            problems.append((("workload", "command"), f"cannot be split into arguments: {exc} "
                             "(it is split like a POSIX shell line, but no shell runs it)"))
        else:
            if not argv:
                problems.append((("workload", "command"), "holds no program to run"))
            elif doc.warm_start and warm_program(python_args(argv)) is None:
                problems.append((("workload", "warm_start"), "a warm start forks Python ranks: the command "
                                 "must be `python <script.py> ...` or `python -m <module> ...`"))
        if doc.warm_start is None:
            try:
                warm_start_from_env()
            except ValueError as exc:
                problems.append((("workload", "warm_start"), f"not set, and {exc}"))
        # Kept with its problems: the steps it states still bound the scenario's triggers.
        return cls(records.Workload(command=doc.command, progress_regex=doc.progress_regex,
                                    steps=doc.steps, checkpoint_dir=doc.checkpoint_dir,
                                    checkpoint_every_steps=doc.checkpoint_every_steps,
                                    warm_start=doc.warm_start)), problems

    @property
    def steps(self) -> int | None:
        return self.spec.steps

    def steps_text(self) -> str:
        return f"the command trains {self.spec.steps} steps (workload.steps)"

    def storage(self) -> StorageLayout | None:
        """The declared checkpoint directory (the run's ``checkpoints`` by default); no
        node-local tier and no data tier: a command declares neither."""
        return StorageLayout(shared_checkpoints=self.spec.checkpoint_dir or contract.SHARED_CHECKPOINTS_SUBDIR,
                             every_steps=self.spec.checkpoint_every_steps,
                             every_steps_key="workload.checkpoint_every_steps")

    def run_values(self, run_dir: str, seed: int) -> dict[str, str]:
        """What each of ``PLACEHOLDERS`` stands for in a run."""
        layout = self.storage()
        return {"{run_dir}": run_dir, "{seed}": str(seed), "{steps}": str(self.steps or ""),
                "{ckpt_dir}": layout.shared_checkpoint_dir(run_dir) if layout is not None else ""}

    def ckpt_env(self, run_dir: str) -> dict[str, str]:
        """``TRAINCHAOS_CKPT_DIR`` for the job, where it has a checkpoint directory."""
        layout = self.storage()
        return {contract.CKPT_DIR_ENV: layout.shared_checkpoint_dir(run_dir)} if layout is not None else {}

    def launch(self, run_dir: str, seed: int) -> Launch:
        values = self.run_values(run_dir, seed)
        argv = script_from_here(python_args([fill_placeholders(arg, values)
                                             for arg in shlex.split(self.spec.command or "")]))
        tee = self.spec.progress_regex is not None
        warm = warm_program(argv) if self.warm_start else None
        env = self.ckpt_env(run_dir)
        if warm is not None:  # harness/zygote.py: the node's zygote forks each rank
            launcher = TorchrunPerNode(("-m", "harness.zygote", *warm), tee_output=tee,
                                       zygote_argv=("-m", "harness.zygote", "serve"),
                                       zygote_modules=SCRIPT_PREIMPORTS)
            if argv[:1] == ["-u"]:
                env["PYTHONUNBUFFERED"] = "1"
        else:
            launcher = TorchrunPerNode(tuple(argv), tee_output=tee)
        return Launch(launcher, steps_target=self.spec.steps or 0, env=env)

    @property
    def warm_start(self) -> bool:
        """The scenario's ``warm_start`` (``warm_start_option``), else TRAINCHAOS_WARM_START's
        (checked by ``validate``), else cold; a command that is not a Python script or module
        then starts cold."""
        option = self.warm_start_option
        return option if option is not None else bool(warm_start_from_env())

    @property
    def warm_start_option(self) -> bool | None:
        """What the scenario says of warm starts: ``workload.warm_start`` beside ``command``."""
        return self.spec.warm_start

    def progress(self, events_dir: str) -> LogProgress:
        """Step lines by ``progress_regex`` (when given), and every worker exit the agents
        report: a script's non-zero exit is its only failure report."""
        return LogProgress(self.spec.progress_regex, events_dir, report_exit_codes=True)

    def finished(self, reported_end: bool) -> bool:
        """A command ends by its exit code: 0 everywhere is done, probe or not."""
        return True

    def detection_sources(self) -> DetectionSources:
        """The torchrun agents see a worker die; what the script notices without a process
        ending is seen only when it reports through the probe."""
        return DetectionSources(in_job="probe", agent=self.progress_agent(), node_loss_seen=self.node_loss_seen,
                                fix=self.detection_fix(), progress_from_logs=self.progress_regex is not None,
                                progress_fix=self.progress_fix())

    @property
    def progress_regex(self) -> str | None:
        """The regular expression its step lines are read by; None: the probe only."""
        return self.spec.progress_regex

    def progress_fix(self) -> str:
        """What gives a run of it with no step source one."""
        return ("give workload.progress_regex for its step lines, or call "
                "`chaos.probe.step_end(step, loss)` after each optimizer step")
    node_loss_seen: ClassVar[bool] = True
    """Whether a lost node shows in the other nodes' agents (``DetectionSources.node_loss_seen``)."""

    def progress_agent(self) -> bool:
        """Whether the agents' reports of a dead worker count as detections (``LogProgress``)."""
        return True

    def detection_fix(self) -> str:
        """What gives a run of it with no detection source one."""
        return PROBE_DETECTION_CALL
