"""Fault families; importing this package registers every built-in fault type."""

from chaos.faults import network, process, scheduler, sdc  # noqa: F401  (registers by import)
