"""Strict JSON values from anything the framework records (metrics, verdicts, journals)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["jsonable"]


def jsonable(obj: Any) -> Any:
    """Plain JSON values: NaN/inf become None (strict parsers such as jq reject them),
    tuples and sets become lists, dataclasses dicts. Anything else is left to ``default=str``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return [jsonable(v) for v in sorted(obj, key=str)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    return obj
