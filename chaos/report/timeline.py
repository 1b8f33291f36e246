"""``timeline.csv`` and ``timeline.parquet``: every event of a run in one ordered table.

Columns: ``t``, ``t_rel`` (seconds since the first event), ``src``, ``incarnation``, ``kind``,
then the union of every other field in order of first appearance. Nested values (dicts,
lists) are JSON-encoded strings, and a column that mixes types (``code`` an int here, a
string there) is written as strings, so that one odd event never loses the whole table.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import TYPE_CHECKING, Any

from chaos.rundir import TIMELINE_CSV, TIMELINE_PARQUET

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TIMELINE_COLUMNS", "timeline_frame", "write_timeline"]

log = logging.getLogger(__name__)

TIMELINE_COLUMNS: tuple[str, ...] = ("t", "t_rel", "src", "incarnation", "kind")
CSV_NAME = TIMELINE_CSV
PARQUET_NAME = TIMELINE_PARQUET


def write_timeline(run_dir: str, events: list[dict[str, Any]]) -> list[str]:
    """Write the CSV (always) and the Parquet file (when pyarrow can); returns the paths written."""
    os.makedirs(run_dir, exist_ok=True)
    frame = timeline_frame(events)
    written = []
    csv_path = os.path.join(run_dir, CSV_NAME)
    _replace_atomically(csv_path, lambda tmp: frame.to_csv(tmp, index=False))
    written.append(csv_path)
    parquet_path = os.path.join(run_dir, PARQUET_NAME)
    try:
        _replace_atomically(parquet_path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))
    except Exception as exc:  # noqa: BLE001 - the CSV holds the same data; never fail a run here
        log.warning("timeline.parquet not written (%s: %s); timeline.csv has the same data",
                    type(exc).__name__, exc)
    else:
        written.append(parquet_path)
    return written


def timeline_frame(events: list[dict[str, Any]]) -> pd.DataFrame:
    """Events as a DataFrame ordered by ``t`` (ties keep their input order)."""
    # Imported here: pandas costs every command that imports the report package about a
    # second (cleanup, gameday, compare), and only writing a timeline needs it.
    import pandas as pd

    events = [e for e in events if isinstance(e, dict)]
    times = [_as_time(e.get("t")) for e in events]
    order = sorted(range(len(events)), key=lambda i: (math.isnan(times[i]), times[i]))
    events = [events[i] for i in order]
    times = [times[i] for i in order]
    extra: dict[str, None] = {}  # ordered set: fields in order of first appearance in time
    for event in events:
        for key in event:
            if key not in TIMELINE_COLUMNS:
                extra.setdefault(str(key), None)
    finite = [t for t in times if not math.isnan(t)]
    t0 = finite[0] if finite else math.nan
    data: dict[str, Any] = {
        "t": pd.Series(times, dtype="float64"),
        "t_rel": pd.Series([t - t0 for t in times], dtype="float64"),
    }
    for name in ("src", "incarnation", "kind", *extra):
        data[name] = _column([e.get(name) for e in events])
    return pd.DataFrame(data, columns=list(TIMELINE_COLUMNS) + list(extra))


def _as_time(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _encode(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple, set)):
        if isinstance(value, set):
            value = sorted(value, key=str)
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _column(values: list[Any]) -> pd.Series:
    import pandas as pd

    """One column with the narrowest type that holds every value (nullable where needed)."""
    values = [_encode(v) for v in values]
    present = [v for v in values if v is not None]
    kinds = {type(v) for v in present}
    if not present:
        return pd.Series(values, dtype="object")
    if kinds == {bool}:
        return pd.Series(values, dtype="boolean")
    if kinds == {int}:
        return pd.Series(values, dtype="Int64")
    if kinds <= {int, float}:
        return pd.Series([math.nan if v is None else float(v) for v in values], dtype="float64")
    if kinds == {str}:
        return pd.Series(values, dtype="object")
    return pd.Series([None if v is None else str(v) for v in values], dtype="object")


def _replace_atomically(path: str, write) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
