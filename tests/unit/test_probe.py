"""The probe's in-process straggler: a fixed multiple of the step time measured before the
fault. A fake clock stands for time, so the test is exact and takes no time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos import probe
from chaos.probe import core as probe_core


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def test_two_slowed_ranks_do_not_compound_each_others_delay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 waits in the all-reduce for its slowed peer, so each of its steps lasts as long
    as the peer's stretched one; a delay taken from that measured step would grow every step
    (0.2 s -> 39 s was seen). It must stay (factor - 1) x the pre-fault step time."""
    clock = FakeClock()
    monkeypatch.setattr(probe_core.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(probe_core.time, "sleep", clock.sleep)
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"id": "f0-straggler", "type": "straggler", "ranks": [1], "at_step": 5,
                                   "action": "slowdown", "point": "step_end",
                                   "params": {"factor": 3.0, "steps": None}}]))
    rank = probe.Probe(str(tmp_path / "events"), "rank-1", 0, str(faults))
    peer_delay = 0.0
    for step in range(1, 16):
        clock.now += 0.2 + peer_delay  # compute, plus waiting for the slowed peer
        before = len(clock.sleeps)
        rank.step_end(step, 1.0)
        ours = clock.sleeps[before:]
        peer_delay = ours[0] if ours else 0.0  # the peer is slowed the same way
    assert clock.sleeps == [0.4] * 10, clock.sleeps


def test_a_user_script_publishes_its_final_state_through_the_probe(tmp_path: Path) -> None:
    """What `final_state: matches_baseline` needs from any training script: run_end with a
    digest that is equal exactly when the weights are, and whether they are finite."""
    import torch

    events = tmp_path / "events"
    pr = probe.Probe(str(events), "rank-0", 0)
    monkey = probe._probe
    probe._probe = pr
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        digest = probe.final_state(7, model=model, loss=0.5)
        twin = torch.nn.Linear(3, 2)
        twin.load_state_dict(model.state_dict())
        assert probe.model_digest(twin) == digest
        with torch.no_grad():
            twin.weight[0, 0] = float("nan")
        assert probe.model_digest(twin) != digest and probe.weights_finite(twin) is False
    finally:
        probe._probe = monkey
        pr.close()
    (line,) = [json.loads(x) for f in events.iterdir() for x in f.read_text().splitlines()]
    assert line["kind"] == "run_end" and line["step"] == 7 and line["digest"] == digest
    assert line["weights_finite"] is True and line["loss"] == 0.5
