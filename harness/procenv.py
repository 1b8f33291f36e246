"""Set this process's environment, as other processes read it in ``/proc/<pid>/environ``.

A process forked from the warm-start zygote (``harness.zygote``) inherits the zygote's
environment block: ``/proc/<pid>/environ`` reads the bytes between the kernel's
``env_start`` and ``env_end`` of the process, which ``execve`` filled and nothing moves
afterwards. trainchaos finds a rank, and the storage fault layer attributes a write to
one, by the ``RANK`` and ``TRAINCHAOS_*`` variables it reads there (``chaos.procs``,
``chaos.storage.daemon``). So the rank's environment is written into that block, in place,
as ``setproctitle`` rewrites a process's argv: the zygote is started with spare room in its
environment for it (``ENV_ROOM``).

Before the block is overwritten, libc's ``environ`` is rebuilt on the heap (``clearenv``,
then every variable set again): its pointers lead into the block, and a C library reading
``getenv`` afterwards must find whole strings there, not the middle of new ones.

Linux only (``/proc/self/stat`` fields 50 and 51); standard library only.
"""

from __future__ import annotations

import ctypes
import os

from chaos import contract

__all__ = ["ENV_ROOM_BYTES", "environ_block", "proc_environ", "set_environ"]

ENV_ROOM_BYTES = 8192
"""Spare bytes the zygote starts with: a rank's environment is the agent's (which the
zygote has too) plus torchrun's twenty-odd variables, well under 2 KiB."""

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


def _block_bounds() -> tuple[int, int]:
    with open("/proc/self/stat", encoding="utf-8", errors="replace") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); env_start and env_end are fields 50 and 51.
    return int(fields[47]), int(fields[48])


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


def proc_environ(pid: int) -> dict[str, str]:
    """The environment of ``pid`` as another process sees it."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw = fh.read()
    return dict(item.decode(errors="surrogateescape").split("=", 1)
                for item in raw.split(b"\0") if b"=" in item)
