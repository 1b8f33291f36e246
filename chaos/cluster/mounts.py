"""The fault layer's mounts as run-scoped resources (kind ``fuse_mount``), and which
directories of a run get one.

A mount is journaled before its daemon starts, torn down by a lazy unmount and a SIGKILL of
the daemon (which aborts the FUSE connection, so a caller stalled inside the layer gets an
error instead of hanging), and found after a SIGKILLed controller by its name alone: every
mount's ``fsname`` is ``<run_id>-<tier>`` (``trainchaos-...``), listed in /proc/mounts as
type ``fuse.trainchaos``, and its daemon carries ``TRAINCHAOS_STORAGE_RUN_ID``.

The daemon does *not* carry ``TRAINCHAOS_RUN_ID``: stopping the nodes kills every process of
the run by that variable, and a daemon killed before its mount is released would leave the
mount dead ("Transport endpoint is not connected") for the last moments of teardown.

Mounting is opt-in per scenario: only a scenario with a storage fault gets mounts, only over
the tiers its faults name (planned by the storage family, ``chaos.faults.storage.mounts.plan_mounts``,
and handed to the backend in ``RunSpec.mounts``); every other scenario runs on the bare
directories.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, ClassVar

from chaos import contract
from chaos.errors import ToolError
from chaos.runfiles.resources import Leftover, ResourceKind, register_kind
from chaos.storage.control import read_json
from chaos.storage.daemon import FSTYPE
from chaos.util.procs import (
    controller_alive,
    controller_tag,
    kill_pids,
    process_start_time,
    process_state,
)

if TYPE_CHECKING:
    from chaos.cluster.base import ClusterBackend

__all__ = ["FuseMount", "acquire_storage_mounts", "control_dir",
           "mounted", "tier_label"]

READY_TIMEOUT_S = 15.0
_FSNAME = re.compile(r"(trainchaos-[0-9a-f]+)-[\w.-]+")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fuse_mounts() -> list[tuple[str, str]]:
    """(fsname, mount point) of every fault-layer mount on the machine."""
    found = []
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == f"fuse.{FSTYPE}":
                    found.append((_unescape(parts[0]), _unescape(parts[1])))
    except OSError:
        pass
    return found


def mounted(path: str) -> bool:
    target = os.path.realpath(path)
    return any(mp == target for _, mp in fuse_mounts())


def _daemons() -> list[tuple[int, str, str | None]]:
    """(pid, storage run id, controller tag) of every fault-layer daemon."""
    found = []
    needle = f"{contract.STORAGE_RUN_ID_ENV}=".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        run = next((e[len(needle):].decode() for e in env if e.startswith(needle)), None)
        if run is None:
            continue
        ctl = next((e.split(b"=", 1)[1].decode() for e in env
                    if e.startswith(contract.CONTROLLER_ENV.encode() + b"=")), None)
        found.append((int(entry), run, ctl))
    return found


def _unmount(path: str) -> None:
    for argv in (["fusermount3", "-u", "-z", path], ["umount", "-l", path]):
        if shutil.which(argv[0]) is None:
            continue
        if subprocess.run(argv, capture_output=True, timeout=10).returncode == 0:
            return


@register_kind
class FuseMount(ResourceKind):
    """One fault-layer mount and its daemon (spec: path, control_dir, fsname, track_unfsynced)."""

    kind: ClassVar[str] = "fuse_mount"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        path, control = spec["path"], spec["control_dir"]
        if not spec["fsname"].startswith(f"{run_id}-"):
            raise ToolError(f"a fault-layer mount is named after its run ({run_id}-...), not {spec['fsname']!r}")
        if mounted(path):
            raise ToolError(f"{path} is already a fault-layer mount")
        os.makedirs(path, exist_ok=True)
        os.makedirs(control, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != contract.RUN_ID_ENV}
        env.update({contract.STORAGE_RUN_ID_ENV: run_id, contract.CONTROLLER_ENV: controller_tag()})
        argv = [sys.executable, "-m", "chaos.storage.daemon", path, control, spec["fsname"]]
        if spec.get("track_unfsynced"):
            argv.append("--track-unfsynced")
        log_path = os.path.join(control, "daemon.log")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        details = {"pid": proc.pid, "pid_start": process_start_time(proc.pid)}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            state = read_json(os.path.join(control, "state.json")) or {}
            if state.get("ready") and mounted(path):
                return details
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            tail = fh.read()[-600:]
        cls.destroy(spec, details)
        raise ToolError(f"the storage fault layer did not come up over {path} "
                        f"(daemon {'exited ' + str(proc.returncode) if proc.poll() is not None else 'not ready'}): {tail}")

    @classmethod
    def _ours(cls, details: dict[str, Any]) -> bool:
        pid = details.get("pid")
        if not pid:
            return False
        return process_start_time(pid) == details.get("pid_start") and process_state(pid) not in (None, "Z")

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        path = spec["path"]
        if mounted(path):
            _unmount(path)
        pids = [details["pid"]] if cls._ours(details) else []
        fsname = spec.get("fsname")
        named = _FSNAME.fullmatch(fsname) if fsname else None
        run = named.group(1) if named else None
        if not pids and run:
            # From a scan (no details): the run's daemons whose controller is gone.
            pids = [pid for pid, r, ctl in _daemons() if r == run and not controller_alive(ctl)]
        kill_pids(pids)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # our own child: reap it (dead by now); else not ours to reap
        deadline = time.monotonic() + 5
        while mounted(path) and time.monotonic() < deadline:
            _unmount(path)
            time.sleep(0.05)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return mounted(spec["path"]) or cls._ours(details)

    @classmethod
    def scan(cls) -> list[Leftover]:
        """Mounts and daemons of runs whose controller is gone. A run of another state
        directory (another suite on the machine) is not in the caller's list of live runs,
        so liveness is judged here, by the controller its daemons carry."""
        found = []
        seen_runs = set()
        daemons = _daemons()
        live = {run for _pid, run, ctl in daemons if controller_alive(ctl)}
        for fsname, mountpoint in fuse_mounts():
            match = _FSNAME.fullmatch(fsname)
            run = match.group(1) if match else None
            seen_runs.add(run)
            if run in live:
                continue
            found.append(Leftover(cls.kind, mountpoint, run, {"path": mountpoint, "fsname": fsname}))
        for pid, run, ctl in daemons:
            if run not in seen_runs and not controller_alive(ctl):
                found.append(Leftover(cls.kind, f"daemon pid {pid}", run,
                                      {"path": f"/nonexistent/{run}", "fsname": f"{run}-daemon"}))
        return found


# -- which directories of a run get a mount -----------------------------------------------


def control_dir(run_dir: str, label: str) -> str:
    """Where the injector and a mount's daemon talk (``<run>/storage/<label>``)."""
    return os.path.join(run_dir, "storage", label)


def tier_label(tier: str, node: int | None) -> str:
    """``shared``, ``data`` (one mount each), ``local-node-<i>`` (one per node)."""
    return tier if node is None else f"{tier}-node-{node}"


"""The node-local tier lives in ``$TRAINCHAOS_NODE_LOCAL_DIR/checkpoints`` (harness/ckpt_tiers.py)."""


def acquire_storage_mounts(backend: ClusterBackend, node_local_dir: Any) -> None:
    """Mount the fault layer over the tiers the runner planned (``RunSpec.mounts``; none:
    nothing). Called by a backend once its node directories exist and before any node
    starts."""
    run_id, run_dir = backend.spec.run_id, backend.spec.run_dir
    for mount in sorted(backend.spec.mounts, key=lambda m: m.tier):
        if mount.path is not None:
            targets: list[tuple[str, int | None]] = [(mount.path, None)]
        else:  # each node's own local tier
            targets = [(os.path.join(node_local_dir(n), contract.LOCAL_TIER_SUBDIR), n)
                       for n in range(backend.topology.total_nodes)]
        for path, node in targets:
            label = tier_label(mount.tier, node)
            backend.resources.acquire("fuse_mount", {
                "path": path, "control_dir": control_dir(run_dir, label),
                "fsname": f"{run_id}-{label}", "track_unfsynced": mount.track_unfsynced,
                "name": f"{label} tier"})
