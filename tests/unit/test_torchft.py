"""The torchft stack: its workload kind (launcher, lighthouse, validation), its adapter and
the survivors' metrics, without starting a training job."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos import contract, probe
from chaos.adapters import torchft as adapter
from chaos.cluster.base import RunSpec
from chaos.cluster.local import LocalCluster
from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.metrics.families.survivors import hit_srcs, survivor_restarts
from chaos.runfiles.resources import RunResources, pending_resources, release_records
from chaos.scenario.load import load_scenario
from chaos.util.procs import find_run_processes
from chaos.workload import workload_for
from chaos.workload.torchft import EXAMPLE
from chaos.workload.torchft.lighthouse import Lighthouse
from chaos.workload.torchrun import AGENT_MAIN

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "scenarios" / "stacks" / "torchft"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


# -- the kind: validation -----------------------------------------------------------------


def test_bad_torchft_options_and_replica_groups_are_located_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, """
name: bad
workload:
  torchft: {steps: 0, pg_timout_s: 1, lighthouse: {min_replicas: x}}
topology: {nodes: 2, ranks_per_node: 1}
faults:
  - {type: kill_node, target: {replica_group: 2}, trigger: {at_step: 5}}
""")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.exit_code == EXIT_BAD_INPUT
    text = str(info.value)
    assert f"{path}: workload.torchft.steps: expected an int between 1 and 10000000, got int 0" in text
    assert "workload.torchft.pg_timout_s: unknown torchft option 'pg_timout_s'; did you mean 'pg_timeout_s'?" in text
    assert "workload.torchft.lighthouse.min_replicas: expected an integer" in text
    assert ("faults[0].target.replica_group: replica group 2 does not exist: the job has 2 "
            "replica groups (0-1), one per node") in text


def test_a_replica_group_target_needs_a_torchft_workload(tmp_path: Path) -> None:
    path = _write(tmp_path, """
name: bad
workload: {harness: {steps: 10}}
topology: {nodes: 2, ranks_per_node: 1}
faults:
  - {type: kill_node, target: {replica_group: 1}, trigger: {at_step: 5}}
""")
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.target\.replica_group: a replica group is "
                                            r"a torchft job's failure domain; this workload is harness"):
        load_scenario(path)


@pytest.mark.parametrize("name", sorted(p.name for p in SUITE.glob("*.yaml")))
def test_the_shipped_suite_is_valid(name: str) -> None:
    scenario = load_scenario(str(SUITE / name))
    assert workload_for(scenario.workload).kind == "torchft"


# -- the kind: launch -----------------------------------------------------------------------


def _scenario(tmp_path: Path, workload: str = "{torchft: {steps: 12, pg_timeout_s: 0.5}}"):
    return load_scenario(_write(tmp_path, f"""
name: ok
workload: {workload}
topology: {{nodes: 3, ranks_per_node: 2, max_restarts: 5}}
faults:
  - {{type: kill_rank, target: {{replica_group: 1}}, trigger: {{at_step: 5}}}}
"""))


def test_each_replica_group_is_a_torchrun_of_its_own_with_torchfts_environment(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    launch = workload_for(scenario.workload).launch("/tmp/run", seed=7)
    assert launch.steps_target == 12
    (kind, lighthouse), = launch.resources
    assert kind == "torchft_lighthouse" and lighthouse["argv"][0].endswith("torchft_lighthouse")
    port = launch.launcher.lighthouse_port
    assert lighthouse["port"] == port and f"0.0.0.0:{port}" in lighthouse["argv"]
    assert launch.worker_argv[:1] == [str(EXAMPLE)]
    assert launch.worker_argv[launch.worker_argv.index("--pg-timeout") + 1] == "0.5"
    assert "--chaos" in launch.worker_argv
    spec = RunSpec("trainchaos-abc", "/tmp/run", scenario.topology, launch.worker_argv,
                   launcher=launch.launcher)
    cluster = LocalCluster(spec, None)  # type: ignore[arg-type]
    cluster.rdzv_port = 29555
    argv = cluster.agent_command(2)
    assert argv[:3] == [sys.executable, "-c", AGENT_MAIN]
    option = {argv[i]: argv[i + 1] for i in range(3, argv.index("--local-addr") + 1, 2)}
    assert option["--nnodes"] == "1" and option["--nproc-per-node"] == "2"
    assert option["--rdzv-id"] == "trainchaos-abc-g2" and option["--max-restarts"] == "5"
    # the group's own store, hosted by its agent on a free port of its node
    assert option["--rdzv-endpoint"] == "127.0.0.1:0" and option["--rdzv-conf"].startswith("is_host=true,")
    env = cluster.node_env(2)
    assert env["REPLICA_GROUP_ID"] == "2" and env["NUM_REPLICA_GROUPS"] == "3"
    assert env["TORCHFT_LIGHTHOUSE"] == f"http://127.0.0.1:{port}"
    assert env[contract.RANK_OFFSET_ENV] == "4"  # group 2's ranks are global ranks 4 and 5
    # torchft's Manager is a client of the store torchelastic shares with the workers
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


def test_the_probe_names_a_groups_rank_by_its_global_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv(contract.SRC_ENV, raising=False)
    monkeypatch.setenv(contract.RANK_OFFSET_ENV, "4")
    assert probe._default_src() == "rank-5"
    monkeypatch.delenv(contract.RANK_OFFSET_ENV)
    assert probe._default_src() == "rank-1"


# -- the lighthouse: a run-scoped resource ------------------------------------------------------


def test_the_lighthouse_is_up_before_the_job_and_cleanup_stops_it_from_the_journal(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    run_dir = tmp_path / "run"
    launch = workload_for(scenario.workload).launch(str(run_dir), seed=0)
    (kind, spec), = launch.resources
    run_id = "trainchaos-tft0unit"
    resources = RunResources(run_id, str(run_dir))
    details = resources.acquire(kind, {"name": f"{run_id}-{kind}", **spec})
    try:
        assert [p.pid for p in find_run_processes(run_id)] == [details["pid"]]
        assert Lighthouse.exists(spec, details)
        # What `trainchaos cleanup` does after a SIGKILLed controller: the journal alone.
        journal = pending_resources(resources.path)
        assert [e["spec"]["name"] for e in journal] == [f"{run_id}-torchft_lighthouse"]
        assert release_records(resources.path, journal) == []
        assert find_run_processes(run_id) == [] and not Lighthouse.exists(spec, details)
    finally:
        resources.release_all()


# -- the adapter ----------------------------------------------------------------------------------


class _Client:
    def __init__(self, results: list) -> None:
        self.results = results
        self.other_calls = 0

    def _quorum(self, **kwargs):
        return self.results.pop(0)

    def should_commit(self, *args):
        self.other_calls += 1
        return True


class _Manager:
    """Stands in for torchft.Manager: the attributes and methods the adapter touches."""

    def __init__(self, client: _Client, commits: list[bool]) -> None:
        self._client = client
        self._group_rank = 0
        self._group_world_size = 1
        self._step = 0
        self._commits = commits
        self.shut = 0

    def current_step(self) -> int:
        return self._step

    def should_commit(self) -> bool:
        ok = self._commits.pop(0)
        self._step += ok
        return ok

    def shutdown(self, wait: bool = True) -> None:
        self.shut += 1

    def start_quorum(self) -> None:
        self.quorums_started = getattr(self, "quorums_started", 0) + 1


def _quorum(qid: int, ids: list[str], step: int, heal: bool = False) -> SimpleNamespace:
    return SimpleNamespace(quorum_id=qid, replica_ids=ids, max_step=step, max_world_size=len(ids),
                           heal=heal, recover_src_replica_rank=0 if heal else None,
                           recover_src_manager_address="http://peer:1")


@pytest.fixture
def attached_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    events = tmp_path / "events"
    monkeypatch.setattr(probe, "_probe", probe.Probe(str(events), "rank-0", 0))
    monkeypatch.setenv("NUM_REPLICA_GROUPS", "2")
    monkeypatch.setenv("REPLICA_GROUP_ID", "0")
    yield events
    probe._probe.close()


def _events(events: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(events.glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_the_adapter_reports_quorums_drops_heals_commits_and_the_end(attached_probe: Path) -> None:
    a, b, b2 = "train_ddp_0:u1", "train_ddp_1:u2", "train_ddp_1:u3"
    client = _Client([_quorum(1, [a, b], 0), _quorum(1, [a, b], 1), _quorum(2, [a], 1),
                      _quorum(3, [a, b2], 2, heal=True)])
    manager = _Manager(client, [True, False, True, True])
    model = __import__("torch").nn.Linear(2, 2)
    assert adapter.instrument(manager, model=model) is manager
    for _ in range(4):
        manager.start_quorum()
        manager._client._quorum(group_rank=0, step=manager.current_step())
        manager.should_commit()
    manager._client.should_commit(0, 1, True)  # anything else goes through to torchft's client
    manager.shutdown()
    manager.shutdown()
    assert client.other_calls == 1 and manager.shut == 2 and manager.quorums_started == 4
    seen = [(e["kind"], {k: e[k] for k in ("step", "members", "suspect", "tier") if k in e})
            for e in _events(attached_probe)]
    assert seen == [
        ("rank_start", {}),
        ("quorum", {"step": 0, "members": [0, 1]}),
        ("step_end", {"step": 1}),
        ("commit_failed", {"step": 1}),
        ("quorum", {"step": 1, "members": [0]}),
        ("detected", {"step": 1, "suspect": "rank-1"}),  # the peer of group 1 that was dropped
        ("step_end", {"step": 2}),
        ("quorum", {"step": 2, "members": [0, 1]}),  # group 1 back under a new id: no drop
        ("ckpt_load", {"step": 2, "tier": "peer"}),
        ("step_end", {"step": 3}),
        ("run_end", {"step": 3}),
    ]
    start = _events(attached_probe)[0]
    assert start["world_size"] == 2 and start["replica_group"] == 0 and start["pid"] == os.getpid()


def test_the_adapter_leaves_the_manager_alone_outside_trainchaos(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "_probe", probe.Probe(None, "rank-0", 0))
    client = _Client([])
    manager = _Manager(client, [])
    original = manager.should_commit
    assert adapter.instrument(manager) is manager
    assert manager._client is client and manager.should_commit == original


def test_replica_group_of_a_quorum_member_follows_torchfts_rule() -> None:
    assert adapter.replica_group_of("train_ddp_12:9f1c") == 12
    assert adapter.replica_group_of("replica") is None


# -- the survivors' metrics -------------------------------------------------------------------------


def _step(src: str, t: float, inc: int = 0) -> dict:
    return {"kind": "step_end", "src": src, "t": t, "step": int(t), "incarnation": inc}


def test_survivors_restarted_across_a_fault_are_counted() -> None:
    ends = [_step("rank-0", 1.0), _step("rank-1", 1.1), _step("rank-2", 1.2),
            _step("rank-0", 6.5), _step("rank-2", 3.0, inc=1), _step("rank-0", 7.0)]
    assert survivor_restarts(ends, {"rank-1", "node-1"}, t_inject=1.5) == 1
    assert survivor_restarts(ends, {"rank-0", "rank-1", "rank-2"}, t_inject=1.5) is None


def test_a_repeat_that_named_only_its_node_still_counts_the_nodes_rank_as_hit() -> None:
    """A sustained run's repeat deferred until its target restarted was resolved while the
    rank was down: its targets name node-1 alone. rank-1 ran on node 1, so its restart is
    the fault's own, not a survivor's (the torchft sustained run counted it as one)."""
    events = [{"kind": "rank_start", "src": "rank-0", "node": 0, "t": 0.5},
              {"kind": "rank_start", "src": "rank-1", "node": 1, "t": 0.5}]
    assert hit_srcs(["node-1"], events) == {"node-1", "rank-1"}
    ends = [_step("rank-0", 1.0), _step("rank-1", 1.1, inc=1), _step("rank-0", 2.0),
            _step("rank-1", 3.0, inc=2)]
    assert survivor_restarts(ends, hit_srcs(["node-1"], events), t_inject=1.5) == 0
    assert survivor_restarts(ends, {"node-1"}, t_inject=1.5) == 1  # what it counted before

