"""``timeline.csv`` and ``timeline.parquet``: every event of a run in one ordered table.

Columns: ``t``, ``t_rel`` (seconds since the first event), ``src``, ``incarnation``, ``kind``,
then the union of every other field in order of first appearance. Nested values (dicts,
lists) are JSON-encoded strings, and a column that mixes types (``code`` an int here, a
string there) is written as strings, so that one odd event never loses the whole table.

Every run writes both, so they are written without pandas (the csv module and pyarrow):
importing pandas cost each controller process about 0.4 CPU-s more than pyarrow alone, paid
by every ``trainchaos run`` of a test suite. ``timeline_frame`` gives the same table as a
DataFrame for a script that wants one.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chaos.runfiles.rundir import TIMELINE_CSV, TIMELINE_PARQUET

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TIMELINE_COLUMNS", "timeline_frame", "write_timeline"]

log = logging.getLogger(__name__)

TIMELINE_COLUMNS: tuple[str, ...] = ("t", "t_rel", "src", "incarnation", "kind")
CSV_NAME = TIMELINE_CSV
PARQUET_NAME = TIMELINE_PARQUET


@dataclass(frozen=True)
class _Column:
    """One column: its name, the narrowest type that holds every value (``null``, ``bool``,
    ``int``, ``float`` or ``str``) and its values (None where an event has none)."""

    name: str
    kind: str
    values: list[Any]


def write_timeline(run_dir: str, events: list[dict[str, Any]]) -> list[str]:
    """Write the CSV (always) and the Parquet file (when pyarrow can); returns the paths written."""
    os.makedirs(run_dir, exist_ok=True)
    columns = _columns(events)
    written = []
    csv_path = os.path.join(run_dir, CSV_NAME)
    _replace_atomically(csv_path, lambda tmp: _write_csv(tmp, columns))
    written.append(csv_path)
    parquet_path = os.path.join(run_dir, PARQUET_NAME)
    try:
        _replace_atomically(parquet_path, lambda tmp: _write_parquet(tmp, columns))
    except Exception as exc:  # noqa: BLE001 - the CSV holds the same data; never fail a run here
        log.warning("timeline.parquet not written (%s: %s); timeline.csv has the same data",
                    type(exc).__name__, exc)
    else:
        written.append(parquet_path)
    return written


def timeline_frame(events: list[dict[str, Any]]) -> pd.DataFrame:
    """Events as a DataFrame ordered by ``t`` (ties keep their input order), with nullable
    column types (``Int64``, ``boolean``)."""
    import pandas as pd

    dtypes = {"null": "object", "bool": "boolean", "int": "Int64", "float": "float64", "str": "object"}
    columns = _columns(events)
    return pd.DataFrame({c.name: pd.Series(_floats(c) if c.kind == "float" else c.values, dtype=dtypes[c.kind])
                         for c in columns}, columns=[c.name for c in columns])


def _columns(events: list[dict[str, Any]]) -> list[_Column]:
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
    columns = [_Column("t", "float", times), _Column("t_rel", "float", [t - t0 for t in times])]
    for name in ("src", "incarnation", "kind", *extra):
        columns.append(_column(name, [e.get(name) for e in events]))
    return columns


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


def _column(name: str, values: list[Any]) -> _Column:
    """One column with the narrowest type that holds every value (nullable where needed)."""
    values = [_encode(v) for v in values]
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return _Column(name, "null", values)
    if kinds == {bool}:
        return _Column(name, "bool", values)
    if kinds == {int}:
        return _Column(name, "int", values)
    if kinds <= {int, float}:
        return _Column(name, "float", [None if v is None else float(v) for v in values])
    if kinds == {str}:
        return _Column(name, "str", values)
    return _Column(name, "str", [None if v is None else str(v) for v in values])


def _floats(column: _Column) -> list[float]:
    return [math.nan if v is None else v for v in column.values]


def _csv_cell(value: Any) -> Any:
    """As pandas' ``to_csv`` writes it: a missing value (None, NaN) empty, a float by ``repr``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else value


def _write_csv(path: str, columns: list[_Column]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow([c.name for c in columns])
        writer.writerows(zip(*([_csv_cell(v) for v in c.values] for c in columns), strict=True))


def _write_parquet(path: str, columns: list[_Column]) -> None:
    """Through pyarrow's JSON reader, rows as JSON lines under an explicit schema: building the
    arrays from Python lists (``pyarrow.array``) imports pandas to check for its types."""
    import io

    import pyarrow as pa
    import pyarrow.json as pa_json
    import pyarrow.parquet as pq

    types = {"null": pa.null(), "bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    schema = pa.schema([(c.name, types[c.kind]) for c in columns])
    names = [c.name for c in columns]
    rows = "\n".join(json.dumps(dict(zip(names, row, strict=True)), allow_nan=False)
                     for row in zip(*(_json_values(c) for c in columns), strict=True))
    table = (pa_json.read_json(io.BytesIO(rows.encode()), parse_options=pa_json.ParseOptions(explicit_schema=schema))
             if rows else schema.empty_table())
    # The schema's "pandas" metadata, as pandas' to_parquet writes it: pd.read_parquet then
    # gives the nullable types timeline_frame has (Int64, boolean), not floats and objects.
    pandas_types = {"null": ("empty", "object"), "bool": ("bool", "boolean"), "int": ("int64", "Int64"),
                    "float": ("float64", "float64"), "str": ("unicode", "object")}
    described = [{"name": c.name, "field_name": c.name, "pandas_type": pandas_types[c.kind][0],
                  "numpy_type": pandas_types[c.kind][1], "metadata": None} for c in columns]
    pandas = {"index_columns": [], "column_indexes": [], "columns": described, "attributes": {},
              "creator": {"library": "pyarrow", "version": pa.__version__}}
    pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas)}), path)


def _json_values(column: _Column) -> list[Any]:
    """A column's values as JSON holds them: a NaN is missing (null), as in pandas' Parquet."""
    return [None if isinstance(v, float) and math.isnan(v) else v for v in column.values]


def _replace_atomically(path: str, write) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
