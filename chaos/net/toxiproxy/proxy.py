"""One proxy of the embedded Toxiproxy server: a listener, its toxic chains (one per
direction) and the connections through it (``chaos.net.toxiproxy.link``).

As upstream: a started proxy reports the address it listens on as the socket has it
(``localhost:8080`` becomes ``127.0.0.1:8080``, port 0 the port it got); a stopped one keeps
the last address. Disabling a proxy closes its listener and every connection through it:
clients see their connections end and new connects refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
from typing import Any

from chaos.net.toxiproxy.link import Connection
from chaos.net.toxiproxy.toxics import Toxic

__all__ = ["AddressError", "ListenError", "Proxy", "check_listen", "format_address", "resolve_listen", "split_hostport"]

DIRECTIONS = ("upstream", "downstream")
DIAL_TIMEOUT_S = 5.0


class ListenError(Exception):
    """The proxy cannot listen on a well-formed address here: taken, not this machine's, a
    name that does not resolve. The message is upstream's (Go's ``listen tcp ...``)."""


class AddressError(ListenError):
    """The listen address is not ``host:port`` (the client's mistake, whatever the machine)."""


def split_hostport(text: str) -> tuple[str, str]:
    """Go's net.SplitHostPort: ``host:port`` or ``[v6]:port``; ValueError with Go's words."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"address {text}: missing ']' in address")
        host, rest = text[1:end], text[end + 1:]
        if not rest.startswith(":"):
            raise ValueError(f"address {text}: missing port in address")
        return host, rest[1:]
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"address {text}: missing port in address")
    if ":" in host:
        raise ValueError(f"address {text}: too many colons in address")
    return host, port


def format_address(family: int, sockaddr: tuple[Any, ...]) -> str:
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"


def check_listen(text: str) -> tuple[str, int]:
    """(host, port) of a listen address; AddressError with Go's words when it is not
    ``host:port`` with a port of ASCII digits up to 65535 (Go reads no other digits)."""
    try:
        host, port_text = split_hostport(text)
    except ValueError as exc:
        raise AddressError(f"listen tcp: {exc}") from exc
    if not (port_text.isascii() and port_text.isdigit()):
        raise AddressError(f"listen tcp: lookup tcp/{port_text}: unknown port")
    if int(port_text) > 65535:
        raise AddressError(f"listen tcp: address {text}: invalid port")
    return host, int(port_text)


def resolve_listen(text: str) -> tuple[int, tuple[Any, ...]]:
    """(family, sockaddr) to listen on for ``text``, as Go resolves it: a name's IPv4
    address first, no host: every address (IPv6 and IPv4). AddressError for a malformed
    address, ListenError for a name that does not resolve (Go's words for both)."""
    host, port = check_listen(text)
    if not host:
        return socket.AF_INET6, ("::", port, 0, 0)
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:  # gaierror; a NUL or a name IDNA cannot encode
        raise ListenError(f"listen tcp: lookup {host}: no such host") from exc
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def _dial(upstream: str) -> socket.socket:
    host, port = split_hostport(upstream)
    return socket.create_connection((host, int(port)), timeout=DIAL_TIMEOUT_S)


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name, self.listen, self.upstream = name, listen, upstream
        self.enabled = False
        self.chains: dict[str, list[Toxic]] = {d: [] for d in DIRECTIONS}
        self.lock = threading.Lock()
        """Guards the chains and the connections; never held while a connection closes
        (closing waits for its threads, and a closing connection calls ``forget``)."""
        self._listener: socket.socket | None = None
        self._connections: set[Connection] = set()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream, "enabled": self.enabled,
                "toxics": [t.to_json() for t in self.toxics()]}

    # -- toxics --------------------------------------------------------------------------------

    def toxics(self) -> list[Toxic]:
        """Upstream's order: the upstream chain, then the downstream one."""
        with self.lock:
            return [t for d in DIRECTIONS for t in self.chains[d]]

    def find_toxic(self, name: str) -> Toxic | None:
        return next((t for t in self.toxics() if t.name == name), None)

    def add_toxic(self, toxic: Toxic) -> None:
        with self.lock:
            self.chains[toxic.direction].append(toxic)
            for conn in self._connections:
                conn.toxic_added(toxic)

    def update_toxic(self, toxic: Toxic, toxicity: float, attributes: dict[str, int]) -> None:
        with self.lock:
            toxic.toxicity, toxic.attributes = toxicity, attributes
            for conn in self._connections:
                conn.toxic_updated(toxic)

    def remove_toxic(self, toxic: Toxic) -> None:
        with self.lock:
            self.chains[toxic.direction] = [t for t in self.chains[toxic.direction] if t is not toxic]
            ending = [conn for conn in self._connections if conn.toxic_removed(toxic)]
        for conn in ending:
            conn.close()

    # -- listening -----------------------------------------------------------------------------

    def start(self) -> None:
        """Listen (ListenError when it cannot); a started proxy is left alone."""
        if self.enabled:
            return
        family, sockaddr = resolve_listen(self.listen)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and sockaddr[0] == "::":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            if exc.errno == errno.EADDRINUSE:
                reason = "address already in use"
            where = format_address(family, sockaddr)
            raise ListenError(f"listen tcp {where}: bind: {reason[:1].lower()}{reason[1:]}") from exc
        self.listen = format_address(family, sock.getsockname())
        with self.lock:
            self._listener = sock
        self.enabled = True
        threading.Thread(target=self._accept, args=(sock,), daemon=True, name=f"toxi-accept-{self.name}").start()

    def stop(self) -> None:
        self.enabled = False
        with self.lock:
            listener, self._listener = self._listener, None
            conns = list(self._connections)
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
            listener.close()
        for conn in conns:
            conn.close()

    def forget(self, conn: Connection) -> None:
        with self.lock:
            self._connections.discard(conn)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = _dial(self.upstream)
            except (OSError, ValueError):
                client.close()  # upstream closes the client when it cannot reach the upstream
                continue
            with self.lock:
                accepted = self._listener is listener
                if accepted:
                    # The chains as they are now, under the lock the API changes them under:
                    # a toxic added from here on reaches this connection through toxic_added.
                    conn = Connection(self, client, server, {d: list(self.chains[d]) for d in DIRECTIONS})
                    self._connections.add(conn)
                    conn.start()  # before anyone can close it: a close joins its threads
            if not accepted:
                client.close()
                server.close()
                return
