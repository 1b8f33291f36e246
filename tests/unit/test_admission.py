"""harness.admission: whether torchrun is re-forming a group to admit a waiting node, read
from a real TCPStore holding a real rendezvous state (and compared with what torch's own
rendezvous handler, the one every agent runs, reads from it); and what a rank does whose
collective failed on a peer its agent tore down for that node (harness.failures).

The case this is for, from a CI run of test_docker on a loaded host: node 2's container
started 16 s after the others, the group formed without it, and when it arrived the agents
restarted their ranks to admit it. Rank 1 got its SIGTERM during setup and left with a
farewell; rank 0's collective failed on its closed connection before rank 0's own SIGTERM
came, and rank 0 blamed rank 1 as crashed: a false alarm, 12 s before any fault."""

from __future__ import annotations

import json
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    _NodeDesc,
    _RendezvousState,
)

from chaos.contract import RDZV_ENDPOINT_ENV
from harness import admission, failures
from harness.admission import (
    RUN_ID_ENV,
    first_round_short_of_nodes,
    group_may_be_admitting,
    nodes_waiting_to_join,
)
from harness.health import LivenessServer, PeerAddress, Watchdog
from tests.integration._support import catches_signal

REPO = Path(__file__).resolve().parents[2]
RUN = "trainchaos-test-admission"


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> TCPStore:
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    monkeypatch.setenv(RDZV_ENDPOINT_ENV, f"127.0.0.1:{master.port}")
    monkeypatch.setenv(RUN_ID_ENV, RUN)
    return master


def _state(waiting: int) -> bytes:
    state = _RendezvousState()
    state.round = 1
    state.complete = True
    state.participants = {_NodeDesc("node0", 100, 0): 0, _NodeDesc("node1", 101, 0): 1}
    state.wait_list = {_NodeDesc(f"node{2 + i}", 200 + i, 0) for i in range(waiting)}
    return pickle.dumps(state)


def test_the_nodes_waiting_are_read_as_torchruns_own_handler_reads_them(store: TCPStore) -> None:
    assert nodes_waiting_to_join() == 0  # no round yet: nobody waits to join one
    backend = C10dRendezvousBackend(store, RUN)
    for waiting in (1, 0, 2):
        _, token = backend.get_state() or (None, None)
        assert backend.set_state(_state(waiting), token)[2]
        # A handler of its own each time: one caches the state it read for a second.
        handler = DynamicRendezvousHandler.from_backend(RUN, store, backend, min_nodes=1, max_nodes=3)
        assert nodes_waiting_to_join() == handler.num_nodes_waiting() == waiting


def test_without_an_endpoint_or_a_store_answering_nothing_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RDZV_ENDPOINT_ENV, raising=False)
    monkeypatch.setenv(RUN_ID_ENV, RUN)
    assert nodes_waiting_to_join() is None
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv(RDZV_ENDPOINT_ENV, f"127.0.0.1:{port}")
    t0 = time.monotonic()
    assert nodes_waiting_to_join(timeout_s=0.5) is None
    assert time.monotonic() - t0 < 5


def test_the_store_is_asked_only_where_the_agent_could_admit_a_node(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_ask(timeout_s: float = 1.0) -> int:
        raise AssertionError("asked the store for a group at its maximum size")

    monkeypatch.setattr(admission, "nodes_waiting_to_join", must_not_ask)
    monkeypatch.setattr(admission, "agent_cmdline", lambda: ["torchrun", "--nnodes", "1:3", "train.py"])
    monkeypatch.setenv("GROUP_WORLD_SIZE", "3")
    assert group_may_be_admitting() is False
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    for waiting, admitting in ((1, True), (0, False), (None, False)):
        monkeypatch.setattr(admission, "nodes_waiting_to_join", lambda timeout_s=1.0, n=waiting: n)
        assert group_may_be_admitting() is admitting


class _Rank(failures.FailureHandling):
    """The failure side of a rank with only what a failed collective's diagnosis reads."""

    def __init__(self, peers: list[PeerAddress], watchdog: Watchdog) -> None:
        from types import SimpleNamespace

        self.peers, self.watchdog, self.env = peers, watchdog, SimpleNamespace(rank=0, node=0)


def _peer_that_left() -> tuple[LivenessServer, Watchdog, list[PeerAddress]]:
    server = LivenessServer(1, "127.0.0.1")
    addresses = [PeerAddress(rank=1, host="127.0.0.1", port=server.port, pid=0, node=1)]
    watchdog = Watchdog(addresses, heartbeat_s=30.0, timeout_s=0.0, on_failure=lambda d: None)
    watchdog.start()
    deadline = time.monotonic() + 5
    while not server._conns and time.monotonic() < deadline:
        time.sleep(0.01)
    server.farewell()
    server.close()
    while watchdog.first_death() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return server, watchdog, addresses


@pytest.mark.parametrize("admitting", [False, True])
def test_a_peer_that_left_is_blamed_at_once_unless_a_node_waits_then_after_the_wait(
        monkeypatch: pytest.MonkeyPatch, admitting: bool) -> None:
    """No SIGTERM comes here: after the wait the peer is blamed as before (a stopped peer)."""
    monkeypatch.setattr(failures, "group_may_be_admitting", lambda: admitting)
    monkeypatch.setattr(failures, "ADMISSION_TEARDOWN_WAIT_S", 0.3)
    _server, watchdog, addresses = _peer_that_left()
    t0 = time.monotonic()
    failure_class, suspect, reason = _Rank(addresses, watchdog).classify(RuntimeError("Connection closed by peer"))
    waited = time.monotonic() - t0
    assert (failure_class, suspect) == ("crash", "rank-1"), reason
    assert "left first" in reason
    assert (waited >= 0.3) is admitting, waited


_TORN_DOWN = """
import sys, time
from types import SimpleNamespace
sys.path[:0] = [{repo!r}, {tests!r}]
from harness import failures
from harness.health import TerminationGuard
from test_admission import _peer_that_left

class Rank(failures.FailureHandling):
    stop = liveness = _sigterm_diagnosis = None
    _failing = __import__("threading").Lock()

failures.group_may_be_admitting = lambda: True  # a node waits to join (the store's part: above)
failures.ADMISSION_TEARDOWN_WAIT_S = 60.0
_server, watchdog, addresses = _peer_that_left()
rank = Rank()
rank.peers, rank.watchdog, rank.env = addresses, watchdog, SimpleNamespace(rank=0, node=0)
TerminationGuard(rank._on_sigterm)
failure_class, suspect, reason = rank.classify(RuntimeError("Connection closed by peer [127.0.0.1]:1"))
rank.fail(reason, suspect, failure_class, 1)  # what harness.train does with it
"""


def test_the_ranks_own_teardown_during_the_wait_ends_it_without_a_failure(tmp_path: Path) -> None:
    """A real process, a real SIGTERM through the harness's SIGTERM guard: the rank leaves as
    torn down by its agent (exit 143, ``terminated by torchrun``) and reports no detection."""
    script = _TORN_DOWN.format(repo=str(REPO), tests=str(Path(__file__).parent))
    env = {"RANK": "0", "TRAINCHAOS_EVENTS_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        while line and "waits to join" not in line:
            line = proc.stderr.readline()
        assert "waits to join" in line, "the rank did not wait for its teardown"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    events = [json.loads(line) for p in tmp_path.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert [e["kind"] for e in events if e["kind"] in ("detected", "rank_exit")] == ["rank_exit"], events
    assert [e["reason"] for e in events if e["kind"] == "rank_exit"] == ["terminated by torchrun (SIGTERM)"]


def _round(number: int) -> bytes:
    state = _RendezvousState()
    state.round = number
    state.complete = True
    state.participants = {_NodeDesc("node1", 101, 0): 0, _NodeDesc("node2", 102, 0): 1}
    return pickle.dumps(state)


def test_only_the_jobs_first_round_short_of_nodes_waits_for_the_late_ones(
        store: TCPStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The round is the group's (every rank reads the same one): a node back from a power cut
    starts with torchrun's restart count 0, the survivors' has moved; round 0 is the launch."""
    monkeypatch.setattr(admission, "agent_cmdline", lambda: ["torchrun", "--nnodes", "1:3", "train.py"])
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    assert first_round_short_of_nodes() is False  # no round in the store yet
    backend = C10dRendezvousBackend(store, RUN)
    token = None
    for number, waits in ((0, True), (1, False), (4, False)):
        _, token, _ = backend.set_state(_round(number), token)
        assert first_round_short_of_nodes() is waits, number
    _, token, _ = backend.set_state(_round(0), token)
    monkeypatch.setenv("GROUP_WORLD_SIZE", "3")
    assert first_round_short_of_nodes() is False  # every node launched is in
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setattr(admission, "agent_cmdline", lambda: ["torchrun", "--nnodes", "2", "train.py"])
    assert first_round_short_of_nodes() is False  # not elastic: torchrun admits no one
    monkeypatch.setattr(admission, "agent_cmdline", lambda: ["torchrun", "--nnodes", "1:3", "train.py"])
    monkeypatch.delenv(RDZV_ENDPOINT_ENV)
    assert first_round_short_of_nodes() is False  # cannot ask: train at once, as before


_WAITS = """
import os, sys
sys.path[:0] = [{repo!r}]
from harness.admission import await_late_nodes

def leave():
    print("left", flush=True)
    os._exit(143)

print("waiting", flush=True)
print("gave up" if await_late_nodes(float(sys.argv[1]), leave) is False else "?", flush=True)
"""


def test_the_wait_for_late_nodes_ends_in_the_agents_sigterm_or_at_its_bound() -> None:
    script = textwrap.dedent(_WAITS.format(repo=str(REPO)))
    proc = subprocess.Popen([sys.executable, "-c", script, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        deadline = time.monotonic() + 30
        while not catches_signal(proc.pid, signal.SIGTERM):  # the wait's handler is in place
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        assert proc.stdout.read().split() == ["left"] and time.monotonic() - t0 < 30
    finally:
        proc.kill()
        proc.wait()
    bounded = subprocess.run([sys.executable, "-c", script, "0.2"], capture_output=True, text=True, timeout=30)
    assert bounded.returncode == 0 and bounded.stdout.split() == ["waiting", "gave", "up"], bounded
