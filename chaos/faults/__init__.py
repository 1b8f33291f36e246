"""Fault families, one package each (``chaos/faults/<family>/``), each registering one
``chaos.faults.family.FamilySpec``; ``base`` is the fault-type interface and its registry.
Importing this package imports no family: the registries load them on first lookup."""
