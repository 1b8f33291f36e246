"""Run-scoped resources: infrastructure that lives for one run and must never outlive it.

Every resource (a scratch directory, a helper process, and, as families land, namespaces,
bridges, nftables tables, FUSE mounts, containers) has one lifecycle:

1. ``RunResources.acquire`` writes a ``create`` record to ``<run>/resources.jsonl`` and
   fsyncs it *before* the resource exists, so a controller killed mid-create still leaves
   enough to undo it;
2. the kind's ``create`` makes it and returns details (a pid, a device name...), journaled as
   ``created``;
3. ``release_all`` tears every resource down in reverse order, going on past a failure and
   returning every failure; ``destroyed`` is journaled per resource;
4. after a SIGKILLed controller, ``trainchaos cleanup`` does step 3 from the journal alone
   (``destroy`` is a classmethod and must be idempotent), and ``cleanup --check`` asks each
   kind to ``scan`` the machine for leftovers named with the project's prefix.

A kind registers by name with ``register_kind`` (``RESOURCE_KINDS``, a ``chaos.util.registry``:
the built-in kinds' modules are listed there by name, others come from ``TRAINCHAOS_PLUGINS``
and the ``trainchaos.resource_kinds`` entry point group); cleanup must know every kind
without any backend having been used in its process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from chaos import contract
from chaos.errors import ToolError
from chaos.runfiles.rollback import append_record, read_records, state_base
from chaos.runfiles.rundir import RunDir
from chaos.util.procs import (
    controller_alive,
    controller_tag,
    find_run_processes,
    kill_pids,
    process_start_time,
)
from chaos.util.registry import Registry

__all__ = [
    "HelperProcess",
    "Leftover",
    "ResourceKind",
    "RunResources",
    "ScratchDir",
    "known_kinds",
    "pending_resources",
    "register_kind",
    "release_records",
    "scratch_base",
]

PREFIX = "trainchaos-"


@dataclass(frozen=True)
class Leftover:
    """Something a run left on the machine, found by a kind's ``scan``."""

    kind: str
    name: str
    """What a user would look for (a path, a pid, an interface name)."""
    run_id: str | None
    spec: dict[str, Any]


class ResourceKind(ABC):
    kind: ClassVar[str]

    @classmethod
    @abstractmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Make the resource; returns details the journal needs to undo it."""

    @classmethod
    @abstractmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        """Undo it (idempotent; ``details`` may be empty when create never finished)."""

    @classmethod
    @abstractmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        """Whether anything of it is still there."""

    @classmethod
    def scan(cls) -> list[Leftover]:
        """Every resource of this kind on the machine, live runs' included (the caller
        filters those out), found by the project's naming alone."""
        return []


RESOURCE_KINDS: Registry[type[ResourceKind]] = Registry(
    "resource kind", key=lambda cls: cls.kind, group="trainchaos.resource_kinds",
    builtins=("chaos.net.fabric", "chaos.net.linkemu", "chaos.net.toxiproxy",
              "chaos.cluster.mounts", "chaos.cluster.docker_engine", "chaos.cluster.slurm_resources",
              "chaos.cluster.cgroups",
              # the kinds fault families and workload kinds define (FamilySpec.resource_modules,
              # Workload.resource_modules), named so that this layer imports nothing of either
              "chaos.faults.family:load_resource_kinds",
              "chaos.workload:load_resource_kinds"))

register_kind = RESOURCE_KINDS.register


def known_kinds() -> dict[str, type[ResourceKind]]:
    return RESOURCE_KINDS.known()


def scratch_base() -> str:
    """Node-local scratch space of every run: ``<state>/scratch/<run_id>/node-<i>``."""
    return os.path.join(state_base(), "scratch")


def _is_ours(path: str) -> bool:
    """Only directories named by a run id of ours are ever removed."""
    return any(part.startswith(PREFIX) for part in os.path.normpath(path).split(os.sep))


@register_kind
class ScratchDir(ResourceKind):
    """A directory that exists for one run only (a node's local disk, a mount point)."""

    kind: ClassVar[str] = "scratch_dir"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        path = spec["path"]
        if not _is_ours(path):
            raise ToolError(f"refusing to own {path}: a run's directories carry {PREFIX!r} in "
                            "their path")
        os.makedirs(path, exist_ok=True)
        if os.stat(path).st_uid != os.geteuid():
            # Made first by another user (a node's TMPDIR sits in the shared temp dir): files
            # written here could be read, replaced or symlinked elsewhere (docs/security.md).
            raise ToolError(f"refusing to use {path}: another user owns it")
        # Who owns it, for a scan that finds it with no journal at hand (a directory in the
        # shared temp dir may belong to a live run of another state directory).
        with open(os.path.join(path, OWNER_FILE), "w", encoding="utf-8") as fh:
            json.dump({"run_id": run_id, "controller": controller_tag()}, fh)
        return {}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        path = spec["path"]
        if _is_ours(path) and os.path.lexists(path):
            shutil.rmtree(path)
        # The run's own parent (<scratch>/<run_id>) goes with its last node directory.
        parent = os.path.dirname(path)
        if os.path.basename(parent).startswith(PREFIX):
            with contextlib.suppress(OSError):
                os.rmdir(parent)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return _is_ours(spec["path"]) and os.path.lexists(spec["path"])

    @classmethod
    def scan(cls) -> list[Leftover]:
        found = []
        base = scratch_base()
        if os.path.isdir(base):
            found += [Leftover(cls.kind, os.path.join(base, name), name, {"path": os.path.join(base, name)})
                      for name in sorted(os.listdir(base)) if name.startswith(PREFIX)]
        # Short per-node temp dirs (``tmp_dir_for``) in the shared temp directory: only those
        # whose controller is gone are leftovers; the others belong to live runs.
        tmp = tempfile.gettempdir()
        for name in sorted(os.listdir(tmp)):
            match = _TMP_NAME.fullmatch(name)
            path = os.path.join(tmp, name)
            if match is None or not os.path.isdir(path) or controller_alive(_owner(path).get("controller")):
                continue
            found.append(Leftover(cls.kind, path, match.group(1), {"path": path}))
        return found


OWNER_FILE = ".trainchaos-owner"
_TMP_NAME = re.compile(r"(trainchaos-[0-9a-f]+)-n\d+")


def tmp_dir_for(run_id: str, node: int) -> str:
    """A node's TMPDIR: short, because AF_UNIX socket paths made in it (multiprocessing's
    resource sharer, which every DataLoader with workers uses) may not pass 108 bytes, and a
    node-local directory under a user's state dir easily would."""
    return os.path.join(tempfile.gettempdir(), f"{run_id}-n{node}")


def _owner(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


@register_kind
class HelperProcess(ResourceKind):
    """A process the run starts beside the training job (an emulator, a proxy): it carries
    the run id in its environment, so it can only ever be confused with the run's own."""

    kind: ClassVar[str] = "helper_process"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        env = {**os.environ, **spec.get("env", {}), contract.RUN_ID_ENV: run_id,
               contract.CONTROLLER_ENV: controller_tag(), contract.RESOURCE_ENV: spec.get("name", "helper")}
        log_path = spec.get("log")
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = subprocess.Popen(spec["argv"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    cwd=spec.get("cwd"))
        finally:
            if not isinstance(log, int):  # a file of ours, not subprocess.DEVNULL
                log.close()
        return {"pid": proc.pid, "pid_start": process_start_time(proc.pid), "run_id": run_id}

    @classmethod
    def _ours(cls, details: dict[str, Any]) -> bool:
        pid = details.get("pid")
        if not pid:
            return False
        if process_start_time(pid) != details.get("pid_start"):
            return False  # gone, or the pid now names another process
        return any(p.pid == pid for p in find_run_processes(details.get("run_id")))

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        if not cls._ours(details):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(details["pid"], signal.SIGCONT)
        kill_pids([details["pid"]])
        with contextlib.suppress(ChildProcessError):
            os.waitpid(details["pid"], os.WNOHANG)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return cls._ours(details)


class RunResources:
    """The resources of one run, journaled in ``<run_dir>/resources.jsonl``."""

    def __init__(self, run_id: str, run_dir: str) -> None:
        self.run_id = run_id
        self.path = RunDir(run_dir).resources_journal
        os.makedirs(run_dir, exist_ok=True)
        self._held: list[dict[str, Any]] = []

    def acquire(self, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Journal, then create. A failed create is still torn down (it may be half made)."""
        # A kind nobody imported yet (a plugin family's) is found by loading the registry.
        cls = RESOURCE_KINDS.items.get(kind) or RESOURCE_KINDS.known().get(kind)
        if cls is None:
            raise ToolError(f"unknown resource kind {kind!r}; known: {', '.join(sorted(RESOURCE_KINDS.items))}")
        entry: dict[str, Any] = {"id": len(self._held), "kind": kind, "spec": spec, "details": {}}
        append_record(self.path, {"op": "create", "run_id": self.run_id, **entry})
        self._held.append(entry)
        try:
            entry["details"] = cls.create(self.run_id, spec)
        except Exception as exc:
            raise ToolError(f"could not create {kind} {_label(spec)}: {exc}") from exc
        append_record(self.path, {"op": "created", "id": entry["id"], "details": entry["details"]})
        return entry["details"]

    def release_all(self) -> list[str]:
        """Tear down everything held, newest first; returns one line per failure."""
        failures = release_records(self.path, list(reversed(self._held)))
        self._held = []
        return failures


def pending_resources(path: str) -> list[dict[str, Any]]:
    """Resources a journal created (or began to) and did not destroy, newest first."""
    entries: dict[int, dict[str, Any]] = {}
    for rec in read_records(path):
        op, rid = rec.get("op"), rec.get("id")
        if not isinstance(rid, int):  # a record this journal never writes: no id to pair
            continue
        if op == "create":
            entries[rid] = {"id": rid, "kind": rec.get("kind"), "spec": rec.get("spec") or {},
                            "details": {}}
        elif op == "created" and rid in entries:
            entries[rid]["details"] = rec.get("details") or {}
        elif op == "destroyed":
            entries.pop(rid, None)
    return sorted(entries.values(), key=lambda e: e["id"], reverse=True)


def release_records(path: str, entries: list[dict[str, Any]]) -> list[str]:
    """Destroy each entry in the order given, journaling each; goes on past failures."""
    failures = []
    RESOURCE_KINDS.load()
    for entry in entries:
        cls = RESOURCE_KINDS.items.get(entry["kind"])
        label = f"{entry['kind']} {_label(entry['spec'])}"
        if cls is None:
            failures.append(f"{label}: unknown resource kind (left in place)")
            continue
        try:
            cls.destroy(entry["spec"], entry["details"])
            if cls.exists(entry["spec"], entry["details"]):
                raise ToolError("still there after teardown")
        except Exception as exc:
            failures.append(f"{label}: {exc}")
            append_record(path, {"op": "destroy_failed", "id": entry["id"], "error": str(exc)})
            continue
        append_record(path, {"op": "destroyed", "id": entry["id"]})
    return failures


def _label(spec: dict[str, Any]) -> str:
    return str(spec.get("name") or spec.get("path") or spec.get("argv", [""])[0])
