"""The tensors a ``bitflip`` can reach, by name: parsing a name, the catalog of a model's
names, and resolving one to the live tensor or module.

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

torch is imported inside the functions that need it (the probe loads this module when a
bitflip fires, in processes that may not have imported torch yet).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chaos.probe.bitflip_bits import BitFlipError, dtype_name

__all__ = [
    "HOOKED_KINDS",
    "TensorSpec",
    "check_name",
    "compress_names",
    "describe_valid",
    "parse_spec",
    "resolve",
    "tensor_catalog",
    "unwrap",
]

HOOKED_KINDS = ("act", "gemm_output")
"""Corrupted through a forward hook on a module, not in place at a step boundary."""



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
    if spec.kind in HOOKED_KINDS:
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
