"""The ``toxic`` fault: bad parameters are located errors, a toxic on a service that is not
behind a proxy is refused before anything starts, and inject/revert act on a real embedded
Toxiproxy server (in-process, loopback) through the client, also from the journal record
alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster.base import InjectionContext, ResolvedTarget
from chaos.cluster.capabilities import ServiceProxies
from chaos.cluster.netns import NetnsCluster
from chaos.errors import ScenarioError
from chaos.faults.base import lookup
from chaos.net import fabric
from chaos.net import toxiproxy as toxi
from chaos.net.toxiproxy.server import serve
from chaos.scenario.load import load_scenario

SCENARIO = """\
name: toxic
workload: {{harness: {{model: {{name: mlp}}, steps: 50, global_batch: 24}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
backend: {backend}
faults:
  - type: toxic
    target: {{job: true}}
    trigger: {{at_step: 10}}
    params: {params}
"""


def _load(tmp_path: Path, params: str, backend: str = "{netns: {proxy_services: [rendezvous]}}") -> Any:
    path = tmp_path / "t.yaml"
    path.write_text(SCENARIO.format(params=params, backend=backend))
    return load_scenario(str(path))


@pytest.mark.parametrize(("params", "location", "fragment"), [
    ("{toxic: latency, attributes: {rate: 5}}", "faults[0].params.attributes.rate",
     "latency has no attribute 'rate'; allowed: latency, jitter"),
    ("{toxic: down, attributes: {timeout: 5}}", "faults[0].params.attributes.timeout", "it takes none"),
    ("{toxic: timeout, attributes: {timeout: -1}}", "faults[0].params.attributes.timeout", "negative"),
    ("{toxic: earthquake}", "faults[0].params.toxic", "latency"),
    ("{toxic: latency, proxy: gossip}", "faults[0].params.proxy", "rendezvous"),
    ("{toxic: latency, stream: sideways}", "faults[0].params.stream", "upstream"),
])
def test_bad_toxic_params_are_located_errors(tmp_path: Path, params: str, location: str, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        _load(tmp_path, params)
    text = str(info.value)
    assert len(info.value.issues) == 1 and location in text and fragment in text, text


def test_toxic_on_a_service_without_proxy_is_refused_before_start(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fabric, "missing_capabilities", lambda: [])
    scenario = _load(tmp_path, "{toxic: down}", backend="netns")
    (line,) = NetnsCluster.preflight(scenario)
    assert line.startswith("faults[0].params.proxy: 'rendezvous' is not behind a proxy") and "proxy_services" in line
    assert NetnsCluster.preflight(_load(tmp_path, "{toxic: down}")) == []


@pytest.fixture
def url() -> Iterator[str]:
    httpd, state = serve("127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        state.shutdown()
        httpd.server_close()


class _Cluster:
    name = "netns"
    capabilities = (ServiceProxies,)

    def __init__(self, url: str) -> None:
        self.toxiproxy_url = url
        self.proxies = {"rendezvous": "trainchaos-x-rendezvous"}

    def service_proxy(self, service: str) -> tuple[str, str] | None:
        return (self.toxiproxy_url, self.proxies[service]) if service in self.proxies else None

    def namespace(self, n: int) -> str:
        return f"tc-x-n{n}"

    def node_interface(self, n: int) -> str:
        return f"tc-x-p{n}"


def _fault(**params: Any) -> Any:
    cls = lookup("toxic")
    return cls(fault_id="f1-toxic", target=ResolvedTarget(), params=cls.params_model.model_validate(params).model_dump())


def test_toxic_is_added_and_removed_and_down_is_undone(url: str) -> None:
    proxy = toxi.client(url).create(upstream="127.0.0.1:1", name="trainchaos-x-rendezvous", listen="127.0.0.1:0")
    ctx = InjectionContext("/nonexistent", _Cluster(url), None)  # type: ignore[arg-type]
    slow = _fault(toxic="latency", attributes={"latency": 200}, stream="upstream")
    assert slow.failure_class == "slow"
    record = slow.inject(ctx)
    (toxic,) = proxy.toxics().values()
    assert (toxic.name, toxic.type, toxic.stream, toxic.attributes) == (
        "trainchaos-f1-toxic", "latency", "upstream", {"latency": 200, "jitter": 0})
    slow.revert(ctx, record)
    assert proxy.toxics() == {}
    down = _fault(toxic="down", duration_s=5)
    assert down.failure_class == "network"
    record = down.inject(ctx)
    assert ctx.scheduled_reverts
    assert toxi.client(url).get_proxy(proxy.name).enabled is False
    type(down).revert_record(record)  # what cleanup does, from the journal record alone
    assert toxi.client(url).get_proxy(proxy.name).enabled is True
    type(down).revert_record({**record, "url": "http://127.0.0.1:1"})  # server gone: nothing to undo


def test_store_timeout_is_an_explicit_harness_option() -> None:
    from harness.config import ConfigError
    from harness.config_load import config_from_args, config_from_mapping, config_to_args

    cfg = config_from_mapping({"failure": {"store_timeout_s": 5, "collective_timeout_s": 20}})
    args = config_to_args(cfg)
    assert args[args.index("--failure-store-timeout-s") + 1] == "5.0"
    assert config_from_args(args).failure.store_timeout_s == 5.0  # what each rank reads back
    with pytest.raises(ConfigError, match="store_timeout_s"):
        config_from_mapping({"failure": {"store_timeout_s": -1}})


def test_toxiproxy_url_server_is_used_and_left_as_found(url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.cluster.base import RunSpec
    from chaos.model.scenario import Topology
    from chaos.runfiles.resources import RunResources

    monkeypatch.setenv("TOXIPROXY_URL", url)
    run_id = "trainchaos-0123456789"
    resources = RunResources(run_id, str(tmp_path))
    spec = RunSpec(run_id=run_id, run_dir=str(tmp_path), topology=Topology(nodes=2, ranks_per_node=1),
                   worker_argv=[], options={"proxy_services": ["rendezvous"]})
    cluster = NetnsCluster(spec, resources)
    cluster.gateway, cluster.rdzv_port = "127.0.0.1", 4242
    cluster._start_proxies()
    try:
        assert cluster.toxiproxy_url == url  # no embedded server started
        found = toxi.client(url).get_proxy("trainchaos-01234567-rendezvous")
        assert found is not None and found.upstream == "127.0.0.1:4242"
        assert cluster.agent_rdzv_port == int(found.listen.rsplit(":", 1)[1])
    finally:
        assert resources.release_all() == []
    assert toxi.client(url).proxies() == {}
