"""The embedded Toxiproxy server, driven through the ``toxiproxy-python`` client exactly as a
user's tooling would drive upstream's, on real loopback sockets (an echo service behind a
proxy): the API's answers and errors, and each toxic's effect on the byte stream."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.net import toxiproxy as toxi
from chaos.net.toxiproxy.server import VERSION, serve


@pytest.fixture
def server() -> Iterator[str]:
    httpd, state = serve("127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        state.shutdown()
        httpd.server_close()


class _Echo:
    """A TCP service: echoes what it gets; records every recv's size; ``close_after`` bytes
    makes it close the connection itself."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.recvs: list[int] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                self.recvs.append(len(data))
                if data == b"bye":
                    return  # the service closes the connection
                conn.sendall(data)


@pytest.fixture
def echo() -> Iterator[_Echo]:
    e = _Echo()
    yield e
    e.sock.close()


def _proxy(url: str, echo: _Echo, name: str = "trainchaos-echo") -> Any:
    return toxi.client(url).create(upstream=f"127.0.0.1:{echo.port}", name=name, listen="127.0.0.1:0")


def _connect(proxy: Any) -> socket.socket:
    host, port = proxy.listen.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _round_trip(proxy: Any, payload: bytes = b"ping") -> tuple[bytes, float]:
    with _connect(proxy) as sock:
        t0 = time.monotonic()
        sock.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        return got, time.monotonic() - t0


def test_api_answers_as_upstream_through_the_client(server: str, echo: _Echo) -> None:
    tp = toxi.client(server)
    assert tp.running()
    assert VERSION.encode() in tp.version()
    proxy = _proxy(server, echo)
    assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")  # the port it got
    assert set(tp.proxies()) == {"trainchaos-echo"}
    assert _round_trip(proxy)[0] == b"ping"
    with pytest.raises(ProxyExists):
        _proxy(server, echo)
    proxy.add_toxic(type="latency", attributes={"latency": 5})
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="earthquake")
    with pytest.raises(ProxyExists):  # 409: a toxic of that name is there already
        proxy.add_toxic(type="latency", attributes={"latency": 5})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream"} and toxics["latency_downstream"].attributes == {"latency": 5, "jitter": 0}
    with pytest.raises(NotFound):
        toxi.client(server).get_proxy("nope") or proxy.destroy_toxic("nope")
    ghost = type(proxy)(name="nope", upstream="x:1", enabled=True, listen="x:1")
    with pytest.raises(NotFound):
        ghost.destroy()
    proxy.destroy()
    assert tp.proxies() == {}


def test_latency_holds_each_chunk_and_removal_restores(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="latency", attributes={"latency": 150}, stream="downstream")
    got, took = _round_trip(proxy)
    assert got == b"ping" and took >= 0.15
    proxy.add_toxic(type="latency", name="up", attributes={"latency": 100}, stream="upstream")
    assert _round_trip(proxy)[1] >= 0.25
    proxy.destroy_toxic("latency_downstream")
    proxy.destroy_toxic("up")
    assert _round_trip(proxy)[1] < 0.15


def test_bandwidth_limits_the_rate(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="bandwidth", attributes={"rate": 100}, stream="downstream")  # 100 KB/s
    got, took = _round_trip(proxy, b"x" * 50_000)
    assert len(got) == 50_000 and took >= 0.4  # 50 KB at 100 KB/s: half a second


def test_timeout_passes_nothing_and_closes_after_it(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="timeout", attributes={"timeout": 300}, stream="upstream")
    with _connect(proxy) as sock:
        t0 = time.monotonic()
        sock.sendall(b"lost")
        assert sock.recv(100) == b""  # closed by the proxy, nothing echoed
        assert time.monotonic() - t0 >= 0.25
    assert echo.recvs == []


def test_timeout_zero_stalls_until_removed_then_closes(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="timeout", attributes={"timeout": 0}, stream="upstream")
    with _connect(proxy) as sock:
        sock.sendall(b"lost")
        sock.settimeout(0.4)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        proxy.destroy_toxic("timeout_upstream")
        sock.settimeout(5)
        assert sock.recv(100) == b""  # as upstream: removing it ends the held connection


def test_reset_peer_resets_after_the_first_data(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 100}, stream="upstream")
    with _connect(proxy) as sock:
        sock.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            while sock.recv(100):
                pass
    assert echo.recvs == []


def test_slow_close_delays_the_close(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="slow_close", attributes={"delay": 300}, stream="downstream")
    with _connect(proxy) as sock:
        t0 = time.monotonic()
        sock.sendall(b"bye")  # the service closes on this
        assert sock.recv(100) == b""
        assert time.monotonic() - t0 >= 0.25


def test_slicer_cuts_the_stream_into_small_pieces(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="slicer", attributes={"average_size": 10, "size_variation": 0, "delay": 20000},
                    stream="upstream")
    got, took = _round_trip(proxy, b"y" * 80)
    assert got == b"y" * 80
    # Eight 10-byte slices, 20 ms apart. How the receiver's reads group them is the host's
    # scheduling (a descheduled reader gets two or three slices in one read); what the toxic
    # guarantees is that the data did not arrive at once, and the time the gaps take.
    assert sum(echo.recvs) == 80 and len(echo.recvs) >= 2, echo.recvs
    assert took >= 7 * 0.02, took


def test_limit_data_closes_after_the_bytes(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="limit_data", attributes={"bytes": 6}, stream="downstream")
    with _connect(proxy) as sock:
        sock.sendall(b"0123456789")
        got = b""
        while chunk := sock.recv(100):
            got += chunk
    assert got == b"012345"


def test_down_refuses_and_cuts_connections_and_reset_restores(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    held = _connect(proxy)
    # a full round trip first: the proxy has accepted the connection (one still in the
    # listen backlog when the listener closes gets a reset, not a close)
    held.sendall(b"x")
    assert held.recv(1) == b"x"
    proxy.disable()
    assert held.recv(100) == b""  # the open connection was closed
    held.close()
    with pytest.raises(ConnectionRefusedError):
        _connect(proxy)
    proxy.add_toxic(type="latency", attributes={"latency": 500})
    assert toxi.client(server).reset()
    assert toxi.client(server).get_proxy("trainchaos-echo").enabled is True
    got, took = _round_trip(proxy)
    assert got == b"ping" and took < 0.5  # enabled again, the toxic gone


def test_toxicity_zero_never_applies(server: str, echo: _Echo) -> None:
    proxy = _proxy(server, echo)
    proxy.add_toxic(type="timeout", attributes={"timeout": 0}, toxicity=0.0)
    assert _round_trip(proxy)[0] == b"ping"
