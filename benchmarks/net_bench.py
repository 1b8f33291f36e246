"""Emulated-fabric figures of the ``netns`` backend: medians over repeats, each with its
reference measured in the same run.

    python benchmarks/net_bench.py [--repeats 3] [--out reports/bench]

1. Clean link throughput between two nodes' namespaces (one TCP stream, 2 s), against the
   same stream over loopback in this namespace (goal: >= 1 Gbit/s).
2. Step time of a 2 nodes x 1 rank harness job on the clean ``netns`` fabric over the same
   job on ``local`` loopback, runs alternating (goal: <= 1.1).

Needs CAP_NET_ADMIN (root); without it, says so and exits 0 (nothing to measure). Timings
on a shared machine are noisy: every figure is a median, ratios compare the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from chaos.cluster.netns import FABRIC_MTU
from chaos.cluster.resources import RunResources
from chaos.events import read_events
from chaos.net import fabric
from chaos.run import run_scenario_once
from chaos.scenario import parse_scenario

_SERVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.perf_counter()
    n += len(b)
print(n * 8 / (time.perf_counter() - t0) / 1e9, flush=True)
"""
_CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); buf = b"x" * (1 << 20)
end = time.perf_counter() + float(sys.argv[3])
while time.perf_counter() < end: c.sendall(buf)
c.close()
"""


def _stream_gbit(server_ns: str | None, client_ns: str | None, host: str, seconds: float = 2.0) -> float:
    port = 40000 + os.getpid() % 20000
    wrap = lambda ns: ["ip", "netns", "exec", ns] if ns else []  # noqa: E731
    server = subprocess.Popen([*wrap(server_ns), sys.executable, "-c", _SERVER, host, str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        subprocess.run([*wrap(client_ns), sys.executable, "-c", _CLIENT, host, str(port), str(seconds)],
                       check=True, timeout=seconds + 30)
        return float(server.stdout.readline())
    finally:
        server.kill()
        server.wait()


def bench_throughput(repeats: int, workdir: str) -> dict:
    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    resources = RunResources(run_id, os.path.join(workdir, "fabric"))
    try:
        subnet = fabric.pick_subnet(run_id)
        hosts = list(subnet.hosts())
        bridge = fabric.bridge_name(run_id)
        resources.acquire("bridge", {"name": bridge, "address": f"{hosts[0]}/24"})
        for node in (0, 1):
            ns = fabric.node_namespace(run_id, node)
            resources.acquire("netns", {"name": ns})
            h, p = fabric.fabric_names(run_id, node)
            resources.acquire("veth", {"name": h, "peer": p, "netns": ns, "bridge": bridge,
                                       "address": f"{subnet.network_address + 10 + node}/24", "mtu": FABRIC_MTU})
        n0, n1 = (fabric.node_namespace(run_id, n) for n in (0, 1))
        fabric_gbit, loop_gbit = [], []
        for _ in range(repeats):
            fabric_gbit.append(_stream_gbit(n1, n0, str(subnet.network_address + 11)))
            loop_gbit.append(_stream_gbit(None, None, "127.0.0.1"))
    finally:
        failures = resources.release_all()
        assert not failures, failures
    fab, loop = statistics.median(fabric_gbit), statistics.median(loop_gbit)
    return {"clean_link_gbit_s": round(fab, 2), "loopback_gbit_s": round(loop, 2),
            "link_over_loopback": round(fab / loop, 3), "goal_gbit_s": 1.0, "met": fab >= 1.0,
            "samples": {"fabric": fabric_gbit, "loopback": loop_gbit}}


def _step_time(backend: str, out: str, index: int) -> float:
    data = {"name": f"steps-{backend}", "seed": 1, "backend": backend,
            "workload": {"harness": {"model": {"name": "mlp"}, "steps": 150,
                                     "checkpoint": {"every_steps": 1000}}},
            "topology": {"nodes": 2, "ranks_per_node": 1}, "timeout_s": 180}
    run_dir = os.path.join(out, f"steps-{backend}-{index}")
    journal = run_scenario_once(parse_scenario(data, f"<bench:{backend}>"), run_dir, 1, with_faults=False)
    assert journal["status"] == "completed", journal["error"]
    steps = [e for e in read_events(os.path.join(run_dir, "events"))
             if e["src"] == "rank-0" and e["kind"] == "step_end"]
    # The first steps carry start-up (page faults, the first collectives' connects).
    gaps = [b["t"] - a["t"] for a, b in zip(steps[10:], steps[11:], strict=False)]
    return statistics.median(gaps)


def bench_step_time(repeats: int, workdir: str) -> dict:
    local, netns = [], []
    for i in range(repeats):
        local.append(_step_time("local", workdir, i))
        netns.append(_step_time("netns", workdir, i))
    lo, ns = statistics.median(local), statistics.median(netns)
    return {"local_step_ms": round(lo * 1000, 3), "netns_step_ms": round(ns * 1000, 3),
            "netns_over_local": round(ns / lo, 3), "goal": 1.1, "met": ns / lo <= 1.1,
            "samples_ms": {"local": [round(x * 1000, 3) for x in local],
                           "netns": [round(x * 1000, 3) for x in netns]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    missing = fabric.missing_capabilities()
    if missing:
        print("net_bench skipped: " + "; ".join(missing))
        return
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="trainchaos-netbench-")
    os.environ.setdefault("TRAINCHAOS_STATE_DIR", os.path.join(workdir, "state"))
    t0 = time.monotonic()
    try:
        results = {"throughput": bench_throughput(args.repeats, workdir),
                   "step_time": bench_step_time(args.repeats, workdir)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["wall_s"] = round(time.monotonic() - t0, 1)
    path = os.path.join(args.out, "net_bench.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    tp, st = results["throughput"], results["step_time"]
    print(f"clean link throughput: {tp['clean_link_gbit_s']} Gbit/s (loopback {tp['loopback_gbit_s']}; "
          f"goal >= 1) {'met' if tp['met'] else 'MISSED'}")
    print(f"step time netns/local: {st['netns_over_local']} ({st['netns_step_ms']} ms / "
          f"{st['local_step_ms']} ms; goal <= 1.1) {'met' if st['met'] else 'MISSED'}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
