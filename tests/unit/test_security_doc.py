"""docs/security.md explains every bandit finding the lint lets through: each test skipped in
pyproject.toml's [tool.bandit], and each line marked ``# nosec`` (its file and test id), so
a new exemption without its reason fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")


def test_every_skipped_bandit_test_is_explained() -> None:
    skips = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["bandit"]["skips"]
    assert skips, "make lint's bandit skips nothing: the table in docs/security.md says otherwise"
    missing = [test for test in skips if not re.search(rf"\b{test}\b", DOC)]
    assert missing == [], f"skipped in pyproject.toml, not explained in docs/security.md: {missing}"


def test_every_nosec_line_is_explained() -> None:
    marked = sorted({(str(path.relative_to(ROOT)), test)
                     for package in ("chaos", "harness") for path in (ROOT / package).rglob("*.py")
                     for line in path.read_text(encoding="utf-8").splitlines()
                     for test in re.findall(r"# nosec (B\d+)", line)})
    assert marked, "no line is marked nosec: the table in docs/security.md says otherwise"
    rows = [line for line in DOC.splitlines() if line.startswith("| ") and "/" in line]
    missing = [(path, test) for path, test in marked if not any(path in row and test in row for row in rows)]
    assert missing == [], f"marked nosec, without a row in docs/security.md: {missing}"
