"""The import contract of ``chaos/``: which package may import which (issue 19).

Read from the source with ``ast``, nothing imported, no dependency (import-linter would do the
same with a config file and a package to install).

What counts as an import (an edge ``a -> b``): every ``import``/``from ... import`` statement
in module ``a`` that names ``b`` (``from pkg import name`` is an edge to ``pkg.name`` when
that is a module, else to ``pkg``) -- at module level, inside a function, and under
``if TYPE_CHECKING:`` alike. A function-level import is a dependency all the same: deferring
it only hides a cycle from Python's import order, not from whoever reads or changes the
code, and a registry that imports its members lazily while they import it back is exactly
the knot the issue names. A ``TYPE_CHECKING`` import is a dependency of the design (the
type it names is part of the interface), so a lower layer naming an upper layer's type
breaks the layering as much as a call does. Importing ``a.b.c`` does run ``a/__init__`` and
``a/b/__init__``, but those are not counted as edges of the importer: their own imports are
counted where they are written. Strings handed to ``importlib`` (plugin and built-in
registrations listed as data) are not edges: that is the point of a registry.

Allowlists: today's offenders are listed below, each with the helper that removes it; an
entry whose import is gone fails the test too, so the lists only ever shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAOS = ROOT / "chaos"

CONCRETE_BACKENDS = tuple(f"chaos.cluster.{name}" for name in (
    "local", "netns", "docker", "docker_engine", "docker_options", "slurm", "slurm_node", "slurm_signal", "slurm_testbed"))
"""Modules of a concrete backend: only ``chaos.cluster`` itself may import them (everything
else asks for a backend by name through the registry and for abilities by capability)."""

RUNNER = ("chaos.runner", "chaos.cli", "chaos.gameday", "chaos.scale", "chaos.pytest_plugin")
"""The engine that drives runs: it uses the backends and the faults, never the reverse."""

LOWER_LAYERS = ("chaos.cluster", "chaos.storage")
"""Infrastructure: knows nothing of fault types, of the training job or of the runner."""

Edge = tuple[str, str]

# -- allowlists (shrinking): (importer, imported) -> who removes it --------------------------

ALLOWED_LAYER: dict[Edge, str] = {}
"""The storage family plans its mounts and the runner hands them over: no exception left."""

ALLOWED_CONCRETE: dict[Edge, str] = {}
"""Nothing outside chaos/cluster names a concrete backend: no exception left."""

ALLOWED_CLUSTER_WORKLOAD: dict[Edge, str] = {}
"""The backends start what the workload's launcher writes (``RunSpec.launcher``, a
``chaos.cluster.base.Launcher``) and never import the workload: no exception."""

ALLOWED_HARNESS: dict[Edge, str] = {}
"""Only chaos.workload (the Workload seam) may know the harness: no exception left."""

ALLOWED_CYCLE_EDGES: dict[Edge, str] = {}
"""No cycle is left (the last four went with issue 19): keep it so."""


LAYERS: tuple[tuple[str, ...], ...] = (
    ("chaos.contract",),                   # every name the controller and the job share (stdlib only)
    ("chaos.errors",),                     # the one exception root
    ("chaos.util",),                       # plumbing: atomic files, strict JSON, processes, registries, YAML, signals
    ("chaos.probe", "chaos.loadgen"),      # what runs in a rank of the job / beside it on a node (stdlib only)
    ("chaos.ckptformat",),                 # checkpoint formats: reading a saved checkpoint of each stack
    ("chaos.adapters",),                   # a foreign stack's one line to the probe
    ("chaos.metrics",),                    # timeline -> metrics (pure), the catalogue, the run-wide checkers
    ("chaos.runfiles",),                   # the run directory, events, run record, fault and resource journals
    ("chaos.model",),                      # the typed scenario: documents, records, target and trigger forms
    ("chaos.workload",),                   # the training job as the engine sees it
    ("chaos.net", "chaos.storage"),        # the machinery the network and storage faults act through
    ("chaos.cluster",),                    # the backends; concrete ones named only here
    ("chaos.faults",),                     # the fault families
    ("chaos.schema",),                     # the schema assembled from every fault type, backend and workload
    ("chaos.scenario",),                   # scenario files -> Scenario records
    ("chaos.report",),                     # summaries, HTML, timelines, JUnit
    ("chaos.gate", "chaos.scale"),         # the regression gate; the scale model
    ("chaos.runner",),                     # the engine that drives runs
    ("chaos.gameday",),                    # the guided exercise against a live run
    ("chaos.cli", "chaos.pytest_plugin"),  # the trainchaos command; the pytest plugin
)
"""The layers of ``chaos/``, bottom first, by package prefix (a module directly in ``chaos/``
is a layer of its own): a module may import its own package and the layers below it, never
a package beside it in the same layer or one above (test_every_import_points_down_a_layer).
Every module of ``chaos/`` but its ``__init__`` has a layer."""

ALLOWED_UPWARD: dict[Edge, str] = {}
"""No import points up or sideways: keep it so."""


# -- the graph ---------------------------------------------------------------------------


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) for every module of ``chaos`` and ``harness``."""
    found = {}
    for top in ("chaos", "harness"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return found


MODULES = _modules()


def _imports(module: str) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement of ``module``, wherever it is."""
    path, is_pkg = MODULES[module]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: None if is_pkg else -1]
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                name = f"{prefix}.{alias.name}"
                yield (name if name in MODULES else prefix), node.lineno


def _known(name: str) -> str:
    """The module an imported name lives in (``chaos.cluster.base.X`` -> ``chaos.cluster.base``)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _graph() -> dict[str, dict[str, int]]:
    """importer -> {imported module of chaos or harness: first line}."""
    graph: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for module in MODULES:
        for name, line in _imports(module):
            if name.split(".")[0] in ("chaos", "harness"):
                target = _known(name)
                if target != module:
                    graph[module].setdefault(target, line)
    return graph


GRAPH = _graph()


def _under(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _edges(importers: tuple[str, ...] | str, imported: tuple[str, ...] | str) -> dict[Edge, int]:
    return {(a, b): line for a, targets in GRAPH.items() if _under(a, importers)
            for b, line in targets.items() if _under(b, imported)}


def _where(edge: Edge, line: int) -> str:
    path = MODULES[edge[0]][0].relative_to(ROOT)
    return f"{path}:{line}: {edge[0]} imports {edge[1]}"


def _check(found: dict[Edge, int], allowed: dict[Edge, str], rule: str) -> None:
    new = [_where(e, line) for e, line in sorted(found.items()) if e not in allowed]
    stale = [f"{a} -> {b} (owner {who})" for (a, b), who in sorted(allowed.items()) if (a, b) not in found]
    assert not new, f"{rule}:\n  " + "\n  ".join(new)
    assert not stale, ("allowlisted imports that are gone (the contract tightens: delete these "
                       f"entries from {Path(__file__).name}):\n  " + "\n  ".join(stale))


# -- the rules -----------------------------------------------------------------------------


def test_the_graph_is_read_from_the_source() -> None:
    # A resolver that lost relative or function-level imports would pass every rule below.
    assert "chaos.cluster.base" in GRAPH["chaos.cluster.local"]
    assert "chaos.errors" in GRAPH["chaos.cluster.base"]
    assert all(_under(b, ("chaos", "harness")) for targets in GRAPH.values() for b in targets)
    assert len(MODULES) > 100


def test_infrastructure_imports_no_fault_harness_or_runner() -> None:
    found = _edges(LOWER_LAYERS, ("chaos.faults", "harness", *RUNNER))
    _check(found, ALLOWED_LAYER, "chaos/cluster and chaos/storage must not import chaos/faults, "
           "harness or the runner (hand them what they need instead)")


def test_the_cluster_package_imports_nothing_of_the_workload() -> None:
    found = _edges("chaos.cluster", "chaos.workload")
    _check(found, ALLOWED_CLUSTER_WORKLOAD, "chaos/cluster must not import chaos/workload (the "
           "RunSpec carries the workload's launcher; ask it, as chaos.cluster.base.Launcher)")


def test_only_the_cluster_package_imports_a_concrete_backend() -> None:
    found = {e: line for e, line in _edges(("chaos", "harness"), CONCRETE_BACKENDS).items()
             if not _under(e[0], "chaos.cluster")}
    _check(found, ALLOWED_CONCRETE, "a concrete backend is imported outside chaos/cluster "
           "(look it up by name, ask for a capability with ctx.require)")


def test_only_the_workload_package_imports_the_harness() -> None:
    found = {e: line for e, line in _edges("chaos", "harness").items() if not _under(e[0], "chaos.workload")}
    _check(found, ALLOWED_HARNESS, "only chaos/workload may import harness")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_chaos() -> None:
    chaos_graph = {a: {b for b in targets if _under(b, "chaos") and (a, b) not in ALLOWED_CYCLE_EDGES}
                   for a, targets in GRAPH.items() if _under(a, "chaos")}
    cycles = _cycles(chaos_graph)
    report = []
    for component in cycles:
        members = set(component)
        report.append(" <-> ".join(component) + ":\n    " + "\n    ".join(
            _where((a, b), GRAPH[a][b]) for a in component for b in sorted(chaos_graph[a]) if b in members))
    assert not cycles, "import cycles in chaos/:\n  " + "\n  ".join(report)
    stale = [f"{a} -> {b} (owner {who})" for (a, b), who in sorted(ALLOWED_CYCLE_EDGES.items())
             if b not in GRAPH.get(a, {})]
    assert not stale, ("allowlisted cycle edges that are gone (the contract tightens: delete these "
                       f"entries from {Path(__file__).name}):\n  " + "\n  ".join(stale))


@pytest.mark.parametrize("edge", sorted(ALLOWED_CYCLE_EDGES))
def test_each_allowlisted_cycle_edge_still_closes_a_cycle(edge: Edge) -> None:
    """An allowlisted edge whose cycle was broken elsewhere must go too: it would let a new
    cycle through that edge pass unnoticed."""
    a, b = edge
    if b not in GRAPH.get(a, {}):
        pytest.skip("gone: test_no_import_cycles_in_chaos asks for its removal")
    # Is there a path back from b to a (over every edge but this one)?
    seen, todo = {b}, [b]
    while todo:
        node = todo.pop()
        for nxt in GRAPH.get(node, {}):
            if _under(nxt, "chaos") and (node, nxt) != edge and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert a in seen, f"{a} -> {b} no longer closes a cycle: delete it from ALLOWED_CYCLE_EDGES"


def _layer(module: str) -> tuple[int, str] | None:
    """(layer index, package prefix) of a module of ``chaos``; None for ``chaos`` itself."""
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if _under(module, prefix):
                return index, prefix
    return None


def test_every_layer_names_modules_in_order() -> None:
    # The rule below compares layer indices: a prefix with a typo, or one whose package is
    # gone, would let every import of it through unseen.
    empty = [prefix for layer in LAYERS for prefix in layer if not any(_under(m, prefix) for m in MODULES)]
    assert not empty, f"LAYERS names prefixes no module has: {empty}"
    assert _layer("chaos.probe.core") < _layer("chaos.runner.run") < _layer("chaos.cli")  # type: ignore[operator]


def test_every_chaos_module_has_a_layer() -> None:
    missing = sorted(m for m in MODULES if _under(m, "chaos") and m != "chaos" and _layer(m) is None)
    assert not missing, ("modules of chaos/ in no layer (put them in a package of LAYERS, or add "
                         "their package to LAYERS where its imports say it belongs):\n  " + "\n  ".join(missing))


def test_every_import_points_down_a_layer() -> None:
    found = {}
    for (a, b), line in _edges("chaos", "chaos").items():
        layer_a, layer_b = _layer(a), _layer(b)
        if layer_a is None or layer_b is None or layer_a[1] == layer_b[1]:
            continue
        if layer_b[0] >= layer_a[0]:
            found[(a, b)] = line
    _check(found, ALLOWED_UPWARD, "an import points up a layer or sideways (LAYERS, bottom first: "
           "move what both need below both, or hand it over instead of importing it)")
