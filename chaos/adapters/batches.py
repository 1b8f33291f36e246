"""The sample indices of each batch a data loader fetched, for adapters whose stack hands the
loop the batch but not its indices (Lightning, Accelerate): what the adapter reports with
the step that trains it (``probe.samples``, the data exactly-once checker's input).

Where the indices are seen: torch's map-style fetcher reads a batch with
``dataset.__getitems__(indices)`` when the dataset has that attribute, looked up on the
*instance* at every fetch. An instance attribute set here therefore sees every batch of
every iterator of every DataLoader over that dataset object (the loader a stack rebuilt
with its own sampler, a ``skip_first_batches`` loader, the next epoch's iterator) without
replacing the dataset the loaders hold, and returns what the fetcher would have built.

Why a queue: a loader may fetch ahead of the step (Accelerate's ``DataLoaderShard`` reads
one batch ahead to know the last one), and a loop may fetch batches it never trains (a
resume that skips by iterating). Fetched batches queue in order; when a step trains one the
adapter says how many the loader has fetched after it, and the older ones are dropped.

Only fetches in the rank's own process are seen (``num_workers=0``): a DataLoader worker
cannot write the rank's events. Such a loader, an iterable dataset or a dataset that takes
no attribute is left alone, with one line on stderr saying the steps carry no indices.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from chaos import probe

__all__ = ["BatchRecorder"]

_HOOK = "__getitems__"


class BatchRecorder:
    """Queues the indices of each batch fetched through the hooked loaders' datasets.

    ``recording``: asked at each fetch; a fetch while it says False (an evaluation pass over
    the same dataset, the model in eval mode) is not queued. ``epoch``: the label of the
    batches fetched from now on (None: one endless pass), for stacks that announce an epoch
    before fetching it (``follow_epoch``)."""

    def __init__(self, recording: Callable[[], bool] | None = None) -> None:
        self.recording = recording
        self.epoch: int | None = None
        self.pending: deque[tuple[list[int], int | None]] = deque()
        self._warned = False

    def hook(self, loader: Any) -> bool:
        """Record every batch ``loader`` (any DataLoader over the same dataset) fetches; False,
        with a note on stderr, where the indices cannot be seen."""
        dataset = getattr(loader, "dataset", None)
        if getattr(loader, "num_workers", 0):
            return self._cannot(f"its DataLoader fetches in {loader.num_workers} worker processes")
        if dataset is None or not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            return self._cannot(f"{type(dataset).__name__} is not a map-style dataset")
        fetch = getattr(dataset, _HOOK, None)
        if getattr(fetch, "recorder", None) is self:
            return True
        # Another recorder's hook (an earlier Trainer over the same dataset): replace it.
        fetch = getattr(fetch, "inner", fetch)

        def getitems(indices: list[Any]) -> list[Any]:
            if self.recording is None or self.recording():
                self.pending.append(([int(i) for i in indices], self.epoch))
            return fetch(indices) if fetch is not None else [dataset[i] for i in indices]

        getitems.recorder = self  # type: ignore[attr-defined]  # marks the hook as this recorder's
        getitems.inner = fetch  # type: ignore[attr-defined]
        try:
            setattr(dataset, _HOOK, getitems)
        except (AttributeError, TypeError):
            return self._cannot(f"{type(dataset).__name__} takes no attribute")
        return True

    def follow_epoch(self, loader: Any) -> None:
        """Label batches with the epoch ``loader`` is set to (``loader.set_epoch(n)``, which
        Accelerate's loaders call at the start of each pass)."""
        original = getattr(loader, "set_epoch", None)
        if original is None or getattr(original, "recorder", None) is self:
            return

        def set_epoch(epoch: int) -> Any:
            self.epoch = int(epoch)
            return original(epoch)

        set_epoch.recorder = self  # type: ignore[attr-defined]
        loader.set_epoch = set_epoch

    def report_trained(self, ahead: int = 0, epoch: int | None = None) -> list[int] | None:
        """Report the batch the step is training now with the step (``probe.samples``); its
        indices, or None when nothing was fetched.

        ``ahead``: the batches the loader has fetched after it (1 for a loader that reads one
        ahead and is not at its last batch). Fetches older than it were never trained (a loop
        that skips batches by iterating past them) and are dropped. ``epoch`` overrides the
        label the batch was fetched with."""
        if not self.pending:
            return None
        while len(self.pending) > ahead + 1:
            self.pending.popleft()  # fetched before the one trained now, and never trained
        indices, fetched_in = self.pending.popleft()  # the oldest when fewer were fetched
        probe.samples(indices, epoch=epoch if epoch is not None else fetched_in)
        return indices

    def _cannot(self, why: str) -> bool:
        if not self._warned:
            self._warned = True
            print(f"trainchaos: no sample indices reported ({why}): call probe.samples with each "
                  f"batch's indices for the data exactly-once checker", file=sys.stderr, flush=True)
        return False
