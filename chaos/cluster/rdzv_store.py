"""The rendezvous store the controller hosts for the agents: torch's TCPStore server, spoken
in Python on one thread.

Why not ``torch.distributed.TCPStore(is_master=True)``: it is the only thing a controller
needs torch for, and importing torch costs 1.1-1.3 s of CPU at every run's start (49 runs
of a ``make test`` paid 55 CPU-s for it on 2 cores). The agents and ranks keep torch's own
TCPStore client; this module is its server side, the wire protocol of torch 2.x as its
client speaks it (little-endian; a string or a value is a u64 length and the bytes):

- on connect, ``VALIDATE`` with the magic number (no reply), then ``PING`` with a u32 nonce
  (echoed);
- ``SET``, ``MULTI_SET``, ``APPEND`` (no reply); ``GET``, ``MULTI_GET`` (values; the client
  ``WAIT``\\s for the keys first), ``ADD`` (the new i64), ``COMPARE_SET`` (the value now
  stored; a missing key with a non-empty expected value is answered with that value and
  left unset, as torch does), ``CHECK`` (READY 0 / NOT_READY 1), ``DELETE_KEY`` and
  ``GETNUMKEYS`` (an i64);
- ``WAIT`` answers STOP_WAITING (0) once every key exists, at once or when the last one is
  set; ``CANCEL_WAIT`` (the client's timeout) forgets the waits of that connection and
  always answers WAIT_CANCELED (1), also after a STOP_WAITING already sent, which the client
  expects.

A query the server does not know (torch's queue operations, which no launcher of ours uses)
closes that connection, as a malformed one does: the client gets an error, never a wrong
answer. A connection that only connects and closes (``harness.health``'s reachability
check) is nothing to the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import struct
import threading
import time

__all__ = ["RendezvousStore"]

log = logging.getLogger(__name__)

MAGIC = 0x3C85F7CE
"""What a TCPStore client sends with VALIDATE."""
(VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET,
 MULTI_SET, CANCEL_WAIT, PING) = range(14)
READY, NOT_READY = 0, 1
STOP_WAITING, WAIT_CANCELED = 0, 1
_U32, _U64, _I64 = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<q")
_MAX_FIELD = 1 << 30
"""A length above this is no store value of ours: the stream is not the protocol."""
SLOW_WAIT_S = 10.0
"""A WAIT answered later than this, or given up by its client, is logged (a warning on the
controller's stderr): a rendezvous takes about 2 s here, and once in a few hundred restarts one
took 34 s with nothing on record to say which key it waited for."""


class _Incomplete(Exception):
    """The message is not all there yet: read more, then parse it again from its start."""


class _Malformed(Exception):
    """The connection does not speak the protocol: close it."""


class _Reader:
    """The fields of one message, read from a connection's buffer."""

    def __init__(self, data: bytearray) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise _Incomplete
        out = bytes(self.data[self.at:self.at + size])
        self.at += size
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def i64(self) -> int:
        return _I64.unpack(self.take(8))[0]

    def field(self) -> bytes:
        size = self.u64()
        if size > _MAX_FIELD:
            raise _Malformed(f"a field of {size} bytes")
        return self.take(size)

    def fields(self) -> list[bytes]:
        count = self.u64()
        if count > _MAX_FIELD:
            raise _Malformed(f"{count} keys")
        return [self.field() for _ in range(count)]


def _value(data: bytes) -> bytes:
    return _U64.pack(len(data)) + data


def _names(keys: list[bytes]) -> str:
    return ", ".join(k.decode(errors="replace") for k in keys)


class _Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closed = False
        self.awaited = 0
        """Keys this connection's WAIT still waits for (0: none)."""
        self.wait_keys: list[bytes] = []
        self.wait_since = 0.0


class RendezvousStore:
    """A TCPStore server on an already bound, listening socket, served by a daemon thread
    until ``close``."""

    def __init__(self, listener: socket.socket) -> None:
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._listener.setblocking(False)
        self._data: dict[bytes, bytes] = {}
        self._waiting: dict[bytes, list[_Connection]] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._wake_read, self._wake_write = os.pipe()
        self._selector.register(self._wake_read, selectors.EVENT_READ, "stop")
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name="trainchaos-rdzv-store", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and close every connection (the agents see the store go)."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(OSError):  # the thread already ended (it failed, and said so)
            os.write(self._wake_write, b"x")
        self._thread.join(timeout=5)
        os.close(self._wake_write)

    # -- the loop ---------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while not self._closing:
                for key, mask in self._selector.select():
                    if key.data == "stop":
                        return
                    if key.data is None:
                        self._accept()
                        continue
                    conn: _Connection = key.data
                    if conn.closed:
                        continue  # dropped while an earlier event of this round was handled
                    if mask & selectors.EVENT_READ:
                        self._receive(conn)
                    if mask & selectors.EVENT_WRITE and not conn.closed:
                        self._send(conn)
        except Exception:  # noqa: BLE001 -- the agents then fail to rendezvous, which the run reports
            log.exception("rendezvous store: the serving thread failed")
        finally:
            for key in list(self._selector.get_map().values()):
                if isinstance(key.data, _Connection):
                    key.data.sock.close()
            self._selector.close()
            self._listener.close()
            os.close(self._wake_read)

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._selector.register(sock, selectors.EVENT_READ, _Connection(sock))

    def _receive(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.inbox += data
        while conn.inbox:
            reader = _Reader(conn.inbox)
            try:
                self._handle(conn, reader)
            except _Incomplete:
                break
            except (_Malformed, KeyError, ValueError) as exc:  # ValueError: ADD to a non-number
                log.warning("rendezvous store: closing a connection: %s", exc)
                self._drop(conn)
                return
            del conn.inbox[:reader.at]
        self._send(conn)

    def _reply(self, conn: _Connection, data: bytes) -> None:
        conn.outbox += data

    def _send(self, conn: _Connection) -> None:
        if conn.closed:
            return
        if conn.outbox:
            try:
                sent = conn.sock.send(conn.outbox)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(conn)
                return
            del conn.outbox[:sent]
        self._selector.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0), conn)

    def _drop(self, conn: _Connection) -> None:
        conn.closed = True
        self._forget_waits(conn)
        self._selector.unregister(conn.sock)
        conn.sock.close()

    # -- the protocol -------------------------------------------------------------------
    def _handle(self, conn: _Connection, msg: _Reader) -> None:
        """One whole message, or _Incomplete before anything changed (it is parsed again)."""
        query = msg.u8()
        if query == VALIDATE:
            if msg.u32() != MAGIC:
                raise _Malformed("not a TCPStore client (wrong magic number)")
        elif query == PING:
            self._reply(conn, _U32.pack(msg.u32()))
        elif query == SET:
            key, value = msg.field(), msg.field()
            self._set(key, value)
        elif query == MULTI_SET:
            count = msg.u64()
            pairs = [(msg.field(), msg.field()) for _ in range(count)]
            for key, value in pairs:
                self._set(key, value)
        elif query == APPEND:
            key, value = msg.field(), msg.field()
            self._set(key, self._data.get(key, b"") + value)
        elif query == GET:
            self._reply(conn, _value(self._data[msg.field()]))
        elif query == MULTI_GET:
            keys = msg.fields()
            self._reply(conn, b"".join(_value(self._data[key]) for key in keys))
        elif query == ADD:
            key, amount = msg.field(), msg.i64()
            total = amount + (int(self._data[key]) if key in self._data else 0)
            self._set(key, str(total).encode())
            self._reply(conn, _I64.pack(total))
        elif query == COMPARE_SET:
            self._compare_set(conn, msg.field(), msg.field(), msg.field())
        elif query == CHECK:
            keys = msg.fields()
            self._reply(conn, bytes([READY if all(k in self._data for k in keys) else NOT_READY]))
        elif query == WAIT:
            self._wait(conn, msg.fields())
        elif query == CANCEL_WAIT:
            if conn.awaited:
                log.warning("rendezvous store: a client gave up waiting for %s after %.1f s",
                            _names(conn.wait_keys), time.monotonic() - conn.wait_since)
            self._forget_waits(conn)
            self._reply(conn, bytes([WAIT_CANCELED]))
        elif query == DELETE_KEY:
            self._reply(conn, _I64.pack(1 if self._data.pop(msg.field(), None) is not None else 0))
        elif query == GETNUMKEYS:
            self._reply(conn, _I64.pack(len(self._data)))
        else:
            raise _Malformed(f"query type {query} is not served here")

    def _compare_set(self, conn: _Connection, key: bytes, expected: bytes, desired: bytes) -> None:
        current = self._data.get(key)
        if current is None:
            if expected:
                self._reply(conn, _value(expected))  # torch's answer: unset, "as expected"
                return
            self._set(key, desired)
        elif current == expected:
            self._set(key, desired)
        self._reply(conn, _value(self._data[key]))

    def _set(self, key: bytes, value: bytes) -> None:
        self._data[key] = value
        for waiter in self._waiting.pop(key, []):
            waiter.awaited -= 1
            if waiter.awaited == 0:
                waited = time.monotonic() - waiter.wait_since
                if waited > SLOW_WAIT_S:
                    log.warning("rendezvous store: a wait for %s was answered after %.1f s",
                                _names(waiter.wait_keys), waited)
                self._reply(waiter, bytes([STOP_WAITING]))
                self._send(waiter)

    def _wait(self, conn: _Connection, keys: list[bytes]) -> None:
        missing = list(dict.fromkeys(k for k in keys if k not in self._data))
        if not missing:
            self._reply(conn, bytes([STOP_WAITING]))
            return
        for key in missing:
            self._waiting.setdefault(key, []).append(conn)
        conn.awaited = len(missing)
        conn.wait_keys, conn.wait_since = missing, time.monotonic()

    def _forget_waits(self, conn: _Connection) -> None:
        if not conn.awaited:
            return
        for key in list(self._waiting):
            waiters = [w for w in self._waiting[key] if w is not conn]
            if waiters:
                self._waiting[key] = waiters
            else:
                del self._waiting[key]
        conn.awaited = 0
