"""The controller's rendezvous store (chaos.cluster.rdzv_store) against torch's own TCPStore
client: every operation the launchers use, waits that end by a set or by the client's
timeout, and connections that do not speak the protocol."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from chaos.cluster import rdzv_store
from chaos.cluster.rdzv_store import MAGIC, VALIDATE, RendezvousStore


@pytest.fixture
def server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    store = RendezvousStore(sock)
    yield store
    store.close()


def _client(server: RendezvousStore, timeout_s: float = 10.0) -> TCPStore:
    return TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=timeout_s))


def test_every_operation_of_torchs_client_is_answered_as_torchs_server_answers_it(server):
    client = _client(server)
    client.set("k", b"v1")
    assert client.get("k") == b"v1"
    assert client.add("n", 5) == 5 and client.add("n", -2) == 3 and client.get("n") == b"3"
    assert client.compare_set("k", b"v1", b"v2") == b"v2"
    assert client.compare_set("k", b"other", b"v3") == b"v2"  # not as expected: unchanged
    assert client.compare_set("new", b"", b"made") == b"made"
    assert client.compare_set("absent", b"x", b"y") == b"x" and not client.check(["absent"])
    assert client.check(["k", "n"]) and not client.check(["k", "zz"])
    client.multi_set(["a", "b"], [b"1", b"22"])
    assert client.multi_get(["a", "b"]) == [b"1", b"22"]
    client.append("a", b"x")
    assert client.get("a") == b"1x"
    assert client.delete_key("b") and not client.delete_key("b")
    assert client.num_keys() == 4  # k, n, new, a
    # a second client (as each agent is) sees the same keys
    assert _client(server).get("new") == b"made"


def test_a_wait_ends_when_another_client_sets_the_key_and_a_timed_out_one_leaves_the_stream_in_step(server, caplog):
    waiter, setter = _client(server), _client(server)
    threading.Timer(0.3, lambda: setter.set("late", b"1")).start()
    t0 = time.monotonic()
    waiter.wait(["late"])
    assert time.monotonic() - t0 >= 0.25
    waiter.set_timeout(timedelta(seconds=0.3))
    with pytest.raises(Exception, match="(?i)timeout|timed out|wait"):
        waiter.wait(["never"])
    with pytest.raises(Exception, match="(?i)timeout|timed out|wait"):
        waiter.get("never")
    # a wait given up is on record with its key (what a stalled rendezvous waited for)
    assert "gave up waiting for /never after" in caplog.text
    # the cancelled waits are forgotten: a later set answers nobody out of turn
    setter.set("never", b"now")
    waiter.set_timeout(timedelta(seconds=5))
    assert waiter.get("never") == b"now" and waiter.add("n", 1) == 1


def test_a_wait_answered_late_is_logged_with_its_key(server, monkeypatch, caplog):
    monkeypatch.setattr(rdzv_store, "SLOW_WAIT_S", 0.2)
    waiter, setter = _client(server), _client(server)
    threading.Timer(0.4, lambda: setter.set("slow/key", b"1")).start()
    waiter.wait(["slow/key"])
    assert "a wait for /slow/key was answered after" in caplog.text  # torch's client prefixes "/"
    setter.set("quick", b"1")
    waiter.wait(["quick"])
    assert "quick" not in caplog.text


def test_a_bare_connect_and_a_stranger_are_dropped_and_the_store_serves_on(server):
    socket.create_connection(("127.0.0.1", server.port), timeout=2).close()  # harness.health's check
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as stranger:
        stranger.sendall(bytes([VALIDATE]) + (MAGIC ^ 1).to_bytes(4, "little"))
        assert stranger.recv(16) == b""  # closed by the store
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as stranger:
        stranger.sendall(bytes([200]))  # no such query
        assert stranger.recv(16) == b""
    client = _client(server)
    client.set("still", b"here")
    assert client.get("still") == b"here"


def test_closing_the_store_ends_its_thread_and_the_port_refuses(server):
    port = server.port
    server.close()
    assert not server._thread.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    server.close()  # twice: nothing


def test_a_controller_serves_the_rendezvous_without_importing_torch():
    """What the store is for: a run's start (the backend, its store) costs no torch import."""
    import subprocess
    import sys

    code = ("import sys; from chaos.cluster.local import LocalCluster; "
            "cluster = LocalCluster.__new__(LocalCluster); cluster._store = None; "
            "cluster.serve_rendezvous('127.0.0.1'); assert cluster.rdzv_port > 0; cluster.close_rendezvous(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
