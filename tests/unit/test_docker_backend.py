"""The ``docker`` backend and container faults without an engine: options validated with
locations, a clear exit 2 when no engine answers (nothing started), process handles that
cannot collide across containers, the blast-radius guard, the agent command and node
environment a container gets, and every container fault described in ``trainchaos faults``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from chaos.cli import cli
from chaos.cluster import lookup_backend
from chaos.cluster.base import RunSpec
from chaos.cluster.docker import STORE_HOST, DockerCluster
from chaos.cluster.docker_engine import LABEL_RUN, BlastRadiusError, owned
from chaos.cluster.docker_options import DockerOptions
from chaos.cluster.docker_procs import PID_STRIDE, handle, split_handle
from chaos.faults.base import known_types
from chaos.model.scenario import Topology
from chaos.workload.torchrun import TorchrunPerNode

RUN_ID = "trainchaos-0123456789"

SCENARIO = """\
name: d
workload: {{harness: {{model: {{name: mlp}}, steps: 5}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
backend: {backend}
"""


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``chaos.cli.main`` in-process (errors mapped to exit codes); (exit code, all output)."""
    from chaos.cli import main

    monkeypatch.setattr(sys, "argv", ["trainchaos", *argv])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def _write(tmp_path: Path, backend: str) -> str:
    path = tmp_path / "d.yaml"
    path.write_text(SCENARIO.format(backend=backend))
    return str(path)


def test_backend_is_registered_with_its_options_model() -> None:
    assert lookup_backend("docker") is DockerCluster
    opts = DockerOptions.model_validate({"hosts": ["ssh://staging-2"], "image": "team/train:1"})
    assert opts.hosts == ["ssh://staging-2"] and opts.shm_size == "256m"


def test_bad_options_are_located_input_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "{docker: {hosts: unix:///x.sock, cpus: -1, imag: x}}")
    code, out = _main(["validate", path], monkeypatch, capsys)
    assert code == 2
    for where in ("backend.docker.hosts", "backend.docker.cpus", "imag"):
        assert where in out, out


def test_no_engine_is_exit_2_with_a_clear_line_and_nothing_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "no-such.sock"
    path = _write(tmp_path, f"{{docker: {{hosts: ['unix://{sock}']}}}}")
    code, out = _main(["run", path, "--out", str(tmp_path / "out")], monkeypatch, capsys)
    assert code == 2
    assert f"d.yaml: backend: docker: no docker engine answers at unix://{sock}" in out, out
    assert not (tmp_path / "out").exists()


def test_preflight_says_which_engine_does_not_answer(tmp_path: Path) -> None:
    from chaos.scenario.load import load_scenario

    sock = tmp_path / "gone.sock"
    scenario = load_scenario(_write(tmp_path, f"{{docker: {{hosts: ['unix://{sock}']}}}}"))
    problems = DockerCluster.preflight(scenario)
    assert len(problems) == 1 and f"no docker engine answers at unix://{sock}" in problems[0]
    assert "DOCKER_HOST" in problems[0]


def test_process_handles_name_one_process_of_one_node() -> None:
    assert split_handle(handle(3, 4_194_303)) == (3, 4_194_303)
    # The same pid in two containers (pid namespaces overlap): two different handles.
    assert handle(0, 57) != handle(1, 57)
    assert handle(1, 1) == PID_STRIDE + 1


def _obj(name: str, labels: dict[str, str]) -> SimpleNamespace:
    return SimpleNamespace(name=name, labels=labels)


def test_guard_refuses_anything_not_labelled_and_named_for_the_run() -> None:
    mine = _obj(f"{RUN_ID}-n1", {LABEL_RUN: RUN_ID})
    assert owned(mine, RUN_ID) is mine
    for stranger in (_obj("postgres", {}), _obj(f"{RUN_ID}-n1", {LABEL_RUN: "trainchaos-other"}),
                     # a container started by someone else from the run's image inherits its label
                     _obj("someone-elses", {LABEL_RUN: RUN_ID})):
        with pytest.raises(BlastRadiusError, match="refusing to touch") as exc:
            owned(stranger, RUN_ID, "container")
        assert exc.value.exit_code == 2


def _cluster(tmp_path: Path, **options: object) -> DockerCluster:
    spec = RunSpec(run_id=RUN_ID, run_dir=str(tmp_path / "run"), topology=Topology(nodes=2, ranks_per_node=2),
                   worker_argv=["-m", "harness", "--steps", "5"], options=dict(options),
                   launcher=TorchrunPerNode(("-m", "harness", "--steps", "5")))
    cluster = DockerCluster(spec, resources=None)  # type: ignore[arg-type]
    import ipaddress

    cluster.subnet = ipaddress.ip_network("198.18.7.0/24")
    cluster.gateway = "198.18.7.1"
    cluster.rdzv_port = 29400
    return cluster


def test_agent_reaches_the_store_on_the_run_bridge_and_binds_its_own_address(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    argv = cluster.agent_command(1)
    assert argv[0] == sys.executable
    assert argv[argv.index("--rdzv-endpoint") + 1] == "198.18.7.1:29400"
    assert argv[argv.index("--local-addr") + 1] == "198.18.7.11"
    user_image = _cluster(tmp_path, image="team/train:1")
    assert user_image.agent_command(0)[0] == "python"


def test_a_node_finds_the_store_its_peers_and_itself_in_its_hosts_file(tmp_path: Path) -> None:
    """The c10d client looks up the name of the store's address: unnamed, that went to the
    engine's DNS and waited 10 s for a resolver that does not answer, at every agent start.
    Its own name is there too: gloo binds the address its hostname resolves to."""
    cluster = _cluster(tmp_path)
    both = {STORE_HOST: "198.18.7.1", "node0": "198.18.7.10", "node1": "198.18.7.11"}
    assert cluster.peer_hosts(1) == cluster.peer_hosts(0) == both
    # the spares' addresses are named too: one may replace a node of the first round
    spares = RunSpec(run_id=RUN_ID, run_dir=str(tmp_path / "run"), worker_argv=["-m", "harness"],
                     topology=Topology(nodes=2, ranks_per_node=1, spares=1))
    with_spare = DockerCluster(spares, resources=None)  # type: ignore[arg-type]
    with_spare.subnet, with_spare.gateway = cluster.subnet, cluster.gateway
    assert set(with_spare.peer_hosts(0)) == {STORE_HOST, "node0", "node1", "node2"}
    assert with_spare.peer_hosts(2)["node0"] == with_spare.node_address(0) == "198.18.7.10"


def test_container_env_is_the_node_identity_not_the_controllers_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_CONTROLLER_SECRET", "x")
    monkeypatch.setenv("DOCKER_HOST", "unix:///somewhere.sock")
    env = _cluster(tmp_path, image="team/train:1").node_env(1)
    assert env["TRAINCHAOS_RUN_ID"] == RUN_ID and env["TRAINCHAOS_NODE"] == "1"
    assert env["TMPDIR"].endswith(f"{RUN_ID}-n1")
    # not pinned to an interface name: after container_disconnect's revert it is eth1
    assert "GLOO_SOCKET_IFNAME" not in env
    assert "SOME_CONTROLLER_SECRET" not in env and "DOCKER_HOST" not in env and "PATH" not in env


def test_default_image_mounts_the_controllers_python_read_only_and_the_run_rw(tmp_path: Path) -> None:
    import os

    mounts = {m["Target"]: m for m in _cluster(tmp_path)._mounts(0)}
    assert mounts["/usr"]["ReadOnly"] and mounts[sys.prefix]["ReadOnly"]
    assert not mounts[str(tmp_path / "run")]["ReadOnly"]
    # /lib stays where a dynamic loader looks for it even where it links to /usr/lib.
    if os.path.islink("/lib"):
        assert mounts["/lib"]["Source"] == os.path.realpath("/lib")
    assert "/sbin" not in mounts  # the engine's init goes there


def test_container_faults_are_docker_only_with_mechanism_and_fidelity() -> None:
    types = known_types()
    for name in ("container_pause", "container_disconnect", "container_packet_loss", "container_limits"):
        cls = types[name]
        assert cls.supported_backends() == ("docker",) and cls.mechanism and len(cls.fidelity) > 100
    res = CliRunner().invoke(cli, ["faults"])
    assert "docker pause: the cgroup freezer" in res.output


def test_limits_fault_must_change_something(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "l.yaml"
    path.write_text(SCENARIO.format(backend="docker") + "faults:\n  - type: container_limits\n"
                    "    target: {node: 1}\n    trigger: {at_step: 2}\n")
    code, out = _main(["validate", str(path)], monkeypatch, capsys)
    assert code == 2 and "faults[0].params: set cpus, memory_mb or both" in out, out


def test_container_fault_on_another_backend_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SCENARIO.format(backend="local") + "faults:\n  - type: container_pause\n"
                    "    target: {node: 1}\n    trigger: {at_step: 2}\n    params: {duration_s: 2}\n")
    code, out = _main(["validate", str(path)], monkeypatch, capsys)
    assert code == 2 and "faults[0].type: container_pause" in out and "docker" in out, out


HOST_A, HOST_B = "unix:///tmp/a.sock", "ssh://staging-b"
ROUTED = {"hosts": [HOST_A, HOST_B, HOST_B], "store_address": "198.18.0.1",
          "subnets": {HOST_A: "198.18.10.0/24", HOST_B: "198.18.11.0/24"}}


def test_routed_hosts_give_each_node_an_address_of_its_hosts_subnet(tmp_path: Path) -> None:
    """Node i is .10+i of the subnet of the host it is placed on (a host named twice takes
    twice the nodes), and every node finds the store at the controller's routed address."""
    spec = RunSpec(run_id=RUN_ID, run_dir=str(tmp_path / "run"), topology=Topology(nodes=3, ranks_per_node=1),
                   worker_argv=["-m", "harness"], options=ROUTED)
    cluster = DockerCluster(spec, resources=None)  # type: ignore[arg-type]
    cluster.rdzv_port = 29400
    assert [cluster.host_of(n) for n in range(3)] == [HOST_A, HOST_B, HOST_B]
    assert [cluster.node_address(n) for n in range(3)] == ["198.18.10.10", "198.18.11.11", "198.18.11.12"]
    assert cluster.peer_hosts(2) == {STORE_HOST: "198.18.0.1", "node0": "198.18.10.10",
                                     "node1": "198.18.11.11", "node2": "198.18.11.12"}
    assert cluster.rdzv_endpoint() == "198.18.0.1:29400"


@pytest.mark.parametrize(("options", "said"), [
    ({**ROUTED, "subnets": {HOST_A: "198.18.10.0/24"}}, f"host {HOST_B} has no subnet"),
    ({**ROUTED, "subnets": {HOST_A: "198.18.10.0/24", HOST_B: "198.18.10.128/25"}}, "overlaps"),
    ({**ROUTED, "subnets": {HOST_A: "198.18.10.1/24", HOST_B: "198.18.11.0/24"}}, "host bits zero"),
    ({**ROUTED, "store_address": None}, "store_address: required with subnets"),
    ({**ROUTED, "store_address": "controller"}, "is not an IP address"),
])
def test_routed_hosts_options_are_refused_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          options: dict, said: str) -> None:
    import yaml

    path = tmp_path / "d.yaml"
    path.write_text(SCENARIO.format(backend=yaml.safe_dump({"docker": options}, default_flow_style=True).strip()))
    code, out = _main(["validate", str(path)], monkeypatch, capsys)
    assert code == 2 and "backend.docker" in out and said in out, out


def test_preflight_says_when_the_store_address_is_not_this_machines() -> None:
    from chaos.cluster.docker_options import _routing_problems

    options = DockerOptions.model_validate({**ROUTED, "store_address": "192.0.2.254"})
    problems = _routing_problems(options, 3)
    assert len(problems) == 1 and "docker.store_address: 192.0.2.254 is not an address of this machine" in problems[0]
    small = DockerOptions.model_validate({**ROUTED, "store_address": "127.0.0.1",
                                          "subnets": {HOST_A: "198.18.10.0/28", HOST_B: "198.18.11.0/28"}})
    assert _routing_problems(small, 6) == [f"docker.subnets: {HOST_B}'s 198.18.11.0/28 has no address .15 for node 5"]


def test_cleanup_scans_every_engine_named_besides_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.cluster import docker_engine

    monkeypatch.setenv("DOCKER_HOST", HOST_A)
    monkeypatch.setenv(docker_engine.DOCKER_HOSTS_ENV, f"{HOST_B}, {HOST_A},unix:///gone.sock")
    monkeypatch.setattr(docker_engine, "engine_problem", lambda url: "down" if "gone" in url else None)
    assert docker_engine.scanned_hosts() == [HOST_A, HOST_B]
    # and the nodes are not told where the controller's cleanup looks
    env = _cluster(Path("/tmp/x")).node_env(0)
    assert docker_engine.DOCKER_HOSTS_ENV not in env
