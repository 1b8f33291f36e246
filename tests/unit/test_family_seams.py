"""The fault-family seam (docs/design.md, "Fault types and families"): each family is one
package registering one ``FamilySpec`` that carries what it contributes, and the engine
names no family. Read from the source with ``ast``, like the import contract."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chaos import probe
from chaos.faults.base import example_of, known_types
from chaos.faults.family import FAMILIES, crash_sweep, families
from chaos.metrics.registry import families as metric_families
from chaos.runfiles.events import KINDS

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "chaos" / "faults"
BUILTIN = ("container", "memory", "neighbor", "network", "power", "process", "scheduler", "sdc", "storage")


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
    from chaos.model.targets import ResolvedTarget

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
    """String constants of ``path`` that are code, not docstrings (a bare string statement:
    a module's, class's or function's docstring, or an attribute's below it)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_fault_asks_the_backend_with_hasattr_or_getattr() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(FAULTS.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "hasattr(cluster" in line or "getattr(cluster" in line]
    assert found == [], "ask for a capability with ctx.require(...) (chaos/cluster/capabilities.py)"


# Where a family's fault-type name is spelled in code outside its package on purpose, each
# with why. Shrink-only: an entry whose string is gone fails too, so it cannot outlive it.
# Other namespaces that share a word with a type (not a reference to the type):
SAME_WORD_OTHER_THING = {
    ("chaos/probe/actions.py", "device_error"): "the probe action the process family's type fires",
    ("chaos/probe/actions.py", "bitflip"): "the probe action the sdc family's type fires",
    ("chaos/probe/bitflip.py", "bitflip"): "the rank-side mechanics of the sdc bitflip (loaded by the probe, "
                                     "which may import nothing of chaos.faults)",
    ("chaos/runfiles/events.py", "crash_point"): "an event kind (the storage layer's report of a crash point)",
    ("chaos/storage/crashpoints.py", "crash_point"): "the event kind",
    ("chaos/storage/control.py", "crash_point"): "the layer's control-file key",
    ("chaos/storage/daemon.py", "crash_point"): "the layer's state key",
    ("chaos/storage/rules.py", "disk_full"): "a rule action of the FUSE layer",
    ("chaos/net/toxiproxy/toxics.py", "latency"): "a Toxiproxy toxic kind",
    ("chaos/net/toxiproxy/toxics.py", "bandwidth"): "a Toxiproxy toxic kind",
    ("chaos/net/toxiproxy/link.py", "latency"): "a Toxiproxy toxic kind",
    ("chaos/net/toxiproxy/link.py", "bandwidth"): "a Toxiproxy toxic kind",
    ("chaos/net/nft.py", "latency"): "a chain name",
    ("chaos/cluster/netns.py", "latency"): "the fabric's emulator role",
    ("chaos/cluster/netns.py", "toxic"): "the fabric's proxy role",
    ("chaos/cluster/slurm_cli.py", "partition"): "a Slurm partition",
    ("chaos/schema/suggest.py", "latency"): "a word users write (the vocabulary of did-you-mean)",
    ("chaos/schema/suggest.py", "partition"): "a word users write",
    ("chaos/schema/suggest.py", "bandwidth"): "a word users write",
    ("chaos/schema/suggest.py", "straggler"): "a word users write",
    ("chaos/schema/suggest.py", "toxic"): "a word users write",
    ("chaos/faults/container/__init__.py", "partition"): "a word of a did-you-mean phrase",
    ("chaos/faults/storage/__init__.py", "bandwidth"): "a word of a did-you-mean phrase",
    ("chaos/cluster/cgroups.py", "oom_kill"): "the kernel's OOM-kill counter in memory.oom_control",
}
def _type_spellings() -> set[tuple[str, str]]:
    """(file, type name) for each code string outside the type's family package that is the
    name, or, for a name with an underscore (never an English word), holds it as a word."""
    import re

    owner = {name: cls.family for name, cls in known_types().items() if cls.__module__.startswith("chaos.faults.")}
    patterns = {name: re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])") for name in owner if "_" in name}
    found = set()
    for path in sorted((ROOT / "chaos").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for _, text in _code_strings(path):
            for name, family in owner.items():
                if where.startswith(f"chaos/faults/{family}/"):
                    continue
                if text == name or (name in patterns and patterns[name].search(text)):
                    found.add((where, name))
    return found


def test_no_family_spells_a_fault_type_outside_its_package() -> None:
    found = _type_spellings()
    unexpected = found - set(SAME_WORD_OTHER_THING)
    assert unexpected == set(), ("route it through the family's spec or its type (a classmethod, "
                                 "a FamilySpec field) instead of naming the type")
    stale = set(SAME_WORD_OTHER_THING) - found
    assert stale == set(), "remove the allowance: the spelling is gone"


# What the engine asks the families instead of naming their types:


def test_each_failure_class_has_at_most_one_example_type_and_messages_name_it() -> None:
    examples = [cls.failure_class for cls in known_types().values() if cls.example_of_class]
    assert len(examples) == len(set(examples))
    for failure_class in ("crash", "device", "hang"):  # chaos.schema.checks names these
        assert known_types()[example_of(failure_class)].failure_class == failure_class


def test_one_family_provides_the_crash_point_sweeps_types() -> None:
    providers = [spec for spec in families().values() if spec.crash_sweep is not None]
    assert len(providers) == 1 and crash_sweep() is providers[0].crash_sweep
    sweep = providers[0].crash_sweep
    assert {sweep.arm_type, sweep.power_loss_type} <= set(providers[0].fault_types())
    assert sweep.event in KINDS


def test_the_classes_a_type_stands_for_are_simulates_classes() -> None:
    from chaos.scale.llama3 import LLAMA3_CLASSES

    names = {c.name for c in LLAMA3_CLASSES}
    for type_name, cls in known_types().items():
        assert set(cls.stands_for) | set(cls.also_stands_for) <= names, type_name
        assert not set(cls.stands_for) & set(cls.also_stands_for), type_name

