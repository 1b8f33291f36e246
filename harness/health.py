"""Peer health: a liveness endpoint per rank, a heartbeat watchdog, and failure classification.

Each rank answers pings on a small TCP endpoint. The watchdog pings every peer each
``heartbeat_s``; a peer that has not answered for ``watchdog_s`` is declared failed. The
same classification serves the training loop when a collective raises:

* connection refused / reset      -> the peer process is gone            -> ``crash``
* TCP connects, no pong           -> the kernel accepts, the process
                                     does not run (SIGSTOP, GPU hang)     -> ``hang``
* connect itself times out         -> packets are dropped on the way      -> ``network``

Heartbeats go over these sockets rather than through the c10d store because the store is
hosted by rank 0: a frozen rank 0 would freeze every heartbeat with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from chaos import contract

__all__ = ["PROGRESS_REQUEST", "WATCHED_RING_PEERS", "Diagnosis", "LivenessServer", "PeerAddress", "Watchdog",
           "ask", "diagnose", "diagnose_peers", "watched_ranks"]

PROGRESS_REQUEST = b"progress\n"
"""Asks a rank's liveness endpoint for its training loop's state (harness.progress)."""

FAREWELL = b"bye\n"
"""What a rank sends every peer watching it just before it leaves on purpose: torn down by
its agent, or leaving because it detected another rank's failure. Its connections close a
moment later like a crashed rank's; the farewell is what tells the two apart."""


@dataclass(frozen=True)
class PeerAddress:
    rank: int
    host: str
    port: int
    pid: int
    node: int


@dataclass(frozen=True)
class Diagnosis:
    rank: int
    failure_class: str  # crash | hang | network | alive
    detail: str


WATCHED_RING_PEERS = 8
"""Beyond its node-mates, the peers a rank keeps a heartbeat connection to: the next ranks
around the ring. Every rank is then watched by its node-mates and the 8 ranks before it. A
full mesh costs N(N-1) connections, each with a thread answering pings twice a second: at 64
ranks on 2 cores, 4,032 threads and 8,000 pings a second, most of a step's time
(docs/scale.md#emulated-cluster-size). Jobs of up to 9 ranks still watch everyone."""


def watched_ranks(peers: list[PeerAddress], rank: int, node: int, ring: int = WATCHED_RING_PEERS) -> set[int]:
    """The ranks of ``peers`` (every other rank of the job) that ``rank`` on ``node`` keeps a
    heartbeat connection to: all of them in a job of at most ``ring`` + 1 ranks; else its
    node-mates (a hung one is killed by a node-mate, ``FailureHandling._kill_hung_node_mate``)
    and the next ``ring`` ranks after it, wrapping around."""
    if len(peers) <= ring:
        return {p.rank for p in peers}
    world = sorted([rank, *(p.rank for p in peers)])
    at = world.index(rank)
    after = {world[(at + step) % len(world)] for step in range(1, ring + 1)}
    return after | {p.rank for p in peers if p.node == node}


class LivenessServer:
    """Answers ``ping`` with ``pong``; runs on daemon threads so it never blocks exit."""

    def __init__(self, rank: int, bind_host: str) -> None:
        """``bind_host``: the node's own address, never 0.0.0.0: the socket answers anyone
        who connects, and nothing beyond the job's own fabric has a reason to."""
        self.rank = rank
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.status: Callable[[], dict[str, object]] | None = None
        """Answers ``progress`` with this (harness.progress): the loop's state, read by the
        same thread that answers pings, so a stuck training thread does not hold it up."""
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((bind_host, 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept_loop, name="liveness-accept", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="liveness-conn", daemon=True).start()

    def farewell(self) -> None:
        """Say FAREWELL on every open connection (never blocks: the rank is about to exit)."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send(FAREWELL, socket.MSG_DONTWAIT)

    def close(self) -> None:
        """Stop answering and drop every connection, as the process's exit would."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept loop, which close() would not
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _serve(self, conn: socket.socket) -> None:
        reply = f"pong {self.rank} {os.getpid()}\n".encode()
        with self._conns_lock:
            self._conns.add(conn)
        with conn:
            self._answer(conn, reply)
        with self._conns_lock:
            self._conns.discard(conn)

    def _answer(self, conn: socket.socket, reply: bytes) -> None:
        while True:
            try:
                data = conn.recv(64)
                if not data:
                    return
                if data.startswith(PROGRESS_REQUEST) and self.status is not None:
                    conn.sendall(json.dumps(self.status()).encode() + b"\n")
                    continue
                conn.sendall(reply * data.count(b"\n"))
            except OSError:
                return


def diagnose(peer: PeerAddress, timeout_s: float = 1.0) -> Diagnosis:
    """Classify one peer with a fresh connection: crash, hang, network or alive."""
    answer = ask(peer, b"ping\n", timeout_s)
    return answer if isinstance(answer, Diagnosis) else Diagnosis(peer.rank, "alive", f"rank {peer.rank} answers")


def ask(peer: PeerAddress, request: bytes, timeout_s: float = 1.0) -> bytes | Diagnosis:
    """Send ``request`` on a fresh connection and return the first line of the answer, or
    what the failure to get one says about the peer (crash, hang, network)."""
    try:
        sock = socket.create_connection((peer.host, peer.port), timeout=timeout_s)
    except ConnectionRefusedError:
        return Diagnosis(peer.rank, "crash", f"rank {peer.rank} refuses connections: its process is gone")
    except TimeoutError:
        return Diagnosis(peer.rank, "network", f"rank {peer.rank} unreachable: connect timed out after {timeout_s:g} s")
    except OSError as exc:
        return Diagnosis(peer.rank, "network", f"rank {peer.rank} unreachable: {exc}")
    data = b""
    with sock:
        try:
            sock.sendall(request)
            sock.settimeout(timeout_s)
            while not data.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            return Diagnosis(peer.rank, "hang", f"rank {peer.rank} accepts connections but does not answer: its process is not running")
        except OSError:
            return Diagnosis(peer.rank, "crash", f"rank {peer.rank} reset the connection")
    if not data:
        return Diagnosis(peer.rank, "crash", f"rank {peer.rank} closed the connection")
    if data.startswith(FAREWELL):
        return Diagnosis(peer.rank, "crash", f"rank {peer.rank} is leaving (its agent stopped it, "
                         "or it detected another rank's failure)")
    return data


def diagnose_peers(peers: list[PeerAddress], timeout_s: float = 1.0,
                   left: set[int] | frozenset[int] = frozenset()) -> list[Diagnosis]:
    """Diagnose every peer in parallel; returns only the unhealthy ones, crash first, and
    the peers in ``left`` (they said FAREWELL: gone on purpose) after every other one."""
    results: list[Diagnosis] = []
    lock = threading.Lock()

    def one(peer: PeerAddress) -> None:
        diag = diagnose(peer, timeout_s)
        with lock:
            results.append(diag)

    threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s * 2 + 0.5)
    order = {"crash": 0, "hang": 1, "network": 2}
    bad = [d for d in results if d.failure_class != "alive"]
    return sorted(bad, key=lambda d: (d.rank in left, order.get(d.failure_class, 9), d.rank))


class Watchdog:
    """Watches its peers (``watched``: every peer when None) over one persistent connection
    each; a fresh diagnosis may still look at any peer of the job.

    * A peer whose connection hits EOF/reset died: reported at once as ``crash``, and its
      time of death is kept, so that when several peers are gone (an agent tears down the
      rest of a node after one rank died) the first to die is the one blamed.
    * A peer that said FAREWELL first left on purpose: torn down by its agent, or leaving on
      a failure it detected elsewhere. Its end is kept but not reported: the rank whose
      death set off the teardown is the one to blame, even when this rank, short of CPU,
      sees both ends at once.
    * Every ``heartbeat_s`` each peer is pinged; a peer silent for ``timeout_s`` is
      diagnosed with a fresh connection (hang, network) and reported. ``timeout_s`` 0 turns
      this off (plain gloo: a frozen peer blocks the job until the collective timeout).
    """

    def __init__(
        self,
        peers: list[PeerAddress],
        heartbeat_s: float,
        timeout_s: float,
        on_failure: Callable[[Diagnosis], None],
        watched: set[int] | None = None,
    ) -> None:
        self._peers = {p.rank: p for p in peers}
        self._watched = [p for p in peers if watched is None or p.rank in watched]
        self._heartbeat_s = heartbeat_s
        self._timeout_s = timeout_s
        self._on_failure = on_failure
        self._conns: dict[int, socket.socket] = {}
        self._last_pong: dict[int, float] = {}
        self._deaths: dict[int, float] = {}
        self._farewells: set[int] = set()
        self._lock = threading.Lock()
        # Held while reading the connections: settle() reads them from the caller's thread
        # too, and one reader at a time keeps a farewell and its EOF in order.
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def start(self) -> None:
        now = time.monotonic()
        for peer in self._watched:
            rank = peer.rank
            self._last_pong[rank] = now
            try:
                sock = socket.create_connection((peer.host, peer.port), timeout=max(1.0, self._heartbeat_s))
            except OSError:
                continue  # not up yet or already gone: the ping loop retries and diagnoses
            sock.setblocking(False)
            self._conns[rank] = sock
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def first_death(self) -> tuple[int, float] | None:
        """(rank, monotonic time) of the first peer seen dying, if any; a peer that died
        without a farewell comes before any that said one."""
        with self._lock:
            if not self._deaths:
                return None
            rank = min(self._deaths, key=lambda r: (r in self._farewells, self._deaths[r]))
            return rank, self._deaths[rank]

    def farewells(self) -> set[int]:
        """The peers that said they were leaving on purpose."""
        with self._lock:
            return set(self._farewells)

    def settle(self) -> None:
        """Take in, from the calling thread, whatever the peers have sent by now (deaths,
        farewells): a caller about to blame a peer sees what the watchdog thread, short of
        CPU, may not have read yet. The thread still reports what is found."""
        self._take_news()

    def _close(self, rank: int) -> None:
        sock = self._conns.pop(rank, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _report(self, diag: Diagnosis) -> None:
        if self._stop.is_set():
            return  # stopped meanwhile: training ended normally, peers are leaving
        self._stop.set()
        self._on_failure(diag)

    def _run(self) -> None:
        next_ping = time.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_ping - time.monotonic())
            socks = list(self._conns.values())
            if socks:
                with contextlib.suppress(OSError, ValueError):
                    select.select(socks, [], [], timeout)
            else:
                self._stop.wait(timeout)
            self._take_news()
            dead = self._first_unannounced_death()
            if dead is not None:
                self._report(Diagnosis(dead, "crash", f"rank {dead} closed its connection: its process is gone"))
                return
            if time.monotonic() >= next_ping:
                next_ping = time.monotonic() + self._heartbeat_s
                if self._ping_and_check():
                    return

    def _first_unannounced_death(self) -> int | None:
        # A farewell arrives before its sender's EOF: once dead, a peer's farewell is final.
        death = self.first_death()
        return death[0] if death is not None and death[0] not in self.farewells() else None

    def _take_news(self) -> None:
        """Read every connection until none has more: pongs, farewells, ends. (A farewell or
        an end may wait behind a pong: one read each would leave it for the next round.)"""
        with self._io_lock:
            for _ in range(16):  # bounded: a peer answering pings cannot keep this busy
                socks = {s: r for r, s in self._conns.items()}
                try:
                    ready = select.select(list(socks), [], [], 0)[0] if socks else []
                except (OSError, ValueError):
                    ready = []
                if not ready:
                    return
                for sock in ready:
                    self._read(socks[sock], sock)

    def _read(self, rank: int, sock: socket.socket) -> None:
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self._last_pong[rank] = time.monotonic()
            if FAREWELL in data:
                with self._lock:
                    self._farewells.add(rank)
            return
        with self._lock:
            self._deaths.setdefault(rank, time.monotonic())
        self._close(rank)

    def _ping_and_check(self) -> bool:
        """Ping everyone; diagnose and report peers silent too long. True when reported."""
        with self._io_lock:
            for rank, sock in list(self._conns.items()):
                try:
                    sock.send(b"ping\n")
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self._close(rank)
        if self._timeout_s <= 0:
            return False
        now = time.monotonic()
        silent = [r for r, t in self._last_pong.items() if now - t > self._timeout_s]
        if not silent:
            return False
        # Confirm with a fresh connection: it also tells a frozen process from a dead one
        # or an unreachable host.
        diagnoses = diagnose_peers([self._peers[r] for r in silent], timeout_s=1.0, left=self.farewells())
        if not diagnoses:
            for r in silent:
                self._last_pong[r] = time.monotonic()
            return False
        if diagnoses[0].failure_class == "network":
            # Every remote peer unreachable at once: the likelier fault is this rank's own
            # link (one cut, not several), unless the store still answers (own_link_cut);
            # blaming each peer in turn would name healthy ones.
            remote = [p for p in self._peers.values() if p.node != _own_node()]
            cut = own_link_cut(diagnose_peers(remote, timeout_s=1.0), remote)
            if cut is not None:
                diagnoses = [cut]
        self._report(diagnoses[0])
        return True


def _own_node() -> int:
    return int(os.environ.get(contract.NODE_ENV, os.environ.get("GROUP_RANK", "-1")))


def own_link_cut(diagnoses: list[Diagnosis], remote: list[PeerAddress],
                 store_reachable: Callable[[], bool | None] | None = None) -> Diagnosis | None:
    """This rank's own link, blamed as a ``network`` failure, when no peer on any other node
    is reachable, those peers live on at least two nodes (with one other node, either side's
    link may be the cut one: each blames the other), and this rank no longer reaches the
    rendezvous store either.

    A node whose link is cut reaches nothing beyond itself; the lone survivor of a majority
    outage (two of three nodes without power) reaches no peer either, but still reaches the
    store, which lives off the nodes (the controller's, behind the fabric's gateway): then
    the silent nodes are the fault, not this one, and None lets the caller blame them.
    ``store_reachable``: None (the default) asks ``rendezvous_reachable``; a callable that
    returns None (the store's address is unknown) keeps the old reading."""
    unreachable = {d.rank for d in diagnoses if d.failure_class == "network"}
    nodes = {p.node for p in remote}
    if len(nodes) < 2 or any(p.rank not in unreachable for p in remote):
        return None
    if (store_reachable or rendezvous_reachable)():
        return None
    rank = int(os.environ.get("RANK", "-1"))
    return Diagnosis(rank, "network", f"rank {rank} reaches none of its peers on {len(nodes)} "
                     "other nodes nor the rendezvous store: its own node is cut off")


def rendezvous_endpoint() -> tuple[str, int] | None:
    """The rendezvous store's (host, port) from ``RDZV_ENDPOINT_ENV``; None when the launcher
    does not export it."""
    host, _, port = os.environ.get(contract.RDZV_ENDPOINT_ENV, "").rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def rendezvous_reachable(timeout_s: float = 1.0) -> bool | None:
    """Whether this node still reaches the rendezvous store (``RDZV_ENDPOINT_ENV``); None when
    the address is unknown (a launcher that does not export it). A refused connection counts
    as reached: the refusal came back over the link."""
    endpoint = rendezvous_endpoint()
    if endpoint is None:
        return None
    try:
        socket.create_connection(endpoint, timeout=timeout_s).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return True


class TerminationGuard:
    """Acts on SIGTERM at once, even while the main thread is blocked inside a collective.

    torchrun stops a worker group with SIGTERM. Python runs a signal handler only when the
    main thread gets back to the interpreter, which a rank blocked in gloo never does; the
    C-level handler still writes the signal number to the wakeup fd, and this thread reads
    it and calls ``on_term`` (which is expected to exit the process).
    """

    def __init__(self, on_term: Callable[[int], None]) -> None:
        import signal

        self._on_term = on_term
        self._read, write = socket.socketpair()
        write.setblocking(False)
        self._write = write  # kept alive: the wakeup fd must stay open
        signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
        # A Python-level handler installs the C handler that feeds the wakeup fd; the work
        # itself is done on the guard thread, not here.
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        threading.Thread(target=self._run, name="sigterm-guard", daemon=True).start()

    def _run(self) -> None:
        import signal

        while True:
            try:
                data = self._read.recv(64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                self._on_term(signal.SIGTERM)
                return
