"""The ``netns`` backend and network faults without touching the machine: names that fit
Linux's limits, addresses that stay in 198.18.0.0/15 and avoid subnets already in use, the
agent command, ownership read back from interface aliases, the rules each partition shape
writes, and a clear preflight line when a capability is missing."""

from __future__ import annotations

import ipaddress
import subprocess
from typing import Any

import pytest

from chaos.cluster import lookup_backend
from chaos.cluster.base import InjectionContext, RunSpec
from chaos.cluster.capabilities import Fabric, PacketFilter
from chaos.cluster.netns import NetnsCluster
from chaos.faults.base import lookup
from chaos.model.scenario import Topology
from chaos.model.targets import ResolvedTarget
from chaos.net import fabric
from chaos.util.procs import controller_tag
from chaos.workload.torchrun import TorchrunPerNode

RUN_ID = "trainchaos-0123456789"


def test_every_name_fits_the_interface_limit_and_carries_the_prefix() -> None:
    assert fabric.short_id(RUN_ID) == "01234567"
    names = [fabric.bridge_name(RUN_ID), *fabric.fabric_names(RUN_ID, 11)]
    assert all(n.startswith("tc-01234567-") and len(n) <= 15 for n in names), names
    assert fabric.node_namespace(RUN_ID, 3) == "tc-01234567-n3"
    # A run id of another shape still gets 8 hex digits.
    assert len(fabric.short_id("my-own-run")) == 8


def test_subnet_is_in_the_benchmarking_range_and_avoids_subnets_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    first = fabric.pick_subnet(RUN_ID)
    assert first.subnet_of(ipaddress.ip_network("198.18.0.0/15")) and first.prefixlen == 24
    monkeypatch.setattr(fabric, "_root_addresses", lambda: {first})
    second = fabric.pick_subnet(RUN_ID)
    assert second != first and second.subnet_of(ipaddress.ip_network("198.18.0.0/15"))


def test_subnet_routed_to_another_host_counts_as_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller of routed docker hosts routes their containers' subnets: a run here that
    took one of them would shadow a host's containers."""
    first = fabric.pick_subnet(RUN_ID)
    outputs = {"addr": "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n",
               "route": f"default via 192.0.2.1 dev eth0\n{first} via 198.18.200.10 dev tc-x-fab\n"}

    def fake_ip(*args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["ip", *args], 0, outputs[args[2] if args[0] == "-o" else args[1]], "")

    monkeypatch.setattr(fabric, "ip", fake_ip)
    assert first in fabric._root_addresses()
    assert fabric.pick_subnet(RUN_ID) != first


def test_agent_runs_in_its_namespace_against_the_bridge_store_with_gloo_on_its_link(
        tmp_path: Any) -> None:
    assert lookup_backend("netns") is NetnsCluster
    spec = RunSpec(run_id=RUN_ID, run_dir=str(tmp_path), topology=Topology(nodes=2, ranks_per_node=1),
                   worker_argv=["-m", "harness"], launcher=TorchrunPerNode(("-m", "harness")))
    cluster = NetnsCluster(spec, resources=None)  # type: ignore[arg-type]
    cluster.subnet = ipaddress.ip_network("198.18.5.0/24")
    cluster.gateway, cluster.rdzv_port = "198.18.5.1", 4242
    argv = cluster.agent_command(1)
    assert argv[:4] == ["ip", "netns", "exec", "tc-01234567-n1"]
    assert argv[argv.index("--rdzv-endpoint") + 1] == "198.18.5.1:4242"
    assert argv[argv.index("--local-addr") + 1] == "198.18.5.11"
    env = cluster.node_env(1)
    assert env["TRAINCHAOS_NODE_ADDR"] == "198.18.5.11"
    assert env["GLOO_SOCKET_IFNAME"] == "tc-01234567-p1"


def test_owner_and_liveness_come_from_the_alias() -> None:
    live = f"trainchaos run={RUN_ID} controller={controller_tag()}"
    assert fabric.alias_owner(live) == (RUN_ID, True)
    assert fabric.alias_owner(f"trainchaos run={RUN_ID} controller=1:0") == (RUN_ID, False)
    assert fabric.alias_owner("") == (None, False)


def test_missing_capability_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fabric.shutil, "which", lambda cmd: f"/usr/sbin/{cmd}")
    denied = subprocess.CompletedProcess([], 1, "", "mount --make-shared /run/netns failed: Operation not permitted")
    calls: list[tuple[str, ...]] = []

    def fake_ip(*args: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return denied

    monkeypatch.setattr(fabric, "ip", fake_ip)
    lines = NetnsCluster.preflight(None)  # type: ignore[arg-type]
    assert len(lines) == 1 and "CAP_NET_ADMIN is missing" in lines[0] and "Operation not permitted" in lines[0]
    assert calls == [("netns", "add", calls[0][2])] and calls[0][2].startswith("tc-preflight-")
    monkeypatch.setattr(fabric.shutil, "which", lambda cmd: None if cmd == "nft" else "/usr/sbin/ip")
    monkeypatch.setattr(fabric, "ip", lambda *a, **k: subprocess.CompletedProcess([], 0, "", ""))
    lines = NetnsCluster.preflight(None)  # type: ignore[arg-type]
    assert lines == ["netns: the 'nft' command is not installed (Debian: apt-get install nftables)"]


class _Fabric:
    name = "netns"
    capabilities = (Fabric, PacketFilter)

    def gateway_address(self) -> str:
        return "198.18.5.1"

    rendezvous_address = gateway_address

    def __init__(self, nodes: int) -> None:
        self.topology = Topology(nodes=nodes, ranks_per_node=1)
        self.lost: list[int] = []

    def namespace(self, node: int) -> str:
        return f"ns{node}"

    node_netns = namespace

    def node_interface(self, node: int) -> str:
        return f"p{node}"

    def node_address(self, node: int) -> str:
        return f"198.18.5.{10 + node}"

    def mark_lost(self, node: int) -> None:
        self.lost.append(node)


def _rules(monkeypatch: pytest.MonkeyPatch, nodes: int, target: tuple[int, ...], **params: Any
           ) -> tuple[dict[str, list[str]], _Fabric]:
    from chaos.net import nft

    written: dict[str, list[str]] = {}
    monkeypatch.setattr(nft, "add_input_drops", lambda ns, table, rules: written.setdefault(ns, []).extend(rules))
    cls = lookup("partition")
    fault = cls(fault_id="f0-partition", target=ResolvedTarget(nodes=target),
                params=cls.params_model.model_validate(params).model_dump())
    cluster = _Fabric(nodes)
    fault.inject(InjectionContext("/nonexistent", cluster, None))  # type: ignore[arg-type]
    return written, cluster


def test_isolate_drops_at_the_node_and_from_it_everywhere_else(monkeypatch: pytest.MonkeyPatch) -> None:
    rules, cluster = _rules(monkeypatch, 3, (2,), shape="isolate")
    assert rules == {"ns2": ["meta nfproto { ipv4, ipv6 }"], "ns0": ["ip saddr { 198.18.5.12 }"],
                     "ns1": ["ip saddr { 198.18.5.12 }"]}
    assert cluster.lost == [2]


def test_split_keeps_the_store_with_the_majority(monkeypatch: pytest.MonkeyPatch) -> None:
    rules, cluster = _rules(monkeypatch, 3, (2,), shape="split", groups=[[0, 1], [2]])
    assert rules["ns0"] == ["ip saddr { 198.18.5.12 }"]
    assert rules["ns2"] == ["ip saddr { 198.18.5.10, 198.18.5.11 }", "ip saddr 198.18.5.1"]
    assert cluster.lost == [2]


def test_a_container_partition_names_each_namespace_for_the_fault_and_forgets_it_on_revert(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docker hands out a container's init pid: the fault names that namespace for itself (two
    faults on one node never share a name) and its record lets the journal undo both."""
    from types import SimpleNamespace

    from chaos.net import nft

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(nft, "attach_namespace", lambda name, pid: calls.append(("attach", name, pid)))
    monkeypatch.setattr(nft, "add_input_drops", lambda ns, table, rules: calls.append(("drops", ns, *rules)))
    monkeypatch.setattr(nft, "delete_table", lambda ns, table: calls.append(("delete", ns)))
    monkeypatch.setattr(nft, "forget_namespace", lambda name: calls.append(("forget", name)))

    class _Containers(_Fabric):
        name = "docker"
        capabilities = (PacketFilter,)
        spec = SimpleNamespace(run_id="run-1")

        def node_netns(self, node: int) -> int:  # type: ignore[override]
            return 4000 + node

    cls = lookup("partition")
    records = []
    for fault_id in ("f0-partition", "f1-partition"):
        fault = cls(fault_id=fault_id, target=ResolvedTarget(nodes=(1,)),
                    params=cls.params_model.model_validate({"shape": "split", "duration_s": 5}).model_dump())
        records.append(fault.inject(InjectionContext("/nonexistent", _Containers(2), None)))  # type: ignore[arg-type]
    names = [r["attached"] for r in records]
    assert len({n for pair in names for n in pair}) == 4, names  # one name per node and fault
    assert [c[2] for c in calls if c[0] == "attach"] == [4000, 4001, 4000, 4001]
    assert ("drops", names[0][0], "ip saddr { 198.18.5.11 }") in calls
    calls.clear()
    cls.revert_record(records[0])
    assert calls == [("delete", names[0][0]), ("delete", names[0][1]),
                     ("forget", names[0][0]), ("forget", names[0][1])]


def test_one_way_drops_only_at_the_receiving_end(monkeypatch: pytest.MonkeyPatch) -> None:
    rules, cluster = _rules(monkeypatch, 2, (0,), shape="one_way", links=[[0, 1]], duration_s=5)
    assert rules == {"ns1": ["ip saddr 198.18.5.10"]}
    assert cluster.lost == []


def test_a_rank_that_reaches_no_remote_peer_blames_its_own_link(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.health import Diagnosis, PeerAddress, own_link_cut

    monkeypatch.setenv("RANK", "2")
    peers = [PeerAddress(0, "198.18.5.10", 1, 10, 0), PeerAddress(1, "198.18.5.11", 1, 11, 1)]
    unreachable = [Diagnosis(0, "network", "x"), Diagnosis(1, "network", "x")]
    cut = own_link_cut(unreachable, peers, store_reachable=lambda: False)
    assert cut is not None and cut.rank == 2 and cut.failure_class == "network"
    # The store's address unknown (a launcher that does not export it): the old reading.
    assert own_link_cut(unreachable, peers, store_reachable=lambda: None) is not None
    # One remote peer still answers: that one peer is the suspect, not this rank.
    assert own_link_cut(unreachable[:1], peers, store_reachable=lambda: False) is None
    # A single other node: either side's link may be the cut one; no self-blame.
    assert own_link_cut(unreachable[:1], peers[:1], store_reachable=lambda: False) is None
    # The lone survivor of a majority outage still reaches the store: its link is up, the
    # silent nodes are the fault (issue 23: a 2-of-3 power outage on netns blamed rank 0).
    assert own_link_cut(unreachable, peers, store_reachable=lambda: True) is None


def test_the_store_counts_as_reached_when_it_answers_or_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from chaos import contract
    from harness.health import rendezvous_reachable

    monkeypatch.delenv(contract.RDZV_ENDPOINT_ENV, raising=False)
    assert rendezvous_reachable() is None
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        monkeypatch.setenv(contract.RDZV_ENDPOINT_ENV, f"127.0.0.1:{port}")
        assert rendezvous_reachable() is True
    # Nothing listens there any more: refused, so the link works.
    assert rendezvous_reachable() is True
    # Packets dropped on the way (a cut link): the connect times out.
    def dropped(address: tuple[str, int], timeout: float) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", dropped)
    assert rendezvous_reachable(timeout_s=0.2) is False
