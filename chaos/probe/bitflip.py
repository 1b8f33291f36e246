"""Bit-level corruption of live tensors: the mechanics of the ``bitflip`` fault.

The probe loads this module when a bitflip fires (never at import: the probe is imported by
every rank and stays standard-library only). torch is imported inside the functions that
need it.

This module is the fault in effect on a rank (``Episode``); the bit arithmetic lives in
``chaos.probe.bitflip_bits``, the tensor names (which the scenario checks use too) in
``chaos.probe.bitflip_names``.
"""

from __future__ import annotations

import random
from typing import Any

from chaos.probe.bitflip_bits import (
    FLOAT_LAYOUTS,
    BitFlipError,
    bit_index,
    dtype_name,
    element_view,
    flip_,
    flip_positions,
    force_bit_,
    pick_element,
    read_bit,
    span_elements,
)
from chaos.probe.bitflip_names import HOOKED_KINDS, parse_spec, resolve

__all__ = ["Episode"]


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
        if kind in HOOKED_KINDS:
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
            self._report(step, index, bit, dtype, first[0][2], float(element_view(tensor, index)[0]),
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
