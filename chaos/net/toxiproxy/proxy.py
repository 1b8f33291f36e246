"""One proxy of the embedded Toxiproxy server: a listener, and per accepted connection a
connection to the upstream with two directions (``upstream``: client to server,
``downstream``: server to client), each a reader thread and a writer thread that runs the
direction's toxics (``chaos.net.toxiproxy.toxics``) on every chunk.

Disabling a proxy ("down") closes its listener and every connection through it, as
upstream does: clients see their connections end and new connects refused.
"""

from __future__ import annotations

import contextlib
import queue
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from chaos.net.toxiproxy.toxics import ATTRIBUTES, Chunk, ConnectionToxicState, apply_toxic

__all__ = ["Proxy", "Toxic", "split_hostport"]

CHUNK = 32 * 1024


@dataclass
class Toxic:
    name: str
    type: str
    stream: str = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        attrs = {k: int(self.attributes.get(k) or 0) for k in ATTRIBUTES[self.type]}
        return {"name": self.name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity,
                "attributes": attrs}


def split_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not host:port: {text!r}")
    return host.strip("[]"), int(port)


class _Direction:
    def __init__(self, conn: _Connection, name: str, src: socket.socket, dst: socket.socket) -> None:
        self.conn, self.name, self.src, self.dst = conn, name, src, dst
        self.queue: queue.Queue[Chunk | None] = queue.Queue(maxsize=1024)
        self.states: dict[str, ConnectionToxicState] = {}
        self.rng = random.Random()
        self.reader: threading.Thread | None = None

    def start(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True, name=f"toxi-read-{self.name}")
        self.reader.start()
        threading.Thread(target=self._write, daemon=True, name=f"toxi-write-{self.name}").start()

    def _read(self) -> None:
        while True:
            try:
                data = self.src.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                self.queue.put(None)
                return
            self.queue.put(Chunk(data, time.monotonic()))

    def _toxics(self) -> list[Toxic]:
        toxics = self.conn.proxy.toxics_for(self.name)
        names = {t.name for t in toxics}
        for name, state in list(self.states.items()):
            if name not in names:
                # A removed timeout toxic ends the connections it held (their data is lost).
                if state.active and getattr(state, "kind", "") == "timeout":
                    self.conn.close()
                del self.states[name]
        for t in toxics:
            if t.name not in self.states:
                state = ConnectionToxicState(active=self.rng.random() < t.toxicity, started=time.monotonic())
                state.kind = t.type  # type: ignore[attr-defined]
                self.states[t.name] = state
        return toxics

    def _timers_due(self, toxics: list[Toxic]) -> bool:
        now = time.monotonic()
        for t in toxics:
            state = self.states[t.name]
            if not state.active:
                continue
            if t.type == "timeout" and int(t.attributes.get("timeout") or 0) > 0 and \
                    now >= state.started + int(t.attributes["timeout"]) / 1000.0:
                self.conn.close()
                return True
            if t.type == "reset_peer" and state.reset_at is not None and now >= state.reset_at:
                self.conn.close(reset=True)
                return True
        return False

    def _write(self) -> None:
        while not self.conn.closed:
            toxics = self._toxics()
            if self._timers_due(toxics):
                return
            try:
                item = self.queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if self.conn.closed:
                return
            if item is None:
                for t in toxics:
                    if t.type == "slow_close" and self.states[t.name].active:
                        time.sleep(int(t.attributes.get("delay") or 0) / 1000.0)
                with contextlib.suppress(OSError):
                    self.dst.shutdown(socket.SHUT_WR)
                self.conn.half_closed()
                return
            pieces: list[tuple[float, Chunk]] = [(0.0, item)]
            close = False
            for t in toxics:
                passed: list[tuple[float, Chunk]] = []
                for pause, chunk in pieces:
                    if pause:
                        time.sleep(pause)
                    verdict = apply_toxic(t.type, t.attributes, self.states[t.name], [chunk], self.rng)
                    passed.extend(verdict.pieces)
                    close = close or verdict.close
                pieces = passed
            try:
                for pause, chunk in pieces:
                    if pause:
                        time.sleep(pause)
                    self.dst.sendall(chunk.data)
            except OSError:
                self.conn.close()
                return
            if close:
                self.conn.close()
                return


class _Connection:
    def __init__(self, proxy: Proxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.client, self.server = proxy, client, server
        self.closed = False
        self._ends = 0
        self._lock = threading.Lock()
        self.directions = [_Direction(self, "upstream", client, server),
                           _Direction(self, "downstream", server, client)]

    def start(self) -> None:
        for d in self.directions:
            d.start()

    def half_closed(self) -> None:
        with self._lock:
            self._ends += 1
            done = self._ends >= 2
        if done:
            self.close()

    def close(self, reset: bool = False) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if reset:
            # An RST goes out only when the last reference to the socket is closed with
            # SO_LINGER 0: wake the readers (SHUT_RD sends nothing) and let them leave first.
            for sock in (self.client, self.server):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RD)
            for d in self.directions:
                if d.reader is not None and d.reader is not threading.current_thread():
                    d.reader.join(timeout=1.0)
        for sock in (self.client, self.server):
            if not reset:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        self.proxy.forget(self)


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str, enabled: bool = True) -> None:
        self.name, self.listen, self.upstream = name, listen, upstream
        self.enabled = False
        self.toxics: list[Toxic] = []
        self.lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: set[_Connection] = set()
        if enabled:
            self.start()

    def to_json(self, with_toxics: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                               "enabled": self.enabled}
        if with_toxics:
            out["toxics"] = [t.to_json() for t in self.toxics_for(None)]
        return out

    def toxics_for(self, stream: str | None) -> list[Toxic]:
        with self.lock:
            return [t for t in self.toxics if stream is None or t.stream == stream]

    def start(self) -> None:
        if self.enabled:
            return
        host, port = split_hostport(self.listen)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        # As upstream: a proxy asked to listen on port 0 reports the port it got.
        self.listen = f"{host}:{sock.getsockname()[1]}"
        self._listener = sock
        self.enabled = True
        threading.Thread(target=self._accept, args=(sock,), daemon=True, name=f"toxi-accept-{self.name}").start()

    def stop(self) -> None:
        self.enabled = False
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self.lock:
            conns = list(self._connections)
        for conn in conns:
            conn.close()

    def forget(self, conn: _Connection) -> None:
        with self.lock:
            self._connections.discard(conn)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(split_hostport(self.upstream), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()  # upstream closes the client when it cannot reach the upstream
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, client, server)
            with self.lock:
                accepted = self.enabled and self._listener is listener
                if accepted:
                    self._connections.add(conn)
            if not accepted:
                # Closed outside the lock: close() takes it again (forget), and a proxy
                # disabled while this connection was being accepted must not deadlock.
                conn.close()
                return
            conn.start()
