"""Fault families; importing this package registers every built-in fault type."""

from chaos.faults import process, sdc  # noqa: F401  (registers by import)
