"""Fault families, one module each. Their types register with ``chaos.faults.base.FAULT_TYPES``
when the registry first loads them (it lists them by module name): importing this package
imports no family."""
