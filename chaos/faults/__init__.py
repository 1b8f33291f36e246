"""Fault families; importing this package registers every built-in fault type."""

from chaos.faults import network, power, process, scheduler, sdc, storage  # noqa: F401  (registers by import)
