"""The regression gate's input error (exit 2)."""

from __future__ import annotations

from chaos.errors import EXIT_BAD_INPUT, ChaosError

__all__ = ["ComparisonInputError"]


class ComparisonInputError(ChaosError):
    """Inputs that cannot be compared: a missing or unreadable suite output, or suites that
    do not hold the same scenarios."""

    exit_code = EXIT_BAD_INPUT
