"""Exact checksums and digests of tensors: what the replica comparisons of the silent-
corruption detectors compare (harness.sdc).

``param_digest`` is the sha256 of the parameters (the ``digest`` detector, and a checkpoint's
``param_sha256``); ``bits_checksum`` / ``BitsChecksum`` is the exact integer checksum of the
bits of any tensors (the ``fingerprint`` detector, every step): cheap enough to run every
step, and still certain to see one flipped bit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import nn

__all__ = ["BitsChecksum", "ParamDigest", "bits_checksum", "device_checksum", "digest_words", "optimizer_tensors", "param_digest",
           "update_fingerprint", "words_of"]

DIGEST_WORDS = 4
"""A sha256 digest in the evidence row: its first 4 x 48 bits."""
_WORD_BYTES = 6  # 48-bit words: exact in a float64
_CHECKSUM_BITS = 64
_WORD = 8  # bytes of one checksum word
_SUMMED_IN_PLACE = 1 << 16
"""Bytes from which a tensor is summed where it lies rather than copied with the small ones."""
_CHECKSUM_WORD_BITS = 32  # two 32-bit words per checksum: exact in a float64


def param_digest(model: nn.Module) -> bytes:
    """sha256 over every parameter's bytes, in name order."""
    return ParamDigest(model)()


class ParamDigest:
    """``param_digest`` of one model, again and again (every ``digest_every`` steps): the
    parameters' name order and their byte views are made once and kept, as
    ``BitsChecksum`` keeps them, so a digest costs the hashing and little more. Parameters
    that lie one after the other in name order in one buffer (``harness.model``'s flat
    parameters) are hashed in one pass over it: the same bytes in the same order."""

    def __init__(self, model: nn.Module) -> None:
        self._params = [param for _, param in sorted(model.named_parameters())]
        self._key: list[int] | None = None
        self._views: list[np.ndarray] = []

    def __call__(self) -> bytes:
        if self._params and self._params[0].device.type != "cpu":
            # a device's memory has no numpy view to keep: its bytes are copied to the host
            # each time (once per digest_every steps and per checkpoint)
            self._views = [_bytes_of(p).cpu().numpy() for p in self._params]
            self._key = None
        else:
            self._refresh_views()
        digest = hashlib.sha256()
        for view in self._views:
            digest.update(view.data)
        return digest.digest()

    def _refresh_views(self) -> None:
        key = _layout(self._params)
        if key is None or key != self._key:
            region = _tiled_region(self._params, ordered=True)
            self._views = [region] if region is not None else [_bytes_of(p).numpy() for p in self._params]
            self._key = key


def _layout(tensors: Sequence[torch.Tensor]) -> list[int] | None:
    """Where the tensors lie: what a kept view of them depends on. None when one is not
    contiguous: its flat view is a copy, so it is viewed afresh every time."""
    if not all(t.is_contiguous() for t in tensors):
        return None
    return [t.data_ptr() for t in tensors]


def _tiled_region(tensors: Sequence[torch.Tensor], ordered: bool) -> np.ndarray | None:
    """A byte view of the memory ``tensors`` cover when they tile it exactly, one right
    after the other in one storage (in the order given if ``ordered``, else in any order);
    None when they do not (a gap, an overlap, two storages, a layout that is not
    contiguous). Empty tensors are left out: they cover nothing."""
    tensors = [t for t in tensors if t.numel()]
    if not tensors or any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        return None
    storage = tensors[0].untyped_storage()
    if any(t.untyped_storage().data_ptr() != storage.data_ptr() for t in tensors[1:]):
        return None
    spans = [(t.data_ptr(), t.numel() * t.element_size()) for t in tensors]
    if not ordered:
        spans.sort()
    start = end = spans[0][0]
    for address, size in spans:
        if address != end:
            return None
        end += size
    region = torch.empty(0, dtype=torch.uint8).set_(storage, start - storage.data_ptr(), (end - start,), (1,))
    return region.numpy()


def bits_checksum(tensors: Iterable[torch.Tensor]) -> int:
    """The sum of the tensors' bits read as 64-bit integer words, mod 2^64.

    The words: a tensor whose size is a whole number of words is read as words on its own;
    the bytes of the others, one after the other in the order given, zero-padded to a whole
    word, are read as words together (each tensor in its logical order, whatever its
    layout in memory). The sum is taken with two's-complement wrap-around: addition mod 2^64
    is exact in any order, so equal tensors give equal checksums on every machine, whatever
    its kernels, and every byte is read once, whatever the dtypes. One flipped bit (bit k of
    a word) changes the sum by exactly +-2^k, never 0 mod 2^64: a single flip is always
    seen, and so are several bits of one word (the lowest of them decides). Flips in
    different words can cancel (bit k set in one and cleared in another); the sha256 digest
    before checkpoints covers that.
    """
    return BitsChecksum()(list(tensors))


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


class BitsChecksum:
    """``bits_checksum`` for tensors that are checksummed again and again (the parameters
    every step), at about the cost of reading their bytes once.

    The byte views are made once and kept: the optimizer and ``load_state_dict`` write into
    the tensors in place, so a view keeps seeing their bits; a tensor whose storage was
    swapped (``param.data = ...``, a gradient made afresh) or that is not contiguous (its
    flat view is a copy) is viewed afresh. Large tensors are summed where they lie; the
    small ones are copied into one buffer made once and summed together: summing each on
    its own costs a few dispatches apiece, and a fresh buffer each step a page fault per
    4 KiB -- for a model of many small tensors, most of the time. The views are numpy
    arrays on the tensors' memory (CPU tensors): a numpy sum or copy costs about a
    microsecond to call where a torch op costs several, which is a third of the checksum
    of 42 separate tensors of 1.4 MB (numpy's integer sum wraps around too). Tensors that
    tile one buffer in whole words (the harness's flat parameters, ``harness.model``) are
    summed as that buffer, in one call."""

    def __init__(self) -> None:
        self._key: list[int] | None = None
        self._direct: list[np.ndarray] = []
        self._packed: list[np.ndarray] = []
        self._buffer = np.zeros(0, dtype=np.uint8)
        self._target = self._buffer

    def __call__(self, tensors: list[torch.Tensor]) -> int:
        if tensors and tensors[0].device.type != "cpu":
            return device_checksum(tensors)
        key = _layout(tensors)
        if key is None or key != self._key:
            self._plan(tensors)
            self._key = key
        total = 0
        if self._packed:
            np.concatenate(self._packed, out=self._target)
            total = int(self._buffer.view(np.int64).sum())
        for words in self._direct:
            total += int(words.sum())  # in int64: wraps around, mod 2^64
        return total % (1 << _CHECKSUM_BITS)

    def _plan(self, tensors: list[torch.Tensor]) -> None:
        region = _tiled_region(tensors, ordered=False)
        if (region is not None and region.ctypes.data % _WORD == 0
                and all(t.numel() * t.element_size() % _WORD == 0 for t in tensors)):
            # Whole words that tile one buffer (harness.model's flat parameters): every
            # tensor starts at a word of it, so the buffer's words are the tensors' words,
            # summed in one pass.
            self._direct, self._packed = [region.view(np.int64)], []
            self._buffer = self._target = np.zeros(0, dtype=np.uint8)
            return
        direct, packed, rest = [], [], []
        for view in (_bytes_of(t).numpy() for t in tensors):
            if view.size % _WORD:
                rest.append(view)
            elif view.size >= _SUMMED_IN_PLACE and view.ctypes.data % _WORD == 0:
                direct.append(view.view(np.int64))
            else:
                packed.append(view)
        # whole-word tensors first: each of them starts at a word in the buffer too, so
        # where it is summed does not change the words
        self._direct, self._packed = direct, packed + rest
        size = sum(v.size for v in self._packed)
        if self._buffer.size != -(-size // _WORD) * _WORD:
            # zeros: the pad after the last byte is never written, and must read as 0
            self._buffer = np.zeros(-(-size // _WORD) * _WORD, dtype=np.uint8)
        self._target = self._buffer[:size]


def device_checksum(tensors: Sequence[torch.Tensor]) -> int:
    """``bits_checksum`` of tensors in a device's memory, equal to the host's for the same
    bits (a CUDA rank and a CPU rank compare their rows). The whole-word tensors are summed
    where they lie, as 64-bit words (a wrapping integer sum, exact mod 2^64 in any order);
    only the bytes of the others cross to the host, packed in the order given, as
    ``BitsChecksum`` packs them. One host sync for the device's part."""
    whole = [t for t in tensors if t.numel() and t.numel() * t.element_size() % _WORD == 0]
    rest = [_bytes_of(t).cpu().numpy() for t in tensors
            if t.numel() and t.numel() * t.element_size() % _WORD]
    total = 0
    if whole:
        sums = torch.stack([_words_of(_bytes_of(t)).sum() for t in whole])
        total = int(sums.sum())
    if rest:
        size = sum(v.size for v in rest)
        packed = np.zeros(-(-size // _WORD) * _WORD, dtype=np.uint8)
        np.concatenate(rest, out=packed[:size])
        total += int(packed.view(np.int64).sum())
    return total % (1 << _CHECKSUM_BITS)


def _words_of(data: torch.Tensor) -> torch.Tensor:
    """Bytes as 64-bit words; a tensor that does not start at a word (a parameter after one
    of an odd number of floats in the flat buffer) is copied first: a view cannot move it."""
    return (data if data.data_ptr() % _WORD == 0 else data.clone()).view(torch.int64)


def update_fingerprint(params: Iterable[torch.Tensor], grads: Iterable[torch.Tensor] | None = None,
                       optim_state: Iterable[torch.Tensor] | None = None) -> tuple[int, int, int]:
    """(parameters, gradients, optimizer state) checksums (``bits_checksum``); a part not
    given is 0."""
    return (bits_checksum(params), bits_checksum(grads) if grads is not None else 0,
            bits_checksum(optim_state) if optim_state is not None else 0)


def words_of(checksum: int) -> list[float]:
    """A 64-bit checksum as two 32-bit words, each exact in a float64 (the evidence table)."""
    mask = (1 << _CHECKSUM_WORD_BITS) - 1
    return [float(checksum >> _CHECKSUM_WORD_BITS), float(checksum & mask)]


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's floating state (exp_avg, exp_avg_sq...), in a fixed order."""
    out = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            for _key, value in sorted(optimizer.state.get(param, {}).items()):
                if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() > 0:
                    out.append(value)
    return out


def digest_words(digest: bytes) -> list[float]:
    return [float(int.from_bytes(digest[i * _WORD_BYTES:(i + 1) * _WORD_BYTES], "big"))
            for i in range(DIGEST_WORDS)]
