"""Run-scoped cgroups (v1 hierarchies): a memory cgroup that gives a node a memory limit of
its own, a CPU cgroup that caps a neighbour's share. Registered as the resource kind
``cgroup``: journaled before it exists, its tasks moved back to the parent and the directory
removed on teardown, found again by name (``trainchaos-...`` under the controller's own
cgroup) when no journal leads to it.

A run's cgroup is made inside the cgroup the controller itself runs in (a container's, a
systemd slice's), never at a hierarchy's root: the run may only narrow what it was given.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, ClassVar

from chaos.runfiles.resources import PREFIX, Leftover, ResourceKind, register_kind

__all__ = ["CgroupDir", "cgroup_path", "cgroup_procs", "move_to", "oom_kills", "own_cgroup"]

ROOT = "/sys/fs/cgroup"


def own_cgroup(controller: str, pid: int | str = "self") -> str | None:
    """The directory of ``pid``'s cgroup in the v1 hierarchy of ``controller``; None when
    that hierarchy is not mounted here."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                directory = os.path.join(ROOT, controller, path.lstrip("/"))
                return directory if os.path.isdir(directory) else None
    return None


def cgroup_path(controller: str, name: str) -> str:
    """Where the run's cgroup ``name`` goes: inside this process's own cgroup."""
    parent = own_cgroup(controller)
    if parent is None:
        raise OSError(f"no cgroup v1 {controller} hierarchy is mounted under {ROOT}")
    return os.path.join(parent, name)


def cgroup_procs(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs"), encoding="utf-8") as fh:
            return [int(line) for line in fh if line.strip()]
    except OSError:
        return []


def move_to(path: str, pids: list[int]) -> list[int]:
    """Move each pid still alive into the cgroup at ``path``; returns those moved."""
    moved = []
    for pid in pids:
        try:
            with open(os.path.join(path, "cgroup.procs"), "w", encoding="utf-8") as fh:
                fh.write(str(pid))
            moved.append(pid)
        except OSError:
            continue  # gone meanwhile
    return moved


def oom_kills(path: str) -> int:
    """How many processes the kernel's OOM killer killed in the memory cgroup at ``path``
    (``oom_kill`` of ``memory.oom_control``, kernel 4.13+)."""
    with open(os.path.join(path, "memory.oom_control"), encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


@register_kind
class CgroupDir(ResourceKind):
    """``spec``: ``path`` (from ``cgroup_path``), ``settings`` (file -> value, written in
    order after the directory is made)."""

    kind: ClassVar[str] = "cgroup"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        path = spec["path"]
        if not os.path.basename(path).startswith(PREFIX):
            raise OSError(f"refusing to own cgroup {path}: a run's cgroups are named {PREFIX}...")
        os.makedirs(path, exist_ok=True)
        for name, value in spec.get("settings", {}).items():
            with open(os.path.join(path, name), "w", encoding="utf-8") as fh:
                fh.write(str(value))
        return {}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        path = spec["path"]
        if not os.path.basename(path).startswith(PREFIX) or not os.path.isdir(path):
            return
        # A cgroup with tasks cannot be removed: what still runs goes back to the parent
        # (a node whose limit is reverted mid-run lives on, unlimited again).
        for _ in range(50):
            move_to(os.path.dirname(path), cgroup_procs(path))
            with contextlib.suppress(OSError):
                os.rmdir(path)
                return
            time.sleep(0.05)
        os.rmdir(path)  # the error says why

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return os.path.isdir(spec["path"])

    @classmethod
    def scan(cls) -> list[Leftover]:
        found = []
        for controller in ("memory", "cpu"):
            with contextlib.suppress(OSError):
                parent = own_cgroup(controller)
                if parent is None:
                    continue
                for name in sorted(os.listdir(parent)):
                    path = os.path.join(parent, name)
                    if name.startswith(PREFIX) and os.path.isdir(path):
                        run_id = "-".join(name.split("-")[:2])
                        found.append(Leftover(cls.kind, path, run_id, {"path": path}))
        return found
