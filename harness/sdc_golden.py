"""The golden self-test of the silent-corruption detectors (harness.sdc, ``golden``): a test
of a rank's arithmetic, not of its weights."""

from __future__ import annotations

import struct

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GOLDEN_BATCH", "GoldenSelfTest"]

GOLDEN_BATCH = 1
"""Sequences in the golden self-test's fixed batch: one full-length sequence runs every
module and every kernel of a step (a mercurial core's flip hits any forward); a second one
added a third to the test's time (8.2 -> 6.0 ms here), not coverage."""


class GoldenSelfTest:
    """A fixed batch through forward and backward with frozen initial weights, compared
    bitwise with the result this rank computed at start.

    Runs through the live model's modules (``torch.func.functional_call`` swaps the golden
    weights in), so whatever corrupts this rank's arithmetic -- a faulty core, or an
    injected fault hooked on a module -- corrupts the self-test too; the training weights
    are not involved, so a corrupted weight does not fail it.
    """

    def __init__(self, model: nn.Module, initial: nn.Module, tokens: torch.Tensor, seq_len: int,
                 batch: int = GOLDEN_BATCH) -> None:
        self.model = model
        self.params = {name: p.detach().clone().requires_grad_(True)
                       for name, p in initial.named_parameters()}
        n = batch * seq_len
        # on the model's device: a faulty GPU core must compute the self-test too
        device = next(iter(self.params.values())).device
        self.x = tokens[:n].reshape(batch, seq_len).to(device)
        self.y = tokens[1:n + 1].reshape(batch, seq_len).to(device)
        # The result kept whole, compared byte for byte (a memcmp): a tenth of hashing the
        # gradients again at every test, for one more copy of them.
        self.reference = [bytearray(part) for part in self._run()]

    def _run(self) -> list[memoryview]:
        """The loss's bytes and every gradient's, as computed now."""
        from torch.func import functional_call

        logits = functional_call(self.model, self.params, (self.x,))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), self.y.reshape(-1))
        grads = torch.autograd.grad(loss, list(self.params.values()))
        return [memoryview(struct.pack("<d", float(loss.detach())))] + [
            grad.contiguous().reshape(-1).view(torch.uint8).cpu().numpy().data for grad in grads]

    def passes(self) -> bool:
        return self.reference == self._run()  # bytearray first: its == is one memcmp
