"""The scenario schema, declared once as pydantic models, and what is derived from it.

- ``models``: the scenario and suite files (every section, every key, its type, bounds,
  default and documentation);
- ``workload_doc``: the ``workload`` section, built from the registered workload kinds (each
  declares the keys it owns: ``Workload.section_fields``);
- ``errors``: pydantic's errors in the words and locations a scenario author reads;
- ``checks``: what needs more than one field (ranks vs the topology, fault types' params...);
- ``build``: a validated document -> the ``chaos.model.scenario`` records the runner reads;
- ``jsonschema``: the JSON Schema editors use (``trainchaos schema``);
- ``markdown``: the reference in docs/scenario.md (``trainchaos schema --markdown``).

Fault types declare their parameters (``FaultType.params_model``) and backends their options
(``options_model``) as models too; both join the JSON Schema and the reference.

This package module imports nothing, so that ``chaos.faults.base`` can build on
``chaos.model.types`` without an import cycle.
"""
