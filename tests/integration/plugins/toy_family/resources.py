"""The toy family's run-scoped resource: a ballast file, ``<run dir>/toy-ballast-<fault>.bin``."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from chaos.runfiles.resources import ResourceKind, register_kind

__all__ = ["BallastFile"]

PREFIX = "toy-ballast-"


def _ours(path: str) -> bool:
    """Only files named as ballast are ever removed."""
    return os.path.basename(path).startswith(PREFIX) and path.endswith(".bin")


@register_kind
class BallastFile(ResourceKind):
    kind: ClassVar[str] = "toy_ballast_file"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        path = spec["path"]
        if not _ours(path):
            raise ValueError(f"refusing to own {path}: not a ballast file")
        with open(path, "wb") as fh:
            fh.truncate(int(spec["mb"]) << 20)  # sparse: a ballast of size, not of disk
        return {"bytes": os.path.getsize(path)}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        if _ours(spec["path"]) and os.path.lexists(spec["path"]):
            os.remove(spec["path"])

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return _ours(spec["path"]) and os.path.lexists(spec["path"])
