"""The tiny in-process API a training script calls: events out, in-process faults in.

A training script (the bundled harness or a user's own) calls::

    from chaos import probe
    probe.emit("rank_start", world_size=4)
    probe.watch(model=model, optimizer=optimizer)     # once: tensors bit flips can reach
    probe.fault_point("step_begin", step=step)       # in-process faults land here
    ...forward, backward...
    probe.fault_point("after_backward", step=step)   # gradient flips after the all-reduce
    probe.samples(ids, epoch=0)                       # the sample indices this step trained on
    probe.step_end(step, loss)                        # progress event (+ faults at step_end)

``probe.samples`` (or a dataset wrapped in ``probe.track``) feeds the exactly-once data
checker (docs/checkers.md): the indices ride on the step's own ``step_end`` event as
half-open ranges, so reporting them adds no event and no file.

In-process faults are *actions* in a registry (``register_action``): one function per
action, looked up by the name a fault type's ``probe_actions`` gives. Some act once
(raise a device error, exit); others start an *episode* that the following fault points
drive (a straggler's slowdown, a stuck bit) until it ends.

Without ``TRAINCHAOS_EVENTS_DIR`` in the environment the probe is detached: every call is a
cheap no-op, so a script instrumented with it runs unchanged outside trainchaos.

External faults planned at a step (a kill, a partition, a storage stall) are not fired
here, but the probe of each targeted rank holds at the end of that step until the
controller confirms the fault is in effect (action ``hold``, ``chaos.probe.hold``), so that they
land at their step and not somewhere in the next.

This module is the script's API; what it forwards to lives beside it: ``chaos.probe.core``
(the ``Probe`` of one process: its event file, fault points and holds, the action
registry), ``chaos.probe.actions`` (the actions the framework ships) and
``chaos.probe.digest`` (model-state digests). All of them import only the standard library
(and ``chaos.contract`` and ``chaos.probe.hold``, which import nothing else): they are loaded into
every rank and must not slow start-up or pull in the framework.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from chaos import contract
from chaos.probe.actions import STALL_MODES, DeviceError, RampProfile
from chaos.probe.core import Episode, Probe, known_actions, register_action
from chaos.probe.digest import model_digest, state_dict_digest, unwrapped, weights_finite

__all__ = [
    "ENV_EVENTS_DIR",
    "ENV_FAULTS_FILE",
    "ENV_NODE",
    "ENV_SRC",
    "DeviceError",
    "Episode",
    "Probe",
    "RampProfile",
    "STALL_MODES",
    "attached",
    "emit",
    "fault_point",
    "final_state",
    "get",
    "incarnation",
    "known_actions",
    "model_digest",
    "register_action",
    "restart_in_place",
    "samples",
    "src",
    "state_dict_digest",
    "state_digest",
    "step_end",
    "track",
    "watch",
    "weights_finite",
]

ENV_EVENTS_DIR = contract.EVENTS_DIR_ENV
ENV_FAULTS_FILE = contract.PROBE_FAULTS_ENV
ENV_SRC = contract.SRC_ENV
ENV_NODE = contract.NODE_ENV

def _default_src() -> str:
    if os.environ.get(ENV_SRC):
        return os.environ[ENV_SRC]
    if "RANK" in os.environ:
        offset = os.environ.get(contract.RANK_OFFSET_ENV, "")
        rank = os.environ["RANK"]
        return f"rank-{int(rank) + int(offset)}" if offset.isdigit() and rank.isdigit() else f"rank-{rank}"
    return f"proc-{os.getpid()}"


def _default_incarnation(events_dir: str | None, src: str) -> int:
    """How many processes of ``src`` started before this one in the run (0 for the first).

    torchrun's TORCHELASTIC_RESTART_COUNT is per agent and does not move on a membership
    change (an agent restarts its healthy workers because another node re-joined), so two
    processes of one rank can share it. Claiming the next free number with O_EXCL in the
    run's events directory cannot: one process of a rank runs at a time.
    """
    if not events_dir:
        try:
            return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        except ValueError:
            return 0
    starts = os.path.join(events_dir, ".starts")
    os.makedirs(starts, exist_ok=True)
    n = 0
    while True:
        try:
            os.close(os.open(os.path.join(starts, f"{src}.{n}"), os.O_CREAT | os.O_EXCL))
            return n
        except FileExistsError:
            n += 1


_probe: Probe | None = None
_probe_lock = threading.Lock()


def get() -> Probe:
    """The process's probe, created from the environment on first use."""
    global _probe
    if _probe is None:
        with _probe_lock:
            if _probe is None:
                _probe = _probe_from_env()
    return _probe


def _probe_from_env() -> Probe:
    """A probe as the environment says (events dir, source, planned faults), under the next
    free incarnation number of its source."""
    events_dir = os.environ.get(ENV_EVENTS_DIR)
    src = _default_src()
    return Probe(events_dir, src, _default_incarnation(events_dir, src), os.environ.get(ENV_FAULTS_FILE))


def restart_in_place() -> Probe:
    """Start the next incarnation of this process's source, in the same process: for a job
    whose training restarts without its process (an in-process restart re-entering the
    training function). Its events go to a new file under the next free incarnation number,
    so that metrics see the re-entry as a restart; the source is taken from the environment
    again (the restart may have given the process another rank). What was watched is kept."""
    global _probe
    with _probe_lock:
        old = _probe
        _probe = _probe_from_env()
        if old is not None:
            _probe.watched.update(old.watched)
            old.close()
    return _probe


def attached() -> bool:
    return get().attached


def src() -> str:
    return get().src


def incarnation() -> int:
    return get().incarnation


def emit(kind: str, **fields: Any) -> None:
    get().emit(kind, **fields)


def step_end(step: int, loss: float | None = None, **fields: Any) -> None:
    get().step_end(step, loss, **fields)


def fault_point(point: str, step: int | None = None, **context: Any) -> None:
    get().fault_point(point, step, **context)


def samples(ids: Any, epoch: int | None = None) -> None:
    """Report the sample indices of the batch being trained on (see ``Probe.samples``)."""
    get().samples(ids, epoch)


def track(dataset: Any) -> Any:
    """``dataset`` wrapped so that every sample a DataLoader fetches from it is reported with
    the next ``step_end`` (``probe.samples``), for a training script that changes nothing
    else: ``DataLoader(probe.track(dataset), ...)``.

    A map-style dataset (``__getitem__`` and ``__len__``): the index of every item fetched
    is reported. Fetching happens in the process that calls ``__getitem__``: with
    ``num_workers=0`` (the default) that is the rank itself, just before the step trains on
    the batch, so what is reported is exactly what the step trained on. DataLoader worker
    processes cannot report into the rank's event stream; there the wrapper reports nothing
    and says so once on stderr (call ``probe.samples`` with the batch's indices instead).
    ``epoch`` is taken from the wrapper's ``set_epoch`` (call it where you call the
    sampler's). Detached (outside trainchaos) the wrapper only forwards.
    """
    return _Tracked(dataset)


class _Tracked:
    """A map-style dataset that reports the indices fetched from it (``probe.track``).

    Not a ``torch.utils.data.Dataset`` subclass, so that the probe never imports torch: the
    DataLoader only needs ``__getitem__`` and ``__len__``. Attribute reads fall through to
    the wrapped dataset, so code that looks at ``loader.dataset.classes`` still works.
    """

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"probe.track needs a map-style dataset (__getitem__ and __len__), "
                            f"got {type(dataset).__name__}")
        self.dataset = dataset
        self.epoch: int | None = None
        self._owner = os.getpid()
        self._warned = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        item = self.dataset[index]
        if os.getpid() == self._owner:
            get().samples([index] if isinstance(index, int) else index, self.epoch)
        else:
            self._warn()
        return item

    def __getitems__(self, indices: list[int]) -> list[Any]:
        # DataLoader's batched fetch (torch >= 2.1): one report for the batch.
        many = getattr(self.dataset, "__getitems__", None)
        items = many(indices) if many is not None else [self.dataset[i] for i in indices]
        if os.getpid() == self._owner:
            get().samples(indices, self.epoch)
        else:
            self._warn()
        return items

    def _warn(self) -> None:
        if not self._warned:
            self._warned = True
            sys.stderr.write("trainchaos probe.track: samples fetched in a DataLoader worker are not "
                             "reported; use num_workers=0 or call probe.samples(ids)\n")

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not yet set (unpickling in a worker)
            raise AttributeError(name)
        return getattr(self.dataset, name)


def final_state(step: int, *, model: Any = None, digest: str | None = None,
                loss: float | None = None, **fields: Any) -> str | None:
    """Publish the end of training (``run_end``): the last step, and the final model state
    as a digest, so that ``final_state: matches_baseline`` can judge any script's run.

    Call it once, from one rank (rank 0), after the last step. Give ``model`` (any
    ``torch.nn.Module``, DDP-wrapped or not) and the probe computes the digest and whether
    every weight is finite; or give ``digest`` (a string of your own that is equal exactly
    when the states are equal). Returns the digest.
    """
    if model is not None:
        if digest is None:
            digest = model_digest(model)
        fields.setdefault("weights_finite", weights_finite(model))
    get().emit("run_end", step=step, loss=loss, digest=digest, **fields)
    return digest


_record_digests: bool | None = None


def state_digest(step: int, *, model: Any = None, digest: str | None = None) -> str | None:
    """Publish the model state reached at ``step`` (``state_digest``), for the checkpoint
    freshness checker: the fault-free twin's digests are what each checkpoint of the faulty
    run must hold at the step it claims. A no-op (returning None, computing nothing) unless
    the controller asked for it (``TRAINCHAOS_RECORD_DIGESTS``, set in the twin only), so a
    script can call it after every optimizer step at no cost. Call it from one rank; give
    ``model`` (its ``state_dict`` is hashed as a checkpoint's is, ``state_dict_digest``) or
    a ``digest`` of your own that your workload's checkpoint reader computes the same way."""
    global _record_digests
    if _record_digests is None:
        _record_digests = os.environ.get(contract.RECORD_DIGESTS_ENV) == "1"
    if not _record_digests:
        return None
    if digest is None and model is not None:
        digest = state_dict_digest(unwrapped(model).state_dict())
    get().emit("state_digest", step=step, digest=digest)
    return digest


def watch(model: Any = None, optimizer: Any = None, **tensors: Any) -> None:
    """Hand the model and optimizer to the probe (see ``Probe.watch``)."""
    get().watch(model=model, optimizer=optimizer, **tensors)
