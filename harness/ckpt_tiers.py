"""Checkpoint tiers and placement: a node-local fast tier beside the shared durable one, each
with its own interval, as torchtitan's and DLRover's flash checkpoints do, and where the
fast tier's copies live (``checkpoint.placement``).

The fast tier lives on the node's local disk (``$TRAINCHAOS_NODE_LOCAL_DIR/checkpoints``),
is written often and, with ``checkpoint.local_fsync: false``, without fsync (a page-cache or
shm tier: nearly free, and gone when the node loses power). The shared tier
(``checkpoint.dir``) is written less often and always fsynced. DDP state is replicated, so
rank 0 writes both, as it writes the shared tier alone without tiers.

Placement (what a power-domain outage takes with it):

- ``shared``: the shared tier only (the default without ``local_every_steps``);
- ``local``: rank 0's node-local fast tier only: lost with that node;
- ``replicated``: rank 0's fast tier plus a replica on a node in another power domain
  (``TRAINCHAOS_FAILURE_DOMAIN``, exported by the backend), kept by the lowest rank there
  (``<fast tier>/replica``): a domain outage leaves one copy;
- ``local+shared``, ``replicated+shared``: a fast tier with the shared tier behind it.

Loading takes the newest checkpoint that passes verification anywhere: the shared tier (read
by rank 0) or any node's fast tier (read by the lowest rank on that node, since a node's
local disk is its own). Candidates go newest first, the fast tier first on a tie (the
cheaper read); the rank holding one reads and verifies it and broadcasts the outcome, every
failed one is reported as skipped, and every rank resumes from the same step.

Which tiers a save goes to: those whose own interval is due at that step; a save asked for
when none is due (the final step, an emergency checkpoint) goes to the shared tier, which
survives the node, or without one to every copy of the fast tier.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chaos import contract
from harness.checkpoint import CheckpointCorruptError, CheckpointManager, LoadInfo, TierOptions
from harness.config import HarnessConfig

__all__ = ["TieredCheckpoints", "agree_on_start", "build_checkpoints", "local_tier_dir",
           "pick_replica"]

REPLICA_SUBDIR = "replica"
"""The replica's copies, inside the fast tier's directory (one mount of the node-local disk)."""
PRIMARY, REPLICA, SHARED = "primary", "replica", "shared"
Share = Callable[[Any, int], Any]
"""The object of the given source rank on every rank (a broadcast from it)."""
Gather = Callable[[Any], list[Any]]
"""Every rank's object, in rank order (an all-gather)."""


def local_tier_dir(cfg: HarnessConfig) -> str:
    base = os.environ.get(contract.NODE_LOCAL_DIR_ENV) or os.path.join(cfg.run_dir, "node-local")
    return os.path.join(base, contract.LOCAL_TIER_SUBDIR)


def build_checkpoints(cfg: HarnessConfig, rank: int, *, emit: Any = None, fault_point: Any = None,
                      on_deadline: Any = None, share: Share | None = None,
                      gather: Gather | None = None) -> Any:
    """The harness's checkpoint manager for ``checkpoint.placement``: the shared tier alone,
    or a node-local fast tier (rank 0's, plus a replica in another power domain for
    ``replicated``) with or without the shared tier behind it."""
    c = cfg.checkpoint
    options = TierOptions(keep=c.keep, mode=c.mode, every_steps=c.every_steps, every_seconds=c.every_seconds,
                          verify_checksum=cfg.detect.ckpt_checksum, retries=c.save_retries,
                          max_failed_saves=c.max_failed_saves, when_busy=c.when_busy,
                          save_deadline_s=c.save_deadline_s, pointer_before_fsync=c.bug_pointer_before_fsync)
    hooks = dict(emit=emit, fault_point=fault_point, on_deadline=on_deadline)
    shared_dir = c.dir or os.path.join(cfg.run_dir, contract.SHARED_CHECKPOINTS_SUBDIR)
    parts = c.placement_parts
    if not c.fast_tier:
        return CheckpointManager(shared_dir, options, is_writer=rank == 0, **hooks)
    shared = (CheckpointManager(shared_dir, replace(options, tier="shared"), is_writer=rank == 0, **hooks)
              if "shared" in parts else None)
    fast = replace(options, every_steps=c.local_every_steps or c.every_steps,
                   # without a shared tier the fast tier is the job's only one: its time trigger too
                   every_seconds=0.0 if shared is not None else c.every_seconds,
                   tier="local", fsync=c.local_fsync)
    replica_rank = pick_replica(rank, gather) if "replicated" in parts else None
    if emit is not None and rank == 0:
        emit("ckpt_placement", placement="+".join(parts), replica_rank=replica_rank)
    copies = {PRIMARY: CheckpointManager(local_tier_dir(cfg), fast, is_writer=rank == 0, **hooks)}
    if "replicated" in parts:
        copies[REPLICA] = CheckpointManager(os.path.join(local_tier_dir(cfg), REPLICA_SUBDIR), fast,
                                            is_writer=rank == replica_rank, **hooks)
    return TieredCheckpoints(shared, copies, rank, share, gather)


def failure_domain() -> str:
    """This node's power domain (else rack) as the backend exported it; empty: unknown."""
    return os.environ.get(contract.FAILURE_DOMAIN_ENV, "")


def pick_replica(rank: int, gather: Gather | None) -> int | None:
    """The rank that keeps the fast tier's replica: the lowest one on a node in another power
    domain than rank 0's (without domains: on another node); None when there is none. DDP
    state is the same on every rank, so that rank writes its own copy: the bytes rank 0 would
    send it over the network."""
    if gather is None:
        return None
    me = (rank, os.environ.get(contract.NODE_ENV, ""), failure_domain())
    everyone = sorted(gather(me))
    _, node0, domain0 = everyone[0]
    for r, node, domain in everyone[1:]:
        if (domain != domain0) if (domain or domain0) else (node != node0):
            return r
    return None


def agree_on_start(checkpoints: Any, loaded: tuple[dict[str, Any], LoadInfo] | None,
                   gather_steps: Callable[[int], list[int]]) -> tuple[dict[str, Any], LoadInfo] | None:
    """Every rank resumes from the same step, also when ranks verified differently.

    With one tier every rank verifies the shared checkpoints itself, and corruption that only
    one node's IO path shows (a bad HBA) makes that rank reject a checkpoint the others
    accept. A checkpoint one rank found bad is not trusted by any: all go to the lowest step
    any rank loaded, verifying it themselves (no rank loaded anything: all start fresh)."""
    step = loaded[1].step if loaded is not None else 0
    steps = gather_steps(step)
    target = min(steps)
    if target == step:
        return loaded
    if target == 0:
        return None
    state, path, reason = checkpoints.read_step(target)
    if state is None:
        raise CheckpointCorruptError([(path, f"{reason} (the step another rank fell back to)")])
    assert loaded is not None  # without a load, step is 0 and so is the lowest: returned above
    skipped = [(loaded[1].path, f"another rank rejected it; the group resumes from step {target}")]
    checkpoints._emit("ckpt_load", step=target, tier=checkpoints.tier, verified=True, path=path,
                      skipped=[list(s) for s in skipped], seconds=None)
    return state, LoadInfo(step=target, path=path, skipped=skipped)


class TieredCheckpoints:
    """The fast tier's copies (and the shared tier) behind the one manager's interface."""

    def __init__(self, shared: CheckpointManager | None, copies: dict[str, CheckpointManager],
                 rank: int, share: Share | None, gather: Gather | None = None,
                 node: str | None = None) -> None:
        self.shared = shared
        self.copies = copies
        self.rank = rank
        self.node = node if node is not None else os.environ.get(contract.NODE_ENV, str(rank))
        """Which node's local disk this rank sees (ranks of one node read one fast tier)."""
        self.share = share
        self.gather = gather
        self.directory = (shared or copies[PRIMARY]).directory

    @property
    def local(self) -> CheckpointManager:
        return self.copies[PRIMARY]

    @property
    def tiers(self) -> list[CheckpointManager]:
        return [*self.copies.values(), *([self.shared] if self.shared is not None else [])]

    def should_save(self, step: int) -> bool:
        return any(t.should_save(step) for t in self.tiers)

    def save(self, step: int, state: dict[str, Any], verified: dict[str, Any] | None = None) -> None:
        # A save when none is due (the final step, an emergency checkpoint) goes where it
        # survives the node best: the shared tier, else the fast tier's every copy.
        fallback = [self.shared] if self.shared is not None else list(self.copies.values())
        due = [t for t in self.tiers if t.should_save(step)] or fallback
        for tier in due:
            tier.save(step, state, verified)

    def load(self, allow_fresh_start: bool = False) -> tuple[dict[str, Any], LoadInfo] | None:
        """The newest checkpoint that verifies, wherever it is: the shared tier (read by rank
        0), or the fast tier of any node (read by the lowest rank on it: a node's local disk
        is its own). Candidates go newest first, the fast tier first on a tie (the cheaper
        read); the rank holding one reads and verifies it and sends the outcome to all."""
        candidates = self._candidates()
        if not candidates:
            return None
        skipped: list[tuple[str, str]] = []
        for step, _order, holder, copy in candidates:
            outcome = self._read(step, copy) if holder == self.rank else None
            if self.share is not None:
                outcome = self.share(outcome, holder)
            assert outcome is not None  # without share, no gather either: every candidate is ours
            state, path, reason = outcome
            if state is None:
                skipped.append((path, reason or "invalid"))
                continue
            if holder == self.rank:
                tier = self._tier(copy)
                tier._emit("ckpt_load", step=step, tier=tier.tier, verified=True, path=path,
                           copy=None if copy == SHARED else copy, skipped=[list(s) for s in skipped],
                           seconds=None)
            return state, LoadInfo(step=step, path=path, skipped=skipped)
        if allow_fresh_start:
            return None
        raise CheckpointCorruptError(skipped)

    def _candidates(self) -> list[tuple[int, int, int, str]]:
        """(step, tier order, holder rank, copy) of every checkpoint any rank can read, best
        first; each node's fast tier once (its lowest rank), the shared tier by rank 0."""
        fast = [(step, 0, copy) for copy, tier in self.copies.items() for step in tier.steps()]
        mine = {"node": self.node, "fast": fast,
                "shared": self.shared.steps() if self.shared is not None and self.rank == 0 else []}
        everyone = self.gather(mine) if self.gather is not None else [mine]
        found: list[tuple[int, int, int, str]] = []
        nodes_seen: set[str] = set()
        for holder, info in enumerate(everyone):
            holder = holder if self.gather is not None else self.rank
            if info["node"] not in nodes_seen:
                nodes_seen.add(info["node"])
                found += [(step, order, holder, copy) for step, order, copy in info["fast"]]
            found += [(step, 1, holder, SHARED) for step in info["shared"]]
        return sorted(found, key=lambda c: (-c[0], c[1], c[2], c[3]))

    def _read(self, step: int, copy: str) -> tuple[dict[str, Any] | None, str, str | None]:
        return self._tier(copy).read_step(step)

    def _tier(self, copy: str) -> CheckpointManager:
        """The manager holding ``copy`` of a candidate this rank listed (SHARED: only a rank
        with the shared tier lists its steps)."""
        tier = self.shared if copy == SHARED else self.copies[copy]
        assert tier is not None, f"copy {copy} of a rank without the shared tier"
        return tier

    def quarantine(self, from_step: int, record: dict[str, Any]) -> list[int]:
        return sorted({s for t in self.tiers for s in t.quarantine(from_step, record)})

    def rollback_records(self) -> list[dict[str, Any]]:
        return (self.shared or self.local).rollback_records()

    def wait(self) -> None:
        for tier in self.tiers:
            tier.wait()

    def close(self) -> None:
        errors = []
        for tier in self.tiers:
            try:
                tier.close()
            except Exception as exc:  # close both tiers, then report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> TieredCheckpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
