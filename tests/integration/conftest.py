"""Fixtures and capability skips every integration test shares (the helpers themselves are
in ``_support.py``).

A test marked with a capability (``netns``, ``docker``, ``slurm``, ``fuse``, ``chromium``:
see ``_support.py``) is skipped with the probe's reason when this machine lacks it, before
any of its fixtures starts; each probe runs once a session, and only if a test that needs
it was selected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.contract import WARM_START_ENV
from tests.integration._dockerd import docker_host  # noqa: F401  (session fixture, for the docker tests)
from tests.integration._shared_runs import smoke_device_error  # noqa: F401  (session fixture)
from tests.integration._support import CAPABILITIES, machine_cleanup_lock, missing, state_dir_env


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for capability in CAPABILITIES:
        if item.get_closest_marker(capability) is not None and (reason := missing(capability)):
            # Reported at the test, not at this hook (as pytest's own skip marks are).
            raise pytest.skip.Exception(f"{capability}: {reason}", _use_item_location=True)


@pytest.fixture(scope="session", autouse=True)
def _warm_starts() -> Iterator[None]:
    """Every harness run of the integration tests starts its ranks warm where its scenario
    does not say (TRAINCHAOS_WARM_START=1): the suite runs on two cores, and a cold rank's
    start is ~4 CPU-seconds of imports, paid again at every restart. Tests that assert
    what a cold launch is set ``warm_start: false`` (test_power's outage); test_warm_start and
    test_harness compare both. ``TRAINCHAOS_WARM_START=0 make test`` runs the suite cold."""
    before = os.environ.get(WARM_START_ENV)
    os.environ[WARM_START_ENV] = before or "1"
    yield
    if before is None:
        os.environ.pop(WARM_START_ENV, None)


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """The test's own state dir, set for runs started in this process (``run_scenario_once``)."""
    with state_dir_env(tmp_path / "state") as path:
        yield path


@pytest.fixture(autouse=True)
def _machine_cleanup(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``machine_cleanup`` runs alone among such tests (see
    ``machine_cleanup_lock``). Autouse, so it is taken before the test's own fixtures and
    released after their teardown."""
    if request.node.get_closest_marker("machine_cleanup") is None:
        yield
        return
    with machine_cleanup_lock():
        yield
