"""The regression gate's input error (exit 2)."""

from __future__ import annotations

from chaos.runfiles.suite_record import SuiteRecordError

__all__ = ["ComparisonInputError"]

ComparisonInputError = SuiteRecordError
"""Inputs that cannot be compared: a missing, unreadable, malformed or newer suite output
(what ``load_suite_record`` refuses), or suites that do not hold the same scenarios. One
class, not two: a caller that catches the gate's input errors must also catch the loader's,
since the gate reads suite.json only through it."""
