"""chaos.util.registry: built-ins by module name, TRAINCHAOS_PLUGINS and an entry point group per
kind; and the real registries (fault types, backends, resource kinds) built on it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import chaos.util.registry
from chaos.cluster import BACKENDS, UnknownBackend, lookup_backend
from chaos.contract import PLUGINS_ENV
from chaos.faults.base import FAULT_TYPES, UnknownFaultType, lookup
from chaos.runfiles.resources import RESOURCE_KINDS
from chaos.util.registry import Registry


class _Thing:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path for this test's plugin modules, forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in set(sys.modules) - before:
        if name.startswith("tc_plugin_"):
            del sys.modules[name]


REGISTRY_HOME = "tests.unit.test_registry"


def _module(where: Path, name: str, body: str) -> None:
    (where / f"{name}.py").write_text(body)


THINGS: Registry[_Thing] = Registry("thing", key=lambda t: t.name, group="trainchaos.test_things")


def test_builtins_are_imported_by_name_on_first_lookup(plugin_dir: Path) -> None:
    _module(plugin_dir, "tc_plugin_builtin", f"from {REGISTRY_HOME} import _Thing\n"
            "from tc_plugin_registry import REG\nREG.register(_Thing('one'))\n")
    _module(plugin_dir, "tc_plugin_registry", "from chaos.util.registry import Registry\n"
            "REG = Registry('thing', key=lambda t: t.name, builtins=('tc_plugin_builtin',))\n")
    import tc_plugin_registry  # type: ignore[import-not-found]

    assert "tc_plugin_builtin" not in sys.modules, "declaring a registry must not import its members"
    assert tc_plugin_registry.REG.lookup("one").name == "one"
    assert list(tc_plugin_registry.REG.known()) == ["one"]


def test_a_name_nobody_registered_raises_the_kinds_own_error() -> None:
    with pytest.raises(UnknownFaultType):
        lookup("no_such_fault")
    with pytest.raises(UnknownBackend):
        lookup_backend("kubernetes")


def test_a_second_member_under_a_taken_name_is_refused() -> None:
    reg: Registry[_Thing] = Registry("thing", key=lambda t: t.name)
    first = reg.register(_Thing("x"))
    assert reg.register(first) is first  # the same one again: harmless (a module re-imported)
    with pytest.raises(ValueError, match="thing 'x' registered twice"):
        reg.register(_Thing("x"))


def test_trainchaos_plugins_registers_things_of_several_kinds(plugin_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _module(plugin_dir, "tc_plugin_team", """
from dataclasses import dataclass
from typing import ClassVar
from chaos.cluster import register_backend
from chaos.cluster.local import LocalCluster
from chaos.faults.base import FaultType, register

@register
@dataclass
class TeamFault(FaultType):
    type_name: ClassVar[str] = "tc_team_fault"
    family: ClassVar[str] = "team"
    failure_class: ClassVar[str] = "crash"
    fidelity: ClassVar[str] = "a test's"
    summary: ClassVar[str] = "a test's"
    def inject(self, ctx): return {}
    def revert(self, ctx, record): pass

@register_backend
class TeamBackend(LocalCluster):
    name: ClassVar[str] = "tc_team"
""")
    monkeypatch.setenv(PLUGINS_ENV, "tc_plugin_team")
    monkeypatch.setattr(chaos.util.registry, "_imported", set())
    try:
        assert lookup("tc_team_fault").family == "team"
        assert lookup_backend("tc_team").name == "tc_team"
        # A plugin backend declares capabilities like a built-in one (here: local's, inherited).
        assert "tc_team" in lookup("io_stall").supported_backends()
    finally:
        FAULT_TYPES.unregister("tc_team_fault")
        BACKENDS.unregister("tc_team")


def test_entry_points_of_the_kinds_group_register_a_module_or_one_object(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The module reaches this test's registry through a stable module (pytest may import this
    # file under another name than the plugin would).
    monkeypatch.setattr(chaos.util.registry, "test_things", THINGS, raising=False)
    _module(plugin_dir, "tc_plugin_ep_module", f"import chaos.util.registry\nfrom {REGISTRY_HOME} import _Thing\n"
            "chaos.util.registry.test_things.register(_Thing('from-module'))\n")
    _module(plugin_dir, "tc_plugin_ep_object", f"from {REGISTRY_HOME} import _Thing\nTHING = _Thing('from-object')\n")
    points = [EntryPoint("mod", "tc_plugin_ep_module", "trainchaos.test_things"),
              EntryPoint("obj", "tc_plugin_ep_object:THING", "trainchaos.test_things"),
              EntryPoint("other", "tc_plugin_not_loaded", "trainchaos.backends")]
    scans: list[str] = []

    def entry_points(group: str) -> list[EntryPoint]:
        scans.append(group)
        return [ep for ep in points if ep.group == group]

    monkeypatch.setattr(chaos.util.registry, "entry_points", entry_points)
    monkeypatch.setattr(THINGS, "items", {})
    monkeypatch.setattr(THINGS, "_entry_points_read", False)
    assert sorted(THINGS.known()) == ["from-module", "from-object"]
    assert sorted(THINGS.known()) == ["from-module", "from-object"]
    assert scans == ["trainchaos.test_things"], "the installed packages' metadata is read once"
    assert "tc_plugin_not_loaded" not in sys.modules, "another kind's group is not this one's"


def test_the_real_registries_each_have_their_group_and_find_their_built_ins() -> None:
    assert (FAULT_TYPES.group, BACKENDS.group, RESOURCE_KINDS.group) == (
        "trainchaos.faults", "trainchaos.backends", "trainchaos.resource_kinds")
    assert {"kill_rank", "partition", "container_pause", "node_down", "io_stall", "power_outage",
            "bitflip"} <= set(FAULT_TYPES.known())
    assert set(BACKENDS.known()) >= {"local", "netns", "docker", "slurm"}
    # cleanup must know every kind without a backend having been used in its process
    assert {"scratch_dir", "netns", "veth", "fuse_mount", "docker_container", "slurm_job",
            "link_emulator", "toxiproxy_server"} <= set(RESOURCE_KINDS.known())
