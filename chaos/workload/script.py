"""The shared base of the kinds that are "a training stack's own script, run per rank by
torchrun": ``workload: {lightning: {...}}``, ``workload: {accelerate: {...}}``.

Such a kind is the ``command`` kind (``chaos.workload.command``) with what trainchaos knows
of the stack filled in: the script defaults to the stack's bundled example
(``examples/<stack>/train.py``), which takes ``--steps``, ``--seed`` and ``--ckpt-dir``
from the run and reports through the stack's adapter (``chaos/adapters/<stack>.py``); a
user's own script gets its ``args`` with ``{run_dir}``, ``{seed}``, ``{steps}`` and
``{ckpt_dir}`` filled in, and, where it has no adapter line, a ``progress_regex`` for its
log lines. Where it checkpoints is ``checkpoint_dir`` (the run's ``checkpoints`` by default,
also in ``TRAINCHAOS_CKPT_DIR``), and how often ``checkpoint_every_steps``: storage faults
and the crash-point sweep act there. The launch, the log reader and the end by exit code are
``command``'s.

A new kind of this shape is a subclass naming its ``kind``, its ``stack`` (the module that
must be importable) and its options dataclass (a subclass of ``ScriptOptions``: the schema's
definition is named after it), registered with ``@register_workload`` (and listed in
``chaos.workload._BUILTIN`` when it is built in); its key joins the scenario schema by itself
(``Workload.section_fields``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos import contract
from chaos.model.types import close_match, describe_value
from chaos.workload.base import Launch, Location, StorageLayout, Workload, WorkloadSection
from chaos.workload.command import (
    MAX_COMMAND_STEPS,
    PLACEHOLDERS,
    CommandWorkload,
    check_checkpoint_dir,
    check_progress_regex,
    fill_placeholders,
)
from chaos.workload.logprogress import LogProgress
from chaos.workload.torchrun import SCRIPT_PREIMPORTS, TorchrunPerNode, warm_start_from_env

if TYPE_CHECKING:
    from chaos.model import scenario as records

__all__ = ["EXAMPLES_DIR", "PLACEHOLDERS", "ScriptOptions", "ScriptWorkload"]

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
"""The bundled examples (``examples/<stack>/train.py``), beside the ``chaos`` package."""

@dataclass(frozen=True)
class ScriptOptions:
    """The options of a stack's script (``workload.<kind>``); each kind subclasses it."""

    script: str | None = None
    steps: int | None = None
    args: list[str] | None = None
    progress_regex: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every_steps: int | None = None
    warm_start: bool | None = None


_OPTION_DOCS = {
    "script": "The training script torchrun runs on each rank; null: the bundled example "
              "({example}), which trainchaos gives --steps, --seed and --ckpt-dir. A relative "
              "path is taken from the directory trainchaos runs in.",
    "steps": "The step the script trains to (the run is complete when it is reached; at_step "
             "triggers are checked against it); null: {default_steps} for the bundled example, "
             "unknown for your own script.",
    "args": "Arguments after the script (after the ones the bundled example gets; the last of "
            "a repeated flag wins). " + ", ".join(p.replace("{", "{{").replace("}", "}}")
                                                  for p in PLACEHOLDERS)
            + " are replaced by the run's directory, seed, steps and checkpoint directory.",
    "progress_regex": "For a script without the adapter line (chaos/adapters/{stack}.py): a "
                      "regular expression applied to its log lines, with a named group `step` "
                      "(required) and `loss` (optional).",
    "checkpoint_dir": "Where the script saves checkpoints, relative to the run directory (null: "
                      "`checkpoints`): given to it as {{ckpt_dir}} in args, as --ckpt-dir to the "
                      "bundled example, and in $" + contract.CKPT_DIR_ENV + "; storage faults (tier: "
                      "shared) and `trainchaos run --crash-points` act on it.",
    "checkpoint_every_steps": "How often the script saves, in steps (null: not declared); "
                              "`run --crash-points` then sweeps its second save by default (else "
                              "give --crash-save-step).",
    "warm_start": "Start the ranks from a per-node zygote that has imported torch and {stack} once "
                  "(null: $" + contract.WARM_START_ENV + ", else false): a launch or restart then "
                  "pays no imports, so its measured time leaves them out (the run record says "
                  "rank_launch: warm). A torchrun restart of a cold stack pays them.",
}


class ScriptWorkload(CommandWorkload):
    """A stack's script run per rank by torchrun; subclasses name the stack."""

    kind: ClassVar[str]
    stack: ClassVar[str]
    """The module the script needs (``lightning``, ``accelerate``): validation asks that it
    can be imported, without importing it."""
    extra: ClassVar[str]
    """The pip extra that installs it (``trainchaos[lightning]``)."""
    options_class: ClassVar[type[ScriptOptions]] = ScriptOptions
    example_steps: ClassVar[int] = 40
    """The bundled example's steps when the scenario gives none."""
    kind_hint: ClassVar[str] = ""  # its name says it (not command's "your own training command")
    env: ClassVar[dict[str, str]] = {"PYTHONUNBUFFERED": "1"}
    """Environment every rank gets (unbuffered: log lines reach the node log as written)."""
    preimports: ClassVar[tuple[str, ...]] = ()
    """The stack's packages a rank imports on its way to its first step, beyond torch
    (``SCRIPT_PREIMPORTS``): a warm start's zygote imports them once for the node's ranks.
    Only those whose import depends on nothing a rank sets later (its environment is the
    agent's when the zygote imports)."""
    warm_capable: ClassVar[bool] = True
    """Whether ``warm_start`` is built for the kind's launcher (``TorchrunPerNode``)."""
    adapter_line: ClassVar[str] = ""
    """The stack's adapter line (``chaos/adapters/<stack>.py``) as a script adds it: the fix
    named when a run of a script without it could not see a detection; empty: the probe call."""

    def __init__(self, spec: records.Workload) -> None:
        super().__init__(spec)
        self.options = self.options_class(**(spec.options or {}))

    # -- validation and documentation ---------------------------------------------------------
    @classmethod
    def section_fields(cls) -> dict[str, Any]:
        """Its own key only (``Workload``'s): ``command``'s keys are not a stack kind's."""
        return cls.own_key_field()

    @classmethod
    def misplaced_key(cls, key: str, owner: type[Workload]) -> str:
        if key in _fields(cls.options_class):
            return f"only for {owner.kind!r}: {cls.kind}'s is workload.{cls.kind}.{key}"
        return super().misplaced_key(key, owner)

    @classmethod
    def validate(cls, doc: WorkloadSection | None, world_size: int | None
                 ) -> tuple[Workload | None, list[tuple[Location, str]]]:
        from chaos.model import scenario as records

        assert doc is not None and cls.kind in doc.model_fields_set
        where: Location = ("workload", cls.kind)
        problems: list[tuple[Location, str]] = []
        raw: Any = getattr(doc, cls.kind)
        if raw is None:
            raw = {}
        options, option_problems = cls._options(raw)
        problems += [((*where, *loc), message) for loc, message in option_problems]
        if importlib.util.find_spec(cls.stack) is None:
            problems.append((where, f"the {cls.stack} package is not installed in "
                             f"this Python; pip install 'trainchaos[{cls.extra}]'"))
        if options is None:
            return None, problems
        if options.warm_start and not cls.warm_capable:
            problems.append(((*where, "warm_start"), f"{cls.kind} runs its ranks by its own launcher, "
                             "for which warm starts are not built: leave it out or set false"))
        if options.warm_start is None:
            try:
                warm_start_from_env()
            except ValueError as exc:
                problems.append(((*where, "warm_start"), f"not set, and {exc}"))
        script = options.script or str(cls.example())
        if not os.path.isfile(script):
            what = ("the bundled example is missing (a trainchaos installed without its "
                    "examples/ folder): give script" if options.script is None else
                    f"no such file {options.script!r} (a relative path is taken from "
                    f"{os.getcwd()})")
            problems.append(((*where, "script"), what))
        else:
            options = dataclasses.replace(options, script=os.path.abspath(script))
        record = records.Workload(kind=cls.kind, options=dataclasses.asdict(options))
        return cls(record), problems

    @classmethod
    def _options(cls, raw: Any) -> tuple[ScriptOptions | None, list[tuple[Location, str]]]:
        """The options of a mapping, each problem located at its key."""
        if not isinstance(raw, dict):
            return None, [((), f"expected a mapping of {cls.kind} options "
                           f"({', '.join(_fields(cls.options_class))}), got {describe_value(raw)}")]
        problems: list[tuple[Location, str]] = []
        for key in raw:
            known = _fields(cls.options_class)
            if key not in known:
                problems.append(((key,), f"unknown {cls.kind} option {key!r}"
                                 f"{close_match(key, known)} allowed: {', '.join(known)}"))
        script, steps, args, regex, ckpt, every, warm = (raw.get(k) for k in (
            "script", "steps", "args", "progress_regex", "checkpoint_dir", "checkpoint_every_steps",
            "warm_start"))
        if warm is not None and not isinstance(warm, bool):
            problems.append((("warm_start",), f"expected true or false, got {describe_value(warm)}"))
        if script is not None and not (isinstance(script, str) and script):
            problems.append((("script",), f"expected a path, got {describe_value(script)}"))
        for key, value in (("steps", steps), ("checkpoint_every_steps", every)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 1 <= value <= MAX_COMMAND_STEPS):
                problems.append(((key,), f"expected an int between 1 and {MAX_COMMAND_STEPS}, "
                                 f"got {describe_value(value)}"))
        if ckpt is not None:
            if not isinstance(ckpt, str):
                problems.append((("checkpoint_dir",), "expected a path relative to the run directory, "
                                 f"got {describe_value(ckpt)}"))
            else:
                try:
                    check_checkpoint_dir(ckpt)
                except ValueError as exc:
                    problems.append((("checkpoint_dir",), str(exc)))
        if args is not None:
            if not isinstance(args, list):
                problems.append((("args",), "expected a list of arguments, e.g. [--lr, '0.1'], "
                                 f"got {describe_value(args)}"))
            else:
                for i, arg in enumerate(args):
                    if isinstance(arg, bool) or not isinstance(arg, str | int | float):
                        problems.append((("args", i), "expected a string or a number, got "
                                         f"{describe_value(arg)}"))
        if regex is not None:
            try:
                check_progress_regex(regex) if isinstance(regex, str) else None
            except ValueError as exc:
                problems.append((("progress_regex",), str(exc)))
            if not isinstance(regex, str):
                problems.append((("progress_regex",), f"expected a string, got {describe_value(regex)}"))
        if problems:
            return None, problems
        return cls.options_class(script=script, steps=steps, progress_regex=regex,
                                 args=[str(a) for a in args] if args is not None else None,
                                 checkpoint_dir=ckpt, checkpoint_every_steps=every, warm_start=warm), []

    @classmethod
    def example(cls) -> Path:
        return EXAMPLES_DIR / cls.kind / "train.py"

    @classmethod
    def options_type(cls) -> type:
        return cls.options_class

    @classmethod
    def option_docs(cls, section: type) -> dict[str, str]:
        example = f"examples/{cls.kind}/train.py"
        return {name: text.format(example=example, default_steps=cls.example_steps, stack=cls.kind)
                for name, text in _OPTION_DOCS.items()}

    # -- what the engine may know before the run ------------------------------------------
    @property
    def bundled(self) -> bool:
        """Whether the script is the kind's bundled example (it takes the run's options)."""
        return os.path.abspath(self.options.script or self.example()) == str(self.example())

    @property
    def steps(self) -> int | None:
        if self.options.steps is not None:
            return self.options.steps
        return self.example_steps if self.bundled else None

    def steps_text(self) -> str:
        if self.options.steps is not None:
            return f"the {self.kind} script trains {self.options.steps} steps (workload.{self.kind}.steps)"
        return f"the bundled {self.kind} example trains {self.example_steps} steps by default"

    def storage(self) -> StorageLayout | None:
        """The declared ``checkpoint_dir`` (the run's ``checkpoints`` by default: the
        bundled example is given it as --ckpt-dir, a user's script as {ckpt_dir} and
        ``TRAINCHAOS_CKPT_DIR``)."""
        return StorageLayout(shared_checkpoints=self.options.checkpoint_dir or contract.SHARED_CHECKPOINTS_SUBDIR,
                             every_steps=self.options.checkpoint_every_steps,
                             every_steps_key=f"workload.{self.kind}.checkpoint_every_steps")

    # -- the run ------------------------------------------------------------------------------
    def launch(self, run_dir: str, seed: int) -> Launch:
        values = self.run_values(run_dir, seed)
        ckpt_dir = values["{ckpt_dir}"]
        steps = self.steps
        args = [fill_placeholders(arg, values) for arg in self.options.args or ()]
        given = (["--steps", str(steps), "--seed", str(seed), "--ckpt-dir", ckpt_dir]
                 if self.bundled else [])
        script = os.path.abspath(self.options.script or self.example())
        tee = self.options.progress_regex is not None
        if self.warm_start:  # harness/zygote.py: the node's zygote forks each rank
            launcher = TorchrunPerNode(("-m", "harness.zygote", "script", script, *given, *args), tee_output=tee,
                                       zygote_argv=("-m", "harness.zygote", "serve"),
                                       zygote_modules=(*SCRIPT_PREIMPORTS, *self.preimports))
        else:
            launcher = TorchrunPerNode((script, *given, *args), tee_output=tee)
        return Launch(launcher, steps_target=steps or 0, env={**self.env, **self.ckpt_env(run_dir)})

    @property
    def warm_start_option(self) -> bool | None:
        """``workload.<kind>.warm_start``."""
        return self.options.warm_start

    def progress(self, events_dir: str) -> LogProgress:
        return LogProgress(self.progress_regex, events_dir, report_exit_codes=True,
                           agent_detections=self.progress_agent())

    def detection_fix(self) -> str:
        if not self.adapter_line:
            return super().detection_fix()
        return f"add the adapter line to the script: `{self.adapter_line}`"

    @property
    def progress_regex(self) -> str | None:
        return self.options.progress_regex

    def progress_fix(self) -> str:
        if not self.adapter_line:
            return super().progress_fix()
        return (f"add the adapter line to the script (`{self.adapter_line}`), or give "
                f"workload.{self.kind}.progress_regex for its step lines")


def _fields(options_class: type[ScriptOptions] = ScriptOptions) -> list[str]:
    """The options a kind takes: the shared ones, and those its own class adds (a subclass
    validates its own in its ``_options``)."""
    return [f.name for f in dataclasses.fields(options_class)]
