"""Bit-level corruption of live tensors: the mechanics of the ``bitflip`` fault.

The probe loads this module when a bitflip fires (never at import: the probe is imported by
every rank and stays standard-library only), and the scenario checks use it to name a
model's tensors. torch is imported inside the functions that need it.

Tensor names (``params.tensor`` of a bitflip), resolved against what the training script
handed to ``probe.watch(model=..., optimizer=...)``:

=========================  ==============================================================
``NAME``                   a parameter (``model.named_parameters()``; a DDP wrapper's
                           ``module.`` prefix is dropped)
``grad:NAME``              its gradient: before the all-reduce (a hook on the gradient as
                           it is computed, so the flip travels to every replica) or after
                           it (``.grad`` of this rank only)
``optim:NAME:KEY``         optimizer state of the parameter (``exp_avg``, ``exp_avg_sq``)
``act:MODULE``             the output of a module (``model.named_modules()``), through a
                           forward hook
``gemm_output:MODULE``     the result of a linear layer's matrix multiply in the forward
                           pass (an ``nn.Linear``: ``x @ W.T + b``, the bias being the GEMM's
                           fused epilogue on every backend), through a forward hook
=========================  ==============================================================

An element is addressed by its row-major index in the tensor's logical shape, whatever its
strides (a transposed weight, a sliced activation), and the bit is flipped in the element's
own storage, for every floating dtype. ``bits: N`` flips N adjacent bits of memory from the
given one upward; past the element's top bit they go on in the lowest bits of the next
element (the next word in memory of a contiguous tensor): a multi-bit upset, in one word or
two adjacent ones. ``burst: L`` does the same to L consecutive elements: a run of corrupted
words (a cache line, a DMA burst). ``flip_positions`` lays them out.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FLOAT_LAYOUTS",
    "NAMED_BITS",
    "BitFlipError",
    "TensorSpec",
    "bit_index",
    "compress_names",
    "describe_valid",
    "flip_",
    "flip_positions",
    "force_bit_",
    "parse_spec",
    "pick_element",
    "read_bit",
    "resolve",
    "tensor_catalog",
]

FLOAT_LAYOUTS: dict[str, tuple[int, int, int]] = {
    "float64": (64, 11, 52),
    "float32": (32, 8, 23),
    "float16": (16, 5, 10),
    "bfloat16": (16, 8, 7),
}
"""dtype name -> (bits, exponent bits, mantissa bits); the sign is the top bit."""

NAMED_BITS = ("sign", "exponent", "mantissa_high", "mantissa_low")
"""sign: the top bit; exponent: the exponent's most significant bit (for |x| < 2 it is 0, so
the flip multiplies by 2^128 in float32: loud); mantissa_high: the mantissa's top bit (x1.5
or x0.75: visible); mantissa_low: bit 0 (one unit in the last place: quiet)."""

GRAD_PHASES = ("before_allreduce", "after_allreduce")
TENSOR_KINDS = ("param", "grad", "optim", "act", "gemm_output")
_HOOKED_KINDS = ("act", "gemm_output")
"""Corrupted through a forward hook on a module, not in place at a step boundary."""


class BitFlipError(ValueError):
    """A bitflip that cannot be applied: an unknown tensor, a bit outside the dtype..."""


# --------------------------------------------------------------------------- bits


def bit_index(dtype: str, bit: int | str) -> int:
    """The bit position for ``bit`` (an index or one of ``NAMED_BITS``) in ``dtype``."""
    if dtype not in FLOAT_LAYOUTS:
        raise BitFlipError(f"cannot flip bits of a {dtype} tensor: only floating dtypes "
                           f"({', '.join(FLOAT_LAYOUTS)})")
    total, _exp, mantissa = FLOAT_LAYOUTS[dtype]
    if isinstance(bit, str):
        named = {"sign": total - 1, "exponent": total - 2, "mantissa_high": mantissa - 1,
                 "mantissa_low": 0}
        if bit not in named:
            raise BitFlipError(f"unknown bit {bit!r}; use an index or one of {', '.join(NAMED_BITS)}")
        return named[bit]
    if not 0 <= bit < total:
        raise BitFlipError(f"bit {bit} is outside {dtype}: {layout_text(dtype)}")
    return bit


def layout_text(dtype: str) -> str:
    total, _exp, mantissa = FLOAT_LAYOUTS[dtype]
    return (f"bits 0-{total - 1} (sign {total - 1}, exponent {mantissa}-{total - 2}, "
            f"mantissa 0-{mantissa - 1})")


def dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _element_view(tensor: Any, index: int) -> Any:
    """A 0-d view of the element at row-major ``index`` of ``tensor``'s logical shape,
    reinterpreted as the same-width signed integer (shares the tensor's storage)."""
    import torch

    numel = tensor.numel()
    if not 0 <= index < numel:
        raise BitFlipError(f"element {index} is outside the tensor ({numel} elements, shape "
                           f"{list(tensor.shape)})")
    coords = []
    for size in reversed(tensor.shape):
        coords.append(index % size)
        index //= size
    element = tensor.detach()[tuple(reversed(coords))]
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}
    return element, element.view(ints[tensor.element_size()])


def _mask(bit: int, width: int) -> int:
    # The top bit of a signed integer is its sign: 1 << 31 does not fit an int32.
    return -(1 << bit) if bit == width - 1 else 1 << bit


def read_bit(tensor: Any, index: int, bit: int) -> int:
    _, as_int = _element_view(tensor, index)
    return (int(as_int) >> bit) & 1


def flip_(tensor: Any, index: int, bit: int) -> tuple[float, float]:
    """Flip ``bit`` of the element at ``index`` in place; returns (before, after)."""
    import torch

    with torch.no_grad():
        element, as_int = _element_view(tensor, index)
        before = float(element)
        as_int.bitwise_xor_(_mask(bit, tensor.element_size() * 8))
        return before, float(element)


def force_bit_(tensor: Any, index: int, bit: int, value: int) -> tuple[float, float]:
    """Set ``bit`` of the element at ``index`` to ``value`` (stuck-at); returns (before, after)."""
    import torch

    with torch.no_grad():
        element, as_int = _element_view(tensor, index)
        before = float(element)
        mask = _mask(bit, tensor.element_size() * 8)
        if value:
            as_int.bitwise_or_(mask)
        else:
            as_int.bitwise_and_(~mask)
        return before, float(element)


def span_elements(width: int, bit: int, bits: int = 1, burst: int = 1) -> int:
    """How many consecutive elements ``flip_positions`` touches from the first one."""
    return burst + (bit + bits - 1) // width


def flip_positions(index: int, bit: int, width: int, bits: int = 1, burst: int = 1) -> list[tuple[int, int]]:
    """(element, bit) of every bit a flip changes: ``bits`` adjacent bits of memory from
    ``bit`` of element ``index`` upward (past the top bit, on into the next element's lowest
    bits: little-endian words follow each other in memory), in each of ``burst`` consecutive
    elements. ``bits`` is at most the element's width, so a run's spill into the next
    element never meets that element's own flips."""
    if not 1 <= bits <= width:
        raise BitFlipError(f"bits {bits}: between 1 and the element's width ({width})")
    return [(index + e + (bit + k) // width, (bit + k) % width)
            for e in range(burst) for k in range(bits)]


def pick_element(numel: int, element: int | str, rng: random.Random, span: int = 1) -> int:
    """The first element index: as given, or a seeded uniform pick for ``random``, so that
    ``span`` consecutive elements from it fit in the tensor."""
    if numel < span:
        raise BitFlipError(f"the flip spans {span} elements; the tensor has {numel}")
    if element == "random":
        return rng.randrange(numel - span + 1)
    if not 0 <= int(element) <= numel - span:
        raise BitFlipError(f"element {element} is outside the tensor ({numel} elements"
                           + (f"; the flip spans {span} from it)" if span > 1 else ")"))
    return int(element)


# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class TensorSpec:
    kind: str
    """param | grad | optim | act | gemm_output"""
    name: str
    """Parameter or module name."""
    key: str | None = None
    """Optimizer state key (``exp_avg``) for kind optim."""
    text: str = ""

    def __str__(self) -> str:
        return self.text


def parse_spec(text: str) -> TensorSpec:
    if text.startswith("grad:"):
        return TensorSpec("grad", text[5:], text=text)
    if text.startswith("act:"):
        return TensorSpec("act", text[4:], text=text)
    if text.startswith("gemm_output:"):
        return TensorSpec("gemm_output", text[len("gemm_output:"):], text=text)
    if text.startswith("optim:"):
        name, sep, key = text[6:].rpartition(":")
        if not sep or not name or not key:
            raise BitFlipError(f"{text!r}: optimizer state is named optim:PARAM:KEY, e.g. "
                               "optim:head.weight:exp_avg")
        return TensorSpec("optim", name, key, text=text)
    return TensorSpec("param", text, text=text)


def unwrap(model: Any) -> Any:
    """The model inside a DDP / DataParallel wrapper (whose names carry ``module.``)."""
    if type(model).__name__ in ("DistributedDataParallel", "DataParallel"):
        return model.module
    return model


def _hookable(module: Any) -> bool:
    # Containers without a forward of their own never call their forward hooks.
    return type(module).__name__ not in ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict")


def _is_linear(module: Any) -> bool:
    """A layer whose forward is one GEMM (``F.linear``): nn.Linear and its subclasses
    (MultiheadAttention's out_proj is one)."""
    import torch

    return isinstance(module, torch.nn.Linear)


def tensor_catalog(model: Any, optimizer: Any = None) -> dict[str, dict[str, Any]]:
    """name -> {dtype, numel} of every tensor a bitflip can reach (activations: numel None,
    known only when the forward runs). Optimizer state appears once the optimizer has
    stepped."""
    model = unwrap(model)
    out: dict[str, dict[str, Any]] = {}
    names = {}
    for name, param in model.named_parameters():
        names[id(param)] = name
        info = {"dtype": dtype_name(param), "numel": param.numel()}
        out[name] = info
        out[f"grad:{name}"] = info
    if optimizer is not None:
        for param, state in optimizer.state.items():
            name = names.get(id(param))
            if name is None:
                continue
            for key, value in state.items():
                if hasattr(value, "is_floating_point") and value.is_floating_point():
                    out[f"optim:{name}:{key}"] = {"dtype": dtype_name(value), "numel": value.numel()}
    for name, module in model.named_modules():
        if name and _hookable(module):
            dtype = next((dtype_name(p) for p in module.parameters()), dtype_name_default())
            out[f"act:{name}"] = {"dtype": dtype, "numel": None}
            if _is_linear(module):
                out[f"gemm_output:{name}"] = {"dtype": dtype, "numel": None}
    return out


def dtype_name_default() -> str:
    import torch

    return str(torch.get_default_dtype()).removeprefix("torch.")


def compress_names(names: Iterable[str]) -> list[str]:
    """``blocks.0.ln1.weight, blocks.1.ln1.weight`` -> ``blocks.{0-1}.ln1.weight``: layer
    indices folded, so that a list of valid names fits in a message."""
    groups: dict[tuple[str, ...], list[tuple[int, ...]]] = {}
    order: list[tuple[str, ...]] = []
    for name in names:
        parts = re.split(r"(?<=[.:])(\d+)(?=[.:]|$)", name)
        pattern = tuple(p if i % 2 == 0 else "#" for i, p in enumerate(parts))
        numbers = tuple(int(p) for i, p in enumerate(parts) if i % 2)
        if pattern not in groups:
            groups[pattern] = []
            order.append(pattern)
        groups[pattern].append(numbers)
    out = []
    for pattern in order:
        columns = list(zip(*groups[pattern], strict=True)) if groups[pattern][0] else []
        texts = iter(_number_set(sorted(set(col))) for col in columns)
        out.append("".join(next(texts) if part == "#" else part for part in pattern))
    return out


def _number_set(values: list[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    if values == list(range(values[0], values[-1] + 1)):
        return f"{{{values[0]}-{values[-1]}}}"
    return "{" + ",".join(map(str, values)) + "}"


def describe_valid(catalog: dict[str, Any], kind: str | None = None) -> str:
    """The valid names of a catalog, grouped by kind and folded (``compress_names``)."""
    params = [n for n in catalog if ":" not in n]
    acts = [n for n in catalog if n.startswith("act:")]
    gemms = [n for n in catalog if n.startswith("gemm_output:")]
    optim_keys = sorted({n.rsplit(":", 1)[1] for n in catalog if n.startswith("optim:")})
    parts = []
    if kind in (None, "param", "grad", "optim"):
        parts.append("parameters (NAME, grad:NAME" + (", optim:NAME:KEY" if optim_keys else "")
                     + "): " + ", ".join(compress_names(params)))
    if optim_keys and kind in (None, "optim"):
        parts.append("optimizer state keys: " + ", ".join(optim_keys))
    if kind in (None, "act"):
        parts.append("modules (act:MODULE): " + ", ".join(compress_names(n[4:] for n in acts)))
    if kind in (None, "gemm_output") and gemms:
        parts.append("linear layers (gemm_output:MODULE): "
                     + ", ".join(compress_names(n.split(":", 1)[1] for n in gemms)))
    return "; ".join(parts)


def close_match(word: str, candidates: Iterable[str]) -> str:
    """"; did you mean 'x'?" when a candidate is close, else ";" (as the scenario checks
    word it; not imported from there: this module runs inside training processes)."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ";"


def check_name(spec: TensorSpec, catalog: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The catalog entry of ``spec``, or BitFlipError naming the valid ones."""
    if spec.text in catalog:
        return catalog[spec.text]
    prefixed = ("act", "grad", "gemm_output")
    pool = [n for n in catalog if n.startswith(f"{spec.kind}:")] if spec.kind in prefixed \
        else [n for n in catalog if ":" not in n]
    wanted = spec.text if spec.kind in prefixed else spec.name
    hint = close_match(wanted, pool)
    if spec.kind == "optim" and spec.name in catalog:
        keys = sorted({n.rsplit(":", 1)[1] for n in catalog if n.startswith(f"optim:{spec.name}:")})
        raise BitFlipError(f"optimizer state {spec.key!r} does not exist for {spec.name}"
                           f"{close_match(spec.key or '', keys)} known: {', '.join(keys) or 'none yet'}")
    what = {"act": "module", "gemm_output": "linear layer", "grad": "parameter", "optim": "parameter",
            "param": "parameter"}[spec.kind]
    shown = spec.name
    raise BitFlipError(f"no {what} {shown!r} in the model{hint} valid: "
                       f"{describe_valid(catalog, spec.kind)}")


def resolve(spec: TensorSpec, model: Any, optimizer: Any = None) -> Any:
    """The live tensor (param, its .grad, optimizer state) or module (act) that ``spec`` names."""
    model = unwrap(model)
    if spec.kind in _HOOKED_KINDS:
        modules = dict(model.named_modules())
        module = modules.get(spec.name) if spec.name else None
        if module is not None and _hookable(module) and (spec.kind == "act" or _is_linear(module)):
            return module
        check_name(spec, tensor_catalog(model, optimizer))
    params = dict(model.named_parameters())
    if spec.name not in params:
        check_name(spec, tensor_catalog(model, optimizer))
    param = params[spec.name]
    if spec.kind == "optim":
        state = optimizer.state.get(param, {}) if optimizer is not None else {}
        value = state.get(spec.key)
        if value is None or not value.is_floating_point():
            if optimizer is None:
                raise BitFlipError(f"{spec}: the training script handed no optimizer to the "
                                   "probe (probe.watch(model=..., optimizer=...))")
            if not state:
                raise BitFlipError(f"{spec}: the optimizer has no state for {spec.name} yet "
                                   "(it appears after the first step): use at_step >= 2")
            check_name(spec, tensor_catalog(model, optimizer))
        return value
    return param


# --------------------------------------------------------------------------- in effect


class Episode:
    """One bitflip fault in effect on this rank, driven by the probe's fault points.

    ``once`` flips one bit at the planned step; ``stuck_at`` forces the bit to a value at
    every step for ``duration_steps``; ``mercurial`` flips with probability p at each step
    (seeded per step, so a rerun draws the same steps) for ``duration_steps`` or until the
    process ends. Parameters and optimizer state are changed in place at ``step_begin``;
    gradients after the all-reduce at ``after_backward``; gradients before the all-reduce
    and activations through hooks armed for the step (a mercurial activation fault hits
    every forward of a bad step, the golden self-test's included: a faulty core does not
    choose its victims).

    Like every in-process fault, an episode ends with the process that took it: a restarted
    rank is healthy again (the probe claims each fault once per run). Problems (an unknown
    tensor, a bit outside the dtype) are reported as ``fault_error`` events, never raised
    into the training step.
    """

    def __init__(self, emit: Any, src: str, fault: dict[str, Any], model: Any, optimizer: Any) -> None:
        params = fault.get("params", {})
        self._emit = emit
        self.src = src
        self.fault_id = fault["id"]
        self.fault_type = fault.get("type", "bitflip")
        self.point = fault.get("point", "step_begin")
        self.mode = params.get("mode", "once")
        self.spec = parse_spec(str(params["tensor"]))
        self.phase = params.get("grad_phase", "after_allreduce")
        self.bit_spec = params.get("bit", "exponent")
        self.element_spec = params.get("element", "random")
        self.bits = int(params.get("bits") or 1)
        self.burst = int(params.get("burst") or 1)
        self.probability = float(params.get("flip_probability") or 0.0)
        self.stuck_value = params.get("stuck_value")
        self.duration = params.get("duration_steps")
        self.seed = fault.get("seed", 0)
        self.model = model
        self.optimizer = optimizer
        self.first_step: int | None = None
        self.injected = False
        self.done = False
        self._element: int | None = None
        self._hooks: list[Any] = []

    # -- driven by the probe -------------------------------------------------------------
    def at(self, point: str, step: int | None) -> bool:
        """Act at a fault point; False once the episode is over (the probe drops it)."""
        if point != self.point or step is None:
            return not self.done
        self._disarm()
        if self.first_step is None:
            self.first_step = step
        if self.done:
            return False
        if self.mode != "once" and self.duration is not None and step >= self.first_step + self.duration:
            self.done = True
            self._emit("fault_reverted", fault=self.fault_id, target=self.src, step=step)
            return False
        try:
            if self.model is None:
                raise BitFlipError("the training script handed no model to the probe: call "
                                   "probe.watch(model=..., optimizer=...) once before training")
            if self.mode == "mercurial" and not self._bad(step):
                return True
            self._act(step)
        except BitFlipError as exc:
            self._error(step, exc)
        return not self.done

    def close(self) -> None:
        self._disarm()

    # -- mechanics -----------------------------------------------------------------------
    def _bad(self, step: int) -> bool:
        return random.Random(f"{self.seed}/{self.fault_id}/{step}").random() < self.probability

    def _rng(self, step: int, call: int = 0) -> random.Random:
        # once and stuck_at keep one element; a mercurial core hits a new one each time.
        if self.mode == "mercurial":
            return random.Random(f"{self.seed}/{self.fault_id}/{step}/{call}/element")
        return random.Random(f"{self.seed}/{self.fault_id}/element")

    def _act(self, step: int) -> None:
        kind = self.spec.kind
        if kind in _HOOKED_KINDS:
            module = resolve(self.spec, self.model, self.optimizer)
            calls = [0]

            def on_forward(_module: Any, _inputs: Any, output: Any) -> Any:
                calls[0] += 1
                return self._hooked(step, calls[0], output)

            self._hooks.append(module.register_forward_hook(on_forward))
            return
        param = resolve(self.spec, self.model, self.optimizer)
        if kind == "grad" and self.phase == "before_allreduce":
            calls = [0]

            def on_grad(grad: Any) -> Any:
                calls[0] += 1
                return self._hooked(step, calls[0], grad)

            self._hooks.append(param.register_hook(on_grad))
            return
        if kind == "grad":
            tensor = param.grad
            if tensor is None:
                raise BitFlipError(f"{self.spec}: the parameter has no gradient at this point "
                                   "(is it used in the forward? does the script call "
                                   "probe.fault_point('after_backward', step=...) after backward?)")
        else:
            tensor = param
        self._corrupt(tensor, step, 1)
        if self.mode == "once":
            self.done = True

    def _hooked(self, step: int, call: int, output: Any) -> Any:
        """A hook's replacement for ``output`` (an activation or a gradient), corrupted."""
        if self.done or (self.mode == "once" and call > 1):
            return None
        target = output
        if isinstance(output, tuple | list):
            positions = [i for i, t in enumerate(output) if hasattr(t, "is_floating_point")
                         and t.is_floating_point()]
            if not positions:
                return None
            target = output[positions[0]]
        # A copy: the original may be saved for backward, and autograd checks that saved
        # tensors are not modified in place.
        corrupted = target.clone()
        try:
            self._corrupt(corrupted, step, call)
        except BitFlipError as exc:
            self._error(step, exc)
            return None
        if self.mode == "once":
            self.done = True
        if target is output:
            return corrupted
        items = list(output)
        items[positions[0]] = corrupted
        return type(output)(items)

    def _corrupt(self, tensor: Any, step: int, call: int) -> None:
        dtype = dtype_name(tensor)
        bit = bit_index(dtype, self.bit_spec)
        width = FLOAT_LAYOUTS[dtype][0]
        if self._element is None or self.mode == "mercurial":
            span = span_elements(width, bit, self.bits, self.burst)
            index = pick_element(tensor.numel(), self.element_spec, self._rng(step, call), span)
            if self.mode != "mercurial":
                self._element = index
        else:
            index = self._element
        if self.bits > 1 or self.burst > 1:
            positions = flip_positions(index, bit, width, self.bits, self.burst)
            changes = [(e, b, *flip_(tensor, e, b)) for e, b in positions]
            # before/after of the first element, as a single flip reports them; every
            # position flipped is in ``flips``
            first = [c for c in changes if c[0] == index]
            self._report(step, index, bit, dtype, first[0][2], float(_element_view(tensor, index)[0]),
                         flips=[[e, b] for e, b, _, _ in changes])
            return
        if self.mode == "stuck_at":
            if self.stuck_value is None:
                self.stuck_value = 1 - read_bit(tensor, index, bit)
            before, after = force_bit_(tensor, index, bit, int(self.stuck_value))
            if before == after or (before != before and after != after):
                return  # already stuck there: nothing changed this time
        else:
            before, after = flip_(tensor, index, bit)
        self._report(step, index, bit, dtype, before, after)

    def _report(self, step: int, index: int, bit: int, dtype: str, before: float, after: float,
                **more: Any) -> None:
        if not self.injected:
            self.injected = True
            shape = {"bits": self.bits, "burst": self.burst} if more else {}
            self._emit("fault_injected", fault=self.fault_id, type=self.fault_type, target=self.src,
                       step=step, point=self.point, mechanism="probe", tensor=str(self.spec),
                       mode=self.mode, **shape)
        self._emit("sdc_flip", fault=self.fault_id, step=step, tensor=str(self.spec), element=index,
                   bit=bit, dtype=dtype, before=before, after=after, mode=self.mode, **more)

    def _error(self, step: int | None, exc: Exception) -> None:
        self.done = True
        self._disarm()
        self._emit("fault_error", fault=self.fault_id, type=self.fault_type, target=self.src,
                   step=step, error=str(exc))

    def _disarm(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
