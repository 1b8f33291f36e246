"""The DCP example's training function (examples/dcp/train.py) wrapped by NVIDIA's in-process
restart (``nvidia_resiliency_ext.inprocess.Wrapper``), on CPU with gloo.

    torchrun --nproc-per-node 2 examples/nvrx_inprocess/train.py --steps 40 --ckpt-dir /tmp/ckpt

When the function raises on one rank, or a rank stops making progress, the wrapper aborts the
process group on every rank, raises its ``RankShouldRestart`` into each rank's function and
calls the function again, in the same process: it reloads the latest DCP checkpoint and trains
on. What it takes on CPU (found here, see docs/stacks.md):

- a fresh store for each iteration's process group: ``init_process_group`` on torchrun's
  store again after an abort blocks in gloo's rendezvous (it finds the previous iteration's
  keys), so every iteration gets a ``PrefixStore`` of its own, on the one store rank 0 hosts
  for the wrapper too (``store_port``);
- a short gloo timeout (``--pg-timeout``): ``AbortTorchDistributed`` aborts NCCL only; a rank
  blocked in a gloo collective waits for that timeout before the restart reaches it.

torchrun is the launcher: a killed rank's process is torchrun's to restart, not the wrapper's
(NVIDIA's usage guide says so); the wrapper restarts the survivors in place meanwhile, so a
lost rank costs two restarts (docs/stacks.md).

Its lines for trainchaos: ``chaos.adapters.nvrx`` (``iteration`` around the function,
``abort`` for the wrapper) and the DCP example's ``chaos.adapters.dcp``; ``--no-adapter``
leaves all of them out.
"""

# No ``from __future__ import annotations`` here: the wrapper finds the parameter to pass
# itself to by its annotation's class (inprocess.CallWrapper), which a string is not.

import argparse
import contextlib
import datetime
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist
from nvidia_resiliency_ext import inprocess

_DCP_EXAMPLE = Path(__file__).resolve().parents[1] / "dcp" / "train.py"


def _load_dcp_example() -> Any:
    spec = importlib.util.spec_from_file_location("dcp_example", _DCP_EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dcp_example = _load_dcp_example()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = dcp_example.parser()
    p.description = __doc__.split("\n\n")[0]
    p.set_defaults(pg_timeout=5.0)
    w = p.add_argument_group("inprocess.Wrapper")
    w.add_argument("--soft-timeout", type=float, default=10.0,
                   help="seconds without progress before the wrapper restarts every rank")
    w.add_argument("--hard-timeout", type=float, default=15.0,
                   help="seconds without progress before the rank's process is terminated")
    w.add_argument("--heartbeat-timeout", type=float, default=5.0,
                   help="seconds without a rank's heartbeat before it counts as gone")
    w.add_argument("--barrier-timeout", type=float, default=60.0)
    w.add_argument("--last-call-wait", type=float, default=0.1,
                   help="seconds the wrapper waits for other ranks' concurrent faults")
    w.add_argument("--monitor-interval", type=float, default=0.2,
                   help="seconds between checks of the monitor thread and process")
    w.add_argument("--max-iterations", type=int, default=5,
                   help="restarts in place before the wrapper gives up (the process exits)")
    w.add_argument("--monitor-log", default=None,
                   help="the monitor process's log file ({rank} is filled in); default: none")
    return p.parse_args(argv)


def seconds(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)


def store_port() -> int:
    """The port of the store rank 0 hosts for the wrapper and the iterations' process groups.

    MASTER_PORT where torchrun's agent keeps its store to itself (TORCHELASTIC_USE_AGENT_STORE
    is not "True", as under trainchaos): torchrun found that port free for worker rank 0 to
    host the job's store. Else the agent serves MASTER_PORT, and its store outlives a worker
    group (stale barrier keys), so the port above it, as in NVIDIA's examples. A fixed offset
    is a bet that the port is free: torchrun's free port comes from bind(0), which Linux
    gives odd, and connect() takes even ones first, so on a host with many connections
    MASTER_PORT+1 is in use now and then. Rank 0 then fails to host (EADDRINUSE), the
    wrapper restarts every rank on it, and a rank blocked connecting waits for the hard
    timeout (CI met it once; with every even port held it is every run). Hence one store,
    not NVIDIA's two at +1 and +2.
    """
    port = int(os.environ["MASTER_PORT"])
    return port + 1 if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" else port


def wrapped(args: argparse.Namespace) -> Any:
    """The training function, wrapped; its ``call_wrapper`` argument is filled by the wrapper."""
    ckpt = dcp_example.reporter(args.no_adapter)
    if args.no_adapter:
        iteration: Any = lambda call_wrapper: contextlib.nullcontext()  # noqa: E731
        abort: Any = inprocess.abort.AbortTorchDistributed()
    else:
        from chaos.adapters import nvrx as chaos_nvrx

        iteration, abort = chaos_nvrx.iteration, chaos_nvrx.abort()
    port = store_port()
    stores: list[dist.TCPStore] = []

    def iteration_store(n: int) -> dist.Store:
        # The wrapper's server (multi_tenant: one per port and process), hosted by the first
        # rank 0 for the whole process: a rank the wrapper renumbers later stays the client it
        # was. The wrapper's keys have no "iteration-" prefix.
        if not stores:
            stores.append(dist.TCPStore(os.environ["MASTER_ADDR"], port, int(os.environ["WORLD_SIZE"]),
                                        is_master=os.environ["RANK"] == "0", multi_tenant=True,
                                        wait_for_workers=False, use_libuv=True,
                                        timeout=seconds(args.barrier_timeout)))
        return dist.PrefixStore(f"iteration-{n}", stores[0])

    @inprocess.Wrapper(
        store_kwargs={"port": port, "multi_tenant": True, "timeout": seconds(args.barrier_timeout)},
        initialize=inprocess.initialize.RetryController(max_iterations=args.max_iterations),
        abort=abort,
        monitor_thread_interval=seconds(args.monitor_interval),
        monitor_process_interval=seconds(args.monitor_interval),
        progress_watchdog_interval=seconds(args.monitor_interval),
        heartbeat_interval=seconds(min(1.0, args.heartbeat_timeout / 3)),
        soft_timeout=seconds(args.soft_timeout),
        hard_timeout=seconds(args.hard_timeout),
        heartbeat_timeout=seconds(args.heartbeat_timeout),
        barrier_timeout=seconds(args.barrier_timeout),
        completion_timeout=seconds(args.barrier_timeout),
        last_call_wait=seconds(args.last_call_wait),
        termination_grace_time=seconds(1),
        monitor_process_logfile=os.path.abspath(args.monitor_log) if args.monitor_log else None,
    )
    def train(call_wrapper: inprocess.CallWrapper | None = None) -> str | None:
        assert call_wrapper is not None
        with iteration(call_wrapper):
            return dcp_example.train(args, ckpt, store=iteration_store(call_wrapper.iteration))

    return train


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # The wrapper logs through the nearest StreamHandler above its logger (its restarts and
    # their reasons); without one it warns and stays silent.
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    wrapped(args)()


if __name__ == "__main__":
    main()
