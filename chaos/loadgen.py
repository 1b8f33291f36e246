"""A noisy neighbour: real work that competes with a node for one resource.

``python -m chaos.loadgen KIND --workers N [--join-cgroups-of PID] [--dir D] [--size-mb M]``
runs until killed; the ``noisy_neighbor`` fault starts it as a run-scoped helper process
(``chaos.runfiles.resources.HelperProcess``: journaled first, killed by the run's teardown
and by ``trainchaos cleanup``). Kinds:

``cpu``        busy loops, one process per worker (Python threads would share one GIL);
``memory_bw``  streaming copies of a buffer larger than the last-level cache;
``page_cache`` reads of a file of ``--size-mb`` over and over (each pass evicts others'
               cached pages once the cgroup or the machine is short of memory);
``io``         a writer on the node's disk: ``--size-mb`` written and fsynced, again and again.

Each worker is a forked child that dies with its parent (``PR_SET_PDEATHSIG``): the one pid
the resource journal holds is enough to stop all of them, even after a SIGKILL.

``--join-cgroups-of PID`` first moves this process into every cgroup (v1 hierarchies and
the v2 one) PID is in, so the load shares the node's CPU quota, memory limit and page-cache
charge (``placement: same``); without it the load stays where the controller runs, beside
the node (``placement: sibling``), or in a cgroup of its own (``--join-cgroup DIR``: a
CPU quota for the neighbour). Stdlib only: it runs inside node containers too.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import sys
import time

from chaos import contract

__all__ = ["KINDS", "join_cgroups_of", "main", "stop_tagged"]

KINDS = ("cpu", "memory_bw", "page_cache", "io")
_PR_SET_PDEATHSIG = 1
_CGROUP_ROOT = "/sys/fs/cgroup"


def join_cgroups_of(pid: int, me: int | None = None) -> list[str]:
    """Move ``me`` (default: this process) into each cgroup ``pid`` is in; returns the
    cgroup directories joined. A hierarchy that is not mounted here is skipped."""
    me = me if me is not None else os.getpid()
    joined = []
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = [c.removeprefix("name=") for c in controllers.split(",") if c]
        mount = os.path.join(_CGROUP_ROOT, names[0]) if names else os.path.join(_CGROUP_ROOT, "unified")
        directory = os.path.join(mount, path.lstrip("/"))
        procs = os.path.join(directory, "cgroup.procs")
        if not os.path.exists(procs):
            continue
        with open(procs, "w", encoding="utf-8") as out:
            out.write(str(me))
        joined.append(directory)
    return joined


def stop_tagged(tag: str) -> list[int]:
    """SIGKILL the loads carrying ``TRAINCHAOS_RESOURCE=tag`` (their workers die with them)."""
    needle = f"{contract.RESOURCE_ENV}={tag}".encode()
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed.append(int(entry))
        except OSError:
            continue
    return killed


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _cpu(_index: int, _args: argparse.Namespace) -> None:
    x = 0
    while True:
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def _memory_bw(_index: int, args: argparse.Namespace) -> None:
    # 64 MiB per buffer is far past any last-level cache: each copy streams through DRAM.
    size = max(1, args.size_mb) << 20
    src, dst = bytearray(os.urandom(1 << 20) * (size >> 20)), bytearray(size)
    while True:
        dst[:] = src


def _file(args: argparse.Namespace, index: int) -> str:
    os.makedirs(args.dir, exist_ok=True)
    return os.path.join(args.dir, f"neighbor-{os.getppid()}-{index}.bin")


def _page_cache(index: int, args: argparse.Namespace) -> None:
    path = _file(args, index)
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as fh:
        for _ in range(max(1, args.size_mb)):
            fh.write(chunk)
    while True:
        with open(path, "rb", buffering=0) as fh:
            while fh.read(1 << 20):
                pass


def _io(index: int, args: argparse.Namespace) -> None:
    path = _file(args, index)
    chunk = os.urandom(1 << 20)
    while True:
        with open(path, "wb") as fh:
            for _ in range(max(1, args.size_mb)):
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())


_WORK = {"cpu": _cpu, "memory_bw": _memory_bw, "page_cache": _page_cache, "io": _io}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.loadgen", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=(*KINDS, "stop"))
    parser.add_argument("--tag", default=None, help="stop: the loads started with this resource tag in their environment")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--dir", default=None, help="where page_cache and io keep their files")
    parser.add_argument("--join-cgroups-of", type=int, default=None)
    parser.add_argument("--join-cgroup", action="append", default=[], metavar="DIR",
                        help="a cgroup directory to move into (a run-scoped cgroup of its own)")
    args = parser.parse_args(argv)
    if args.kind == "stop":
        return 0 if stop_tagged(args.tag or parser.error("stop needs --tag")) else 1
    if args.kind in ("page_cache", "io") and not args.dir:
        parser.error(f"{args.kind} needs --dir")
    if args.join_cgroups_of:
        join_cgroups_of(args.join_cgroups_of)
    for directory in args.join_cgroup:
        with open(os.path.join(directory, "cgroup.procs"), "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
    children = []
    for index in range(max(1, args.workers)):
        pid = os.fork()
        if pid == 0:
            _die_with_parent()
            if os.getppid() == 1:
                os._exit(0)  # the parent died before the death signal was armed
            try:
                _WORK[args.kind](index, args)
            finally:
                os._exit(0)
        children.append(pid)

    def _stop(_sig: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        if args.dir:
            for index in range(len(children)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(args.dir, f"neighbor-{os.getpid()}-{index}.bin"))
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
