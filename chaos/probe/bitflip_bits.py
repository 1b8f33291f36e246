"""The bit arithmetic of the ``bitflip`` fault: which bit of which element of a tensor, and
flipping or forcing it in the element's own storage.

An element is addressed by its row-major index in the tensor's logical shape, whatever its
strides (a transposed weight, a sliced activation), and the bit is flipped in the element's
own storage, for every floating dtype. ``bits: N`` flips N adjacent bits of memory from the
given one upward; past the element's top bit they go on in the lowest bits of the next
element (the next word in memory of a contiguous tensor): a multi-bit upset, in one word or
two adjacent ones. ``burst: L`` does the same to L consecutive elements: a run of corrupted
words (a cache line, a DMA burst). ``flip_positions`` lays them out.

torch is imported inside the functions that need it (the probe loads this module when a
bitflip fires, in processes that may not have imported torch yet).
"""

from __future__ import annotations

import random
from typing import Any

__all__ = [
    "FLOAT_LAYOUTS",
    "NAMED_BITS",
    "BitFlipError",
    "bit_index",
    "dtype_name",
    "element_view",
    "flip_",
    "flip_positions",
    "force_bit_",
    "layout_text",
    "pick_element",
    "read_bit",
    "span_elements",
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


class BitFlipError(ValueError):
    """A bitflip that cannot be applied: an unknown tensor, a bit outside the dtype..."""



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


def element_view(tensor: Any, index: int) -> Any:
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
    _, as_int = element_view(tensor, index)
    return (int(as_int) >> bit) & 1


def flip_(tensor: Any, index: int, bit: int) -> tuple[float, float]:
    """Flip ``bit`` of the element at ``index`` in place; returns (before, after)."""
    import torch

    with torch.no_grad():
        element, as_int = element_view(tensor, index)
        before = float(element)
        as_int.bitwise_xor_(_mask(bit, tensor.element_size() * 8))
        return before, float(element)


def force_bit_(tensor: Any, index: int, bit: int, value: int) -> tuple[float, float]:
    """Set ``bit`` of the element at ``index`` to ``value`` (stuck-at); returns (before, after)."""
    import torch

    with torch.no_grad():
        element, as_int = element_view(tensor, index)
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
