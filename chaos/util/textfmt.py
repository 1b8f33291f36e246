"""A value as the reports and the verdict's sentences write it (stdlib only): below both the
run record (a check without a reason) and the report writers."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["DASH", "fmt_value"]

DASH = "—"
"""What a table shows for a value nobody knows."""


def fmt_value(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in value.items()) or DASH
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v) for v in value) or DASH
    return str(value)
