"""Emulated-fabric figures of the ``netns`` backend: medians over repeats, each with its
reference measured in the same run.

    python benchmarks/net_bench.py [--repeats 3] [--out reports/bench]

1. Clean link throughput between two nodes' namespaces (one TCP stream, 2 s), against the
   same stream over loopback in this namespace (goal: >= 1 Gbit/s).
2. Step time of a 2 nodes x 1 rank harness job on the clean ``netns`` fabric over the same
   job on ``local`` loopback, runs alternating (goal: <= 1.1).
3. Round-trip time between two nodes with 20 ms injected each way by the link emulator (the
   ``latency`` fault's mechanism), UDP echo, median of 200 probes per repeat, against the
   clean link's RTT measured on the same fabric just before (goal: median within +-2 ms of
   40 ms).

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
from chaos.net import fabric, linkemu
from chaos.runfiles.events import read_events
from chaos.runfiles.resources import RunResources
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario

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


def _two_nodes(run_id: str, resources: RunResources):  # noqa: ANN202
    """Two node namespaces on a bridge, as the ``netns`` backend builds them; the subnet."""
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
    return subnet


def bench_throughput(repeats: int, workdir: str) -> dict:
    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    resources = RunResources(run_id, os.path.join(workdir, "fabric"))
    try:
        subnet = _two_nodes(run_id, resources)
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


_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 0))
print(s.getsockname()[1], flush=True); s.settimeout(float(sys.argv[2]))
try:
    while True:
        b, a = s.recvfrom(2048); s.sendto(b, a)
except TimeoutError:
    pass
"""
_PROBE = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); rtts = []
for i in range(int(sys.argv[3])):
    tag = str(i).encode(); t0 = time.perf_counter(); s.sendto(tag, (sys.argv[1], int(sys.argv[2])))
    while s.recv(2048) != tag:
        pass
    rtts.append((time.perf_counter() - t0) * 1000); time.sleep(0.005)
print(json.dumps(rtts))
"""


def _rtts_ms(server_ns: str, client_ns: str, host: str, probes: int) -> list[float]:
    echo = subprocess.Popen(["ip", "netns", "exec", server_ns, sys.executable, "-c", _ECHO, host, "5"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout is not None
        port = echo.stdout.readline().strip()
        out = subprocess.run(["ip", "netns", "exec", client_ns, sys.executable, "-c", _PROBE, host, port, str(probes)],
                             capture_output=True, text=True, check=True, timeout=probes + 30)
        return json.loads(out.stdout)
    finally:
        echo.kill()
        echo.wait()


def bench_rtt(repeats: int, workdir: str, delay_ms: float = 20.0, probes: int = 200) -> dict:
    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    resources = RunResources(run_id, os.path.join(workdir, "rtt-fabric"))
    short = fabric.short_id(run_id)
    clean, delayed = [], []
    try:
        subnet = _two_nodes(run_id, resources)
        ns = [fabric.node_namespace(run_id, n) for n in (0, 1)]
        addr = [str(subnet.network_address + 10 + n) for n in (0, 1)]
        resources.acquire("link_emulator", {
            "ports": [[n, ns[n], linkemu.tun_name(short, n), fabric.fabric_names(run_id, n)[1]] for n in (0, 1)],
            "mtu": FABRIC_MTU, "log": os.path.join(workdir, "link-emulator.log")})
        emulator = linkemu.LinkEmulatorClient(run_id)
        for _ in range(repeats):
            clean.append(statistics.median(_rtts_ms(ns[1], ns[0], addr[1], probes)))
            # What the latency fault does for the links 0 -> 1 and 1 -> 0.
            for a, b in ((0, 1), (1, 0)):
                emulator.request(op="set", node=a, dst=addr[b], delay_ms=delay_ms)
                linkemu.add_route(ns[a], addr[b], linkemu.tun_name(short, a), addr[a])
            delayed.append(statistics.median(_rtts_ms(ns[1], ns[0], addr[1], probes)))
            for a, b in ((0, 1), (1, 0)):
                linkemu.del_route(ns[a], addr[b], linkemu.tun_name(short, a))
                emulator.request(op="clear", node=a, dst=addr[b])
    finally:
        failures = resources.release_all()
        assert not failures, failures
    med, ref = statistics.median(delayed), statistics.median(clean)
    goal = 2 * delay_ms
    return {"injected_each_way_ms": delay_ms, "rtt_ms": round(med, 3), "clean_rtt_ms": round(ref, 3),
            "added_ms": round(med - ref, 3), "goal_ms": goal, "tolerance_ms": 2.0,
            "met": abs(med - goal) <= 2.0,
            "samples_ms": {"delayed": [round(x, 3) for x in delayed], "clean": [round(x, 3) for x in clean]}}


def _step_time(backend: str, out: str, index: int) -> float:
    data = {"name": f"steps-{backend}", "seed": 1, "backend": backend,
            "workload": {"harness": {"model": {"name": "mlp"}, "steps": 150,
                                     "checkpoint": {"every_steps": 1000}}},
            "topology": {"nodes": 2, "ranks_per_node": 1}, "timeout_s": 180}
    run_dir = os.path.join(out, f"steps-{backend}-{index}")
    journal = run_scenario_once(parse_scenario(data, f"<bench:{backend}>"), run_dir, 1, with_faults=False)
    assert journal.status == "completed", journal.error
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
                   "rtt": bench_rtt(args.repeats, workdir),
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
    rtt = results["rtt"]
    print(f"RTT with {rtt['injected_each_way_ms']:g} ms each way: median {rtt['rtt_ms']} ms (clean "
          f"{rtt['clean_rtt_ms']} ms; goal {rtt['goal_ms']:g} +- {rtt['tolerance_ms']:g} ms) "
          f"{'met' if rtt['met'] else 'MISSED'}")
    print(f"step time netns/local: {st['netns_over_local']} ({st['netns_step_ms']} ms / "
          f"{st['local_step_ms']} ms; goal <= 1.1) {'met' if st['met'] else 'MISSED'}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
