"""The ``latency`` fault and the link emulator's logic, without touching the machine: bad
parameters are located errors, the links a target names, the order inject and revert work
in (delay before route, route off before delay), the emulator's release times (FIFO,
reorder, seeded), and the network metrics (slowdown, heal)."""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster.base import InjectionContext
from chaos.cluster.capabilities import Fabric
from chaos.errors import EXIT_BAD_INPUT, ScenarioError, ToolError
from chaos.faults.base import lookup
from chaos.faults.network.latency import _directed_links
from chaos.faults.network.metrics import network_metrics, step_durations
from chaos.model.scenario import Topology
from chaos.model.targets import ResolvedTarget
from chaos.net import linkemu
from chaos.scenario.load import load_scenario

SCENARIO = """\
name: lat
workload: {{harness: {{model: {{name: mlp}}, steps: 50, global_batch: 24}}}}
topology: {{nodes: 3, ranks_per_node: 1}}
backend: netns
faults:
  - type: latency
    target: {{nodes: [0, 1]}}
    trigger: {{at_step: 10}}
    params: {params}
"""


def _load(tmp_path: Path, params: str) -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(params=params))
    return load_scenario(str(path))


@pytest.mark.parametrize(("params", "location", "fragment"), [
    ("{delay_ms: -5}", "faults[0].params.delay_ms", "must be between 0 and 60000"),
    ("{delay_ms: 10, jitter_ms: 20}", "faults[0].params.jitter_ms", "must not exceed delay_ms"),
    ("{delay_ms: 10, jitter_ms: -1}", "faults[0].params.jitter_ms", "0"),
    ("{jitter_ms: 1}", "faults[0].params.delay_ms", "required"),
])
def test_bad_latency_params_are_located_errors(tmp_path: Path, params: str, location: str, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        _load(tmp_path, params)
    assert info.value.exit_code == EXIT_BAD_INPUT
    text = str(info.value)
    assert len(info.value.issues) == 1, text
    assert location in text and fragment in text and "s.yaml" in text, text


def test_good_latency_params_load(tmp_path: Path) -> None:
    scenario = _load(tmp_path, "{delay_ms: 50, jitter_ms: 5, duration_s: 10}")
    assert scenario.faults[0].type == "latency"


class _Cluster:
    name = "netns"
    capabilities = (Fabric,)

    def __init__(self) -> None:
        self.topology = Topology(nodes=3, ranks_per_node=1)
        self.subnet = ipaddress.ip_network("198.18.7.0/24")
        self.calls: list[tuple[Any, ...]] = []

    def running_link_emulator(self) -> _Cluster:
        return self

    def request(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("emu", kw["op"], kw.get("node"), kw.get("dst"), kw.get("delay_ms")))
        return {"ok": True}

    def link_emulator(self) -> _Cluster:
        return self

    def namespace(self, n: int) -> str:
        return f"tc-00000000-n{n}"

    def node_interface(self, n: int) -> str:
        return f"tc-00000000-p{n}"

    def emulator_interface(self, n: int) -> str:
        return f"tc-00000000-e{n}"

    def node_address(self, n: int) -> str:
        return f"198.18.7.{10 + n}"


def _latency(nodes: tuple[int, ...], **params: Any) -> Any:
    cls = lookup("latency")
    return cls(fault_id="f0-latency", target=ResolvedTarget(nodes=nodes),
               params=cls.params_model.model_validate(params).model_dump(), seed=3)


def test_node_target_delays_both_directions_of_each_of_its_links_once() -> None:
    cluster = _Cluster()
    assert _directed_links(_latency((1,), delay_ms=5), cluster) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    every = _directed_links(_latency((0, 1, 2), delay_ms=5), cluster)
    assert len(every) == 6 and len(set(every)) == 6  # each directed link once, never twice


def test_inject_sets_the_delay_before_the_route_and_revert_undoes_in_reverse(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster()
    monkeypatch.setattr(linkemu, "add_route", lambda ns, dst, tun, src: cluster.calls.append(("route+", ns, dst, tun)))
    monkeypatch.setattr(linkemu, "del_route", lambda ns, dst, tun: cluster.calls.append(("route-", ns, dst, tun)))
    fault = _latency((2,), delay_ms=20)
    ctx = InjectionContext("/nonexistent", cluster, None)  # type: ignore[arg-type]
    record = fault.inject(ctx)
    assert record["links"] == [[0, 2], [1, 2], [2, 0], [2, 1]]
    first = cluster.calls[:2]
    assert first == [("emu", "set", 0, "198.18.7.12", 20.0), ("route+", "tc-00000000-n0", "198.18.7.12", "tc-00000000-e0")]
    cluster.calls.clear()
    fault.revert(ctx, record)
    kinds = [c[0] for c in cluster.calls]
    # Every route is gone before any delay is cleared: no packet reaches an emulator
    # that would pass it on undelayed while the fault is still meant to be on.
    assert kinds == ["route-"] * 4 + ["emu"] * 4
    assert {c[1] for c in cluster.calls if c[0] == "emu"} == {"clear"}


def test_fifo_link_never_reorders_and_reorder_link_does() -> None:
    fifo = linkemu._Link(delay_ms=10, jitter_ms=8, reorder=False, seed=1)
    times = [fifo.release_time(i * 0.001) for i in range(200)]
    assert times == sorted(times)
    loose = linkemu._Link(delay_ms=10, jitter_ms=8, reorder=True, seed=1)
    times = [loose.release_time(i * 0.001) for i in range(200)]
    assert times != sorted(times)
    assert all(0.002 - 1e-9 <= t - i * 0.001 <= 0.018 + 1e-9 for i, t in enumerate(times))


def test_delays_are_seeded() -> None:
    a = [linkemu._Link(10, 5, True, seed=9).release_time(0.0) for _ in range(3)]
    assert len(set(a)) == 1
    b = linkemu._Link(10, 5, True, seed=10).release_time(0.0)
    assert b != a[0]


def test_emulator_refuses_devices_not_named_by_the_project() -> None:
    with pytest.raises(ToolError, match="not named tc-"):
        linkemu.LinkEmulator.create("trainchaos-x", {"ports": [[0, "tc-1-n0", "eth0", "tc-1-p0"]]})
    assert linkemu.tun_name("0123abcd", 12) == "tc-0123abcd-e12" and len(linkemu.tun_name("0123abcd", 99)) <= 15


class _FM:
    def __init__(self, t_inject: float, t_revert: float | None) -> None:
        self.t_inject, self.t_revert = t_inject, t_revert
        self.baseline_step_s = self.fault_step_s = self.slowdown = self.heal_s = None


def _steps(times: list[float], src: str = "rank-0", inc: int = 0) -> list[dict[str, Any]]:
    return [{"t": t, "src": src, "kind": "step_end", "step": i + 1, "incarnation": inc} for i, t in enumerate(times)]


def test_slowdown_is_the_median_step_under_the_fault_over_the_one_before() -> None:
    # 0.1 s steps until t=1, 0.4 s steps from the fault (t=1) to its revert (t=2.95), 0.1 s after.
    times = [0.1 * i for i in range(1, 11)] + [1.0 + 0.4 * i for i in range(1, 6)] + [3.0 + 0.1 * i for i in range(1, 6)]
    events = _steps(times) + _steps([t + 0.01 for t in times], src="rank-1")
    fm = _FM(1.0, 2.95)
    network_metrics(fm, events, 2, t_end=4.0, t_stop=None)
    assert fm.baseline_step_s == pytest.approx(0.1)
    assert fm.fault_step_s == pytest.approx(0.4)
    assert fm.slowdown == pytest.approx(4.0)
    assert fm.heal_s == pytest.approx(0.05)  # the first step of any rank after the revert


def test_heal_waits_for_the_first_step_after_the_revert_and_not_for_teardown() -> None:
    events = _steps([0.1 * i for i in range(1, 11)] + [9.0, 9.1])
    fm = _FM(1.0, 5.0)
    network_metrics(fm, events, 1, t_end=10.0, t_stop=None)
    assert fm.heal_s == pytest.approx(4.0)
    assert fm.fault_step_s is None  # no step both began and ended under the fault
    fm = _FM(1.0, 5.0)
    network_metrics(fm, events, 1, t_end=10.0, t_stop=8.0)
    assert fm.heal_s is None
    fm = _FM(1.0, None)
    network_metrics(fm, events, 1, t_end=10.0, t_stop=None)
    assert fm.heal_s is None


def test_heal_waits_for_the_job_at_full_size() -> None:
    # Three ranks; rank 2 cut off at t=1 and back at t=5. The two others go on shrunken
    # (incarnation 1, world size 2), then all three re-form (incarnation 2) and step at t=9.
    starts = [{"t": 0.0, "src": f"rank-{r}", "kind": "rank_start", "incarnation": 0, "world_size": 3} for r in range(3)]
    starts += [{"t": 2.0, "src": f"rank-{r}", "kind": "rank_start", "incarnation": 1, "world_size": 2} for r in range(2)]
    starts += [{"t": 8.0, "src": f"rank-{r}", "kind": "rank_start", "incarnation": 2, "world_size": 3} for r in range(3)]
    events = starts + _steps([0.2, 0.4, 0.6, 0.8]) + _steps([5.5, 6.0, 6.5], inc=1) + _steps([9.0, 9.2], inc=2)
    fm = _FM(1.0, 5.0)
    network_metrics(fm, events, 3, t_end=10.0, t_stop=None)
    assert fm.heal_s == pytest.approx(4.0)  # not 0.5: the shrunken job was not yet healed
    fm = _FM(1.0, 5.0)
    network_metrics(fm, events, 2, t_end=10.0, t_stop=None)
    assert fm.heal_s == pytest.approx(0.5)


def test_first_step_of_each_incarnation_has_no_duration() -> None:
    events = _steps([1.0, 2.0, 3.0]) + _steps([10.0, 10.5], inc=1)
    assert step_durations(events) == [(1.0, 2.0), (2.0, 3.0), (10.0, 10.5)]


LINKS = """\
name: links
workload: {{harness: {{model: {{name: mlp}}, steps: 50, global_batch: 24}}}}
topology: {{nodes: 3, ranks_per_node: 1}}
backend: netns
faults:
  - type: {type}
    target: {{links: {links}}}
    trigger: {{at_step: 10}}
    params: {params}
"""


@pytest.mark.parametrize(("links", "location", "fragment"), [
    ("[[1, 1]]", "faults[0].target.links[0]", "a link from node 1 to itself"),
    ("[[0, 3]]", "faults[0].target.links[0][1]", "node 3 does not exist: the job has 3 nodes (0-2)"),
    ("[[0, 1, 2]]", "faults[0].target.links[0]", "at most 2"),
    ("[]", "faults[0].target.links", "got an empty list"),
])
def test_bad_links_target_is_a_located_error(tmp_path: Path, links: str, location: str, fragment: str) -> None:
    path = tmp_path / "l.yaml"
    path.write_text(LINKS.format(type="latency", links=links, params="{delay_ms: 5}"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    text = str(info.value)
    assert len(info.value.issues) == 1 and location in text and fragment in text, text


def test_links_target_only_for_link_faults(tmp_path: Path) -> None:
    path = tmp_path / "l.yaml"
    path.write_text(LINKS.format(type="packet_loss", links="[[0, 1]]", params="{percent: 5}"))
    with pytest.raises(ScenarioError, match="packet_loss targets a node, not a link"):
        load_scenario(str(path))
    for kind, params in (("latency", "{delay_ms: 5}"), ("partition", "{shape: one_way}")):
        path.write_text(LINKS.format(type=kind, links="[[0, 1], [2, 0]]", params=params))
        assert load_scenario(str(path)).faults[0].target == {"links": [[0, 1], [2, 0]]}


def test_links_target_delays_exactly_its_directions() -> None:
    cls = lookup("latency")
    fault = cls(fault_id="f0-latency", target=ResolvedTarget(nodes=(0, 1, 2), links=((2, 0), (0, 1))),
                params=cls.params_model.model_validate({"delay_ms": 5}).model_dump())
    assert _directed_links(fault, _Cluster()) == [(0, 1), (2, 0)]


def test_a_rank_called_hung_under_a_slow_network_is_a_false_alarm() -> None:
    from chaos.metrics import FaultRecord, RunInfo, compute_metrics

    events = _steps([0.5 * i for i in range(1, 30)]) + _steps([0.5 * i for i in range(1, 30)], src="rank-1")
    hung = {"t": 6.0, "src": "rank-0", "kind": "detected", "incarnation": 0, "suspect": "rank-1",
            "failure_class": "hang", "by": "watchdog", "reason": "silent 3 s"}
    slow = {**hung, "t": 7.0, "failure_class": "slow", "reason": "steps 4x slower"}
    run = RunInfo(status="completed", t_start=0.0, t_end=15.0, steps_target=29, world_size=2)
    everyone = ["rank-0", "rank-1", "node-0", "node-1"]

    def false_alarms(fault_type: str, failure_class: str) -> list[str]:
        family = lookup(fault_type).family  # as the runner records it
        faults = [FaultRecord("f0", fault_type, failure_class, everyone, t_inject=5.0, family=family)]
        return [f["failure_class"] for f in compute_metrics(events + [hung, slow], faults, run).false_detection_events]

    # Every node is a target of the latency fault, and still: nothing was down.
    assert false_alarms("latency", "slow") == ["hang"]
    assert false_alarms("toxic", "slow") == ["hang"]
    # A fault that takes something down explains a failure detection of its targets.
    assert false_alarms("partition", "network") == []
    assert false_alarms("hang_rank", "hang") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user needs root")
def test_the_control_socket_answers_its_own_user_only() -> None:
    # The socket is abstract (no file, so no permissions): any local user could connect and
    # re-time the run's links until the emulator checked the peer's uid.
    emulator = linkemu.Emulator([], f"\0trainchaos-linkemu-test-{os.getpid()}")
    thread = threading.Thread(target=emulator.run, daemon=True)
    thread.start()

    def ping() -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(emulator.ctl.getsockname())
            try:
                sock.sendall(b'{"op": "ping"}\n')
                return sock.recv(4096)
            except OSError:
                return b""

    try:
        assert b'"ok": true' in ping()
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child reports through the pipe)
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, ping() or b"refused")
            os._exit(0)
        os.close(write)
        os.waitpid(child, 0)
        with os.fdopen(read, "rb") as fh:
            assert fh.read() == b"refused"
    finally:
        emulator.stop = True
        thread.join(timeout=5)
        emulator.ctl.close()
