"""What the scenario fuzz tests share: hostile documents (the shipped scenarios mutated, and
documents generated from the project's own JSON Schema, then mutated) and the one judge
every document goes through (what ``trainchaos validate`` and ``run --dry-run`` do, in
process) with its budget: exit 0 or 2 only, every rejection located, within 2 s and 200 MB.

Used by tests/unit/test_fuzz_scenarios.py, tests/unit/test_fuzz_schema.py and the soak
(``make test-fuzz``, tests/fuzz_soak.py).
"""

from __future__ import annotations

import contextlib
import copy
import io
import resource
import time
import types
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from chaos.errors import EXIT_BAD_INPUT, ChaosError, ScenarioError, ValidationIssue

REPO = Path(__file__).resolve().parents[2]
# scenarios/gpu/ asks for a CUDA device: it validates on a GPU host only (refused elsewhere,
# tests/unit/test_gpu_check.py)
SHIPPED = sorted(p for p in (REPO / "scenarios").rglob("*.yaml") if "scale" not in p.parts and "gpu" not in p.parts)
DOCUMENTS = [yaml.safe_load(p.read_text()) for p in SHIPPED]
TIME_BUDGET_S = 2.0
MEMORY_BUDGET_MB = 200

# ------------------------------------------------------------------------------ the judge


@dataclass
class Verdict:
    """How one document ended: the exit code the CLI would give (0, 2; anything else, or an
    exception that is no ChaosError, is an escape), the issues, the time and memory taken."""

    code: int
    issues: list[ValidationIssue] = field(default_factory=list)
    message: str = ""
    escape: str | None = None
    elapsed_s: float = 0.0
    grown_mb: float = 0.0


def judge(path: str) -> Verdict:
    """``trainchaos validate PATH`` and ``trainchaos run --dry-run --no-preflight PATH``, in
    process: the functions the CLI calls (the host's preflight is no judgement of the file)."""
    from chaos.cli.run import _print_plans
    from chaos.scenario.load import load_suite

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # CPU time of this process, not wall time: the budget is on validation's own work, which
    # a host busy with other processes (load 17 on 2 cores, seen) must not fail.
    t0 = time.process_time()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _print_plans(load_suite([path]), None, None)
        verdict = Verdict(0)
    except ScenarioError as exc:
        verdict = Verdict(exc.exit_code, exc.issues, str(exc))
    except ChaosError as exc:
        verdict = Verdict(exc.exit_code, message=str(exc), escape=f"{type(exc).__name__} (exit {exc.exit_code})")
    except Exception as exc:  # what the CLI reports as an internal error (exit 3)
        verdict = Verdict(3, message=str(exc), escape=f"{type(exc).__name__}: {str(exc)[:200]}")
    verdict.elapsed_s = time.process_time() - t0
    # The process's peak resident size only grows: more than the budget above the peak
    # before this document means validation itself took that much.
    verdict.grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return verdict


def problems(verdict: Verdict, path: str) -> list[str]:
    """What is wrong with how a document ended (empty: it ended well)."""
    out = []
    if verdict.escape is not None:
        out.append(f"escape: {verdict.escape}")
    elif verdict.code not in (0, EXIT_BAD_INPUT):
        out.append(f"exit {verdict.code}")
    if verdict.code == EXIT_BAD_INPUT:
        if not verdict.issues:
            out.append("a rejection without issues")
        for issue in verdict.issues:
            if issue.file != path:
                out.append(f"an issue not in the file: {issue}")
            elif not (issue.location or _whole_document(issue) or " not shown (at most" in issue.message):
                out.append(f"an issue without a location: {issue}")
        if not verdict.message or "Traceback" in verdict.message:
            out.append("an empty message or a traceback")
        if len(verdict.message) > (len(path) + 700) * max(1, len(verdict.issues)):
            out.append(f"an unbounded message ({len(verdict.message)} characters)")
    if verdict.elapsed_s >= TIME_BUDGET_S:
        out.append(f"took {verdict.elapsed_s:.1f} s")
    if verdict.grown_mb >= MEMORY_BUDGET_MB:
        out.append(f"grew the process by {verdict.grown_mb:.0f} MB")
    return out


def _whole_document(issue: ValidationIssue) -> bool:
    """A problem of the document as a whole (empty, not a mapping) has no key to name."""
    return (issue.message.startswith(("the file is empty", "expected a mapping at the top level"))
            or "characters is too large for" in issue.message
            or issue.message.startswith(("the document holds more than", "invalid YAML: nested too deeply")))


def location_of(issue: ValidationIssue) -> str:
    """An issue's location reduced to its first key (``faults``, ``workload``, ``line``),
    to count rejections by where they are."""
    where = issue.location or "<document>"
    return where.split(".")[0].split("[")[0].split(",")[0].split(" ")[0]


def write(text: str, directory: Path) -> str:
    path = directory / "scenario.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return str(path)


# ------------------------------------------------------------------------------ the mutations

leaf = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50), st.text(min_size=500, max_size=3000, alphabet="xé😀\u202e"),
    st.sampled_from(["kill_rank", "rank", "node", "rack", "power_domain", "at_step", "SIGKILL",
                     "matches_baseline", "local", "harness", "python train.py 'unclosed"]),
)
value = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4)),
    max_leaves=12)


def deep(depth: int) -> Any:
    node: Any = 1
    for i in range(depth):
        node = [node] if i % 2 else {"k": node}
    return node


def paths_of(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths_of(v, (*prefix, i))
    return out


def node_at(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def set_at(doc: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    node_at(doc, path[:-1])[path[-1]] = new
    return doc


MUTATIONS = ["replace", "deep", "shared", "unknown_key", "drop", "big_key", "mixed_keys", "wrong_type",
             "empty_list", "huge_list", "non_finite"]


def mutate(draw: st.DrawFn, doc: Any, kinds: list[str] = MUTATIONS) -> Any:
    """One structural change at a drawn place of ``doc`` (which it may replace)."""
    path = draw(st.sampled_from(paths_of(doc)))
    kind = draw(st.sampled_from(kinds))
    node = node_at(doc, path)
    if kind == "replace":
        doc = set_at(doc, path, draw(value))
    elif kind == "deep":
        doc = set_at(doc, path, deep(draw(st.integers(50, 1000))))
    elif kind == "shared":  # yaml.dump writes one anchor and many aliases
        shared = [draw(leaf)] * 10
        doc = set_at(doc, path, [shared] * draw(st.integers(2, 50)))
    elif kind == "unknown_key" and isinstance(node, dict):
        node[draw(st.text(min_size=1, max_size=30))] = draw(value)
    elif kind == "drop" and path and isinstance(node_at(doc, path[:-1]), dict):
        node_at(doc, path[:-1]).pop(path[-1], None)
    elif kind == "big_key" and isinstance(doc, dict):
        doc["k" * draw(st.integers(1000, 50_000))] = 1
    elif kind == "mixed_keys" and isinstance(node, dict):  # keys that do not sort together
        node[draw(st.one_of(st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False), st.none()))] = draw(leaf)
        node[draw(st.text(min_size=1, max_size=5))] = draw(leaf)
    elif kind == "wrong_type":
        doc = set_at(doc, path, draw(st.sampled_from([[], {}, "", "x", 0, -1, True, None, [None], {"": None}])))
    elif kind == "empty_list":
        doc = set_at(doc, path, [])
    elif kind == "huge_list":
        doc = set_at(doc, path, [draw(leaf)] * draw(st.integers(100, 3000)))
    elif kind == "non_finite":
        doc = set_at(doc, path, draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**30, -10**30,
                                                      1e308, 2**63, -2**63 - 1])))
    return doc


# libyaml's emitter where there is one: the pure-Python one spent most of a fuzz run on
# the long strings and lists the mutations write.
_DUMPER = getattr(yaml, "CDumper", yaml.Dumper)


def dump(doc: Any) -> str:
    try:
        return yaml.dump(doc, Dumper=_DUMPER, allow_unicode=True, sort_keys=False)
    except (RecursionError, ValueError, TypeError):
        return "name: x\nseed: " + "9" * 5000 + "\n"


def damage(draw: st.DrawFn, text: str) -> str:
    """Raw text damage: a stray character put in, or a top-level line written twice
    (a duplicate key, which yaml.dump never writes)."""
    lines = text.splitlines(keepends=True)
    top = [line for line in lines if line[:1].isalpha() and ":" in line]
    duplicate: bool = draw(st.booleans())
    if top and duplicate:
        line = draw(st.sampled_from(top))
        return text + line.split(":")[0] + ": " + dump(draw(leaf)).split("\n")[0] + "\n"
    cut = draw(st.integers(0, len(text)))
    return text[:cut] + draw(st.sampled_from(["\t", ":", "[", "'", "&a", "*a", "\x00", "{", "<<: *a"])) + text[cut:]


@st.composite
def hostile_documents(draw: st.DrawFn) -> str:
    """A shipped scenario, mutated one to three times, sometimes its text damaged."""
    doc = copy.deepcopy(draw(st.sampled_from(DOCUMENTS)))
    for _ in range(draw(st.integers(1, 3))):
        doc = mutate(draw, doc, ["replace", "deep", "shared", "unknown_key", "drop", "big_key"])
    text = dump(doc)
    if draw(st.booleans()) and text:
        text = damage(draw, text)
    return text


# ------------------------------------------------------------------------------ from the schema


def _compatible_hypothesis_jsonschema() -> Any:
    """hypothesis-jsonschema 0.23.1 draws an object's keys with ``many.more()``, which
    Hypothesis 6.17x replaced by iterating ``with many(...) as elements: for _ in
    elements``; the same draws, through the new form."""
    import hypothesis_jsonschema._from_schema as generator
    from hypothesis.internal.conjecture import utils as cu

    if hasattr(cu.many, "more"):
        return generator

    class _Many:
        def __init__(self, data: Any, **sizes: Any) -> None:
            self._many = cu.many(data, **sizes).__enter__()
            self._elements = iter(self._many)

        def more(self) -> bool:
            if next(self._elements, False) is None:
                return True
            self._many.__exit__(None)
            return False

        def reject(self) -> None:
            self._many.reject()

    generator.cu = types.SimpleNamespace(many=_Many)  # type: ignore[assignment]
    return generator


@cache
def _schema() -> dict[str, Any]:
    from hypothesis_jsonschema._resolve import resolve_all_refs

    from chaos.schema.jsonschema import scenario_json_schema

    schema = scenario_json_schema()
    schema.pop("$id", None)  # an urn the generator would try to fetch $refs from
    # Every $ref inlined once: each section's strategy then carries no copy of the $defs
    # to resolve again (20 s of the first draw, else).
    return resolve_all_refs(schema)


def _from(sub: dict[str, Any]) -> st.SearchStrategy[Any]:
    generator = _compatible_hypothesis_jsonschema()
    return generator.from_schema(sub, allow_x00=False)


def _fault_schema(fault_type: str, rules: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
    """FaultDoc for one type: its ``if type == T then ...`` rule applied (the generator
    is quick on each type alone, and unusably slow on the 36 rules at once). Resolved, a
    rule reads ``anyOf: [{not: {type == T}}, then]``."""
    doc = {k: v for k, v in base.items() if k != "allOf"}
    props = dict(doc["properties"], type={"const": fault_type})
    for rule in rules:
        unless, then = rule["anyOf"]
        if unless["not"]["properties"]["type"].get("const") == fault_type:
            then = then.get("properties", {})
            if "params" in then:
                props["params"] = then["params"]
            if "target" in then:
                props["target"] = {"allOf": [props["target"], then["target"]]}
    return {**doc, "properties": props}


@cache
def _one_fault() -> st.SearchStrategy[Any]:
    fault = _schema()["properties"]["faults"]["anyOf"][0]["items"]
    types_ = fault["properties"]["type"]["enum"]
    return st.one_of([_from(_fault_schema(t, fault["allOf"], fault)) for t in types_])


def _faults(min_size: int) -> st.SearchStrategy[Any]:
    return st.lists(_one_fault(), min_size=min_size, max_size=4)


@cache
def _section_strategies() -> dict[str, st.SearchStrategy[Any]]:
    schema = _schema()
    out = {name: _from(sub) for name, sub in schema["properties"].items() if name not in ("workload", "faults")}
    out["faults"] = st.one_of(st.none(), _faults(0))
    workload = schema["properties"]["workload"]["properties"]
    kinds = [st.fixed_dictionaries({kind: _from(workload[kind])}) for kind in workload
             if kind not in ("command", "progress_regex", "steps")]
    kinds.append(st.fixed_dictionaries({"command": _from(workload["command"])}, optional={
        "progress_regex": _from(workload["progress_regex"]), "steps": _from(workload["steps"])}))
    out["workload"] = st.one_of(kinds)
    return out


@st.composite
def schema_documents(draw: st.DrawFn, holding: str | None = None) -> Any:
    """A scenario drawn from ``trainchaos schema``: each section from its own part of it;
    ``holding``: that section surely there (faults: at least one)."""
    sections = _section_strategies()
    required = set(_schema().get("required", []))
    doc = {}
    for name, strategy in sections.items():
        if name == holding == "faults":
            doc[name] = draw(_faults(1))
        elif name in required or name == holding or draw(st.booleans()):
            doc[name] = draw(strategy)
    return doc


@cache
def schema_pool(size: int) -> tuple[Any, ...]:
    """``size`` scenarios drawn from the schema with a fixed seed, once per process: the
    generator takes ~70 ms a document (it merges subschemas on every draw), the mutations
    of ``schema_hostile_documents`` below a millisecond. The first documents hold one
    optional section each (faults: at least one fault), the last of a few draws each: left
    to chance, the generator's lean towards small documents left the faults out of all 40
    in some processes (which ones depended on what the process had run before), and the
    mutations then never reached a fault."""
    optional = [name for name in _section_strategies() if name not in set(_schema().get("required", []))]
    holding = [_drawn(schema_documents(name), 5)[-1] for name in optional]
    return (*holding, *_drawn(schema_documents(), size - len(holding)))


def _drawn(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` examples of ``strategy``, with a fixed seed."""
    from hypothesis import HealthCheck, Phase, given, settings

    found: list[Any] = []

    @settings(max_examples=count, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(doc: Any) -> None:
        found.append(doc)

    collect()
    return found


def schema_hostile_documents(pool: tuple[Any, ...]) -> st.SearchStrategy[str]:
    """A scenario of ``pool`` as it is (a third of them) or mutated one to three times; a
    quarter of the mutated ones also damaged as text."""

    @st.composite
    def documents(draw: st.DrawFn) -> str:
        doc = copy.deepcopy(draw(st.sampled_from(pool)))
        if not draw(st.integers(0, 2)):
            return dump(doc)
        for _ in range(draw(st.integers(1, 3))):
            doc = mutate(draw, doc)
        text = dump(doc)
        if not draw(st.integers(0, 3)) and text:
            text = damage(draw, text)
        return text

    return documents()
