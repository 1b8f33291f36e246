"""Silent data corruption: bit flips in live tensors (``bitflip``) and in checkpoint files at
rest (``checkpoint_bitrot``).

A bit flip raises no error: what it tests is whether the training stack's own detectors
(replica digests, spike and NaN guards, golden self-tests, checkpoint checksums) notice, how
many steps later, how many checkpoints were written of corrupted state in between, and
whether recovery ends at a clean model. docs/sdc.md has the whole story.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, Tag

from chaos.faults.base import (
    FailureClass,
    FaultParams,
    FaultType,
    ParamsContext,
    TargetKind,
    known_types,
    register,
)
from chaos.model.types import MAX_BYTES, MAX_STEPS, Expect
from chaos.probe.bitflip_bits import FLOAT_LAYOUTS, BitFlipError, bit_index, span_elements
from chaos.probe.bitflip_names import check_name, parse_spec

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["BitFlip", "BitFlipParams", "CheckpointBitRot", "CheckpointBitRotParams"]

_MAX_BIT = max(bits for bits, _, _ in FLOAT_LAYOUTS.values()) - 1
Location = tuple[str | int, ...]


def _index_or_name(value: Any) -> str:
    return "name" if isinstance(value, str) else "index"


BitChoice = Annotated[
    Annotated[int, Field(ge=0, le=_MAX_BIT), Tag("index")]
    | Annotated[Literal["sign", "exponent", "mantissa_high", "mantissa_low"], Tag("name")],
    Discriminator(_index_or_name),
    Expect(f"a bit index (0-{_MAX_BIT}) or sign, exponent, mantissa_high, mantissa_low"),
]
ElementChoice = Annotated[
    Annotated[int, Field(ge=0, le=MAX_BYTES), Tag("index")] | Annotated[Literal["random"], Tag("name")],
    Discriminator(_index_or_name),
    Expect("an element index (>= 0) or random"),
]


class BitFlipParams(FaultParams):
    tensor: str = Field(min_length=1)
    """What to corrupt: a parameter NAME, grad:NAME (its gradient; see grad_phase),
    optim:NAME:KEY (optimizer state, e.g. optim:head.weight:exp_avg), act:MODULE (a
    module's output, through a forward hook) or gemm_output:MODULE (the result of a linear
    layer's matrix multiply in the forward pass, its fused bias included: the
    instruction-level class SDC studies inject). With the harness, `trainchaos validate` checks
    the name and lists the valid ones; a command's names are checked when the fault fires."""
    element: ElementChoice = "random"
    """Row-major index of the element in the tensor's logical shape (whatever its strides),
    or random: a seeded pick (a new one at each flip of a mercurial fault)."""
    bit: BitChoice = "exponent"
    """Which bit: an index (0 = least significant; below the dtype's width: 32 for float32,
    16 for bfloat16/float16) or sign, exponent (the exponent's top bit: x2^128 for a float32
    below 2, loud), mantissa_high (x1.5 or x0.75) or mantissa_low (one unit in the last
    place, quiet)."""
    bits: int = Field(1, ge=1, le=_MAX_BIT + 1)
    """How many adjacent bits of memory flip at once, from `bit` upward; past the element's
    top bit they go on in the next element's lowest bits: a multi-bit upset in one word or in
    two adjacent ones. At most the element's width (32 for float32)."""
    burst: int = Field(1, ge=1, le=MAX_BYTES)
    """A run of this many consecutive elements from `element`, each flipped alike: a
    corrupted cache line or DMA burst (a random element is picked so the run fits)."""
    mode: Literal["once", "stuck_at", "mercurial"] = "once"
    """once: one flip at the step; stuck_at: the bit is forced (to stuck_value) at every
    step for duration_steps; mercurial: a faulty core, flipping with probability
    flip_probability at each step for duration_steps (null: until the process ends)."""
    duration_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """stuck_at (required) and mercurial: how many steps the fault lasts."""
    flip_probability: float = Field(0.1, gt=0, le=1)
    """mercurial: the chance of a flip at each step (seeded per step)."""
    stuck_value: int | None = Field(None, ge=0, le=1)
    """stuck_at: the value the bit is stuck at; null: the opposite of its value when the
    fault starts (so the first step changes it)."""
    grad_phase: Literal["before_allreduce", "after_allreduce"] = "after_allreduce"
    """grad:NAME only. before_allreduce: the rank's own gradient as backward computes it,
    so the flip reaches every replica through the all-reduce; after_allreduce: this rank's
    .grad after the all-reduce, so only this replica diverges."""


@register
@dataclass
class BitFlip(FaultType):
    type_name: ClassVar[str] = "bitflip"
    family: ClassVar[str] = "sdc"
    failure_class: ClassVar[FailureClass] = "corruption"
    summary: ClassVar[str] = (
        "Flip (or force) a bit of one element of a live tensor at step N -- or N adjacent "
        "bits, or a run of elements: a parameter, a gradient before or after the all-reduce, "
        "optimizer state, an activation, or a linear layer's GEMM output."
    )
    fidelity: ClassVar[str] = (
        "Stands for silent data corruption: a flipped bit in memory, on a link or in a "
        "faulty core (Meta reports about one device in a thousand; Llama 3 had 6 SDC "
        "interruptions in 54 days). Exercises the job's corruption detectors, its rollback "
        "to a clean checkpoint and the cost of checkpointing corrupted state. The flip is "
        "made by torch bit operations on the tensor's storage, at a step boundary or in a "
        "hook: it does not model a corrupted kernel mid-computation except through an "
        "activation or a GEMM output, and it ends with the process (a real faulty core stays "
        "faulty after a restart). bits: N flips N adjacent bits of memory (one word or two "
        "adjacent ones: a multi-bit upset; studies find single-bit flips under 40 % of "
        "bit-flip events), burst: L a run of L words (a cache line); both exact, neither "
        "models ECC, which would correct one bit and report two. gemm_output corrupts the "
        "result of one linear layer's matrix multiply in the forward pass on one rank, bias "
        "epilogue included, as instruction-level injection studies do; not the backward "
        "GEMMs, not a partial sum inside the accumulation, and not a faulty unit that hits "
        "the same output column of every tile (mode mercurial comes closest)."
    )
    params_model: ClassVar[type[FaultParams]] = BitFlipParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("rank",)
    in_process: ClassVar[bool] = True
    mechanism: ClassVar[str] = (
        "in-process, by the probe: torch bit operations on a tensor the training script "
        "handed to probe.watch(), at step_begin, after_backward or in a hook"
    )

    @classmethod
    def param_hint(cls, word: str) -> str | None:
        # "bits" reads like a count of bits to flip; here it would be a typo of the index
        if word not in ("bits", "nbits", "num_bits"):
            return None
        counted = ", ".join(name for name, t in known_types().items() if "bits" in t.params_model.model_fields)
        return ("a bitflip flips one bit per element: 'bit' is that bit's index (0 = least "
                "significant) or sign, exponent, mantissa, not a count"
                + (f"; 'bits' is a count on {counted}" if counted else ""))

    def probe_actions(self) -> list[dict[str, Any]]:
        grad_after = (str(self.params.get("tensor", "")).startswith("grad:")
                      and self.params.get("grad_phase") == "after_allreduce")
        return [{"action": "bitflip", "point": "after_backward" if grad_after else "step_begin",
                 "params": dict(self.params), "seed": self.seed}]

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        """The probe injects and reports ``fault_injected`` itself (at the first flip)."""
        return {"mechanism": "probe"}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        """A flipped bit stays flipped: recovery is the training stack's job, and what is measured."""

    @classmethod
    def check_params(cls, params: BitFlipParams, context: ParamsContext) -> list[tuple[Location, str]]:
        given = params.model_fields_set
        problems: list[tuple[Location, str]] = []
        if params.mode == "stuck_at" and params.duration_steps is None:
            problems.append((("duration_steps",), "mode stuck_at forces the bit at every step for "
                             "duration_steps steps: give duration_steps (an int >= 1)"))
        if params.mode == "once" and "duration_steps" in given:
            problems.append((("duration_steps",), "only for mode stuck_at or mercurial: a "
                             "once flip has no duration"))
        if params.mode != "mercurial" and "flip_probability" in given:
            problems.append((("flip_probability",), "only for mode mercurial"))
        if params.mode != "stuck_at" and "stuck_value" in given:
            problems.append((("stuck_value",), "only for mode stuck_at"))
        for key in ("bits", "burst"):
            if params.mode == "stuck_at" and getattr(params, key) > 1:
                problems.append(((key,), "only for mode once or mercurial: stuck_at forces one bit"))
        try:
            spec = parse_spec(params.tensor)
        except BitFlipError as exc:
            return [*problems, (("tensor",), str(exc))]
        if spec.kind != "grad" and "grad_phase" in given:
            problems.append((("grad_phase",), f"only for a gradient (grad:NAME), not {spec.kind} "
                             f"{params.tensor!r}"))
        catalog = context.workload.tensor_catalog() if context.workload is not None else None
        if catalog is None:
            return problems  # known only inside the job (a command's): checked when it fires
        try:
            entry = check_name(spec, catalog)
        except BitFlipError as exc:
            return [*problems, (("tensor",), str(exc))]
        try:
            bit = bit_index(entry["dtype"], params.bit)
        except BitFlipError as exc:
            problems.append((("bit",), f"{exc} ({params.tensor} is {entry['dtype']})"))
            return problems
        width = FLOAT_LAYOUTS[entry["dtype"]][0]
        if params.bits > width:
            problems.append((("bits",), f"{params.bits} bits: at most the element's width, {width} "
                             f"({params.tensor} is {entry['dtype']})"))
            return problems
        span = span_elements(width, bit, params.bits, params.burst)
        numel = entry.get("numel")
        if isinstance(params.element, int) and numel is not None and params.element + span > numel:
            spans = f"; the flip spans {span} elements from it" if span > 1 else ""
            problems.append((("element",), f"element {params.element} is outside {params.tensor} "
                             f"({numel} elements: 0-{numel - 1}{spans})"))
        elif numel is not None and span > numel:
            problems.append((("burst",), f"the flip spans {span} elements; {params.tensor} has {numel}"))
        return problems


class CheckpointBitRotParams(FaultParams):
    path: str = Field("checkpoints", min_length=1)
    """The file to corrupt, or a directory: then the state file of its newest complete
    checkpoint (step-N/state.pt next to a MANIFEST.json), else its newest file. Relative to
    the run's directory (not a glob), where the harness keeps its checkpoints (checkpoints/)
    unless workload.harness.checkpoint.dir says otherwise: e.g.
    checkpoints/step-00000040/state.pt; absolute paths are taken as they are. The storage
    faults' path is another thing: a glob relative to the tier's mount."""
    offset: int | None = Field(None, ge=0, le=MAX_BYTES)
    """Byte offset in the file; null: a seeded uniform pick."""
    bit: int | None = Field(None, ge=0, le=7)
    """Bit of that byte, 0-7; null: a seeded pick."""


_STEP_DIR = re.compile(r"^step-(\d+)$")


@register
@dataclass
class CheckpointBitRot(FaultType):
    type_name: ClassVar[str] = "checkpoint_bitrot"
    family: ClassVar[str] = "sdc"
    failure_class: ClassVar[FailureClass] = "corruption"
    summary: ClassVar[str] = (
        "Flip one bit of a checkpoint file at rest (the newest checkpoint's state file by "
        "default; offset and bit given or seeded)."
    )
    fidelity: ClassVar[str] = (
        "Stands for bit rot at rest: media decay, a firmware bug, a controller that returns "
        "other bytes than were written. Exercises checkpoint checksums on load and the "
        "fallback to an older checkpoint (and shows the steps that fallback costs). The "
        "file is changed in place by the controller; nothing notices until the job reads "
        "it again (a restart), as on real storage."
    )
    params_model: ClassVar[type[FaultParams]] = CheckpointBitRotParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)
    mechanism: ClassVar[str] = "by the injector: one bit of the file rewritten in place (pwrite + fsync)"

    def _file(self, run_dir: str) -> str:
        path = self.params.get("path", "checkpoints")
        path = path if os.path.isabs(path) else os.path.join(run_dir, path)
        if not os.path.isdir(path):
            return path
        complete = []
        for entry in os.listdir(path):
            match = _STEP_DIR.match(entry)
            if match and os.path.exists(os.path.join(path, entry, "MANIFEST.json")):
                complete.append((int(match.group(1)), os.path.join(path, entry, "state.pt")))
        if complete:
            return max(complete)[1]
        files = [os.path.join(path, e) for e in os.listdir(path) if os.path.isfile(os.path.join(path, e))]
        if not files:
            raise FileNotFoundError(f"no checkpoint and no file in {path} to corrupt")
        return max(files, key=os.path.getmtime)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        path = self._file(ctx.run_dir)
        rng = random.Random(f"{self.seed}/{self.fault_id}")
        size = os.path.getsize(path)
        if size == 0:
            raise ValueError(f"{path} is empty: no bit to flip")
        offset = self.params.get("offset")
        offset = rng.randrange(size) if offset is None else int(offset)
        if offset >= size:
            raise ValueError(f"offset {offset} is beyond the end of {path} ({size} bytes)")
        bit = self.params.get("bit")
        bit = rng.randrange(8) if bit is None else int(bit)
        before = _flip_file_bit(path, offset, bit)
        return {"path": path, "offset": offset, "bit": bit, "byte_before": before,
                "byte_after": before ^ (1 << bit), "bytes": size}

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        """Flip the bit back if the file still holds the corrupted byte (idempotent; a file
        the job already replaced or deleted is left alone)."""
        path = record.get("path")
        if not path or not os.path.exists(path) or "offset" not in record:
            return
        with open(path, "rb") as fh:
            fh.seek(record["offset"])
            current = fh.read(1)
        if current and current[0] == record.get("byte_after"):
            _flip_file_bit(path, record["offset"], record["bit"])


def _flip_file_bit(path: str, offset: int, bit: int) -> int:
    """Flip one bit of the file in place, durably; returns the byte as it was."""
    fd = os.open(path, os.O_RDWR)
    try:
        (byte,) = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([byte ^ (1 << bit)]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return byte
