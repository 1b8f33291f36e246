"""Each network fault type on a real two-node fabric (namespaces, veth, bridge), measured
with real packets, then reverted to a clean fabric. No training job: the fabric is built
through the same run-scoped resources the ``netns`` backend uses, and the faults see a
stand-in backend that answers the questions they ask of it. Needs CAP_NET_ADMIN (root).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster.base import InjectionContext
from chaos.cluster.capabilities import Fabric, PacketFilter
from chaos.cluster.netns import FABRIC_MTU, NODE_HOST_OFFSET
from chaos.faults.base import lookup
from chaos.model.scenario import Topology
from chaos.model.targets import ResolvedTarget
from chaos.net import fabric
from chaos.runfiles.resources import RunResources

pytestmark = [pytest.mark.integration, pytest.mark.netns]

_UDP_RECV = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.2); n = 0; end = time.monotonic() + float(sys.argv[3]); print("ready", flush=True)
while time.monotonic() < end:
    try: s.recv(2048); n += 1
    except TimeoutError: pass
print(n, flush=True)
"""
_UDP_SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[3])):
    s.sendto(b"x" * 64, (sys.argv[1], int(sys.argv[2]))); time.sleep(float(sys.argv[4]))
"""
_TCP_RATE = """
import socket, sys, threading, time
srv = socket.socket(); srv.bind((sys.argv[1], 0)); srv.listen(1); port = srv.getsockname()[1]
def sink():
    c, _ = srv.accept()
    while c.recv(1 << 16): pass
threading.Thread(target=sink, daemon=True).start()
print(port, flush=True); sys.stdin.readline()
"""
_TCP_SEND = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); buf = b"x" * 65536; n = 0
t0 = time.perf_counter()
while time.perf_counter() - t0 < 2: c.sendall(buf); n += len(buf)
print(n * 8 / (time.perf_counter() - t0) / 1e6)
"""


@dataclass
class _Node:
    lost: bool = False


@dataclass
class StandInCluster:
    """What the network faults ask of a backend, for a bare fabric."""

    run_id: str
    subnet: Any
    topology: Topology = field(default_factory=lambda: Topology(nodes=2, ranks_per_node=1))
    nodes: dict[int, _Node] = field(default_factory=lambda: {0: _Node(), 1: _Node()})
    name: str = "netns"
    capabilities = (Fabric, PacketFilter)

    def namespace(self, node: int) -> str:
        return fabric.node_namespace(self.run_id, node)

    node_netns = namespace

    def node_interface(self, node: int) -> str:
        return fabric.fabric_names(self.run_id, node)[1]

    def host_interface(self, node: int) -> str:
        return fabric.fabric_names(self.run_id, node)[0]

    def node_address(self, node: int) -> str:
        return str(self.subnet.network_address + NODE_HOST_OFFSET + node)

    def gateway_address(self) -> str:
        return str(self.subnet.network_address + 1)

    rendezvous_address = gateway_address

    def mark_lost(self, node: int) -> None:
        self.nodes[node].lost = True


@pytest.fixture
def net(tmp_path: Path):  # noqa: ANN201
    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    resources = RunResources(run_id, str(tmp_path / "run"))
    subnet = fabric.pick_subnet(run_id)
    bridge = fabric.bridge_name(run_id)
    try:
        resources.acquire("bridge", {"name": bridge, "address": f"{subnet.network_address + 1}/24"})
        for node in (0, 1):
            ns = fabric.node_namespace(run_id, node)
            resources.acquire("netns", {"name": ns})
            h, p = fabric.fabric_names(run_id, node)
            resources.acquire("veth", {"name": h, "peer": p, "netns": ns, "bridge": bridge, "mtu": FABRIC_MTU,
                                       "address": f"{subnet.network_address + NODE_HOST_OFFSET + node}/24"})
        yield StandInCluster(run_id, subnet)
    finally:
        assert resources.release_all() == []
    tag = f"tc-{fabric.short_id(run_id)}-"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    listed += subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert tag not in listed


def _udp_delivered(cluster: StandInCluster, src: int, dst: int, count: int = 200, gap: float = 0.005) -> int:
    port = 47000 + uuid.uuid4().int % 10000
    recv = subprocess.Popen(["ip", "netns", "exec", cluster.namespace(dst), sys.executable, "-c", _UDP_RECV,
                             cluster.node_address(dst), str(port), str(count * gap + 1.5)],
                            stdout=subprocess.PIPE, text=True)
    assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", cluster.namespace(src), sys.executable, "-c", _UDP_SEND,
                    cluster.node_address(dst), str(port), str(count), str(gap)], check=True, timeout=60)
    out, _ = recv.communicate(timeout=60)
    return int(out.strip())


def _tcp_mbit(cluster: StandInCluster, src: int, dst: int) -> float:
    sink = subprocess.Popen(["ip", "netns", "exec", cluster.namespace(dst), sys.executable, "-c", _TCP_RATE,
                             cluster.node_address(dst)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = sink.stdout.readline().strip()
        out = subprocess.run(["ip", "netns", "exec", cluster.namespace(src), sys.executable, "-c", _TCP_SEND,
                              cluster.node_address(dst), port], capture_output=True, text=True, timeout=60, check=True)
        return float(out.stdout.strip())
    finally:
        sink.kill()
        sink.wait()


def _fault(type_name: str, nodes: tuple[int, ...], **params: Any):  # noqa: ANN202
    cls = lookup(type_name)
    full = cls.params_model.model_validate(params).model_dump()
    return cls(fault_id=f"f0-{type_name}", target=ResolvedTarget(nodes=nodes), params=full,
               target_spec={"nodes": list(nodes)})


def _ctx(cluster: StandInCluster) -> InjectionContext:
    class _Quiet:
        def emit(self, *a: Any, **k: Any) -> None:
            pass

    return InjectionContext("/nonexistent", cluster, _Quiet())  # type: ignore[arg-type]


def _clean(cluster: StandInCluster) -> None:
    for node in (0, 1):
        tables = subprocess.run(["ip", "netns", "exec", cluster.namespace(node), "nft", "list", "tables"],
                                capture_output=True, text=True).stdout
        assert "trainchaos" not in tables
        qd = subprocess.run(["ip", "netns", "exec", cluster.namespace(node), "tc", "qdisc", "show", "dev",
                             cluster.node_interface(node)], capture_output=True, text=True).stdout
        assert " tbf " not in qd


@pytest.mark.timeout(60)
def test_isolate_drops_both_directions_until_reverted(net: StandInCluster) -> None:
    assert _udp_delivered(net, 0, 1, count=50) == 50
    fault = _fault("partition", (1,), shape="isolate")
    ctx = _ctx(net)
    record = fault.inject(ctx)
    assert _udp_delivered(net, 0, 1, count=50) == 0
    assert _udp_delivered(net, 1, 0, count=50) == 0
    assert net.nodes[1].lost and not net.nodes[0].lost  # cut off for good: no duration
    fault.revert(ctx, record)
    _clean(net)
    assert _udp_delivered(net, 0, 1, count=50) == 50


@pytest.mark.timeout(60)
def test_one_way_link_drops_one_direction_only(net: StandInCluster) -> None:
    fault = _fault("partition", (0,), shape="one_way", links=[[0, 1]], duration_s=30)
    ctx = _ctx(net)
    record = fault.inject(ctx)
    assert _udp_delivered(net, 0, 1, count=50) == 0
    assert _udp_delivered(net, 1, 0, count=50) == 50
    assert ctx.scheduled_reverts, "a duration schedules the heal"
    fault.revert_record(record)  # what cleanup does, from the journal record alone
    _clean(net)
    assert _udp_delivered(net, 0, 1, count=50) == 50


@pytest.mark.timeout(60)
def test_packet_loss_drops_about_the_share_asked(net: StandInCluster) -> None:
    fault = _fault("packet_loss", (1,), percent=50)
    ctx = _ctx(net)
    record = fault.inject(ctx)
    got = _udp_delivered(net, 0, 1, count=400, gap=0.002)
    back = _udp_delivered(net, 1, 0, count=400, gap=0.002)
    fault.revert(ctx, record)
    _clean(net)
    # Binomial(400, 0.5): 5 sigma is +-50.
    assert 150 <= got <= 250 and 150 <= back <= 250, (got, back)


@pytest.mark.timeout(60)
def test_bandwidth_caps_the_rate_both_ways(net: StandInCluster) -> None:
    clean = _tcp_mbit(net, 0, 1)
    fault = _fault("bandwidth", (1,), rate_mbit=50)
    ctx = _ctx(net)
    record = fault.inject(ctx)
    to_node, from_node = _tcp_mbit(net, 0, 1), _tcp_mbit(net, 1, 0)
    fault.revert(ctx, record)
    _clean(net)
    assert clean > 500, clean
    assert 25 < to_node < 60 and 25 < from_node < 60, (to_node, from_node)


@pytest.mark.timeout(60)
def test_link_flap_takes_the_link_down_part_of_each_period(net: StandInCluster) -> None:
    fault = _fault("link_flap", (1,), period_s=0.6, down_s=0.3)
    ctx = _ctx(net)
    record = fault.inject(ctx)
    got = _udp_delivered(net, 0, 1, count=120, gap=0.025)  # 3 s of probes, 5 periods
    fault.revert(ctx, record)
    _clean(net)
    assert 25 <= got <= 95, got
    assert _udp_delivered(net, 0, 1, count=50) == 50
