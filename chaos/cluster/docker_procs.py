"""The processes of a docker run's node containers: which ranks live (one exec per node, or
this machine's /proc for a local engine), finding a rank a probe did not announce, and
signalling a rank (inside its container), a node (``docker kill``) or several nodes at
once (a power cut).

A rank's process is named by a *handle*, ``node * 2**22 + pid inside its container``: pid
namespaces overlap, so the bare pid is ambiguous. ``ContainerProcesses`` is the part of
``chaos.cluster.docker.DockerCluster`` that does this; it reads the backend's containers
(``container``, ``_containers``, ``_running``), its interpreter (``python``) and the ranks
the probe announced (``_live``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from chaos.cluster.base import FATAL_SIGNALS, LiveRank
from chaos.cluster.capabilities import PowerCut
from chaos.cluster.docker_engine import is_local_host
from chaos.errors import ToolError

__all__ = ["PID_STRIDE", "ContainerProcesses", "handle", "split_handle"]

PID_STRIDE = 1 << 22
"""Above Linux's largest pid_max: ``node * PID_STRIDE + pid`` names one process of a run."""


def handle(node: int, pid: int) -> int:
    return node * PID_STRIDE + pid


def split_handle(key: int) -> tuple[int, int]:
    return divmod(int(key), PID_STRIDE)


class ContainerProcesses:
    """Live ranks and signals of the run's containers (mixed into ``DockerCluster``)."""

    _live: dict[int, LiveRank]
    _containers: dict[int, str]

    if TYPE_CHECKING:  # what the backend provides
        def container(self, node: int) -> Any: ...
        def host_of(self, node: int) -> str: ...
        def python(self) -> str: ...
        def _running(self, node: int) -> bool: ...
        def mark_lost(self, node: int) -> None: ...

    def _exec(self, node: int, code: str) -> tuple[int, str]:
        res = self.container(node).exec_run([self.python(), "-c", code])
        return res.exit_code, res.output.decode(errors="replace")

    def live_ranks(self) -> dict[int, LiveRank]:
        """One exec per node lists its live pids (a frozen container answers nothing:
        its ranks are alive, only stopped)."""
        by_node: dict[int, list[LiveRank]] = {}
        for lr in self._live.values():
            by_node.setdefault(lr.node, []).append(lr)
        alive = {}
        for node, ranks in by_node.items():
            pids = self._container_pids(node)
            alive.update({lr.rank: lr for lr in ranks if split_handle(lr.pid)[1] in pids})
        return alive

    def _container_pids(self, node: int) -> set[int]:
        try:
            cont = self.container(node)
        except ToolError:
            return set()
        cont.reload()
        if cont.status == "paused":
            return {split_handle(lr.pid)[1] for lr in self._live.values() if lr.node == node}
        if cont.status != "running":
            return set()
        local = self._local_pids(node, cont)
        if local is not None:
            return set(local)
        code, out = self._exec(node, _LIST_PIDS)
        return {int(p) for p in out.split()} if code == 0 else set()

    def _local_pids(self, node: int, cont: Any) -> dict[int, int] | None:
        """Container pid -> pid here, when the container's processes are visible in this
        machine's /proc (a local engine, not one in a VM); None otherwise."""
        init = int(cont.attrs.get("State", {}).get("Pid") or 0)
        if not is_local_host(self.host_of(node)) or init <= 0 or not os.path.exists(f"/proc/{init}"):
            return None
        return _host_pids(init)

    def process_alive(self, pid: int) -> bool:
        node, inner = split_handle(pid)
        return node in self._containers and inner in self._container_pids(node)

    def find_rank(self, rank: int) -> LiveRank | None:
        """A rank without the probe: found by ``RANK`` in its environment inside the node
        containers (the process whose parent is not of the same rank: torchrun's worker)."""
        found = []
        for node in self._containers:
            if not self._running(node):
                continue
            code, out = self._exec(node, _FIND_RANK.replace("@RANK@", str(int(rank))))
            found += [LiveRank(rank, node, handle(node, int(p))) for p in out.split()] if code == 0 else []
        return found[0] if len(found) == 1 else None

    def signal_pid(self, pid: int, sig: int) -> bool:
        """The signal goes to the process in the rank's container: on a local engine straight
        from here to its pid in this machine's namespace (no exec round trip between the
        recorded injection time and the kill); on a remote one from inside the container
        (``docker exec``: the round trip then delays the kill behind ``t_inject``)."""
        node, inner = split_handle(pid)
        if node not in self._containers:
            return False
        try:
            local = self._local_pids(node, self.container(node))
        except ToolError:
            return False
        if local is not None:
            host_pid = local.get(inner)
            if host_pid is None:
                return False
            try:
                os.kill(host_pid, sig)
                return True
            except ProcessLookupError:
                return False
        if not self._running(node):
            return False
        code, _ = self._exec(node, f"import os; os.kill({inner}, {int(sig)})")
        return code == 0

    def signal_node(self, node: int, sig: int) -> list[int]:
        """``docker kill``: the container's init gets the signal (SIGKILL takes every process
        of the container at once, as a host losing power or panicking would)."""
        members = [lr.pid for lr in self._live.values() if lr.node == node]
        cont = self.container(node)
        if cont.status == "paused" and sig in FATAL_SIGNALS:
            cont.unpause()  # a frozen container cannot take a signal
        try:
            cont.kill(signal=int(sig))
        except Exception:
            return []
        if sig in FATAL_SIGNALS:
            self.mark_lost(node)
        return [handle(node, 1), *members]

    # -- power: every node at once
    def power_off(self, nodes: tuple[int, ...]) -> PowerCut:
        """Every container of ``nodes`` SIGKILLed at once: one thread per container, released
        together, so the kills land within milliseconds of each other (sequential API calls
        would spread them by a round trip each)."""
        conts = [(node, self.container(node)) for node in nodes if node in self._containers]
        for node, _ in conts:
            self.mark_lost(node)
        go = threading.Barrier(len(conts) + 1)  # with no container, this thread alone passes it
        stamps: list[float] = []
        hit: list[int] = []

        def kill(node: int, cont: Any) -> None:
            go.wait()
            with contextlib.suppress(Exception):
                if cont.status == "paused":
                    cont.unpause()
                cont.kill(signal="SIGKILL")
                stamps.append(time.perf_counter())
                hit.extend([handle(node, 1), *(lr.pid for lr in self._live.values() if lr.node == node)])

        threads = [threading.Thread(target=kill, args=nc, daemon=True) for nc in conts]
        for t in threads:
            t.start()
        go.wait()
        for t in threads:
            t.join(timeout=30)
        return PowerCut(hit, (max(stamps) - min(stamps)) if stamps else 0.0)


def _host_pids(init_pid: int) -> dict[int, int]:
    """A local container's live processes: pid inside its pid namespace -> pid here. Found
    by the namespace of its init (``State.Pid``) and each process's ``NSpid`` line."""
    if init_pid <= 0:
        return {}
    try:
        ns = os.stat(f"/proc/{init_pid}/ns/pid").st_ino
    except OSError:
        return {}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/pid").st_ino != ns:
                continue
            with open(f"/proc/{entry}/status", encoding="utf-8") as fh:
                status = fh.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").strip().startswith("Z"):
            continue
        nspid = fields.get("NSpid", "").split()
        if nspid:
            found[int(nspid[-1])] = int(entry)
    return found


_LIST_PIDS = (
    "import os\n"
    "for p in os.listdir('/proc'):\n"
    "    if p.isdigit():\n"
    "        try:\n"
    "            s = open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()[0]\n"
    "        except OSError:\n"
    "            continue\n"
    "        if s != 'Z': print(p)\n"
)

_FIND_RANK = (
    "import os\n"
    "def env(p):\n"
    "    try:\n"
    "        return dict(e.split('=', 1) for e in open('/proc/%s/environ' % p).read().split('\\0') if '=' in e)\n"
    "    except OSError:\n"
    "        return {}\n"
    "def ppid(p):\n"
    "    return open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()[1]\n"
    "mine = [p for p in os.listdir('/proc') if p.isdigit() and env(p).get('RANK') == '@RANK@']\n"
    "for p in mine:\n"
    "    if ppid(p) not in mine: print(p)\n"
)
