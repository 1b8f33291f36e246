"""A whole fault family from outside trainchaos, as another team would ship one: the ``toy``
family (``tests/integration/test_toy_family.py`` loads it through the ``trainchaos.families``
entry point of a dist-info the test writes, and runs it for real). Nothing of trainchaos was
edited for it; everything it adds is in this package:

- one fault type, ``toy_ballast`` (``faults.py``): a node gets a ballast file of ``mb`` MiB
  in the run directory, taken back when the fault is reverted;
- one run-scoped resource kind, ``toy_ballast_file`` (``resources.py``): the ballast file,
  journaled before it exists and removed at the end of the run or by ``trainchaos cleanup``;
- one metric with a target, ``toy_ballast_mb`` (``metrics.py``): the MiB of ballast the run's
  toy faults held, gated by ``trainchaos compare``.

The spec is all this module imports (its metrics are plain functions): the fault types and
resource kinds are named, loaded only when their registries are.
"""

from __future__ import annotations

from chaos.faults.family import FamilySpec, register_family
from toy_family.metrics import METRICS

__all__ = ["FAMILY"]

FAMILY = register_family(FamilySpec(
    "toy", "a ballast file on a node (a test's family, loaded through an entry point)",
    fault_modules=("toy_family.faults",),
    metrics=METRICS,
    resource_modules=("toy_family.resources",)))
