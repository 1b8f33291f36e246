"""The run's torchft lighthouse: a run-scoped helper process (``chaos.runfiles.resources``).

Journaled before it starts, stopped with the run whatever way the run ends (the runner's
``finally``, SIGINT/SIGTERM through it, ``trainchaos cleanup`` from the journal after a
SIGKILLed controller), found by the run id in its environment like every process of the run,
and named ``<run_id>-torchft_lighthouse`` (``trainchaos-...``).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, ClassVar

from chaos.errors import ToolError
from chaos.runfiles.resources import HelperProcess, register_kind
from chaos.util.procs import process_state

__all__ = ["READY_TIMEOUT_S", "Lighthouse", "free_port", "lighthouse_resource"]

READY_TIMEOUT_S = 20.0
"""How long the lighthouse may take to accept connections before the run gives up."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the lighthouse binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def lighthouse_resource(log: str, port: int, *, min_replicas: int,
                        heartbeat_timeout_ms: int, join_timeout_ms: int,
                        quorum_tick_ms: int, program: str = "torchft_lighthouse") -> tuple[str, dict[str, Any]]:
    """The (kind, spec) the runner acquires for one run's lighthouse (it names it
    ``<run_id>-torchft_lighthouse``)."""
    # Every interface: a netns node reaches it at the fabric's gateway, a local one on loopback.
    argv = [program, "--bind", f"0.0.0.0:{port}", "--min_replicas", str(min_replicas),
            "--heartbeat_timeout_ms", str(heartbeat_timeout_ms),
            "--join_timeout_ms", str(join_timeout_ms), "--quorum_tick_ms", str(quorum_tick_ms)]
    return Lighthouse.kind, {"argv": argv, "log": log, "port": port,
                             "env": {"RUST_LOG": "info"}}


@register_kind
class Lighthouse(HelperProcess):
    """A lighthouse process; ready once its port accepts connections."""

    kind: ClassVar[str] = "torchft_lighthouse"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        if spec.get("log"):
            os.makedirs(os.path.dirname(spec["log"]), exist_ok=True)
        details = super().create(run_id, spec)
        try:
            cls._wait_ready(spec, details)
        except Exception:
            # The journal holds no pid for a create that raised: stop it here or it leaks.
            cls.destroy(spec, details)
            raise
        return details

    @classmethod
    def _wait_ready(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if process_state(details["pid"]) in (None, "Z"):
                raise ToolError(f"the lighthouse exited at start ({' '.join(spec['argv'])}); "
                                f"see {spec.get('log')}")
            try:
                with socket.create_connection(("127.0.0.1", int(spec["port"])), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.05)
        raise ToolError(f"the lighthouse did not listen on port {spec['port']} within "
                        f"{READY_TIMEOUT_S:g} s; see {spec.get('log')}")
