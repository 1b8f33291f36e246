"""harness.rdzv_records: a warm agent's rendezvous names its events as torch's does, without
``inspect.stack()``."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from harness.rdzv_records import method_name, name_records_by_frame

TORCH_GET_METHOD_NAME = dynamic_rendezvous.get_method_name


class _Recorder:
    """Calls both namers from the same frame, as torch's ``_record`` methods call theirs."""

    def _record(self, depth: int) -> tuple[str, str]:
        return TORCH_GET_METHOD_NAME(depth), method_name(depth)

    def joining(self, depth: int) -> tuple[str, str]:
        return self._record(depth)


@pytest.mark.parametrize("depth", [0, 1, 2, 3, 10_000])
def test_method_name_is_the_name_torch_finds_at_every_depth(depth: int) -> None:
    torch_name, ours = _Recorder().joining(depth)
    expected = {0: "get_method_name", 1: "_record", 2: "joining", 3: "test_method_name_is_the_name_torch_finds_at_every_depth",
                10_000: "no_method_name"}[depth]
    # at depth 0 each names itself: the only depth where they differ, and torch never asks it
    assert torch_name == expected and ours == ("method_name" if depth == 0 else expected)


def test_a_patched_rendezvous_records_the_same_event_names_without_inspecting_the_stack(monkeypatch) -> None:
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", TORCH_GET_METHOD_NAME)
    recorded: list[str] = []
    monkeypatch.setattr(dynamic_rendezvous, "construct_and_record_rdzv_event",
                        lambda **event: recorded.append(event["name"]))
    executor = dynamic_rendezvous._DistributedRendezvousOpExecutor(
        SimpleNamespace(addr="127.0.0.1", pid=1, local_id=0), None, SimpleNamespace(run_id="r"))

    def keep_alive() -> None:  # the method that records, as torch's named it
        executor._record(message="alive")

    keep_alive()
    assert name_records_by_frame() and dynamic_rendezvous.get_method_name is method_name

    def stack_unread(*args: object, **kwargs: object) -> None:
        raise AssertionError("inspect.stack() called")

    monkeypatch.setattr(inspect, "stack", stack_unread)
    keep_alive()
    assert recorded == ["_DistributedRendezvousOpExecutor.keep_alive"] * 2


def test_a_torch_without_get_method_name_is_left_as_it_is(monkeypatch) -> None:
    monkeypatch.delattr(dynamic_rendezvous, "get_method_name")
    assert name_records_by_frame() is False
    assert not hasattr(dynamic_rendezvous, "get_method_name")
