"""Storage fault types: bad input is refused with one located error before anything starts
(exit 2), good input becomes the rule the FUSE layer applies, and the rule logic itself
(path glob, op filter, callers, probability, byte budget, bit flips)."""

from __future__ import annotations

import random
import sys

import pytest

from chaos.cli import main
from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.faults.base import known_types
from chaos.faults.storage.mounts import storage_plan
from chaos.runner.plan import make_plan
from chaos.scenario.load import parse_scenario
from chaos.storage.rules import Caller, Rule, RuleSet, errno_number, flip

STORAGE = ("io_stall", "io_slow", "io_error", "disk_full", "io_corrupt", "lose_unfsynced", "torn_write")


def _scenario(*faults: dict, harness: dict | None = None, command: str | None = None):
    workload = {"command": command} if command else {
        "harness": harness or {"steps": 60, "model": {"name": "mlp"}}}
    return parse_scenario({"name": "st", "seed": 4, "workload": workload,
                           "topology": {"nodes": 2, "ranks_per_node": 1}, "faults": list(faults)}, "st.yaml")


def _fault(type_: str = "io_error", target: dict | None = None, **params) -> dict:
    return {"type": type_, "target": target or {"rank": 0}, "trigger": {"at_step": 20}, "params": params}


def test_every_type_states_mechanism_and_fidelity():
    types = known_types()
    for name in STORAGE:
        assert types[name].family == "storage"
        assert types[name].fidelity and "FUSE" in types[name].describe_mechanism()


@pytest.mark.parametrize(("fault", "where", "fragment"), [
    (_fault(path="/etc/*"), "params.path", "leaves the mounted tree"),
    (_fault(path="../other/*"), "params.path", "relative to the mount of tier 'shared'"),
    (_fault(probability=1.5), "params.probability", "out of range"),
    (_fault(probability=-0.1), "params.probability", "out of range"),
    (_fault(errno="EBOGUS"), "params.errno", "unknown errno name 'EBOGUS'"),
    (_fault(tier="local"), "params.tier", "does not use the local tier"),
    (_fault(tier="tape"), "params.tier", "shared"),
    (_fault(ops=["write", "chmod"]), "params.ops[1]", "write"),
    (_fault("io_corrupt", ops=["rename"]), "params.ops[0]", "read"),
    (_fault("io_slow"), "params.latency_ms", "latency_ms > 0 or bandwidth_mbps > 0"),
    (_fault("io_stall", duration_s=0), "params.duration_s", "out of range"),
    (_fault("disk_full", bytes_free=-1), "params.bytes_free", "out of range"),
    (_fault("lose_unfsynced", target={"node": 0}), "params.tier", "does not use the local tier"),
    (_fault("lose_unfsynced", target={"rank": 0}, tier="shared"), "target.rank", "node"),
    (_fault("torn_write", target={"node": 0}, tier="shared", keep_fraction=1.5), "params.keep_fraction",
     "out of range"),
    (_fault("io_stall", tier="data"), "params.tier", "does not use a data tier"),
])
def test_bad_input_is_located(fault, where, fragment):
    with pytest.raises(ScenarioError) as info:
        _scenario(fault)
    text = str(info.value)
    assert f"faults[0].{where}" in text and fragment in text, text
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_a_command_workloads_checkpoint_directory_is_its_shared_tier():
    scenario = _scenario(_fault(), _fault("lose_unfsynced", target={"node": 0}, tier="shared"),
                         command="python train.py --ckpt {ckpt_dir}")
    assert storage_plan(_plain(scenario), None) == {"shared": True}


def test_a_commands_path_filter_may_name_its_own_step_files():
    # Only the harness names its folders step-NNNNNNNN; a script's step-20 is its own.
    (fault,) = _scenario(_fault(path="step-20/model.pt"), command="python train.py").faults
    assert fault.params["path"] == "step-20/model.pt"


@pytest.mark.parametrize("tier", ["local", "data"])
def test_a_command_workload_has_no_local_or_data_tier(tier):
    with pytest.raises(ScenarioError) as info:
        _scenario(_fault(tier=tier), command="python train.py")
    text = str(info.value)
    assert "faults[0].params.tier" in text and "a command workload has no" in text, text
    assert "tier: shared, its checkpoint_dir" in text and info.value.exit_code == EXIT_BAD_INPUT


def test_the_bundled_torchft_example_keeps_no_checkpoint_to_fault():
    pytest.importorskip("torchft")
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "st", "workload": {"torchft": {}}, "topology": {"nodes": 2, "ranks_per_node": 1},
                        "faults": [_fault()]}, "st.yaml")
    assert "faults[0].params.tier" in str(info.value) and "checkpoint_dir" in str(info.value), str(info.value)


def _plain(scenario) -> dict:
    return {"faults": [{"type": f.type, "params": dict(f.params)} for f in scenario.faults]}


def test_validate_exits_2_and_names_the_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nworkload: {harness: {steps: 40}}\ntopology: {nodes: 2, ranks_per_node: 1}\n"
                    "faults:\n  - type: io_error\n    target: {rank: 0}\n    trigger: {at_step: 5}\n"
                    "    params: {errno: ENOPE}\n")
    monkeypatch.setattr(sys, "argv", ["trainchaos", "validate", str(path)])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "bad.yaml: faults[0].params.errno: unknown errno name 'ENOPE'" in err, err


def test_good_input_becomes_the_layers_rule():
    harness = {"steps": 60, "model": {"name": "mlp"}, "checkpoint": {"local_every_steps": 5}}
    sc = _scenario(_fault(errno="EROFS", ops=["rename"], probability=0.5, path="step-*/state.pt"),
                   _fault("io_slow", target={"node": 1}, latency_ms=5, bandwidth_mbps=10, tier="local"),
                   _fault("lose_unfsynced", target={"node": 0}), harness=harness)
    plan = make_plan(sc, 4)
    err = plan[0].fault.rule()
    assert err["action"] == "error" and err["errno"] == 30 and err["ops"] == ["rename"]
    assert err["paths"] == ["step-*/state.pt"] and err["probability"] == 0.5
    slow = plan[1].fault.rule()
    assert slow["latency_s"] == 0.005 and slow["bandwidth_bps"] == 10e6
    # Only the tiers the faults name are mounted; lose_unfsynced tracks its tier's writes.
    faults = [{"type": f.type, "params": f.params} for f in sc.faults]
    assert storage_plan({"faults": faults}) == {"shared": False, "local": True}
    assert storage_plan({"faults": [{"type": "kill_rank"}]}) == {}


# -- the rule logic the daemon runs ------------------------------------------------------


def test_rules_match_path_op_and_caller():
    rule = Rule(rule_id="r", action="error", paths=("step-*/state.pt",), ops=("write",), ranks=(0,))
    assert rule.matches("write", "step-00000010/state.pt", Caller(rank=0))
    assert not rule.matches("read", "step-00000010/state.pt", Caller(rank=0))
    assert not rule.matches("write", "step-00000010/MANIFEST.json", Caller(rank=0))
    assert not rule.matches("write", "step-00000010/state.pt", Caller(rank=1))
    assert not rule.matches("write", "step-00000010/state.pt", Caller())


def test_decisions_per_action():
    rules = RuleSet([Rule(rule_id="e", action="error", errno=28, ops=("fsync",)),
                     Rule(rule_id="s", action="slow", latency_s=0.01, bandwidth_bps=1e6, ops=("write",)),
                     Rule(rule_id="c", action="corrupt", bits=2, ops=("read",))])
    assert rules.decide("fsync", "a", Caller()).errno == 28
    slow = rules.decide("write", "a", Caller(), nbytes=500_000)
    assert slow.sleep_s == pytest.approx(0.51) and slow.errno is None
    read = rules.decide("read", "a", Caller(), nbytes=10)
    assert read.flip_bits == 2 and read.hits == ["c"]


def test_disk_full_grants_the_budget_then_nothing():
    rules = RuleSet([Rule(rule_id="d", action="disk_full", bytes_left=1000, ops=("write",))])
    assert rules.decide("write", "f", Caller(), nbytes=600).allow_bytes is None
    assert rules.decide("write", "f", Caller(), nbytes=600).allow_bytes == 400
    assert rules.decide("write", "f", Caller(), nbytes=1).allow_bytes == 0


def test_probability_is_seeded_and_about_right():
    def hits(seed: int) -> list[bool]:
        rule = Rule(rule_id="p", action="error", probability=0.3, seed=seed)
        return [bool(RuleSet([rule]).decide("write", "f", Caller()).errno) for _ in range(2000)]

    assert hits(1) == hits(1) and hits(1) != hits(2)
    assert 0.25 < sum(hits(1)) / 2000 < 0.35


@pytest.mark.parametrize(("data", "why"), [
    ({"rule_id": "x", "action": "explode"}, "action 'explode'"),
    ({"rule_id": "x", "action": "error", "ops": ["chmod"]}, "unknown op 'chmod'"),
    ({"rule_id": "x", "action": "error", "probability": 2}, "outside [0, 1]"),
])
def test_a_bad_rule_is_refused_by_the_daemon_too(data, why):
    with pytest.raises(ValueError, match=why.replace("[", r"\[").replace("]", r"\]")):
        Rule.from_dict(data)


def test_errno_names_and_flips():
    assert errno_number("EIO") == 5 and errno_number("ENOSPC") == 28
    with pytest.raises(ValueError, match="unknown errno name 'EFOO'"):
        errno_number("EFOO")
    data = bytes(1000)
    flipped = flip(data, 3, random.Random(1))
    assert sum(bin(b).count("1") for b in flipped) in (1, 3)  # two flips of one bit cancel
    assert flip(data, 3, random.Random(1)) == flipped


def test_the_runner_hands_the_backend_its_mounts_and_nothing_reads_run_json(tmp_path) -> None:
    """The storage family plans the mounts from the scenario and the workload's layout; the
    backend acquires exactly those (RunSpec.mounts), with no run.json anywhere."""
    from types import SimpleNamespace

    from chaos.cluster.base import RunSpec
    from chaos.cluster.mounts import acquire_storage_mounts
    from chaos.faults.family import planned_mounts as plan_mounts  # what chaos.runner.run calls
    from chaos.model.scenario import Topology
    from chaos.workload import StorageLayout

    run_dir = tmp_path / "run"
    source = tmp_path / "corpus.txt"
    source.write_text("data\n")
    layout = StorageLayout(shared_checkpoints="ckpt", node_local_checkpoints=True,
                           data_file="data/corpus.txt", data_source=str(source))
    faults = [{"type": "io_error", "params": {"tier": "shared"}},
              {"type": "lose_unfsynced", "params": {"tier": "local"}},
              {"type": "io_slow", "params": {"tier": "data"}}]
    mounts = plan_mounts({"faults": faults}, layout, str(run_dir))
    assert [(m.tier, m.track_unfsynced, m.path) for m in mounts] == [
        ("data", False, str(run_dir / "data")), ("local", True, None), ("shared", False, str(run_dir / "ckpt"))]
    assert (run_dir / "data" / "corpus.txt").read_text() == "data\n", "the run's own copy is what gets mounted"
    assert plan_mounts({"faults": [{"type": "kill_rank"}]}, None, str(run_dir)) == ()

    acquired: list[dict] = []
    spec = RunSpec(run_id="trainchaos-0123456789", run_dir=str(run_dir), topology=Topology(nodes=2, ranks_per_node=1),
                   worker_argv=[], mounts=mounts)
    backend = SimpleNamespace(spec=spec, topology=spec.topology,
                              resources=SimpleNamespace(acquire=lambda kind, s: acquired.append({"kind": kind, **s})))
    acquire_storage_mounts(backend, lambda n: f"/scratch/node-{n}")  # type: ignore[arg-type]
    assert [(a["kind"], a["path"], a["track_unfsynced"], a["fsname"]) for a in acquired] == [
        ("fuse_mount", str(run_dir / "data"), False, "trainchaos-0123456789-data"),
        ("fuse_mount", "/scratch/node-0/checkpoints", True, "trainchaos-0123456789-local-node-0"),
        ("fuse_mount", "/scratch/node-1/checkpoints", True, "trainchaos-0123456789-local-node-1"),
        ("fuse_mount", str(run_dir / "ckpt"), False, "trainchaos-0123456789-shared")]
    assert not list(tmp_path.rglob("run.json"))
