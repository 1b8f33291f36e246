"""What the storage faults share: the tiers they hit, the checks of a path filter against
the workload's layout, and the FUSE layer's controls of the target's mounts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from chaos.cluster.capabilities import StorageLayer
from chaos.cluster.mounts import tier_label
from chaos.errors import ToolError
from chaos.faults.base import FaultType, ParamsContext
from chaos.storage.control import MountControl

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["Location", "Op", "Tier", "TierParams", "check_storage", "listing", "mount_controls"]

Tier = Literal["shared", "local", "data"]
"""``shared``: the durable checkpoint tier every node sees (the workload's checkpoint
directory: ``checkpoint_dir`` of a command or a stack's script, the harness's checkpoint.dir);
``local``: each node's fast tier on its node-local disk (the harness's
checkpoint.local_every_steps); ``data``: the directory of the harness's data file, a copy
made for the run."""
Op = Literal["open", "create", "read", "write", "fsync", "flush", "rename", "unlink", "mkdir",
             "rmdir", "readdir", "getattr", "truncate", "statfs"]
Location = tuple[str | int, ...]

T = TypeVar("T")


class TierParams(Protocol):
    """What ``check_storage`` reads of a storage fault's params (each type's model has a tier)."""

    @property
    def tier(self) -> Tier: ...


def listing(*items: T) -> Callable[[], list[T]]:
    """A ``default_factory`` for a list field: a fresh list of ``items`` each time, typed by
    the field (``listing("read")`` for a ``list[Op]``), which a bare lambda's list[str] is not."""
    return lambda: list(items)


_STEP_DIR = re.compile(r"(?:^|/|\*)step-(\d+)(?=/|$)")
"""A checkpoint folder written with its step number (the harness names them step-%08d)."""


def check_storage(params: TierParams, context: ParamsContext) -> list[tuple[Location, str]]:
    errors: list[tuple[Location, str]] = []
    path = getattr(params, "path", None)
    if path is not None and (path.startswith("/") or ".." in path.split("/")):
        errors.append((("path",), f"{path!r} leaves the mounted tree: a path filter is a glob "
                                  f"relative to the mount of tier {params.tier!r} (e.g. step-*/state.pt)"))
    workload = context.workload
    layout = workload.storage() if workload is not None else None
    if path is not None and layout is not None and layout.padded_step_dirs:
        for digits in _STEP_DIR.findall(path):
            if len(digits) != 8:
                errors.append((("path",), f"{path!r} never matches: checkpoint folders are named "
                               f"step-NNNNNNNN, 8 digits (step {int(digits)}: step-{int(digits):08d}), "
                               f"holding state.pt; e.g. step-{int(digits):08d}/state.pt or "
                               "step-*/state.pt"))
                break
    if workload is None:
        return errors  # the workload's own problems are reported where it is written
    if (layout is None or (params.tier == "local" and not layout.node_local_checkpoints)
            or (params.tier == "data" and layout.data_file is None)):
        errors.append((("tier",), workload.storage_refusal(params.tier)))
    return errors


def mount_controls(ctx: InjectionContext, fault: FaultType) -> list[MountControl]:
    tier = fault.params.get("tier", "shared")
    if tier in ("shared", "data"):
        labels = [tier_label(tier, None)]
    else:
        nodes = set(fault.target.nodes)
        live = ctx.cluster.live_ranks()
        nodes |= {live[r].node for r in fault.target.ranks if r in live}
        labels = [tier_label(tier, n) for n in sorted(nodes)]
    layer = ctx.require(StorageLayer)
    controls = [MountControl(layer.storage_control_dir(label)) for label in labels]
    for control in controls:
        if not control.state().get("ready"):
            raise ToolError(f"no storage fault layer is mounted for tier {tier!r} ({control.dir})")
    return controls
