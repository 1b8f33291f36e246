"""The fault-family seam (docs/design.md, "Fault types and families"): each family is one
package registering one ``FamilySpec`` that carries what it contributes, and the engine
names no family. Read from the source with ``ast``, like the import contract."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chaos import probe
from chaos.faults.base import known_types
from chaos.faults.family import FAMILIES, families
from chaos.metrics.registry import families as metric_families

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "chaos" / "faults"
BUILTIN = ("container", "network", "power", "process", "scheduler", "sdc", "storage")


def test_every_package_under_chaos_faults_is_a_registered_family() -> None:
    packages = sorted(p.name for p in FAULTS.iterdir() if (p / "__init__.py").is_file())
    assert packages == list(BUILTIN)
    assert set(BUILTIN) <= set(families())
    assert FAMILIES.group == "trainchaos.families"


@pytest.mark.parametrize("name", BUILTIN)
def test_a_family_carries_its_types_metrics_and_capabilities(name: str) -> None:
    spec = families()[name]
    types = spec.fault_types()
    assert types, f"family {name} registers no fault type"
    for type_name, cls in types.items():
        # a type lives in its family's package, and the spec names its module
        assert cls.__module__.startswith(f"chaos.faults.{name}."), (type_name, cls.__module__)
        assert cls.__module__ in spec.fault_modules
        assert set(cls.requires) <= set(spec.requires())
    if spec.metrics is not None:
        assert spec.metrics.name == name
        assert spec.metrics in metric_families()
    assert spec.docs == "" or (ROOT / "docs" / spec.docs).is_file()


def test_every_fault_type_belongs_to_a_registered_family() -> None:
    orphans = {t: cls.family for t, cls in known_types().items()
               if cls.__module__.startswith("chaos.faults.") and cls.family not in families()}
    assert orphans == {}


def test_the_probe_actions_a_family_lists_are_the_ones_its_types_fire_and_the_probe_knows() -> None:
    from chaos.cluster.base import ResolvedTarget

    for name, spec in families().items():
        assert set(spec.probe_actions) <= set(probe.known_actions()), name
        fired: set[str] = set()
        for cls in spec.fault_types().values():
            if cls.in_process:
                params = cls.params_model.model_construct().model_dump()
                fault = cls("f0", ResolvedTarget(ranks=(0,)), params=params)
                try:
                    fired |= {a["action"] for a in fault.probe_actions()}
                except (KeyError, TypeError, ValueError):
                    continue  # params a real scenario must give; the declared list is checked above
        assert fired <= set(spec.probe_actions), (name, fired)


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of ``path`` that are code, not docstrings."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_fault_asks_the_backend_with_hasattr_or_getattr() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(FAULTS.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "hasattr(cluster" in line or "getattr(cluster" in line]
    assert found == [], "ask for a capability with ctx.require(...) (chaos/cluster/capabilities.py)"
