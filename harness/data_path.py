"""The data path: reads of the training data from storage during training, under a deadline.

With ``data_stream: true`` each step reads its slice of the data file (``global_batch x
seq_len`` bytes at a cursor-determined offset) from storage, as an input pipeline reading
shards from a shared file system does. The batch itself still comes from the text loaded at
start -- batches stay a pure function of (seed, cursor), which correctness checks need --
so what this adds is the IO, and the failure mode that comes with it: a read that does not
return. With ``data_deadline_s`` a watchdog reports such a read as a storage failure of
this rank *on the data path* (detector ``data_deadline``) instead of leaving its peers to
time out in their next collective and call the rank hung.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from harness.config import HarnessConfig

__all__ = ["DataPath"]

OnStall = Callable[[str, float], None]


class DataPath:
    def __init__(self, path: str, window: int, deadline_s: float, on_stall: OnStall) -> None:
        self.path = os.path.abspath(path)
        self.window = max(1, window)
        self.deadline_s = deadline_s
        self.on_stall = on_stall
        self._lock = threading.Lock()
        self._reading_since: float | None = None
        if deadline_s > 0:
            threading.Thread(target=self._watch, name="data-deadline", daemon=True).start()

    @classmethod
    def for_config(cls, cfg: HarnessConfig, on_stall: OnStall) -> DataPath | None:
        if not cfg.data_stream:
            return None
        if not cfg.data:
            raise ValueError("data_stream needs a data file (the data option): the shipped corpus "
                             "is package data, not storage")
        return cls(cfg.data, cfg.global_batch * cfg.model.seq_len, cfg.data_deadline_s, on_stall)

    def read(self, cursor: int) -> int:
        """Read the slice of step ``cursor``; returns the bytes read."""
        with self._lock:
            self._reading_since = time.monotonic()
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                offset = (cursor * self.window) % max(1, size)
                return len(os.pread(fd, self.window, offset))
            finally:
                os.close(fd)
        finally:
            with self._lock:
                self._reading_since = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.1, self.deadline_s / 4))
            with self._lock:
                since = self._reading_since
            if since is not None and time.monotonic() - since >= self.deadline_s:
                self.on_stall(self.path, time.monotonic() - since)
                return  # reported once; the rank is leaving
