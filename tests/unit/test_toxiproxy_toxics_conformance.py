"""Toxiproxy's toxic tests (upstream's toxics/*_test.go, and the link semantics of
link_test.go and toxic_test.go), ported to the embedded server: the toxics added through the
HTTP API, their effect measured on real loopback TCP connections.

Where upstream asserts a delay within a few milliseconds, these assert a lower bound only
(with a generous upper bound where a missing effect would otherwise pass), so that a busy
two-core host passes them. Every change of a chain is checked on connections that were
open before the API call, with no pause after it: upstream rewires each link before the call
returns."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from chaos.net.toxiproxy.toxics import slice_points
from tests.unit._toxiproxy_support import (
    IO_TIMEOUT_S,
    LOOPBACK,
    Api,
    LineEcho,
    Server,
    Upstream,
    connect,
    read_all,
    read_exactly,
    read_line,
    running_server,
)


@pytest.fixture
def server() -> Iterator[Server]:
    with running_server() as s:
        yield s


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    u = Upstream()
    yield u
    u.close()


@pytest.fixture
def echo() -> Iterator[LineEcho]:
    e = LineEcho()
    yield e
    e.close()


@pytest.fixture
def api(server: Server) -> Iterator[Api]:
    a = server.api()
    yield a
    a.close()


def _proxy(api: Api, upstream_addr: str, name: str = "test") -> str:
    reply = api.create_proxy(name, f"{LOOPBACK}:0", upstream_addr)
    assert reply.status == 201, reply
    return reply.json["listen"]


def _established(api: Api, upstream: Upstream) -> tuple[socket.socket, socket.socket]:
    """timeout_test.go WithEstablishedProxy: a client and the server's end of its
    connection, data through both ways first."""
    client = connect(_proxy(api, upstream.addr))
    server_end = upstream.next()
    client.sendall(b"foobar")
    assert read_exactly(server_end, 6) == b"foobar"
    server_end.sendall(b"foobar")
    assert read_exactly(client, 6) == b"foobar"
    return client, server_end


def _echo_round(client: socket.socket, server_end: socket.socket, msg: bytes = b"hello world\n") -> None:
    """toxic_test.go AssertEchoResponse."""
    client.sendall(msg)
    assert read_line(server_end) == msg
    server_end.sendall(msg)
    assert read_line(client) == msg


def _add(api: Api, name: str, kind: str, stream: str, toxicity: float = 1.0, **attributes: int) -> None:
    reply = api.add_toxic("test", name, kind, stream, toxicity, attributes)
    assert reply.status == 200, reply


def _remove(api: Api, name: str) -> None:
    assert api.remove_toxic("test", name).status == 204


# -- toxic_test.go ---------------------------------------------------------------------------


def test_persistent_connections(api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    _add(api, "noop_up", "noop", "upstream")
    _add(api, "noop_down", "noop", "downstream")
    _echo_round(client, server_end)
    assert api.post("/reset").status == 204
    _echo_round(client, server_end)
    assert api.post("/reset").status == 204
    _echo_round(client, server_end)
    client.close()


def test_toxic_add_remove(server: Server, api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    running = threading.Event()
    running.set()
    failures: list[str] = []

    def churn() -> None:
        churner = server.api()
        enabled = False
        while running.is_set():
            if enabled:
                churner.add_toxic("test", "noop_up", "noop", "upstream")
                churner.remove_toxic("test", "noop_down")
            else:
                churner.remove_toxic("test", "noop_up")
                reply = churner.add_toxic("test", "noop_down", "noop", "downstream")
                if reply.status not in (200, 409):
                    failures.append(str(reply))
            enabled = not enabled
        churner.close()

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(100):
            _echo_round(client, server_end)
    finally:
        running.clear()
        thread.join(IO_TIMEOUT_S)
    assert not failures
    client.close()


# -- latency_test.go -------------------------------------------------------------------------


@pytest.mark.parametrize(("up_ms", "down_ms"), [(100, 0), (0, 100), (100, 100), (300, 100), (100, 300), (0, 0)])
def test_latency(api: Api, upstream: Upstream, up_ms: int, down_ms: int) -> None:
    """DoLatencyTest: a 32 KiB line each way on an established connection, the toxics
    added just before; the server reads it no sooner than the upstream latency, the client
    no sooner than the downstream one."""
    client, server_end = _established(api, upstream)
    if up_ms:
        _add(api, "latency_up", "latency", "upstream", latency=up_ms)
    if down_ms:
        _add(api, "latency_down", "latency", "downstream", latency=down_ms)
    msg = b"hello world " + b"a" * 32 * 1024 + b"\n"
    t0 = time.monotonic()
    client.sendall(msg)
    assert read_exactly(server_end, len(msg)) == msg
    t_server = time.monotonic() - t0
    # Timed from before the send, like the upstream side: a 32 KiB sendall can return only
    # after the proxy has read (and started delaying) part of it, which undercounts by ms.
    t1 = time.monotonic()
    server_end.sendall(msg)
    assert read_exactly(client, len(msg)) == msg
    t_client = time.monotonic() - t1
    assert t_server >= up_ms / 1000 and t_client >= down_ms / 1000, (t_server, t_client)
    assert t_server + t_client < (up_ms + down_ms) / 1000 + 3.0  # held, not lost
    client.close()


def test_latency_toxic_close_race(server: Server, api: Api, upstream: Upstream) -> None:
    """TestLatencyToxicCloseRace (100 rounds, not 1000): add, dial, write, close, remove;
    every call answered, none hangs."""
    listen = _proxy(api, upstream.addr)
    for _ in range(100):
        assert api.add_toxic("test", "", "latency", "upstream", 1, {"latency": 10}).status == 200
        with connect(listen) as sock:
            sock.sendall(b"hello")
        assert api.remove_toxic("test", "latency_upstream").status == 204


def test_two_latency_toxics(api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    _add(api, "latency_0", "latency", "upstream", latency=250)
    _add(api, "latency_1", "latency", "upstream", latency=250)
    msg = b"hello world " + b"a" * 32 * 1024 + b"\n"
    t0 = time.monotonic()
    client.sendall(msg)
    assert read_exactly(server_end, len(msg)) == msg
    assert time.monotonic() - t0 >= 0.5
    client.close()


def test_latency_toxic_bandwidth(api: Api, upstream: Upstream) -> None:
    """TestLatencyToxicBandwidth: latency delays the stream, it does not throttle it. Each
    chunk is held from its own arrival (a pipeline): 1.2 MB behind 300 ms arrives in far
    less than the 300 ms per chunk a one-at-a-time delay would take (>= 11 s)."""
    listen = _proxy(api, upstream.addr)
    client = connect(listen)
    server_end = upstream.next()
    payload = b"hello world " * 1000
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            try:
                server_end.sendall(payload)
            except OSError:
                return

    _add(api, "latency_downstream", "latency", "downstream", latency=300)
    thread = threading.Thread(target=flood, daemon=True)
    t0 = time.monotonic()  # before the first byte is sent: the toxic holds it 300 ms from its arrival
    thread.start()
    assert len(read_exactly(client, len(payload))) == len(payload)
    assert time.monotonic() - t0 >= 0.3
    t1 = time.monotonic()
    total = sum(len(read_exactly(client, len(payload))) for _ in range(100))
    took = time.monotonic() - t1
    stop.set()
    client.close()
    server_end.close()
    assert total == 100 * len(payload)
    assert took < 5.0, took


# -- bandwidth_test.go -----------------------------------------------------------------------


def test_bandwidth_toxic(api: Api, upstream: Upstream) -> None:
    """TestBandwidthToxic: 120 KB at 200 KB/s upstream takes no less than 0.6 s, intact."""
    client, server_end = _established(api, upstream)
    _add(api, "bandwidth_upstream", "bandwidth", "upstream", rate=200)
    payload = b"hello world " * 10000
    threading.Thread(target=client.sendall, args=(payload,), daemon=True).start()
    t0 = time.monotonic()
    assert read_exactly(server_end, len(payload)) == payload
    assert time.monotonic() - t0 >= 0.6 * 0.95  # the first 100 ms piece may be on its way already
    client.close()


def test_bandwidth_paces_low_rates_instead_of_a_burst(api: Api, upstream: Upstream) -> None:
    """At 10 KB/s a 5 KB write leaves in pieces of 100 ms worth (1000 bytes), spread over
    about half a second: the first bytes arrive well before the last."""
    client, server_end = _established(api, upstream)
    _add(api, "bandwidth_downstream", "bandwidth", "downstream", rate=10)
    server_end.sendall(b"x" * 5000)
    arrivals: list[tuple[float, int]] = []
    got = 0
    while got < 5000:
        chunk = client.recv(65536)
        assert chunk
        got += len(chunk)
        arrivals.append((time.monotonic(), len(chunk)))
    # Not one burst: the last byte comes at least 3 pieces (300 ms) after the first. (How
    # many recvs that takes is the reader's luck on a busy host, so it is not asserted.)
    assert len(arrivals) >= 2 and arrivals[-1][0] - arrivals[0][0] >= 0.3, arrivals
    client.close()


# -- timeout_test.go -------------------------------------------------------------------------


def test_timeout_toxic_does_not_cause_hang(api: Api, upstream: Upstream) -> None:
    client, _ = _established(api, upstream)
    _add(api, "might_block", "latency", "upstream", latency=10)
    _add(api, "timeout", "timeout", "upstream", timeout=0)
    for _ in range(5):
        client.sendall(b"hello")
        time.sleep(0.05)
    t0 = time.monotonic()
    _remove(api, "might_block")
    assert time.monotonic() - t0 < IO_TIMEOUT_S
    client.close()


def test_timeout_toxic_closes_connection_on_remove(api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    _add(api, "to_delete", "timeout", "upstream", timeout=0)
    _remove(api, "to_delete")
    assert client.recv(1) == b""
    assert server_end.recv(1) == b""


def test_timeout_toxic_drops_data_and_closes_after_its_timeout(api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    t0 = time.monotonic()
    _add(api, "timeout", "timeout", "upstream", timeout=200)
    client.sendall(b"lost")
    assert client.recv(100) == b""  # closed, nothing came back
    assert time.monotonic() - t0 >= 0.2
    assert server_end.recv(100) == b""  # and the data never reached the server


# -- reset_peer_test.go ----------------------------------------------------------------------

MSG = b"reset toxic payload\n"


def _reset_case(api: Api, stream: str, timeout_ms: int) -> float:
    """resetTCPHelper + checkConnectionState: the toxic on the proxy before the client
    dials; the client's read is a reset, the next one the end."""
    upstream = LineEcho()
    listen = _proxy(api, upstream.addr)
    _add(api, "resettcp", "reset_peer", stream, timeout=timeout_ms)
    t0 = time.monotonic()
    with connect(listen) as sock:
        sock.sendall(MSG)
        with pytest.raises(ConnectionResetError):
            sock.recv(1000)
        took = time.monotonic() - t0
        assert sock.recv(1000) == b""
    upstream.close()
    return took


def test_reset_toxic_no_timeout(api: Api) -> None:
    _reset_case(api, "upstream", 0)


def test_reset_toxic_with_timeout(api: Api) -> None:
    assert _reset_case(api, "upstream", 100) >= 0.1


def test_reset_toxic_with_timeout_downstream(api: Api) -> None:
    assert _reset_case(api, "downstream", 100) >= 0.1


def _outcome(sock: socket.socket) -> str:
    try:
        data = sock.recv(1000)
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return "hung"
    return "closed" if not data else "data"


@pytest.mark.parametrize("toxic_first", [True, False], ids=["toxic-then-connect", "connect-then-toxic"])
def test_reset_peer_zero_resets_every_one_of_200_connections(server: Server, api: Api, echo: LineEcho,
                                                             toxic_first: bool) -> None:
    """The issue's count: reset_peer with timeout 0 on 200 connections, each sending a line:
    200 resets, none hung (a hung one neither resets nor ends); deleting the proxy leaves no
    connection behind."""
    listen = _proxy(api, echo.addr)
    if toxic_first:
        _add(api, "reset", "reset_peer", "downstream", timeout=0)
    socks = [connect(listen) for _ in range(200)]
    if not toxic_first:
        _add(api, "reset", "reset_peer", "downstream", timeout=0)
    for sock in socks:
        sock.settimeout(5.0)
        sock.sendall(b"ping\n")
    outcomes = [_outcome(sock) for sock in socks]
    counts = {k: outcomes.count(k) for k in set(outcomes)}
    print(f"reset_peer 0 over 200 connections ({'toxic first' if toxic_first else 'open first'}): {counts}")
    assert counts == {"reset": 200}, counts
    assert api.delete("/proxies/test").status == 204
    assert not server.state.proxies
    for sock in socks:
        sock.settimeout(5.0)
        assert _outcome(sock) in ("closed", "reset")
        sock.close()


# -- slicer_test.go --------------------------------------------------------------------------


def test_slicer_cuts() -> None:
    rng = random.Random(1)
    points = slice_points(0, 480_000, 1024, 512, rng)
    reads = len(points) // 2
    assert 480 // 2 <= reads <= 480 // 2 + 480
    assert points[0] == 0 and points[-1] == 480_000
    assert all(points[i] == points[i + 1] for i in range(1, len(points) - 1, 2))  # contiguous
    assert len(slice_points(0, 24, 1, 0, rng)) // 2 == 24  # zero variation: one byte each


def test_slicer_toxic_over_tcp(api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    _add(api, "slicer", "slicer", "upstream", average_size=10, size_variation=0, delay=20_000)
    client.sendall(b"y" * 80)
    arrivals = []
    got = b""
    while len(got) < 80:
        chunk = server_end.recv(1000)
        assert chunk
        arrivals.append((time.monotonic(), len(chunk)))
        got += chunk
    assert got == b"y" * 80
    # 8 slices 20 ms apart: the last comes 140 ms after the first, in several reads
    assert len(arrivals) >= 2 and arrivals[-1][0] - arrivals[0][0] >= 0.1, arrivals
    client.close()


# -- limit_data_test.go ----------------------------------------------------------------------


@pytest.mark.parametrize(("writes", "limit", "expected", "closed"), [
    ([50], 100, 50, False),               # chunk smaller than the limit
    ([100], 100, 100, True),              # chunk the length of the limit
    ([150], 100, 100, True),              # chunk bigger than the limit
    ([25, 25, 25, 25], 100, 100, True),   # chunks that add up to it
    ([90, 20], 100, 100, True),           # the second would overflow it
    ([100], 0, 0, True),                  # limit 0
])
def test_limit_data(api: Api, upstream: Upstream, writes: list[int], limit: int, expected: int,
                    closed: bool) -> None:
    client, server_end = _established(api, upstream)
    _add(api, "limit", "limit_data", "downstream", bytes=limit)
    for n in writes:
        try:
            server_end.sendall(b"z" * n)
        except OSError:
            break  # the proxy closed the connection already
        time.sleep(0.02)
    if closed:
        assert read_all(client) == b"z" * expected
    else:
        assert read_exactly(client, expected) == b"z" * expected
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(1)  # still open, nothing more
    client.close()


def test_limit_data_count_survives_an_update(api: Api, upstream: Upstream) -> None:
    """TestLimitDataToxicMayBeRestarted: the bytes counted stay with the connection when the
    toxic is changed (upstream keeps a stub's state across a restart)."""
    client, server_end = _established(api, upstream)
    _add(api, "limit", "limit_data", "downstream", bytes=100)
    server_end.sendall(b"a" * 90)
    assert read_exactly(client, 90) == b"a" * 90
    assert api.patch("/proxies/test/toxics/limit", {"attributes": {"bytes": 100}}).status == 200
    server_end.sendall(b"b" * 20)
    assert read_all(client) == b"b" * 10
    client.close()


# -- link_test.go: toxicity, data integrity, broken connections ------------------------------


def test_toxicity_is_drawn_again_on_update(api: Api, upstream: Upstream) -> None:
    """TestToxicity: a timeout toxic at toxicity 0 passes data; updated to toxicity 1 and
    100 ms, the same open connection stops passing and is closed."""
    client, server_end = _established(api, upstream)
    _add(api, "timeout1", "timeout", "downstream", toxicity=0.0)
    server_end.sendall(b"*")
    assert read_exactly(client, 1) == b"*"
    t0 = time.monotonic()
    assert api.patch("/proxies/test/toxics/timeout1", {"toxicity": 1, "attributes": {"timeout": 100}}).status == 200
    server_end.sendall(b"*")
    assert client.recv(1) == b""
    assert time.monotonic() - t0 >= 0.1


def test_no_data_dropped_while_the_chain_churns(server: Server, api: Api, upstream: Upstream) -> None:
    """TestNoDataDropped: 20,000 numbered 2-byte words through the downstream while a 1 s
    latency toxic is added and removed over and over: every word arrives, in order."""
    client, server_end = _established(api, upstream)
    running = threading.Event()
    running.set()

    def churn() -> None:
        churner = server.api()
        while running.is_set():
            churner.add_toxic("test", "lat", "latency", "downstream", 1, {"latency": 1000})
            churner.remove_toxic("test", "lat")
        churner.close()

    thread = threading.Thread(target=churn)
    thread.start()
    words = b"".join(struct.pack(">H", i) for i in range(20_000))
    writer = threading.Thread(target=lambda: [server_end.sendall(words[i:i + 64]) for i in range(0, len(words), 64)])
    writer.start()
    try:
        got = read_exactly(client, len(words))
    finally:
        running.clear()
        thread.join(IO_TIMEOUT_S)
        writer.join(IO_TIMEOUT_S)
    assert got == words
    client.close()


def test_remove_toxic_with_broken_connection(api: Api, upstream: Upstream) -> None:
    """TestRemoveToxicWithBrokenConnection: bandwidth 0 both ways, data flowing, the client
    gone: both removals return."""
    client, server_end = _established(api, upstream)
    _add(api, "bw_down", "bandwidth", "downstream", rate=0)
    _add(api, "bw_up", "bandwidth", "upstream", rate=0)
    client.sendall(b"x" * 10_000)
    client.close()
    t0 = time.monotonic()
    _remove(api, "bw_down")
    _remove(api, "bw_up")
    assert time.monotonic() - t0 < IO_TIMEOUT_S


# -- changes are in force on open connections when the call returns --------------------------


def test_latency_added_then_a_request_on_an_open_connection_is_delayed_20_of_20(api: Api, echo: LineEcho) -> None:
    """The issue's count: on an open (pooled) connection, add a 100 ms latency toxic, send at
    once: delayed 20 of 20; remove it, send at once: not held by it."""
    listen = _proxy(api, echo.addr)
    delayed = 0
    with connect(listen) as sock:
        for i in range(20):
            line = f"request {i}\n".encode()
            sock.sendall(line)
            assert read_line(sock) == line  # the connection is open and idle
            _add(api, "slow", "latency", "downstream", latency=100)
            t0 = time.monotonic()
            sock.sendall(line)
            assert read_line(sock) == line
            delayed += time.monotonic() - t0 >= 0.1
            _remove(api, "slow")
    print(f"latency toxic added, then a request on an open connection: delayed {delayed} of 20")
    assert delayed == 20


def test_removing_a_latency_releases_the_data_it_holds(api: Api, echo: LineEcho) -> None:
    """Upstream's interrupted latency toxic passes what it holds on: removing a 5 s latency
    lets a held line through at once, and later lines are not held."""
    listen = _proxy(api, echo.addr)
    with connect(listen) as sock:
        _add(api, "slow", "latency", "downstream", latency=5000)
        t0 = time.monotonic()
        sock.sendall(b"held\n")
        time.sleep(0.2)  # the echo is back at the proxy, held by the toxic
        _remove(api, "slow")
        assert read_line(sock) == b"held\n"
        sock.sendall(b"free\n")
        assert read_line(sock) == b"free\n"
        assert time.monotonic() - t0 < 4.0


def test_update_is_in_force_on_open_connections(api: Api, echo: LineEcho) -> None:
    listen = _proxy(api, echo.addr)
    with connect(listen) as sock:
        _add(api, "slow", "latency", "downstream", latency=0)
        sock.sendall(b"a\n")
        assert read_line(sock) == b"a\n"
        assert api.patch("/proxies/test/toxics/slow", {"attributes": {"latency": 200}}).status == 200
        t0 = time.monotonic()
        sock.sendall(b"b\n")
        assert read_line(sock) == b"b\n"
        assert time.monotonic() - t0 >= 0.2


def test_reset_is_in_force_on_open_connections(api: Api, echo: LineEcho) -> None:
    listen = _proxy(api, echo.addr)
    with connect(listen) as sock:
        _add(api, "slow", "latency", "downstream", latency=5000)
        assert api.post("/reset").status == 204
        t0 = time.monotonic()
        sock.sendall(b"a\n")
        assert read_line(sock) == b"a\n"
        assert time.monotonic() - t0 < 4.0


def test_slow_close_holds_the_end_of_the_stream(api: Api, upstream: Upstream) -> None:
    client, server_end = _established(api, upstream)
    _add(api, "slow_close", "slow_close", "downstream", delay=300)
    t0 = time.monotonic()
    server_end.close()
    assert client.recv(10) == b""
    assert time.monotonic() - t0 >= 0.3
    client.close()


def test_disable_closes_open_connections_and_refuses_new_ones(api: Api, echo: LineEcho) -> None:
    listen = _proxy(api, echo.addr)
    with connect(listen) as sock:
        sock.sendall(b"x\n")
        assert read_line(sock) == b"x\n"
        assert api.patch("/proxies/test", {"enabled": False}).status == 200
        assert sock.recv(10) == b""
    with pytest.raises(ConnectionRefusedError):
        connect(listen)
