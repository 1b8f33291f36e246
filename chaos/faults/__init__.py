"""Fault families; importing this package registers every built-in fault type."""

from chaos.faults import process  # noqa: F401  (registers by import)
