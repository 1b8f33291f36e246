"""chaos.contract: the one home of the names the controller and the training job share."""

from __future__ import annotations

import ast
import pathlib

import pytest

from chaos import contract

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "chaos" / "contract.py"


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String and bytes literals of a module that are not prose (a docstring, or the
    docstring-like string after a field)."""
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and id(node) not in prose:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            out.append((node.lineno, text))
    return out


def test_the_contract_imports_nothing() -> None:
    """The probe loads it into every rank of a user's job: it must cost nothing."""
    tree = ast.parse(CONTRACT.read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [ast.unparse(node) for node in imports] == ["from __future__ import annotations"]


def test_every_name_is_exported_and_distinct() -> None:
    names = {name: getattr(contract, name) for name in contract.__all__}
    env = [value for name, value in names.items() if name.endswith("_ENV")]
    assert env and all(value.startswith(contract.ENV_PREFIX) for value in env)
    assert len(set(env)) == len(env)


@pytest.mark.parametrize("package", ["chaos", "harness"])
def test_no_trainchaos_variable_is_spelled_outside_the_contract(package: str) -> None:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if path == CONTRACT:
            continue
        for line, text in _code_strings(ast.parse(path.read_text())):
            if contract.ENV_PREFIX in text:
                found.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert found == [], "use chaos.contract's names:\n" + "\n".join(found)


def test_the_probe_loads_no_other_part_of_trainchaos() -> None:
    """Every rank of a user's job imports the probe: it brings the contract and the hold
    protocol (both standard library only) and nothing else of the framework (no pydantic,
    no torch, no harness)."""
    import os
    import subprocess
    import sys

    code = ("import sys, chaos.probe; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('chaos', 'harness', 'torch', 'pydantic', 'yaml')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == str(["chaos", "chaos.contract", "chaos.probe", "chaos.probe.actions", "chaos.probe.core",
                                      "chaos.probe.digest", "chaos.probe.hold"])
