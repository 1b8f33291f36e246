"""The Monte-Carlo engine against closed forms, and its bookkeeping on cases worked by hand.

The closed-form cases use one failure class, no correlation and a fixed interval, with
failures rare enough (MTBF 10 h against a period of minutes) that the first-order model's
neglected terms are far below the tolerance, while a wrong loss model is not: losing a whole
interval per failure instead of the elapsed part would move ETTR by about 1 %.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from chaos.scale.analytic import daly_interval, first_order_ettr, poisson_se, young_interval
from chaos.scale.engine import (
    CheckpointSpec,
    ClassSpec,
    Events,
    JobModel,
    RecoverySpec,
    TierSpec,
    account,
    draw_events,
    simulate,
)
from chaos.scale.simulate import search_interval

WINDOW = 54 * 86_400.0
MTBF_S = 36_000.0  # 10 h for the whole job


def one_class(interval_s: float = 600.0, blocking_s: float = 10.0, persist_s: float = 0.0,
              detection_s: float = 60.0, restart_s: float = 240.0, **job: object) -> JobModel:
    return JobModel(
        devices=16_384, devices_per_node=8, window_s=WINDOW,
        classes=(ClassSpec("only", per_hour=3600.0 / MTBF_S, detection_s=detection_s,
                           restart_s=restart_s),),
        checkpoint=CheckpointSpec(interval_s, (TierSpec(blocking_s=blocking_s, persist_s=persist_s),)),
        **job,  # type: ignore[arg-type]
    )


def total_seconds(res) -> np.ndarray:
    return (res.productive_s + res.checkpoint_s + res.maintenance_s
            + (res.detection_s + res.restart_s + res.wait_s + res.lost_work_s).sum(axis=0))


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize(("interval_s", "blocking_s", "persist_s"), [
    (600.0, 10.0, 0.0),     # sync, near Young's optimum
    (1800.0, 30.0, 0.0),    # long interval: lost work dominates
    (900.0, 2.0, 60.0),     # async: durable a minute after the snapshot
])
def test_ettr_matches_the_first_order_model_within_half_a_percent(interval_s, blocking_s, persist_s):
    res = simulate(one_class(interval_s, blocking_s, persist_s), trials=1000, seed=11)
    expected = first_order_ettr(MTBF_S, interval_s, blocking_s, 300.0, persist_s)
    assert res.ettr.mean() == pytest.approx(expected, rel=0.005)
    # and the tolerance has teeth: a whole period lost per failure would be well outside it
    wrong = first_order_ettr(MTBF_S, interval_s, blocking_s, 300.0 + (interval_s + blocking_s) / 2, persist_s)
    assert abs(wrong - expected) / expected > 0.005


def test_interruption_count_matches_the_poisson_mean():
    trials = 1000
    res = simulate(one_class(), trials=trials, seed=5)
    mean = WINDOW / MTBF_S
    assert abs(res.interruptions[0].mean() - mean) < 3 * poisson_se(mean, trials)
    # a Poisson count's variance equals its mean
    assert res.interruptions[0].var(ddof=1) == pytest.approx(mean, rel=0.15)


def test_simulated_optimum_interval_is_within_ten_percent_of_young_and_daly():
    model = one_class(blocking_s=5.0)  # C = 5 s << M = 10 h: Young's regime
    events = draw_events(model, 1000, np.random.default_rng(3))
    young = young_interval(MTBF_S, 5.0)
    daly = daly_interval(MTBF_S, 5.0)
    found = search_interval(model, events, young)
    assert found["optimum_s"] == pytest.approx(young, rel=0.10)
    assert found["optimum_s"] == pytest.approx(daly, rel=0.10)
    # the search really scanned a curve with an interior maximum
    curve = [p["ettr"] for p in found["curve"]]
    assert max(curve) > curve[0] and max(curve) > curve[-1]


def test_young_and_daly_forms():
    assert young_interval(36_000, 5) == pytest.approx(600.0)
    assert daly_interval(36_000, 5) == pytest.approx(600 * (1 + (5 / 72_000) ** 0.5 / 3 + 5 / 648_000) - 5)
    assert daly_interval(100, 500) == 100  # C >= 2M: checkpoint once per MTBF


# --------------------------------------------------------------------------- bookkeeping


def test_every_second_of_the_window_is_accounted_for():
    model = JobModel(
        devices=1024, devices_per_node=8, window_s=5 * 86_400.0,
        classes=(ClassSpec("gpu", per_hour=1.0, detection_s=120, restart_s=900, scope="device"),
                 ClassSpec("sw", per_hour=0.5, detection_s=10, restart_s=300, scope="process", nodes_out=0),
                 ClassSpec("rack", per_hour=0.05, detection_s=30, restart_s=600, scope="domain", nodes_out=8),
                 ClassSpec("sdc", per_hour=0.1, detection_s=3600, restart_s=60, lost_work_s=7200)),
        checkpoint=CheckpointSpec(900, (TierSpec(blocking_s=3, persist_s=20, survives=("process", "device")),
                                        TierSpec(every=4, blocking_s=30, persist_s=120))),
        recovery=RecoverySpec("spares", spare_nodes=4, repair_s=12 * 3600.0, replace_s=3600.0),
        maintenance_spacing_s=86_400.0, maintenance_duration_s=1800.0,
    )
    res = simulate(model, trials=300, seed=2)
    assert np.allclose(total_seconds(res), model.window_s, rtol=0, atol=1e-6)
    assert (res.productive_s > 0).all() and (res.lost_work_s >= 0).all() and (res.checkpoint_s >= 0).all()


def _events(model: JobModel, times: list[float], cls: list[int]) -> Events:
    n = len(times)
    detection = np.array([model.classes[c].detection_s for c in cls])
    restart = np.array([model.classes[c].restart_s for c in cls])
    return Events(trials=1, trial=np.zeros(n, dtype=np.int64), cls=np.array(cls), t=np.array(times),
                  detection=detection, restart=restart, wait=np.zeros(n),
                  nodes_out=np.zeros(n, dtype=np.int64), scope=np.ones(n, dtype=np.int64),
                  fixed_lost=np.full(n, np.nan), starts=np.array([0, n]))


def test_a_failure_during_recovery_restarts_it_and_loses_nothing_more():
    model = JobModel(devices=8, devices_per_node=8, window_s=10_000.0,
                     classes=(ClassSpec("a", per_hour=0.0, detection_s=100, restart_s=400),),
                     checkpoint=CheckpointSpec(1000, (TierSpec(blocking_s=0),)))
    # trains 0..2500 (2 checkpoints, 500 s lost), down 2500..3000; the second failure at
    # 2800 restarts the recovery: back at 3300, nothing more lost; then trains to the end.
    res = account(model, _events(model, [2500.0, 2800.0], [0, 0]))
    assert res.lost_work_s[0, 0] == pytest.approx(500.0)
    assert res.detection_s[0, 0] + res.restart_s[0, 0] == pytest.approx(800.0)
    assert res.productive_s[0] == pytest.approx(2000.0 + 10_000.0 - 3300.0)
    assert res.interruptions[0, 0] == 2


def test_a_failure_before_an_async_checkpoint_is_durable_loses_its_interval():
    model = JobModel(devices=8, devices_per_node=8, window_s=10_000.0,
                     classes=(ClassSpec("a", per_hour=0.0, detection_s=0, restart_s=0),),
                     checkpoint=CheckpointSpec(1000, (TierSpec(blocking_s=10, persist_s=100),)))
    # checkpoint 1 blocks 1000..1010 and is durable at 1110; a failure at 1050 loses all 1000 s
    early = account(model, _events(model, [1050.0], [0]))
    late = account(model, _events(model, [1150.0], [0]))
    assert early.lost_work_s[0, 0] == pytest.approx(1040.0)
    assert late.lost_work_s[0, 0] == pytest.approx(140.0)


def test_a_tier_that_does_not_survive_the_scope_is_not_restored_from():
    tiers = (TierSpec(blocking_s=1, survives=("process",)),
             TierSpec(every=6, blocking_s=1, survives=("process", "device", "node", "domain")))
    model = JobModel(devices=1024, devices_per_node=8, window_s=WINDOW,
                     classes=(ClassSpec("crash", 0.2, 0, 0, scope="process", nodes_out=0),
                              ClassSpec("node", 0.2, 0, 0, scope="node")),
                     checkpoint=CheckpointSpec(300, tiers))
    res = simulate(model, trials=300, seed=4)
    per_failure = res.lost_work_s.sum(axis=1)[:2] / res.interruptions.sum(axis=1)[:2]
    assert per_failure[0] == pytest.approx(300 / 2, rel=0.1)       # memory tier: half an interval
    assert per_failure[1] == pytest.approx(6 * 300 / 2, rel=0.1)   # remote only: half of six


# --------------------------------------------------------------------------- recovery modes


def test_restart_mode_waits_for_a_replacement_on_every_node_failure():
    res = simulate(one_class(recovery=RecoverySpec("restart", replace_s=1800.0)), trials=200, seed=1)
    per_failure = res.wait_s[0].sum() / res.interruptions[0].sum()
    assert per_failure == pytest.approx(1800.0, rel=0.05)  # a little less: overlaps share it


def test_spares_wait_only_when_the_pool_is_empty():
    def waited(spares: int) -> float:
        recovery = RecoverySpec("spares", spare_nodes=spares, repair_s=48 * 3600.0)
        return float(simulate(one_class(recovery=recovery), trials=200, seed=1).wait_s.sum(axis=0).mean())

    # 0.1 failures/h x 48 h repair: about 5 nodes in repair at a time
    assert waited(40) == 0.0
    assert waited(8) < waited(5) < waited(2)
    assert waited(2) > 0.5 * WINDOW  # with 2 spares the job mostly waits


def test_elastic_never_waits_and_loses_capacity_instead():
    recovery = RecoverySpec("elastic", repair_s=24 * 3600.0)
    res = simulate(one_class(recovery=recovery), trials=200, seed=1)
    assert res.wait_s.sum() == 0.0
    out_fraction = (WINDOW / MTBF_S) * 8 * 24 * 3600.0 / (16_384 * WINDOW)
    assert (res.degraded_s / res.productive_s).mean() == pytest.approx(out_fraction, rel=0.1)
    assert (res.goodput < res.ettr).all()


def test_planned_maintenance_happens_as_often_as_configured_and_loses_no_work():
    model = one_class(maintenance_spacing_s=WINDOW / 47, maintenance_duration_s=600.0)
    res = simulate(model, trials=100, seed=1)
    assert (res.interruptions[-1] == 47).all()
    assert (res.lost_work_s[-1] == 0).all()
    assert res.maintenance_s.mean() == pytest.approx(47 * 600.0, rel=0.02)


def test_a_fixed_loss_class_loses_that_much_per_failure():
    model = JobModel(devices=8, devices_per_node=8, window_s=WINDOW,
                     classes=(ClassSpec("sdc", 0.01, 0, 0, lost_work_s=3600.0),),
                     checkpoint=CheckpointSpec(600, (TierSpec(blocking_s=1),)))
    res = simulate(model, trials=200, seed=1)
    assert res.lost_work_s.sum() / res.interruptions[0].sum() == pytest.approx(3600.0, rel=0.02)


def test_16k_devices_54_days_1000_trials_in_under_ten_seconds():
    model = JobModel(  # the Llama 3 rate: 419 interruptions in 54 days
        devices=16_384, devices_per_node=8, window_s=WINDOW,
        classes=(ClassSpec("all", per_hour=419 / (54 * 24), detection_s=60, restart_s=300),),
        checkpoint=CheckpointSpec(600, (TierSpec(blocking_s=10, persist_s=60),)),
        recovery=RecoverySpec("spares", spare_nodes=32, repair_s=48 * 3600.0),
        maintenance_spacing_s=WINDOW / 47, maintenance_duration_s=600.0)
    start = time.perf_counter()
    res = simulate(model, trials=1000, seed=0)
    assert time.perf_counter() - start < 10.0
    assert res.interruptions[0].mean() == pytest.approx(419, rel=0.02)


def test_spares_wait_for_the_earliest_repaired_node_when_the_pool_is_empty():
    from chaos.scale.engine import _waits

    model = JobModel(devices=64, devices_per_node=8, window_s=1000.0,
                     classes=(ClassSpec("a", 0.0, 0, 0),), checkpoint=CheckpointSpec(100),
                     recovery=RecoverySpec("spares", spare_nodes=1, repair_s=100.0))
    ev = _events(model, [0.0, 10.0, 20.0, 150.0], [0, 0, 0, 0])
    ev.nodes_out = np.ones(4, dtype=np.int64)
    # 0: the spare; 10: none left, the node of 0 is back at 100; 20: two short, the node of
    # 10 is back at 110; 150: 0 and 10 are repaired, 20 still out: one spare is free.
    assert _waits(model, ev).tolist() == [0.0, 90.0, 90.0, 0.0]
