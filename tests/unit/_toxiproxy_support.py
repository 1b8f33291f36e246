"""What the Toxiproxy conformance tests share: the embedded server on loopback (in this
process, so a test can also look at its connections), a raw HTTP client that reports status,
headers and body as they came (as upstream's Go tests read them), and TCP services behind
the proxies: an upstream that hands each accepted socket to the test, and a line echo."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from chaos.net.toxiproxy.server import ToxiproxyServer, serve

LOOPBACK = "127.0.0.1"
IO_TIMEOUT_S = 10.0
"""How long a test waits for bytes that must come: a hang fails, nothing slower does."""


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    @property
    def error(self) -> tuple[int, str]:
        """(status, message) of an error object, as the Go client's ``HTTP <status>: <msg>``."""
        return self.status, self.json["error"]


class Api:
    """One keep-alive HTTP connection to the server (a dropped connection fails the test:
    every request must be answered)."""

    def __init__(self, port: int, user_agent: str = "toxiproxy-cli") -> None:
        self.port, self.user_agent = port, user_agent
        self.conn = http.client.HTTPConnection(LOOPBACK, port, timeout=IO_TIMEOUT_S)

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"User-Agent": self.user_agent, "Content-Type": "application/json", **(headers or {})}
        self.conn.request(method, path, body=data, headers=hdrs)
        resp = self.conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None, raw: bytes | None = None) -> Reply:
        return self.request("POST", path, body, raw)

    def patch(self, path: str, body: Any) -> Reply:
        return self.request("PATCH", path, body)

    def delete(self, path: str) -> Reply:
        return self.request("DELETE", path)

    # The Go client's calls, as upstream's api_test.go makes them.

    def create_proxy(self, name: str, listen: str, upstream: str, enabled: bool = True) -> Reply:
        return self.post("/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled})

    def add_toxic(self, proxy: str, name: str, kind: str, stream: str = "", toxicity: float = 1.0,
                  attributes: dict[str, Any] | None = None) -> Reply:
        body: dict[str, Any] = {"name": name, "type": kind, "toxicity": toxicity, "attributes": attributes}
        if stream:
            body["stream"] = stream  # the Go client leaves an empty stream out
        return self.post(f"/proxies/{proxy}/toxics", body)

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        reply = self.get(f"/proxies/{proxy}/toxics")
        assert reply.status == 200, reply
        return reply.json

    def remove_toxic(self, proxy: str, name: str) -> Reply:
        return self.delete(f"/proxies/{proxy}/toxics/{name}")

    def close(self) -> None:
        self.conn.close()


@dataclass
class Server:
    state: ToxiproxyServer
    port: int

    def api(self, user_agent: str = "toxiproxy-cli") -> Api:
        return Api(self.port, user_agent)


@contextmanager
def running_server() -> Iterator[Server]:
    httpd, state = serve(LOOPBACK, 0)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Server(state, httpd.server_address[1])
    finally:
        httpd.shutdown()
        state.shutdown()
        httpd.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def is_up(listen: str) -> bool:
    """Upstream's AssertProxyUp: does a connect succeed?"""
    host, port = listen.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=IO_TIMEOUT_S):
            return True
    except OSError:
        return False


def connect(listen: str) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=IO_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_exactly(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def read_line(sock: socket.socket) -> bytes:
    got = b""
    while not got.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        got += chunk
    return got


def read_all(sock: socket.socket) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


class Upstream:
    """A TCP service that hands every connection it accepts to the test (``accepted``)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(256)
        self.addr = f"{LOOPBACK}:{self.sock.getsockname()[1]}"
        self.accepted: queue.Queue[socket.socket] = queue.Queue()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(IO_TIMEOUT_S)
            self._conns.append(conn)
            self.accepted.put(conn)

    def next(self) -> socket.socket:
        return self.accepted.get(timeout=IO_TIMEOUT_S)

    def close(self) -> None:
        self.sock.close()
        for conn in self._conns:
            conn.close()


class LineEcho(Upstream):
    """Echoes every line back on each connection it accepts."""

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        buf = b""
        try:
            while data := conn.recv(65536):
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    conn.sendall(line + b"\n")
        except OSError:
            return


@contextmanager
def proxied(server: Server, upstream: str, name: str = "test") -> Iterator[tuple[Api, str]]:
    """A proxy to ``upstream`` on a loopback port: (api, its listen address)."""
    api = server.api()
    reply = api.create_proxy(name, f"{LOOPBACK}:0", upstream)
    assert reply.status == 201, reply
    try:
        yield api, reply.json["listen"]
    finally:
        api.close()


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t0
