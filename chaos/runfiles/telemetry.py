"""Tails every process's event file while a run goes on (the runner's live view)."""

from __future__ import annotations

import json
import os

from chaos.runfiles.events import Event

__all__ = ["EventTailer"]


class EventTailer:
    """Returns the events appended since the last poll, across all files, in time order."""

    def __init__(self, events_dir: str) -> None:
        self.events_dir = events_dir
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}

    def poll(self) -> list[Event]:
        if not os.path.isdir(self.events_dir):
            return []
        new: list[Event] = []
        for name in os.listdir(self.events_dir):
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(self.events_dir, name)
            offset = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except OSError:
                continue
            if not chunk:
                continue
            self._offsets[path] = offset + len(chunk)
            data = self._partial.pop(path, b"") + chunk
            lines = data.split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]  # an event still being written
            for line in lines[:-1]:
                if line.strip():
                    try:
                        new.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        new.sort(key=lambda e: e["t"])
        return new
