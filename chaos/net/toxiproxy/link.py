"""One connection through a proxy of the embedded Toxiproxy server: two links (``upstream``:
client to server, ``downstream``: server to client), each a reader thread that takes chunks
off its source socket and a pump thread that passes every chunk through the link's chain of
toxics, in order, then writes it.

The API changes a link's chain synchronously (``toxic_added``/``_updated``/``_removed``,
under the connection's condition), as upstream interrupts and rewires each link's chain
before its API call returns: data that reaches a stage after the call sees the new chain. A
chunk held in a stage (latency, bandwidth, slicer, slow_close) whose toxic is removed or
updated is passed on at once, as upstream's interrupted toxics do.

Sockets are non-blocking; every wait polls a wake-up pipe too, so closing a connection stops
all four threads before its sockets are closed. The close is then the last reference to each
socket, and a reset (SO_LINGER 0) sends its RST at once: nothing is left half-alive.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from chaos.net.toxiproxy.toxics import Chunk, Toxic, ToxicState, latency_delay, slice_points

__all__ = ["Connection", "Owner"]

CHUNK = 32 * 1024
"""Bytes read at a time (upstream's io.Copy buffer)."""
QUEUE_CHUNKS = 1024
"""Chunks a reader runs ahead of its pump (upstream's latency buffer) before it stops reading."""
JOIN_S = 2.0


class _Closed(Exception):
    """The connection closed under a link: its threads leave."""


class _Link:
    def __init__(self, conn: Connection, direction: str, src: socket.socket, dst: socket.socket,
                 chain: list[Toxic], now: float) -> None:
        self.conn, self.direction, self.src, self.dst = conn, direction, src, dst
        self.rng = random.Random()
        self.chain = list(chain)
        self.states = {t.serial: ToxicState.draw(t, self.rng, now) for t in chain}
        self.queue: deque[Chunk | None] = deque()

    # -- the chain, changed by the API (under conn.cond) ------------------------------------

    def add(self, toxic: Toxic, now: float) -> None:
        self.chain.append(toxic)
        self.states[toxic.serial] = ToxicState.draw(toxic, self.rng, now)

    def update(self, toxic: Toxic, now: float) -> None:
        state = self.states.get(toxic.serial)
        if state is not None:
            state.restart(toxic, self.rng, now)

    def remove(self, toxic: Toxic) -> None:
        self.chain = [t for t in self.chain if t.serial != toxic.serial]
        state = self.states.pop(toxic.serial, None)
        if state is not None:
            state.removed = True

    # -- timers ------------------------------------------------------------------------------

    def _deadlines(self) -> list[tuple[float, bool]]:
        """(when, reset) of what will end the connection: an active timeout toxic's timeout,
        a reset_peer's pending reset."""
        out = []
        for t in self.chain:
            state = self.states[t.serial]
            if not state.active:
                continue
            if t.type == "timeout" and t.attr("timeout") > 0:
                out.append((state.started + t.attr("timeout") / 1000.0, False))
            elif t.type == "reset_peer" and state.reset_at is not None:
                out.append((state.reset_at, True))
        return out

    def _wait(self, until: float | None, ready: Callable[[], bool]) -> None:
        """Block until ``ready()`` (checked under the condition) or ``until``; a deadline of
        the link that falls due meanwhile closes the connection (raises _Closed), as does a
        close from elsewhere."""
        cond = self.conn.cond
        with cond:
            while True:
                if self.conn.closed:
                    raise _Closed
                now = time.monotonic()
                deadlines = self._deadlines()
                due = [reset for when, reset in deadlines if when <= now]
                if due:
                    reset = any(due)
                    break
                if ready() or (until is not None and now >= until):
                    return
                wake = [w for w in [until, *(when for when, _ in deadlines)] if w is not None]
                cond.wait(min(wake) - now if wake else None)
        self.conn.close(reset=reset)
        raise _Closed

    def _hold(self, until: float, state: ToxicState) -> bool:
        """Hold the data in a toxic's stage until ``until``; True when the toxic was updated or
        removed meanwhile (the data goes on at once)."""
        epoch = state.epoch
        interrupted = [False]

        def changed() -> bool:
            interrupted[0] = state.removed or state.epoch != epoch
            return interrupted[0]

        self._wait(until, changed)
        return interrupted[0]

    # -- the two threads -----------------------------------------------------------------------

    def read(self) -> None:
        cond = self.conn.cond
        while self.conn.wait_io(self.src, select.POLLIN):
            try:
                data = self.src.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""  # a reset from the peer ends this direction as an end of stream does
            with cond:
                while data and len(self.queue) >= QUEUE_CHUNKS and not self.conn.closed:
                    cond.wait()
                if self.conn.closed:
                    return
                self.queue.append(Chunk(data, time.monotonic()) if data else None)
                cond.notify_all()
            if not data:
                return

    def pump(self) -> None:
        try:
            while True:
                self._wait(None, lambda: bool(self.queue))
                with self.conn.cond:
                    item = self.queue.popleft()
                    self.conn.cond.notify_all()  # room for the reader
                if item is None:
                    self._end_of_stream()
                    return
                self._flow(item, set())
        except _Closed:
            return
        except OSError:
            self.conn.close()

    # -- the chain ----------------------------------------------------------------------------

    def _next(self, applied: set[int]) -> tuple[Toxic, ToxicState] | None:
        with self.conn.cond:
            for t in self.chain:
                if t.serial not in applied:
                    return t, self.states[t.serial]
        return None

    def _flow(self, chunk: Chunk, applied: set[int]) -> None:
        """Pass ``chunk`` through the toxics of the chain not in ``applied`` (read afresh
        before each stage), then write it."""
        while True:
            step = self._next(applied)
            if step is None:
                self._send(chunk.data)
                return
            toxic, state = step
            applied.add(toxic.serial)
            if not state.active:
                continue
            kind = toxic.type
            if kind == "latency":
                depart = chunk.t + latency_delay(toxic, self.rng)
                self._hold(depart, state)
                chunk = Chunk(chunk.data, depart)
            elif kind == "bandwidth":
                chunk = self._bandwidth(toxic, state, chunk, applied)
            elif kind == "timeout":
                return  # dropped on the floor; the timer closes the connection
            elif kind == "reset_peer":
                self._reset_after(toxic, state)
            elif kind == "slicer":
                self._slice(toxic, state, chunk, applied)
                return
            elif kind == "limit_data":
                self._limit(toxic, state, chunk, applied)
                return
            # noop and slow_close pass data through

    def _bandwidth(self, toxic: Toxic, state: ToxicState, chunk: Chunk, applied: set[int]) -> Chunk:
        rate = toxic.attr("rate")  # KB/s: bytes per millisecond
        if rate <= 0:
            state.debt = 0.0
            return chunk
        state.debt += len(chunk.data) / rate / 1000.0
        data, piece = chunk.data, rate * 100  # what 100 ms carries
        while len(data) > piece:
            if self._hold(time.monotonic() + 0.1, state):
                return Chunk(data, chunk.t)
            self._flow(Chunk(data[:piece], chunk.t), set(applied))
            data = data[piece:]
            state.debt -= 0.1
        start = time.monotonic()
        if not self._hold(start + state.debt, state):
            state.debt -= time.monotonic() - start
        return Chunk(data, chunk.t)

    def _slice(self, toxic: Toxic, state: ToxicState, chunk: Chunk, applied: set[int]) -> None:
        points = slice_points(0, len(chunk.data), toxic.attr("average_size"), toxic.attr("size_variation"), self.rng)
        for i in range(1, len(points), 2):
            self._flow(Chunk(chunk.data[points[i - 1]:points[i]], chunk.t), set(applied))
            if self._hold(time.monotonic() + toxic.attr("delay") / 1e6, state):
                rest = chunk.data[points[i]:]
                if rest:
                    self._flow(Chunk(rest, chunk.t), set(applied))
                return

    def _limit(self, toxic: Toxic, state: ToxicState, chunk: Chunk, applied: set[int]) -> None:
        limit = toxic.attr("bytes")
        data = chunk.data[:max(limit - state.transmitted, 0)]
        if data:
            self._flow(Chunk(data, chunk.t), set(applied))
            state.transmitted += len(data)
        if limit - state.transmitted <= 0:
            self.conn.close()
            raise _Closed

    def _reset_after(self, toxic: Toxic, state: ToxicState) -> None:
        """Drop what met the toxic; reset the connection ``timeout`` later (not undone by a
        change of the toxic, as upstream's wait is not interruptible)."""
        with self.conn.cond:
            if state.reset_at is None:
                state.reset_at = time.monotonic() + toxic.attr("timeout") / 1000.0
        self._wait(None, lambda: False)  # returns only by the reset (or another close)

    def _end_of_stream(self) -> None:
        """The source ended: the end passes the chain (slow_close holds it, reset_peer resets
        instead), then this direction is shut down."""
        applied: set[int] = set()
        while (step := self._next(applied)) is not None:
            toxic, state = step
            applied.add(toxic.serial)
            if not state.active:
                continue
            if toxic.type == "reset_peer":
                self._reset_after(toxic, state)
            elif toxic.type == "slow_close":
                self._hold(time.monotonic() + toxic.attr("delay") / 1000.0, state)
        with contextlib.suppress(OSError):
            self.dst.shutdown(socket.SHUT_WR)
        self.conn.half_closed()

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.dst.send(view):]
            except (BlockingIOError, InterruptedError):
                if not self.conn.wait_io(self.dst, select.POLLOUT):
                    raise _Closed from None


class Owner(Protocol):
    """What a connection needs of its proxy (``chaos.net.toxiproxy.proxy.Proxy``)."""

    def forget(self, conn: Connection) -> None: ...


class Connection:
    """A client's connection and its connection to the upstream, with the two links."""

    def __init__(self, proxy: Owner, client: socket.socket, server: socket.socket,
                 chains: dict[str, list[Toxic]]) -> None:
        self.proxy, self.client, self.server = proxy, client, server
        self.cond = threading.Condition()
        self.closed = False
        self._ended = 0
        self._wake_r, self._wake_w = os.pipe()
        now = time.monotonic()
        self.links = {"upstream": _Link(self, "upstream", client, server, chains["upstream"], now),
                      "downstream": _Link(self, "downstream", server, client, chains["downstream"], now)}
        self._threads: list[threading.Thread] = []
        self._started = threading.Event()
        for sock in (client, server):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start(self) -> None:
        for link in self.links.values():
            for job in (link.read, link.pump):
                thread = threading.Thread(target=job, daemon=True, name=f"toxi-{job.__name__}-{link.direction}")
                self._threads.append(thread)
        for thread in self._threads:
            thread.start()
        self._started.set()

    # -- the API's changes, in force when they return -----------------------------------------

    def toxic_added(self, toxic: Toxic) -> None:
        with self.cond:
            self.links[toxic.direction].add(toxic, time.monotonic())
            self.cond.notify_all()

    def toxic_updated(self, toxic: Toxic) -> None:
        with self.cond:
            self.links[toxic.direction].update(toxic, time.monotonic())
            self.cond.notify_all()

    def toxic_removed(self, toxic: Toxic) -> bool:
        """True when the connection is to be closed (by the caller, outside its locks): a
        removed timeout toxic ends the stream it held, whether it drew or not (upstream's
        Cleanup)."""
        with self.cond:
            self.links[toxic.direction].remove(toxic)
            self.cond.notify_all()
        return toxic.type == "timeout"

    # -- waiting and closing -----------------------------------------------------------------

    def wait_io(self, sock: socket.socket, event: int) -> bool:
        """Until ``sock`` is ready for ``event``; False once the connection is closed."""
        poller = select.poll()
        try:
            poller.register(sock, event)
            poller.register(self._wake_r, select.POLLIN)
        except (OSError, ValueError):
            return False
        while not self.closed:
            try:
                ready = poller.poll(1000)
            except InterruptedError:
                continue
            if any(fd == self._wake_r for fd, _ in ready):
                return False
            if ready:
                return not self.closed
        return False

    def half_closed(self) -> None:
        with self.cond:
            self._ended += 1
            done = self._ended >= 2
        if done:
            self.close()

    def close(self, reset: bool = False) -> None:
        """Stop the four threads, then close both sockets (``reset``: with an RST)."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        # A link can end the connection before start() has started the others (reset_peer 0).
        self._started.wait(JOIN_S)
        me = threading.current_thread()
        for thread in self._threads:
            if thread is not me:
                thread.join(JOIN_S)
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if not any(t.is_alive() for t in self._threads if t is not me):
            os.close(self._wake_r)  # only once nobody polls it: a reused fd would wake strangers
            os.close(self._wake_w)
        self.proxy.forget(self)
