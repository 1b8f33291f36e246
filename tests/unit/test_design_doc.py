"""docs/design.md says what the code is: a fault family, a workload kind, a package or a
stack example that the code has and the design leaves out, or a module the design names and
the code no longer has, fails here (as docs/scenario.md's reference does in test_schema)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from chaos.faults.family import families
from chaos.workload import known_workloads

ROOT = Path(__file__).resolve().parents[2]
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The text under ``## title``, up to the next ``## ``."""
    assert f"\n## {title}\n" in DESIGN, f"docs/design.md has no section {title!r}"
    return DESIGN.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the table whose header row starts with ``| header |``, by first cell."""
    assert f"| {header} |" in text, f"docs/design.md has no table headed {header!r} there"
    table = text.split(f"| {header} |", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def _named(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_layout_lists_every_fault_family_with_its_page() -> None:
    packages = sorted(p.name for p in (ROOT / "chaos" / "faults").iterdir() if (p / "__init__.py").is_file())
    rows = _table_rows(_section("Layout"), "family")
    assert sorted(name for cell in rows for name in _named(cell)) == packages
    for cell, (_, page) in rows.items():
        spec = families()[_named(cell)[0]]
        assert page == f"[{spec.docs}]({spec.docs})", f"{spec.name}'s page is {spec.docs}, the design says {page}"


def test_the_layout_lists_every_workload_kind() -> None:
    rows = _table_rows(_section("Layout"), "kind")
    assert sorted(name for cell in rows for name in _named(cell)) == sorted(known_workloads())


def test_the_layout_names_every_package_and_stack_example() -> None:
    layout = _section("Layout")
    packages = [p.name for p in (ROOT / "chaos").iterdir() if (p / "__init__.py").is_file()]
    for package in packages:
        assert f"`chaos/{package}/`" in layout, f"chaos/{package}/ is missing from the Layout table"
    examples = _table_rows(layout, "path")["`examples/`"][0]
    for stack in (p.name for p in (ROOT / "examples").iterdir() if (p / "train.py").is_file()):
        assert f"`{stack}`" in examples, f"examples/{stack}/ is missing from the Layout table"
    for top in ("harness", "scenarios", "gamedays", "benchmarks", "examples"):
        assert f"`{top}/`" in layout


@pytest.mark.parametrize("path", sorted(set(re.findall(
    r"`((?:chaos|harness|tests|benchmarks|examples|scenarios|gamedays)/[^`\s<*]*)`", DESIGN))))
def test_every_path_the_design_names_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"docs/design.md names {path}, which is gone"


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"\b(chaos(?:\.[A-Za-z_]\w*)+)", DESIGN))))
def test_every_dotted_name_the_design_names_resolves(dotted: str) -> None:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        break
    for attr in parts[split:]:
        assert hasattr(obj, attr), f"docs/design.md names {dotted}: {'.'.join(parts[:split])} has no {attr}"
        obj = getattr(obj, attr)


def test_the_design_holds_no_dated_measurement() -> None:
    """Figures and their dates live in docs/testing.md and the README's Figures."""
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", DESIGN)
