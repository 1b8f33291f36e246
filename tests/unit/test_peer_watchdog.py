"""The peer watchdog (harness.health.Watchdog) for real over liveness endpoints on loopback:
whom it blames when peers end, with and without a farewell."""

from __future__ import annotations

import socket
import time

import pytest

from harness.failures import FailureHandling
from harness.health import (
    WATCHED_RING_PEERS,
    Diagnosis,
    LivenessServer,
    PeerAddress,
    Watchdog,
    watched_ranks,
)


@pytest.fixture
def peers():
    """Ranks 1-3 answering on loopback; closed afterwards (a closed one twice does no harm)."""
    servers = {rank: LivenessServer(rank, "127.0.0.1") for rank in (1, 2, 3)}
    yield servers
    for server in servers.values():
        server.close()


def _watch(servers: dict[int, LivenessServer]) -> tuple[Watchdog, list[Diagnosis]]:
    reports: list[Diagnosis] = []
    addresses = [PeerAddress(rank=r, host="127.0.0.1", port=s.port, pid=0, node=r // 2) for r, s in servers.items()]
    # A long heartbeat and no silence timeout: only connections ending can report here.
    watchdog = Watchdog(addresses, heartbeat_s=30.0, timeout_s=0.0, on_failure=reports.append)
    watchdog.start()
    deadline = time.monotonic() + 5
    while any(not s._conns for s in servers.values()) and time.monotonic() < deadline:
        time.sleep(0.01)  # each endpoint serves its connection: a farewell has somewhere to go
    return watchdog, reports


def _wait_for(reports: list[Diagnosis], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not reports and time.monotonic() < deadline:
        time.sleep(0.01)


def _wait_for_death(watchdog: Watchdog, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while watchdog.first_death() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_peer_dying_unannounced_is_reported_at_once_as_a_crash(peers) -> None:
    watchdog, reports = _watch(peers)
    peers[2].close()
    _wait_for(reports)
    assert [(d.rank, d.failure_class) for d in reports] == [(2, "crash")]
    assert watchdog.first_death()[0] == 2 and watchdog.farewells() == set()


def test_a_node_mate_torn_down_after_the_first_death_is_not_blamed_even_when_both_are_seen_at_once(peers) -> None:
    """Rank 3 is killed; its agent then tears down rank 2, which says farewell first. The
    watching rank, short of CPU, reads both ends in one go, rank 2's the earlier one: it
    still reports rank 3, and first_death names rank 3 (what a failed collective blames)."""
    watchdog, reports = _watch(peers)
    with watchdog._io_lock:  # the watchdog thread cannot read meanwhile: as if descheduled
        peers[2].farewell()
        peers[2].close()
        time.sleep(0.1)
        peers[3].close()
        time.sleep(0.1)
    watchdog.settle()
    assert watchdog.first_death()[0] == 3
    _wait_for(reports)
    assert [(d.rank, d.failure_class) for d in reports] == [(3, "crash")]
    assert watchdog.farewells() == {2}


def test_a_farewell_alone_is_not_reported_but_is_still_the_death_on_record(peers) -> None:
    """Every peer that ended said farewell (the whole node stopped on purpose): nothing is
    reported, and a failed collective still has someone to name."""
    watchdog, reports = _watch(peers)
    peers[1].farewell()
    peers[1].close()
    _wait_for_death(watchdog)
    time.sleep(0.2)
    assert reports == [] and watchdog.first_death()[0] == 1 and watchdog.farewells() == {1}


class _Rank(FailureHandling):
    """The failure side of a rank, with only what a failed collective's diagnosis reads."""

    def __init__(self, peers: list[PeerAddress], watchdog: Watchdog) -> None:
        self.peers, self.watchdog = peers, watchdog


def test_a_collective_failed_by_a_peer_that_left_on_a_hang_blames_the_hung_peer(peers) -> None:
    """Rank 1 saw rank 3 hang and left first (farewell); this rank's collective then fails on
    rank 1's closed connection. The one gone is not the one to blame: a fresh diagnosis
    finds rank 3 accepting connections but not answering, and blames it as hung."""
    peers[3].close()
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(8)  # the kernel accepts connections; nobody answers them, as in a frozen rank
    servers = {1: peers[1], 2: peers[2]}
    watchdog, reports = _watch(servers)
    addresses = [PeerAddress(rank=r, host="127.0.0.1", port=s.port, pid=0, node=r // 2) for r, s in servers.items()]
    addresses.append(PeerAddress(rank=3, host="127.0.0.1", port=frozen.getsockname()[1], pid=0, node=1))
    peers[1].farewell()
    peers[1].close()
    _wait_for_death(watchdog)
    try:
        failure_class, suspect, reason = _Rank(addresses, watchdog).classify(
            RuntimeError("Connection closed by peer [127.0.0.1]:1234"))
    finally:
        frozen.close()
    assert (failure_class, suspect) == ("hang", "rank-3"), reason
    assert reports == []


def test_a_collective_failed_by_a_peer_that_left_with_nobody_else_down_still_names_it(peers) -> None:
    watchdog, _reports = _watch(peers)
    peers[2].farewell()
    peers[2].close()
    _wait_for_death(watchdog)
    addresses = [PeerAddress(rank=r, host="127.0.0.1", port=s.port, pid=0, node=r // 2) for r, s in peers.items()]
    failure_class, suspect, _reason = _Rank(addresses, watchdog).classify(RuntimeError("Connection reset by peer"))
    assert (failure_class, suspect) == ("crash", "rank-2")


def test_silent_peers_name_a_hung_one_before_one_that_left(peers) -> None:
    """Rank 1 leaves with a farewell, rank 3 is frozen from the start: both fall silent, and
    the watchdog's silence check names rank 3, hung, not rank 1's closed endpoint."""
    peers[3].close()
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(8)
    addresses = [PeerAddress(rank=r, host="127.0.0.1", port=peers[r].port, pid=0, node=0) for r in (1, 2)]
    addresses.append(PeerAddress(rank=3, host="127.0.0.1", port=frozen.getsockname()[1], pid=0, node=0))
    reports: list[Diagnosis] = []
    watchdog = Watchdog(addresses, heartbeat_s=0.05, timeout_s=0.5, on_failure=reports.append)
    try:
        watchdog.start()
        deadline = time.monotonic() + 5
        while not peers[1]._conns and time.monotonic() < deadline:
            time.sleep(0.01)  # rank 1 serves the watchdog's connection: its farewell reaches it
        peers[1].farewell()
        peers[1].close()
        _wait_for(reports)
    finally:
        watchdog.stop()
        frozen.close()
    assert [(d.rank, d.failure_class) for d in reports] == [(3, "hang")]
    assert watchdog.farewells() == {1}


def _ring(world: int, per_node: int) -> list[PeerAddress]:
    return [PeerAddress(rank=r, host="127.0.0.1", port=0, pid=0, node=r // per_node) for r in range(world)]


def test_a_big_job_watches_node_mates_and_the_next_ranks_so_every_rank_is_watched_by_as_many() -> None:
    """harness.health.watched_ranks: bounded heartbeat connections (a full mesh of 64 ranks
    was most of a step's time on 2 cores), and still every rank watched by its node-mates
    (who kill it when hung) and by WATCHED_RING_PEERS others."""
    world = _ring(64, 4)
    watched = {r: watched_ranks([p for p in world if p.rank != r], r, r // 4) for r in range(64)}
    assert watched[0] == {1, 2, 3, 4, 5, 6, 7, 8} and watched[62] == {60, 61, 63, 0, 1, 2, 3, 4, 5, 6}
    for rank in range(64):
        watchers = {r for r, seen in watched.items() if rank in seen}
        mates = {r for r in range(64) if r // 4 == rank // 4} - {rank}
        assert mates <= watchers and len(watchers - mates) >= WATCHED_RING_PEERS - 3
        assert len(watched[rank]) <= WATCHED_RING_PEERS + 3
    small = _ring(9, 1)
    assert watched_ranks(small[1:], 0, 0) == set(range(1, 9)), "a job of 9 ranks still watches everyone"


def test_a_watchdog_connects_only_to_the_ranks_it_watches(peers) -> None:
    reports: list[Diagnosis] = []
    addresses = [PeerAddress(rank=r, host="127.0.0.1", port=s.port, pid=0, node=r) for r, s in peers.items()]
    watchdog = Watchdog(addresses, heartbeat_s=30.0, timeout_s=0.0, on_failure=reports.append, watched={3})
    watchdog.start()
    try:
        deadline = time.monotonic() + 5
        while not peers[3]._conns and time.monotonic() < deadline:
            time.sleep(0.01)
        assert peers[3]._conns and not peers[1]._conns and not peers[2]._conns
        peers[1].close()  # not watched: no report
        peers[3].close()
        _wait_for(reports)
        assert [(d.rank, d.failure_class) for d in reports] == [(3, "crash")]
    finally:
        watchdog.stop()
