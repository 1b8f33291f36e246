"""chaos.workload.agent_forks: which agent zygote a controller forks from (its own, or its
keeper's) and what it does with a keeper it cannot use. Forking itself, for real:
tests/integration/test_warm_start.py."""

from __future__ import annotations

import os

import pytest

from chaos import contract
from chaos.workload import agent_forks


@pytest.fixture
def keeper_env(monkeypatch):
    monkeypatch.setattr(agent_forks, "_keeper_said", [])

    def given(value: str) -> agent_forks._Keeper | None:
        monkeypatch.setenv(contract.AGENT_ZYGOTE_KEEPER_ENV, value)
        return agent_forks._keeper()
    return given


def test_a_keeper_pipe_names_the_servers_of_every_controller_given_it(keeper_env):
    read_end, write_end = os.pipe()
    try:
        keeper = keeper_env(str(read_end))
        assert keeper == agent_forks._Keeper(read_end, os.fstat(read_end).st_ino)
        env = {"PATH": "/usr/bin", "LOGLEVEL": "INFO"}
        one = agent_forks._Server("/usr/bin/python3", env, keeper)
        # Another controller, the same pipe under another descriptor, the same environment.
        again = agent_forks._Server("/usr/bin/python3", dict(env), agent_forks._Keeper(99, keeper.ino))
        assert one.name == again.name and one.name.startswith(f"trainchaos-agents-k{keeper.ino}-")
        # What the agents import with differs: another server.
        assert agent_forks._Server("/usr/bin/python3", {**env, "LOGLEVEL": "DEBUG"}, keeper).name != one.name
        assert agent_forks._Server("/usr/bin/python3", env).name != one.name  # no keeper: its own
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_keeper_that_is_not_an_open_pipe_is_said_once_and_not_used(keeper_env, tmp_path, capsys):
    with open(tmp_path / "file", "w") as fh:
        assert keeper_env(str(fh.fileno())) is None
        assert "is not an open pipe (not a pipe)" in capsys.readouterr().err
    assert keeper_env("seven") is None
    assert keeper_env("1000000") is None
    assert capsys.readouterr().err == ""  # said once for the controller's life
    assert keeper_env("") is None
