"""The control channel of one mount: two small JSON files in its control directory.

``rules.json`` (written by the injector, atomically: a temp file renamed over it) holds a
``version``, the active ``rules``, a ``drop`` counter (raised by one per crash whose
unfsynced data must be dropped) and a ``release`` counter (raised by one per process crash:
the page cache stays, an armed crash point takes its image and thaws). The daemon polls it every 20 ms and answers in
``state.json`` with the version it applied, the drops it performed, and how often each rule
hit. A writer waits for that answer, so a fault counts as injected only once the layer
applies it, and a dead daemon is a tool error instead of a fault that silently did nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from chaos.errors import ToolError

__all__ = ["RULES_FILE", "STATE_FILE", "MountControl", "read_json", "write_json_atomic"]

RULES_FILE = "rules.json"
STATE_FILE = "state.json"
POLL_S = 0.02


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class MountControl:
    """The injector's side: add and remove rules, ask for a drop, wait for the daemon."""

    def __init__(self, control_dir: str) -> None:
        self.dir = control_dir

    @property
    def rules_path(self) -> str:
        return os.path.join(self.dir, RULES_FILE)

    @property
    def state_path(self) -> str:
        return os.path.join(self.dir, STATE_FILE)

    def current(self) -> dict[str, Any]:
        return read_json(self.rules_path) or {"version": 0, "rules": [], "drop": 0}

    def state(self) -> dict[str, Any]:
        return read_json(self.state_path) or {}

    def _publish(self, doc: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        doc["version"] = int(doc.get("version", 0)) + 1
        write_json_atomic(self.rules_path, doc)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.state()
            if state.get("version", 0) >= doc["version"]:
                return state
            time.sleep(POLL_S)
        raise ToolError(f"the storage fault layer of {self.dir} did not apply rules version "
                        f"{doc['version']} within {timeout_s:g} s (its daemon is gone or stuck)")

    def add_rule(self, rule: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
        doc = self.current()
        doc["rules"] = [r for r in doc.get("rules", []) if r.get("rule_id") != rule["rule_id"]] + [rule]
        return self._publish(doc, timeout_s)

    def remove_rule(self, rule_id: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
        doc = self.current()
        kept = [r for r in doc.get("rules", []) if r.get("rule_id") != rule_id]
        if len(kept) == len(doc.get("rules", [])):
            return None
        doc["rules"] = kept
        return self._publish(doc, timeout_s)

    def arm_crash_point(self, spec: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
        """Arm a crash at one point of one save (chaos.storage.crashpoints)."""
        doc = self.current()
        doc["crash_point"] = spec
        return self._publish(doc, timeout_s)

    def process_crashed(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """The writer's processes were killed, the node was not: nothing is dropped."""
        doc = self.current()
        doc["release"] = int(doc.get("release", 0)) + 1
        return self._publish(doc, timeout_s)

    def drop_unfsynced(self, timeout_s: float = 10.0, torn: dict[str, Any] | None = None) -> dict[str, Any]:
        """Drop what was not fsynced (``torn``: keep a part of it, see FaultFS)."""
        doc = self.current()
        doc["drop"] = int(doc.get("drop", 0)) + 1
        doc["torn"] = torn
        return self._publish(doc, timeout_s)
