"""chaos.adapters.nvrx: a re-entry of the wrapped function is the rank's next incarnation, and
what interrupts the function is reported as a detection, without being swallowed.

The wrapper itself is not run here (it needs a store and ranks: tests/integration/
test_stack_nvrx.py runs it); its call_wrapper and its RankShouldRestart are stood in for.
"""

from __future__ import annotations

import json
import types

import pytest

from chaos import probe
from chaos.adapters import nvrx as chaos_nvrx


class RankShouldRestart(BaseException):
    """Named as the wrapper's: the adapter knows it by name, without importing NVRx."""


@pytest.fixture
def events(tmp_path, monkeypatch):
    events_dir = tmp_path / "events"
    monkeypatch.setenv(probe.ENV_EVENTS_DIR, str(events_dir))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(probe, "_probe", None)
    monkeypatch.setattr(chaos_nvrx, "_aborted_at", [])

    def read() -> list[dict]:
        probe.get()._file.flush()
        found = [json.loads(line) for path in events_dir.glob("*.jsonl")
                 for line in path.read_text().splitlines()]
        return sorted(found, key=lambda e: e["t"])

    yield read
    probe.get().close()


def _call(iteration: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(iteration=iteration)


def test_a_re_entry_is_the_next_incarnation_of_the_same_process(events, monkeypatch):
    with chaos_nvrx.iteration(_call(0)):
        probe.step_end(1)
    first = probe.get()
    monkeypatch.setenv("RANK", "1")  # the wrapper renumbered the ranks
    with chaos_nvrx.iteration(_call(1)):
        probe.step_end(1)
    assert probe.get() is not first
    steps = [(e["src"], e["incarnation"]) for e in events() if e["kind"] == "step_end"]
    assert steps == [("rank-0", 0), ("rank-1", 0)]
    with chaos_nvrx.iteration(_call(2)):
        probe.step_end(2)
    assert [(e["src"], e["incarnation"]) for e in events() if e["kind"] == "step_end"][-1] == ("rank-1", 1)


def test_an_exception_of_the_function_is_this_ranks_detection_and_goes_on(events):
    with pytest.raises(probe.DeviceError), chaos_nvrx.iteration(_call(0)):
        raise probe.DeviceError("CUDA error: an illegal memory access was encountered")
    (found,) = [e for e in events() if e["kind"] == "detected"]
    assert found["suspect"] == "rank-0" and found["failure_class"] == "device"
    assert found["detector"] == "nvrx_inprocess"


def test_the_wrappers_restart_names_the_ranks_it_blames_at_the_time_it_aborted(events):
    with pytest.raises(RankShouldRestart), chaos_nvrx.iteration(_call(0)):
        chaos_nvrx._aborted_at.append(1000.0)  # the monitor thread ran the abort then
        raise RankShouldRestart("Interruption.EXCEPTION on ranks={1}")
    (found,) = [e for e in events() if e["kind"] == "detected"]
    assert found["t"] == 1000.0 and found["suspect"] == "rank-1"
    assert found["failure_class"] == "unknown"


def test_a_collective_error_after_the_abort_is_the_wrappers_detection_not_a_suspect(events):
    with pytest.raises(RuntimeError), chaos_nvrx.iteration(_call(0)):
        chaos_nvrx._aborted_at.append(2000.0)
        raise RuntimeError("Timed out waiting 5000ms for recv operation to complete")
    (found,) = [e for e in events() if e["kind"] == "detected"]
    assert found["t"] == 2000.0 and found["suspect"] is None
    assert "restarts every rank" in found["reason"]


def test_a_hang_blames_the_ranks_that_stopped(events):
    with pytest.raises(RankShouldRestart), chaos_nvrx.iteration(_call(0)):
        raise RankShouldRestart("Interruption.SOFT_TIMEOUT on ranks={0, 1}")
    (found,) = [e for e in events() if e["kind"] == "detected"]
    assert found["failure_class"] == "hang" and found["suspect"] is None


def test_abort_is_the_wrappers_default_after_noting_the_time(monkeypatch):
    inprocess = pytest.importorskip("nvidia_resiliency_ext.inprocess")
    monkeypatch.setattr(chaos_nvrx, "_aborted_at", [])
    called = []
    monkeypatch.setattr(inprocess.abort.AbortTorchDistributed, "__call__",
                        lambda self, state: called.append(list(chaos_nvrx._aborted_at)) or state)
    composed = chaos_nvrx.abort()
    assert isinstance(composed, inprocess.abort.Abort)
    assert composed("state") == "state"
    assert len(called) == 1 and len(called[0]) == 1  # noted before the default ran
