"""The typed scenario: the records the engine consumes (``scenario``), the one
interpreter of each target form and trigger form, and the strict pydantic building
blocks (``types``) that fault types, backends and the schema declare their
parameters with. Imports no fault, backend or workload: they build on it.
"""
