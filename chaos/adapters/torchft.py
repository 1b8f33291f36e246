"""torchft adapter: one line after the ``Manager`` is built reports the job through the probe.

    manager = Manager(pg=..., replica_id=f"train_ddp_{REPLICA_GROUP_ID}", ...)
    manager = chaos.adapters.torchft.instrument(manager, model=model)   # the one line

What it reports, from torchft's own view (so detection and the survivors' stall are measured
where torchft notices, not where trainchaos does):

- ``rank_start`` once (global rank, replica group, node, pid), so faults can find the rank;
- ``quorum`` for each new quorum: its id, the member replica groups, the step it starts at;
- ``detected`` when a quorum no longer holds a replica that the previous one held (a group
  died, or restarted under a new id): ``suspect`` is this rank's peer in that group, the
  rank the dropped replica's collectives ran with;
- ``commit_failed`` when a step is abandoned (``should_commit`` said no: a collective failed
  or timed out, or too few groups took part); the sample indices reported for it
  (``probe.samples``) are dropped, since its batch was not trained;
- ``step_end`` for every committed step, with the Manager's step count (``current_step``)
  and the sample indices the script reported for it with ``probe.samples``: torchft hands
  the Manager no data (a ``torchft.data.DistributedSampler`` is the script's), so the data
  checker's input is the script's one ``probe.samples`` line (``examples/torchft/train.py``);
- ``ckpt_load`` (``tier: peer``) when this group heals from a live peer's state;
- ``run_end`` with the model digest when ``manager.shutdown()`` is called, from group rank 0;
- the probe's ``step_begin`` fault point after each ``start_quorum`` (in-process faults such
  as a weight bit flip land there; gradient flips need ``after_backward``, which the Manager
  does not expose: not supported).

It observes and never steers: the Manager's client is wrapped to read each quorum's result
as torchft itself receives it, and ``start_quorum``/``should_commit``/``shutdown`` are wrapped to
report what they returned; no argument, return value or timing decision of torchft changes (a test runs
the example with and without it and compares the final digests). Imports only the probe;
torchft is the caller's.
"""

from __future__ import annotations

import os
import re
from typing import Any

from chaos import contract, probe

__all__ = ["instrument", "replica_group_of"]

_TRAILING_DIGITS = re.compile(r"(\d+)$")


def replica_group_of(replica_id: str) -> int | None:
    """The replica group a quorum member's id names: ``train_ddp_1:<uuid>`` -> 1 (torchft's
    own rule: the trailing digits of the part before the colon)."""
    match = _TRAILING_DIGITS.search(replica_id.split(":", 1)[0])
    return int(match.group(1)) if match else None


class _QuorumSpy:
    """Stands in for the Manager's ``ManagerClient``: every call goes through unchanged; the
    result of each ``_quorum`` is read on its way back."""

    def __init__(self, client: Any, on_quorum: Any) -> None:
        self._client = client
        self._on_quorum = on_quorum

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        result = self._client._quorum(*args, **kwargs)
        try:
            self._on_quorum(result)
        except Exception:  # a report must never break training
            pass
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class _Reporter:
    def __init__(self, manager: Any, model: Any) -> None:
        self.manager = manager
        self.model = model
        self.group_rank = int(getattr(manager, "_group_rank", os.environ.get("RANK", 0)))
        self.group_world_size = int(getattr(manager, "_group_world_size", os.environ.get("WORLD_SIZE", 1)))
        self.quorum_id: int | None = None
        self.members: set[str] = set()
        self.ended = False

    def peer_src(self, group: int | None) -> str | None:
        """The rank this one's collectives ran with in ``group`` (same group rank)."""
        return None if group is None else f"rank-{group * self.group_world_size + self.group_rank}"

    def on_quorum(self, result: Any) -> None:
        members = set(getattr(result, "replica_ids", []) or [])
        quorum_id = int(result.quorum_id)
        step = int(result.max_step)
        if quorum_id != self.quorum_id:
            groups = sorted({g for g in map(replica_group_of, members) if g is not None})
            probe.emit("quorum", quorum_id=quorum_id, members=groups, step=step,
                       participants=int(result.max_world_size), heal=bool(result.heal))
            for gone in sorted(self.members - members):
                group = replica_group_of(gone)
                probe.emit("detected", by=probe.src(), suspect=self.peer_src(group), failure_class="crash",
                           detector="torchft_quorum", step=step,
                           reason=f"quorum {quorum_id} dropped replica {gone} (replica group {group})")
            self.quorum_id, self.members = quorum_id, members
        if result.heal:
            src = result.recover_src_replica_rank
            probe.emit("ckpt_load", step=step, tier="peer", verified=None, copy="replica",
                       path=str(result.recover_src_manager_address),
                       from_replica_rank=None if src is None else int(src))

    def should_commit(self, original: Any) -> Any:
        def should_commit(*args: Any, **kwargs: Any) -> bool:
            committed = original(*args, **kwargs)
            if committed:
                probe.step_end(int(self.manager.current_step()))
            else:
                probe.get().discard_samples()  # the abandoned step's batch was not trained
                probe.emit("commit_failed", step=int(self.manager.current_step()),
                           errored=str(getattr(self.manager, "_errored", None) or "")[:300] or None)
            return committed
        return should_commit

    def start_quorum(self, original: Any) -> Any:
        """In-process faults planned for the step about to be trained land here (the
        probe's ``step_begin`` point: a weight bit flip), after torchft has asked for its
        quorum and before the forward pass."""
        def start_quorum(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            probe.fault_point("step_begin", step=int(self.manager.current_step()) + 1)
            return result
        return start_quorum

    def shutdown(self, original: Any) -> Any:
        def shutdown(*args: Any, **kwargs: Any) -> Any:
            if not self.ended and self.group_rank == 0:
                self.ended = True
                probe.final_state(int(self.manager.current_step()), model=self.model)
            return original(*args, **kwargs)
        return shutdown


def instrument(manager: Any, *, model: Any = None) -> Any:
    """Report ``manager``'s job through ``chaos.probe``; returns the same Manager. Outside
    trainchaos (no ``TRAINCHAOS_EVENTS_DIR``) it returns the Manager untouched."""
    if not probe.attached() or getattr(manager, "_trainchaos_reporter", None) is not None:
        return manager
    reporter = _Reporter(manager, model)
    manager._trainchaos_reporter = reporter
    groups = int(os.environ.get("NUM_REPLICA_GROUPS", "1"))
    rank = probe.get().rank
    probe.emit("rank_start", rank=rank, local_rank=int(os.environ.get("LOCAL_RANK", reporter.group_rank)),
               world_size=groups * reporter.group_world_size, node=_int_env(contract.NODE_ENV),
               pid=os.getpid(), replica_group=_int_env("REPLICA_GROUP_ID"),
               restart_count=_int_env("TORCHELASTIC_RESTART_COUNT"))
    if model is not None:
        probe.watch(model=model)
    manager._client = _QuorumSpy(manager._client, reporter.on_quorum)
    manager.should_commit = reporter.should_commit(manager.should_commit)
    manager.start_quorum = reporter.start_quorum(manager.start_quorum)
    manager.shutdown = reporter.shutdown(manager.shutdown)
    return manager


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None
