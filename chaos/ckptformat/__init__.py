"""Checkpoint formats, by name: how the checkpoint checkers read what a job saved, whatever
kind of job saved it (docs/checkers.md, "Checkpoint formats").

The freshness checker (``chaos.runner.freshness``) and the crash-point sweep (``chaos.runner.crashsweep``)
ask the workload (``Workload.read_checkpoint`` / ``audit_checkpoints``); a kind without a
reader of its own reads by format: the one the kind declares (``Workload.checkpoint_format``),
else the one whose layout the path shows (``detect``, in ``precedence`` order). The built-in
formats are listed here as module names (``chaos.util.registry``), imported on first use, each
registering itself; another package adds one through the entry-point group
``trainchaos.checkpoint_formats``, a module in ``TRAINCHAOS_PLUGINS`` or ``register_format``.
``TRAINCHAOS_CHECKPOINT_FORMAT`` (a format's name, or a hook ``module:function``:
``chaos.ckptformat.hook``) overrides both for every kind that reads by format.
"""

from __future__ import annotations

import os
from collections import Counter

from chaos import contract
from chaos.ckptformat.base import CheckpointFormat
from chaos.ckptformat.hook import HookFormat
from chaos.ckptformat.records import CheckpointAudit, CheckpointImage, LoadedState
from chaos.errors import ScenarioError, ValidationIssue
from chaos.util.registry import Registry

__all__ = ["ENTRY_POINT_GROUP", "FORMATS", "FORMAT_ENV", "CheckpointAudit", "CheckpointFormat",
           "CheckpointImage", "LoadedState", "audit_checkpoints", "check_format_env", "chosen_format",
           "detect_format", "format_named", "known_formats", "read_checkpoint", "register_format"]

ENTRY_POINT_GROUP = "trainchaos.checkpoint_formats"
FORMAT_ENV = contract.CHECKPOINT_FORMAT_ENV
"""In the controller's environment: the format every kind that reads by format reads its
checkpoints as: a registered format's name, or a hook ``module:function``."""

_BUILTIN = ("chaos.ckptformat.dcp", "chaos.ckptformat.deepspeed", "chaos.ckptformat.hf", "chaos.ckptformat.lightning",
            "chaos.ckptformat.safetensors", "chaos.ckptformat.torch_save")


def _name(cls: type[CheckpointFormat]) -> str:
    if not (isinstance(cls, type) and issubclass(cls, CheckpointFormat)):
        raise TypeError(f"{cls!r} is not a chaos.ckptformat.CheckpointFormat")
    return cls.name


FORMATS: Registry[type[CheckpointFormat]] = Registry("checkpoint format", _name, builtins=_BUILTIN,
                                                     group=ENTRY_POINT_GROUP)
register_format = FORMATS.register
"""Class decorator: make a checkpoint format known by its ``name``."""


def known_formats() -> list[type[CheckpointFormat]]:
    """Every registered format, in detection order (``precedence``, then name)."""
    return sorted(FORMATS.known().values(), key=lambda cls: (cls.precedence, cls.name))


def detect_format(path: str) -> CheckpointFormat | None:
    """The first format, in detection order, whose layout ``path`` shows; None: none does."""
    for cls in known_formats():
        fmt = cls()
        if fmt.detect(path):
            return fmt
    return None


def format_named(spec: str) -> CheckpointFormat:
    """The format ``TRAINCHAOS_CHECKPOINT_FORMAT``'s value names: a registered name, or a hook
    ``module:function``. A bad one is a ScenarioError located at the variable, with the
    allowed values."""
    known = {cls.name: cls for cls in known_formats()}
    if spec in known:
        return known[spec]()
    if ":" in spec:
        try:
            return HookFormat(spec)
        except ValueError as exc:
            problem = f"checkpoint hook {spec!r}: {exc}"
    else:
        problem = f"unknown checkpoint format {spec!r}"
    raise ScenarioError([ValidationIssue("environment", FORMAT_ENV, (
        f"{problem}; allowed: {', '.join(known)}, or module:function (a hook that takes the "
        "checkpoint's path and returns (step, state_dict))"))])


def chosen_format(declared: str | None = None) -> CheckpointFormat | None:
    """``TRAINCHAOS_CHECKPOINT_FORMAT``'s format, else the one a kind ``declared`` (a kind's
    own name for a format nobody registered is its bug: KeyError); None: detect."""
    spec = os.environ.get(FORMAT_ENV, "").strip()
    if spec:
        return format_named(spec)
    return FORMATS.lookup(declared)() if declared else None


def check_format_env() -> None:
    """Raise the located error of a bad ``TRAINCHAOS_CHECKPOINT_FORMAT`` now (a run's start),
    not at its first checkpoint."""
    chosen_format()


def read_checkpoint(path: str, declared: str | None = None, step: int | None = None) -> CheckpointImage | None:
    """What the checkpoint at ``path`` holds, read as the chosen format (``chosen_format``)
    when its layout fits, else as the format it shows; None: no format knows it. ``step``:
    the saver's claim, for a checkpoint that records none. Raises ValueError or OSError
    saying why it is unusable."""
    chosen = chosen_format(declared)
    fmt = chosen if chosen is not None and chosen.detect(path) else detect_format(path)
    return fmt.read(path, step) if fmt is not None else None


def audit_checkpoints(directory: str, declared: str | None = None) -> CheckpointAudit | None:
    """The checkpoints of ``directory`` as the chosen format audits them, else as the format
    most of its entries show; None: no entry is in a known format."""
    fmt = chosen_format(declared)
    if fmt is None:
        found: dict[str, CheckpointFormat] = {}
        counts: Counter[str] = Counter()
        for name in sorted(os.listdir(directory)):
            entry = None if name.startswith(".") else detect_format(os.path.join(directory, name))
            if entry is not None and name not in entry.pointer_names():
                found.setdefault(entry.name, entry)
                counts[entry.name] += 1
        if not counts:
            return None
        fmt = found[counts.most_common(1)[0][0]]
    return fmt.audit(directory)
