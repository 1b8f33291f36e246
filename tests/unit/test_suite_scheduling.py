"""How `make test` hands integration modules to its pytest-xdist workers (tests/conftest.py):
the slowest first to whichever worker frees first, and never a long module queued behind a
worker's long last test while another worker runs out of work."""

from __future__ import annotations

import collections
import heapq
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.conftest import plan_next, unit_seconds

pytest.importorskip("xdist")


@pytest.fixture
def seconds(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    table: dict[str, float] = {}
    monkeypatch.setattr(conftest, "MODULE_SECONDS", table)
    monkeypatch.setattr(conftest, "SHARED_GROUPS", {"test_b1": "b", "test_b2": "b"})
    return table


def test_a_group_costs_what_its_modules_cost_and_a_unit_test_next_to_nothing(seconds) -> None:
    seconds.update(test_b1=30, test_b2=50, test_c=20)
    assert unit_seconds("b") == 80 and unit_seconds("test_c") == 20
    assert unit_seconds("test_unlisted") == conftest.UNLISTED_S
    assert unit_seconds("tests/unit/test_x.py::test_y") == conftest.UNIT_TEST_S


def test_the_longest_unit_goes_to_the_worker_that_frees_first(seconds) -> None:
    seconds.update(test_long=300, test_mid=200, test_short=5)
    units = ["test_short", "test_mid", "test_long"]
    assert plan_next({"a": 0, "b": 0, "c": 0}, "a", units) == "test_long"
    # `a` is still busy with a long last test: the long units are planned for b and c, and
    # what `a` gets now (it must get something: its last test waits for it) is the short one.
    assert plan_next({"a": 250, "b": 10, "c": 20}, "a", units) == "test_short"
    assert plan_next({"a": 15, "b": 10, "c": 400}, "a", units) == "test_mid"


class _Worker:
    """A pytest-xdist worker as the scheduler sees it: it runs a test only once it knows the
    next one (or is told to shut down)."""

    def __init__(self, name: str) -> None:
        self.name, self.torun, self.shutting_down = name, collections.deque(), False
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.torun.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _run(items: list[str], cost: dict[str, float], workers: int = 3) -> dict[str, tuple[float, str]]:
    """Simulated time at which each test started, and on which worker."""
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"],
                             option=SimpleNamespace(loadscopereorder=False))
    sched = conftest.ModuleScheduling(config)
    now = [0.0]
    sched._clock = lambda: now[0]
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, items)
    sched.schedule()
    started: dict[str, tuple[float, str]] = {}
    running: dict[int, int] = {}
    events: list[tuple[float, int]] = []

    def start(k: int) -> None:
        node = nodes[k]
        if k not in running and (len(node.torun) >= 2 or (node.torun and node.shutting_down)):
            index = node.torun.popleft()
            running[k] = index
            started[items[index]] = (now[0], node.name)
            heapq.heappush(events, (now[0] + cost[items[index]], k))

    for k in range(workers):
        start(k)
    while events:
        now[0], k = heapq.heappop(events)
        sched.mark_test_complete(nodes[k], running.pop(k))
        for j in range(workers):
            start(j)
    assert sorted(started) == sorted(items), "every test ran"
    return started


def test_no_module_waits_behind_a_long_one_test_module_while_a_worker_is_free(seconds, monkeypatch) -> None:
    seconds.update(test_sweep=300, test_long=250, test_mid=60, test_b1=30, test_b2=20, test_quick=30)
    monkeypatch.setattr(conftest.ModuleScheduling, "FILLERS", 2)
    unit = [f"tests/unit/test_u.py::test_{i}" for i in range(8)]
    integ = ["tests/integration/test_sweep.py::test_one",
             "tests/integration/test_long.py::test_a", "tests/integration/test_long.py::test_b",
             "tests/integration/test_mid.py::test_a",
             "tests/integration/test_b1.py::test_a", "tests/integration/test_b2.py::test_a",
             "tests/integration/test_quick.py::test_a", "tests/integration/test_quick.py::test_b"]
    cost = {**dict.fromkeys(unit, 0.1), "tests/integration/test_sweep.py::test_one": 300.0}
    cost.update({t: seconds[t.split("/")[-1].split(".")[0]] / 2 for t in integ[1:]})
    started = _run(unit + integ, cost)
    ends = {t: at + cost[t] for t, (at, _) in started.items()}
    # Unit tests first, but for the two held back to wait behind a long last test.
    fillers = [t for t in unit if started[t][0] > min(started[t][0] for t in integ)]
    assert fillers == unit[-2:] or fillers == unit[-1:], fillers
    # The sweep and the long module start at once, on different workers, and nothing of
    # the integration tests waits behind the sweep's single test: the suite ends with it
    # (pytest-xdist's own scheduling queued the shared group behind it: 350 s).
    (sweep_at, sweep_on), (long_at, long_on) = started[integ[0]], started[integ[1]]
    assert sweep_on != long_on and max(sweep_at, long_at) < 1
    assert not [t for t in integ[1:] if started[t][1] == sweep_on], started
    assert max(ends.values()) == pytest.approx(sweep_at + 300, abs=0.5)
    # The group's modules ran on one worker, in collection order.
    b1, b2 = started[integ[4]], started[integ[5]]
    assert b1[1] == b2[1] and b1[0] < b2[0]
