"""Process-group set-up that never hangs after an elastic restart, and peer discovery.

torch 2.13 with a shared agent store: after torchrun restarts the group, new workers can read
the previous round's gloo addresses from the store and hang in ``init_process_group``. Two
ways out, both used:

* trainchaos launches agents with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: worker rank 0
  then hosts a brand-new store on a fresh port every round, so no stale key can exist.
* when the harness runs under a plain torchrun (shared agent store), the group is built on
  that store wrapped in a ``PrefixStore`` keyed by the restart count.

Every blocking call gets a timeout.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from chaos import contract
from harness.health import PeerAddress

__all__ = ["DistEnv", "GradientGather", "completed_on", "deterministic_allreduce_hook", "exchange_peers", "init_process_group"]

_FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# gloo's own default: what a job that never set a timeout gets.
_GLOO_DEFAULT_TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    node: int
    restart_count: int

    @classmethod
    def from_env(cls) -> DistEnv:
        env = os.environ
        return cls(
            rank=int(env.get("RANK", "0")),
            world_size=int(env.get("WORLD_SIZE", "1")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            node=int(env.get(contract.NODE_ENV, env.get("GROUP_RANK", "0"))),
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )


def init_process_group(env: DistEnv, timeout_s: float, store_timeout_s: float = 0.0) -> dist.Store:
    """Create the gloo group; returns the store the group was built on. ``store_timeout_s``
    bounds each store call (0: the collective timeout, at most 60 s)."""
    timeout = timedelta(seconds=timeout_s) if timeout_s > 0 else _GLOO_DEFAULT_TIMEOUT
    # Store operations (and so init) get a bounded timeout even when collectives use gloo's
    # default: a missing peer at start-up must fail the round, not block it.
    store_timeout = timedelta(seconds=store_timeout_s if store_timeout_s > 0
                              else min(timeout.total_seconds(), 60.0))
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        base = dist.TCPStore(addr, port, env.world_size, is_master=False, timeout=store_timeout)
        store: dist.Store = dist.PrefixStore(f"trainchaos/attempt-{env.restart_count}/", base)
    else:
        # Rank 0 hosts the round's store. TCPStore binds every interface when left to itself;
        # a socket bound to the node's own address keeps it off the user's real networks.
        listen_fd = bound_listen_fd(node_address(), port) if env.rank == 0 else None
        listen: dict[str, Any] = {"master_listen_fd": listen_fd} if listen_fd is not None else {}
        store = dist.TCPStore(
            addr, port, env.world_size, is_master=env.rank == 0, timeout=store_timeout,
            wait_for_workers=False, **listen,
        )
    # gloo's own listener on the node's address too, not on whatever the hostname resolves to.
    # _Options, not the stubs' Options: only the private class takes _devices and _timeout.
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # missing from torch's stubs
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=node_address())]
    options._timeout = timeout
    dist.init_process_group(
        "gloo", store=store, rank=env.rank, world_size=env.world_size, timeout=timeout,
        pg_options=options,
    )
    return store


def bound_listen_fd(host: str, port: int) -> int:
    """A listening TCP socket on ``host:port`` handed over as a file descriptor (TCPStore's
    ``master_listen_fd`` takes ownership of it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock.detach()


def node_address() -> str:
    """The address peers reach this rank on: the node's own, where the backend set one."""
    return os.environ.get(contract.NODE_ADDR_ENV) or "127.0.0.1"


def exchange_peers(store: dist.Store, env: DistEnv, liveness_port: int) -> list[PeerAddress]:
    """Publish this rank's liveness endpoint; return every other rank's."""
    host = node_address()
    if host == "localhost":
        host = socket.gethostbyname(host)
    store.set(f"trainchaos/liveness/{env.rank}", f"{host}:{liveness_port}:{os.getpid()}:{env.node}")
    peers = []
    for rank in range(env.world_size):
        if rank == env.rank:
            continue
        host_, port, pid, node = store.get(f"trainchaos/liveness/{rank}").decode().split(":")
        peers.append(PeerAddress(rank=rank, host=host_, port=int(port), pid=int(pid), node=int(node)))
    return peers


class GradientGather:
    """What the gradient all-gather of one backward carried, kept until the next backward
    replaces it; pass one as ``deterministic_allreduce_hook``'s state.

    - every rank's own gradients, before the average (``local_norms``): they say whose
      backward went wrong where the averaged gradient cannot (a flipped weight on one rank
      can leave its loss finite and still fill its gradients with NaN, which the average
      then spreads to every replica);
    - every rank's evidence row (``rows``): a row handed over before the backward
      (``send``) rides on the step's last gradient bucket, so the corruption detectors'
      exchange (harness.sdc) costs no collective, no round trip of its own;
    - the norm of the averaged gradient (``mean_norm``), identical on every rank, taken
      while the average is made (``track_norm``).
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.track_norm = False
        self.seconds = 0.0
        """Time spent on the averaged gradient's norm (a detector's cost)."""
        self._parts: dict[int, list[torch.Tensor]] = {}
        self._norms: dict[int, float] = {}
        self._outgoing: Callable[[], torch.Tensor] | None = None
        self.rows: list[torch.Tensor] | None = None
        """Every rank's row (float64) of the last backward; None when none travelled."""

    def send(self, row: Callable[[], torch.Tensor] | None) -> None:
        """The row (built when the last bucket leaves, float64) to ride on the next backward's
        gather. Every rank must send one, or none: the gathered sizes must agree."""
        self._outgoing = row

    def keep(self, bucket_index: int, parts: list[torch.Tensor]) -> None:
        if bucket_index == 0:
            # DDP launches its buckets in index order, and rebuilds them (fewer, other
            # indices) after the first iteration: bucket 0 starts a new backward.
            self._parts.clear()
            self._norms.clear()
            self.rows = None
        self._parts[bucket_index] = parts

    def _take_outgoing(self) -> torch.Tensor | None:
        row, self._outgoing = self._outgoing, None
        return row() if row is not None else None

    def _averaged(self, bucket_index: int, total: torch.Tensor, rows: list[torch.Tensor] | None) -> None:
        if self.track_norm:
            t0 = time.perf_counter()
            self._norms[bucket_index] = float(torch.linalg.vector_norm(total))
            self.seconds += time.perf_counter() - t0
        if rows is not None:
            self.rows = rows

    def mean_norm(self) -> float | None:
        """The 2-norm of the averaged gradient (as ``torch.nn.utils.get_total_norm`` takes
        it: over the buckets' norms); None when not tracked."""
        if not self._norms or len(self._norms) != len(self._parts):
            return None
        # The buckets' norms combined in Python (a stack and a norm of two numbers cost more
        # dispatches than the arithmetic), overflowing where get_total_norm's float32 sum of
        # squares does: a norm past float32's range is inf there, and a non-finite norm is
        # what the NaN/Inf guard judges. NaN stays NaN.
        squares = math.fsum(norm * norm for norm in self._norms.values())
        return math.sqrt(squares) if math.isnan(squares) or squares <= _FLOAT32_MAX else math.inf

    def local_norms(self) -> list[float] | None:
        """Each rank's local gradient 2-norm (inf or nan where its gradients are not finite
        or overflow, as ``torch.nn.utils.get_total_norm`` would say); None before a backward.
        The same list on every rank: every rank gathered the same parts."""
        if not self._parts:
            return None
        per_rank = zip(*(self._parts[i] for i in sorted(self._parts)), strict=True)
        return [float(torch.nn.utils.get_total_norm(list(parts))) for parts in per_rank]


def deterministic_allreduce_hook(state, bucket):  # noqa: ANN001
    # No annotations: DDP checks them at run time, and postponed (string) ones fail its check.
    """DDP comm hook: average gradients summing in rank order, whatever the bucket layout.

    gloo's ring allreduce adds each element in an order that depends on where it sits in the
    bucket, and DDP rebuilds its buckets after the first iteration. A run resumed from a
    checkpoint has its "first iteration" at another step than a fault-free run, so with
    4+ ranks plain allreduce makes the two diverge in the last bit. Gathering every rank's
    bucket and summing 0..W-1 locally is exact to reproduce; it moves W times the bytes,
    which is nothing for this model on one machine. ``state``: the process group (None: the
    default one), or a ``GradientGather`` that keeps what was gathered, and whose row rides
    on the last bucket (its bytes appended, reinterpreted: the gather copies bytes).
    """
    keeper = state if isinstance(state, GradientGather) else None
    group = keeper.group if keeper is not None else state
    group = group if group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    device = bucket.buffer().device
    # A CUDA rank's bucket is gathered through the host (harness.device): gloo's CUDA
    # collectives would stage it anyway, and every rank's evidence row, the sum in rank order
    # and the kept parts then stay on the host, the same code for CPU and CUDA ranks.
    tensor = bucket.buffer() if device.type == "cpu" else bucket.buffer().to("cpu")
    index = bucket.index()
    row = keeper._take_outgoing() if keeper is not None and bucket.is_last() else None
    size = tensor.numel()
    send = tensor if row is None else torch.cat([tensor, row.reshape(-1).view(tensor.dtype)])
    gathered = [torch.empty_like(send) for _ in range(world)]
    work = dist.all_gather(gathered, send, group=group, async_op=True)
    if keeper is not None:
        keeper.keep(index, [part[:size] for part in gathered] if row is not None else gathered)

    def sum_in_rank_order(fut):
        # A callback of ``then`` runs on a failed future too, and what it returns completes the
        # child: without this wait a gather that failed (a peer killed mid-step) averaged what
        # the buffers held, and the step went on with garbage gradients and evidence rows
        # (a fingerprint "mismatch" blamed on no one where a peer had crashed). Raising here
        # fails the backward, as a failed all-reduce does.
        fut.wait()
        total = gathered[0][:size].clone()
        for part in gathered[1:]:
            total.add_(part[:size])
        total.div_(world)
        if keeper is not None:
            # clone: a row's bytes start wherever the bucket ends, maybe not 8-byte aligned
            rows = [part[size:].clone().view(torch.float64) for part in gathered] if row is not None else None
            keeper._averaged(index, total, rows)
        return total

    if device.type == "cpu":
        return work.get_future().then(sum_in_rank_order)
    return completed_on(device, sum_in_rank_order(work.get_future()))


def completed_on(device: torch.device, host: torch.Tensor) -> torch.futures.Future:
    """A completed future holding ``host`` copied to ``device``: what DDP takes from a comm
    hook of a CUDA bucket (a future chained on gloo's host work may hold host tensors only).
    The gather is waited for on the autograd thread: the backward of a CUDA rank does not
    overlap its gradient exchange, which costs a few ms a step on a model this small."""
    future: torch.futures.Future = torch.futures.Future(devices=[device] if device.type == "cuda" else None)
    future.set_result(host.to(device))
    return future
