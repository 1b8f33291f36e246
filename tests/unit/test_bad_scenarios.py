"""Every malformed scenario in tests/scenarios/bad/ is rejected with file, location and reason.

The table is the contract of the error messages a user sees (exit code 2, nothing started):
each row names the file, the location the message must point at, and a fragment that tells
the user what is allowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.errors import EXIT_BAD_INPUT, ScenarioError
from chaos.scenario.load import load_scenario

BAD = Path(__file__).resolve().parent.parent / "scenarios" / "bad"

# file -> (location, fragment of the message)
CASES: dict[str, tuple[str, str]] = {
    "malformed_yaml.yaml": ("line 3, column 7", "invalid YAML: expected ',' or '}'"),
    "duplicate_key.yaml": ("line 3, column 1", "duplicate key 'seed'"),
    "top_level_list.yaml": ("", "expected a mapping at the top level"),
    "unknown_fault_type.yaml": (
        "faults[0].type",
        "unknown fault type 'kil_rank'; did you mean 'kill_rank'? known: bandwidth, bitflip, "
        "checkpoint_bitrot, container_disconnect",
    ),
    "rank_out_of_range.yaml": (
        "faults[0].target.rank", "rank 7 does not exist: the job has 4 ranks (0-3)"),
    "node_out_of_range.yaml": (
        "faults[0].target.nodes[1]", "node 2 does not exist: the job has 2 nodes (0-1)"),
    "target_kind_mismatch.yaml": (
        "faults[0].target.rank", "kill_node targets a node, not a rank; use {node: N}"),
    "wrong_type.yaml": ("topology.nodes", "expected int, got str 'two'"),
    "bool_is_not_int.yaml": ("repeat", "expected int, got bool true"),
    "unknown_top_level_key.yaml": (
        "fautls", "unknown key 'fautls'; did you mean 'faults'? allowed: name, description"),
    "missing_name.yaml": ("name", "required: the scenario's name"),
    "bad_name.yaml": ("name", "'../Escape' is not a valid name: use lowercase letters"),
    "trigger_two_kinds.yaml": (
        "faults[0].trigger", "give exactly one trigger of at_step, at_time, after_event, random, "
        "poisson, every; got at_step and at_time"),
    "unknown_trigger_key.yaml": (
        "faults[0].trigger.at_stp", "unknown trigger 'at_stp'; did you mean 'at_step'?"),
    "in_process_at_time.yaml": (
        "faults[0].trigger.at_time",
        "device_error is delivered in-process by the probe and fires only at an exact step: "
        "use trigger {at_step: N}"),
    "at_step_beyond_run.yaml": (
        "faults[0].trigger.at_step", "the harness trains 100 steps (workload.harness.steps), so "
        "at_step must be between 1 and 99"),
    "unknown_event.yaml": (
        "faults[0].trigger.after_event.event",
        "unknown event kind 'ckpt_saved'; did you mean 'ckpt_save_end'? allowed: run_start"),
    "random_window_empty.yaml": ("faults[0].trigger.random.window_s", "need lo < hi"),
    "param_out_of_range.yaml": (
        "faults[0].params.factor", "500 is out of range: must be between 1 and 100"),
    "param_not_in_choices.yaml": (
        "faults[0].params.signal",
        "'SIGKIL' is not allowed; did you mean 'SIGKILL'? allowed values: SIGKILL, SIGTERM"),
    "param_wrong_type.yaml": ("faults[0].params.factor", "expected int or float, got str 'abc'"),
    "param_unknown.yaml": (
        "faults[0].params.signl", "unknown kill_rank parameter 'signl'; did you mean 'signal'?"),
    "probability_zero.yaml": ("faults[0].probability", "must be > 0 and <= 1"),
    "duplicate_fault_name.yaml": ("faults[1].name", "'kill' is already the name of faults[0]"),
    "final_state_without_baseline.yaml": ("targets.final_state", "set baseline: true"),
    "goodput_above_one.yaml": ("targets.goodput.min", "must be between 0 and 1"),
    "bound_unknown_key.yaml": (
        "targets.recovery_s.maximum", "unknown key 'maximum'; did you mean 'max'? allowed: max, min"),
    "workload_both.yaml": (
        "workload", "give exactly one workload kind: 'harness' (options of the bundled training "
        "job), 'command' (your own training command), 'lightning', 'accelerate', 'dcp', "
        "'nvrx_inprocess', 'torchft', 'deepspeed', 'megatron'; got 'harness' and 'command'"),
    "bad_harness_option.yaml": (
        "workload.harness.checkpoint.mode", "'lazy' is not allowed; allowed values: sync, async"),
    "batch_not_divisible.yaml": (
        "workload.harness.global_batch", "must be divisible by the world size (3)"),
    "regex_without_step.yaml": ("workload.progress_regex", "needs a named group 'step'"),
    "negative_timeout.yaml": ("timeout_s", "-5 is out of range: must be > 0"),
    "min_nodes_above_nodes.yaml": ("topology.min_nodes", "3 is out of range: must be between 1 and 2"),
    "spares_out_of_range.yaml": ("topology.spares", "9 is out of range: must be between 0 and 8"),
    "node_in_two_power_domains.yaml": (
        "topology.power_domains.pd-b[0]",
        "node 1 is already in power domain 'pd-a'; a node belongs to at most one power domain"),
    "rack_index_out_of_range.yaml": (
        "topology.racks.r2[1]", "node 3 does not exist: the job has 2 nodes and 1 spare (0-2)"),
    "unknown_power_domain_target.yaml": (
        "faults[0].target.power_domain",
        "unknown power domain 'pd-c'; did you mean 'pd-b'? known: pd-a, pd-b"),
    "rack_target_without_racks.yaml": (
        "faults[0].target.rack",
        "the topology declares no racks; declare them under topology, e.g. racks: {r1: [0, 1]"),
    "rack_target_on_rank_fault.yaml": (
        "faults[0].target.rack", "kill_rank targets a rank, not a rack; use {rank: R}"),
    "unknown_backend.yaml": ("backend", "unknown backend 'locl'; did you mean 'local'? known: docker, local"),
    "backend_unknown_option.yaml": (
        "backend.local.hosts", "unknown local option 'hosts'; allowed: memory_mb"),
    "bitflip_unknown_tensor.yaml": (
        "faults[0].params.tensor",
        "no parameter 'mlp.0.wieght' in the model; did you mean 'mlp.0.weight'? valid: parameters "
        "(NAME, grad:NAME, optim:NAME:KEY): tok_emb.weight, mlp.{0,2}.weight, mlp.{0,2}.bias"),
    "bitflip_bit_outside_dtype.yaml": (
        "faults[0].params.bit", "bit 40 is outside float32: bits 0-31 (sign 31, exponent 23-30, "
        "mantissa 0-22) (mlp.0.weight is float32)"),
    "bitflip_bit_too_large.yaml": ("faults[0].params.bit", "64 is out of range: must be between 0 and 63"),
    "bitflip_rank_outside_world.yaml": (
        "faults[0].target.rank", "rank 2 does not exist: the job has 2 ranks (0-1)"),
    "bitflip_stuck_at_without_duration.yaml": (
        "faults[0].params.duration_steps", "mode stuck_at forces the bit at every step for "
        "duration_steps steps: give duration_steps (an int >= 1)"),
    # network faults (backend netns)
    "partition_node_in_two_groups.yaml": (
        "faults[0].params.groups[1][0]",
        "node 1 is already in group 0; a node belongs to at most one group"),
    "partition_link_to_itself.yaml": (
        "faults[0].params.links[1]", "a link from node 1 to itself; it joins two different nodes"),
    "partition_group_unknown_node.yaml": (
        "faults[0].params.groups[1][1]", "node 4 does not exist: the job has 2 nodes (0-1)"),
    "partition_unknown_rack.yaml": ("faults[0].target.rack", "unknown rack 'r3'; known: r1, r2"),
    "packet_loss_above_100.yaml": (
        "faults[0].params.percent", "150 is out of range: must be > 0 and <= 100"),
    "network_fault_on_local.yaml": (
        "faults[0].type", "partition acts through the docker or netns backend; this scenario runs on "
        "local (set backend: docker): local has no PacketFilter"),
    # a backend capability the backend lacks (chaos.cluster.capabilities)
    "container_fault_on_local.yaml": (
        "faults[0].type", "container_pause acts through the docker backend; this scenario runs on "
        "local (set backend: docker): local has no ContainerHost (each node a container"),
    # an expected failure (expect) needs its reason; its issue is a link
    "expect_not_a_mapping.yaml": ("expect", "expected a mapping with keys fail, issue, got str"),
    "expect_without_reason.yaml": ("expect.fail", "required: why the run is expected to miss its targets"),
    "expect_issue_not_a_url.yaml": ("expect.issue", "'#21' is not a link: give the http(s) URL"),
    "link_flap_down_not_shorter.yaml": (
        "faults[0].params.down_s", "down_s must be less than period_s"),
}


@pytest.mark.parametrize("filename", sorted(CASES))
def test_bad_scenario_is_rejected_with_location_and_reason(filename: str) -> None:
    location, fragment = CASES[filename]
    path = str(BAD / filename)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert err.exit_code == EXIT_BAD_INPUT
    text = str(err)
    assert filename in text
    prefix = f"{path}: {location}: " if location else f"{path}: "
    matching = [line for line in text.splitlines() if line.startswith(prefix)]
    assert matching, f"no issue at {location!r} in:\n{text}"
    assert any(fragment in line for line in matching), f"{fragment!r} not in:\n{text}"


def test_every_bad_file_is_in_the_table() -> None:
    on_disk = {p.name for p in BAD.glob("*.yaml")}
    assert on_disk == set(CASES), "add the new file to CASES (or remove the stale row)"


def test_each_bad_file_reports_exactly_one_issue() -> None:
    """One mistake, one message: no follow-up noise derived from the same problem."""
    noisy = {}
    for filename in CASES:
        with pytest.raises(ScenarioError) as info:
            load_scenario(str(BAD / filename))
        if len(info.value.issues) != 1:
            noisy[filename] = [str(i) for i in info.value.issues]
    assert not noisy
