"""Set this process's environment (and its command line), as other processes read them in
``/proc/<pid>/environ`` (``/proc/<pid>/cmdline``).

A process forked from the warm-start zygote (``harness.zygote``) inherits the zygote's
environment block: ``/proc/<pid>/environ`` reads the bytes between the kernel's
``env_start`` and ``env_end`` of the process, which ``execve`` filled and nothing moves
afterwards. trainchaos finds a rank, and the storage fault layer attributes a write to
one, by the ``RANK`` and ``TRAINCHAOS_*`` variables it reads there (``chaos.util.procs``,
``chaos.storage.daemon``). So the rank's environment is written into that block, in place,
as ``setproctitle`` rewrites a process's argv: the node's agent, which forks the zygote, is
started with spare room in its environment for it (``ENV_ROOM_BYTES``).

Before the block is overwritten, libc's ``environ`` is rebuilt on the heap (``clearenv``,
then every variable set again): its pointers lead into the block, and a C library reading
``getenv`` afterwards must find whole strings there, not the middle of new ones.

The warm-start zygote is forked from its node's torchrun agent, so it would show the
agent's command line too, and a rank looking for its agent among its ancestors
(``harness.quarantine.agent_pid``) would take the zygote for it: the zygote writes its own
command line over the argument area it inherited (``set_cmdline``), in the same way.

Linux only (``/proc/self/stat`` fields 48 to 51); standard library only.
"""

from __future__ import annotations

import ctypes
import os

from chaos import contract

__all__ = ["ENV_ROOM_BYTES", "environ_block", "proc_environ", "set_cmdline", "set_environ"]

ENV_ROOM_BYTES = 8192
"""Spare bytes a warm node's agent starts with (``TorchrunPerNode.node_env``), inherited by
the zygote it forks and each rank forked from that: a rank's environment is the agent's
plus torchrun's twenty-odd variables, well under 2 KiB more."""

# Read first when the block has too little room for everything: what trainchaos and the
# storage layer look for in a process's environment.
_FIRST = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE")


def environ_block(env: dict[str, str], room: int) -> tuple[bytes, bool]:
    """``KEY=value\\0`` entries that fit in ``room`` bytes, ``RANK`` and the ``TRAINCHAOS_*``
    names first, whole entries only, NUL-padded to ``room``; and whether all of them fit."""
    def first(key: str) -> tuple[int, str]:
        return (0 if key in _FIRST or key.startswith(contract.ENV_PREFIX) else 1, key)

    out = bytearray()
    complete = True
    for key in sorted(env, key=first):
        entry = f"{key}={env[key]}".encode(errors="surrogateescape") + b"\0"
        if len(out) + len(entry) <= room:
            out += entry
        else:
            complete = False
    return bytes(out) + b"\0" * (room - len(out)), complete


def _block_bounds(first_field: int = 50) -> tuple[int, int]:
    """Start and end of this process's environment block (fields 50 and 51 of its stat), or
    of its argument area (``first_field=48``: arg_start and arg_end)."""
    with open("/proc/self/stat", encoding="utf-8", errors="replace") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state).
    return int(fields[first_field - 3]), int(fields[first_field - 2])


def set_environ(env: dict[str, str]) -> bool:
    """Make ``env`` this process's whole environment: ``os.environ``, libc's ``environ`` and
    what ``/proc/<pid>/environ`` shows. False when the block could not hold it all (the
    first names above are kept)."""
    libc = ctypes.CDLL(None, use_errno=True)
    os.environ.clear()
    libc.clearenv()  # also what os.environ never knew (entries without '=')
    os.environ.update(env)
    start, end = _block_bounds()
    block, complete = environ_block(env, end - start)
    ctypes.memmove(start, block, len(block))
    return complete


def set_cmdline(argv: list[str]) -> bool:
    """Make ``argv`` what ``/proc/<pid>/cmdline`` shows (``ps``, ``chaos.util.procs``), written over
    this process's argument area in place and NUL-padded (its last byte stays NUL, so the
    kernel reads the area as arguments; readers skip the empty ones). Whole arguments only;
    False when not all of them fit."""
    start, end = _block_bounds(48)
    out = bytearray()
    complete = True
    for arg in argv:
        entry = arg.encode(errors="surrogateescape") + b"\0"
        if len(out) + len(entry) > end - start:
            complete = False
            break
        out += entry
    ctypes.memmove(start, bytes(out) + b"\0" * (end - start - len(out)), end - start)
    return complete


def proc_environ(pid: int) -> dict[str, str]:
    """The environment of ``pid`` as another process sees it."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw = fh.read()
    return dict(item.decode(errors="surrogateescape").split("=", 1)
                for item in raw.split(b"\0") if b"=" in item)
