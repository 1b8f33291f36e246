"""The embedded Toxiproxy server against its OpenAPI description (chaos/net/toxiproxy/
openapi.yaml): the paths and methods the router serves are the described ones; every status
code described is reached by a real request, and its answer (status, content type, body)
validates against the description; the regressions schemathesis found, one test each; and
schemathesis itself against a live server, a short run with a fixed seed (the long one is
docs/network.md's command)."""

from __future__ import annotations

import functools
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
import yaml

from chaos.net.toxiproxy.server import ToxiproxyServer
from tests.unit._toxiproxy_support import LOOPBACK, Server, free_port, running_server

SPEC = Path(__file__).resolve().parents[2] / "chaos" / "net" / "toxiproxy" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
FUZZ_EXAMPLES, FUZZ_SEED = 5, 1
"""make test's run: every phase, 5 cases per operation in fuzzing (about 1,000 requests, most
of them the coverage phase's; about 9 s of CPU on a 2-core host)."""


def _spec() -> dict[str, Any]:
    return yaml.safe_load(SPEC.read_text(encoding="utf-8"))


@functools.cache
def _schema() -> Any:
    return schemathesis.openapi.from_path(str(SPEC))


def _described() -> dict[str, set[str]]:
    """Path template -> its methods, upper case."""
    return {path: {m.upper() for m in item if m in METHODS} for path, item in _spec()["paths"].items()}


def _concrete(template: str) -> str:
    return template.replace("{proxy}", "p").replace("{toxic}", "t")


# -- the routes --------------------------------------------------------------------------------


def test_every_route_is_described_and_every_described_route_served() -> None:
    router = ToxiproxyServer()
    for template, methods in _described().items():
        handlers = router.routes(_concrete(template))
        assert handlers is not None and set(handlers) == methods, template
    # Paths next to the described ones (deeper, shallower, an empty name, upstream's
    # /metrics) are not routes: 404 for them is what the description promises by omission.
    for path in ("/", "/metrics", "/proxies/", "/proxies/p/", "/proxies/p/other", "/proxies/p/toxics/",
                 "/proxies/p/toxics/t/x", "/version/x", "/reset/x", "/populate/x"):
        assert router.routes(path) is None, path


# -- every described status, reached ------------------------------------------------------------


class _Client:
    """Requests to one server, each answer checked against the description."""

    def __init__(self, server: Server) -> None:
        self.base = f"http://{LOOPBACK}:{server.port}"
        self.schema = _schema()
        self.reached: set[tuple[str, str, int]] = set()

    def call(self, method: str, template: str, body: Any = None, raw: bytes | None = None,
             user_agent: str = "pytest", **names: str) -> requests.Response:
        path = template.format(**names)
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        response = requests.request(method, self.base + path, data=data, timeout=10,
                                    headers={"User-Agent": user_agent, "Content-Type": "application/json"})
        self.schema[template][method].validate_response(response)
        self.reached.add((method, template, response.status_code))
        return response

    def proxy(self, name: str = "p", listen: str = f"{LOOPBACK}:0", enabled: bool = True) -> dict[str, Any]:
        reply = self.call("POST", "/proxies", {"name": name, "upstream": f"{LOOPBACK}:1", "listen": listen,
                                               "enabled": enabled})
        assert reply.status_code == 201, reply.text
        return reply.json()

    def toxic(self, proxy: str = "p", name: str = "t") -> None:
        reply = self.call("POST", "/proxies/{proxy}/toxics", {"name": name, "type": "latency"}, proxy=proxy)
        assert reply.status_code == 200, reply.text


@contextmanager
def _taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen(1)
        yield sock.getsockname()[1]


CASES: list[tuple[str, Callable[[_Client], None]]] = []


def _case(fn: Callable[[_Client], None]) -> Callable[[_Client], None]:
    CASES.append((fn.__name__, fn))
    return fn


@_case
def plain_reads(c: _Client) -> None:
    assert c.call("GET", "/version").json()["version"]
    assert c.call("GET", "/proxies").json() == {}
    assert c.call("GET", "/proxies/{proxy}", proxy="p").status_code == 404
    assert c.call("GET", "/proxies/{proxy}/toxics", proxy="p").status_code == 404
    assert c.call("GET", "/proxies/{proxy}/toxics/{toxic}", proxy="p", toxic="t").status_code == 404
    c.proxy()
    assert c.call("GET", "/proxies/{proxy}", proxy="p").status_code == 200
    assert c.call("GET", "/proxies/{proxy}/toxics/{toxic}", proxy="p", toxic="t").status_code == 404
    c.toxic()
    assert c.call("GET", "/proxies/{proxy}/toxics", proxy="p").status_code == 200
    assert c.call("GET", "/proxies/{proxy}/toxics/{toxic}", proxy="p", toxic="t").status_code == 200


@_case
def browsers(c: _Client) -> None:
    for template, methods in _described().items():
        for method in methods:
            reply = c.call(method, template, {}, user_agent="Mozilla/5.0", proxy="p", toxic="t")
            assert reply.status_code == 403, (method, template)


@_case
def proxies_made_changed_removed(c: _Client) -> None:
    c.proxy()
    for method in ("POST", "PATCH"):
        assert c.call(method, "/proxies/{proxy}", {"enabled": False}, proxy="p").status_code == 200
        assert c.call(method, "/proxies/{proxy}", {"enabled": "no"}, proxy="p").status_code == 400
        assert c.call(method, "/proxies/{proxy}", {"enabled": True}, proxy="q").status_code == 404
    assert c.call("POST", "/proxies", {"name": "p"}).status_code == 400
    assert c.call("POST", "/proxies", {"name": "p", "upstream": "u:1"}).status_code == 409
    assert c.call("DELETE", "/proxies/{proxy}", proxy="p").status_code == 204
    assert c.call("DELETE", "/proxies/{proxy}", proxy="p").status_code == 404
    assert c.call("POST", "/reset").status_code == 204


@_case
def listen_addresses(c: _Client) -> None:
    assert c.call("POST", "/proxies", {"name": "bad", "upstream": "u:1", "listen": "nope"}).status_code == 400
    with _taken_port() as port:
        assert c.call("POST", "/proxies", {"name": "in-use", "upstream": "u:1",
                                           "listen": f"{LOOPBACK}:{port}"}).status_code == 409
        for method in ("POST", "PATCH"):
            # As upstream, the proxy is left stopped on the address asked for.
            c.proxy(method)
            body = {"listen": f"{LOOPBACK}:{port}"}
            assert c.call(method, "/proxies/{proxy}", body, proxy=method).status_code == 409
        # A disabled proxy whose port is taken meanwhile: reset cannot enable it again.
        listen = c.proxy("off", listen=f"{LOOPBACK}:{free_port()}")["listen"]
        assert c.call("POST", "/proxies/{proxy}", {"enabled": False}, proxy="off").status_code == 200
        with socket.socket() as squatter:
            _bind_when_released(squatter, int(listen.rsplit(":", 1)[1]))
            squatter.listen(1)
            assert c.call("POST", "/reset").status_code == 409


def _bind_when_released(sock: socket.socket, port: int, within_s: float = 10.0) -> None:
    """Bind ``sock`` to the port a proxy was just disabled on: its listener is closed by the
    server's own thread, which a busy host may run a moment after the reply."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            sock.bind((LOOPBACK, port))
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@_case
def populate(c: _Client) -> None:
    entry = {"name": "one", "upstream": "u:1", "listen": f"{LOOPBACK}:0"}
    assert c.call("POST", "/populate", [entry]).json()["proxies"][0]["name"] == "one"
    assert c.call("POST", "/populate", [{"name": "two"}]).status_code == 400  # text/plain
    reply = c.call("POST", "/populate", [{"name": "two", "upstream": "u:1", "listen": "nope"}])
    assert reply.status_code == 400 and reply.json()["proxies"] is None  # application/json
    with _taken_port() as port:
        reply = c.call("POST", "/populate", [{"name": "three", "upstream": "u:1", "listen": f"{LOOPBACK}:{port}"}])
        assert reply.status_code == 409


@_case
def toxics(c: _Client) -> None:
    assert c.call("POST", "/proxies/{proxy}/toxics", {"type": "noop"}, proxy="p").status_code == 404
    c.proxy()
    c.toxic()
    assert c.call("POST", "/proxies/{proxy}/toxics", {"name": "t", "type": "noop"}, proxy="p").status_code == 409
    assert c.call("POST", "/proxies/{proxy}/toxics", {"type": "nope"}, proxy="p").status_code == 400
    for method in ("POST", "PATCH"):
        template = "/proxies/{proxy}/toxics/{toxic}"
        assert c.call(method, template, {"attributes": {"latency": 5}}, proxy="p", toxic="t").status_code == 200
        assert c.call(method, template, {"toxicity": "x"}, proxy="p", toxic="t").status_code == 400
        assert c.call(method, template, {}, proxy="p", toxic="u").status_code == 404
    assert c.call("DELETE", "/proxies/{proxy}/toxics/{toxic}", proxy="p", toxic="t").status_code == 204
    assert c.call("DELETE", "/proxies/{proxy}/toxics/{toxic}", proxy="p", toxic="t").status_code == 404


def test_every_described_status_is_reached_and_answered_as_described() -> None:
    reached: set[tuple[str, str, int]] = set()
    for _, case in CASES:
        with running_server() as server:
            client = _Client(server)
            case(client)
            reached |= client.reached
    described = {(method.upper(), path, int(status)) for path, item in _spec()["paths"].items()
                 for method, op in item.items() if method in METHODS for status in op["responses"]}
    assert described - reached == set(), "described, never reached"
    assert reached - described == set(), "reached, not described"


# -- what schemathesis found, each a regression ------------------------------------------------


@pytest.fixture
def api() -> Iterator[_Client]:
    with running_server() as server:
        yield _Client(server)


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "PUT", "HEAD", "OPTIONS", "FROBNICATE"])
def test_any_other_method_is_405_with_allow(api: _Client, method: str) -> None:
    # http.server answered a method with no do_ handler (TRACE, CONNECT...) 501 (a 5xx).
    reply = requests.request(method, f"{api.base}/proxies/p/toxics/t", timeout=10)
    assert reply.status_code == 405 and reply.headers["Allow"] == "DELETE, GET, PATCH, POST"
    assert requests.request(method, f"{api.base}/nowhere", timeout=10).status_code == 404


@pytest.mark.parametrize(("listen", "status", "message"), [
    ("", 400, "listen tcp: address : missing port in address"),
    ("[::1]", 400, "listen tcp: address [::1]: missing port in address"),
    ("127.0.0.1:١٢", 400, "listen tcp: lookup tcp/١٢: unknown port"),  # Go reads ASCII digits only
    ("127.0.0.1:65536", 400, "listen tcp: address 127.0.0.1:65536: invalid port"),
    ("\U000f3757:0", 409, "listen tcp: lookup \U000f3757: no such host"),  # IDNA cannot encode it
    ("a\x00b:0", 409, "listen tcp: lookup a\x00b: no such host"),
])
def test_a_listen_address_that_cannot_be_used_is_a_4xx(api: _Client, listen: str, status: int, message: str) -> None:
    # These were 500s (a bad address on update; a name IDNA refuses anywhere).
    api.proxy()
    reply = api.call("PATCH", "/proxies/{proxy}", {"listen": listen}, proxy="p")
    assert (reply.status_code, reply.json()["error"]) == (status, message)


def test_a_disabled_proxy_with_a_malformed_address_is_refused(api: _Client) -> None:
    # It was stored, and POST /reset then failed with a 500.
    reply = api.call("POST", "/proxies", {"name": "p", "upstream": "u:1", "listen": "x", "enabled": False})
    assert reply.status_code == 400 and api.call("GET", "/proxies").json() == {}


@pytest.mark.parametrize("toxicity", [1e39, -1e39, 10 ** 400], ids=["1e39", "-1e39", "10**400"])
def test_a_toxicity_beyond_float32_is_refused(api: _Client, toxicity: float) -> None:
    # 10**400 was an OverflowError (500); 1e39 was kept although Go's float32 refuses it.
    api.proxy()
    body = {"type": "noop", "toxicity": toxicity}
    assert api.call("POST", "/proxies/{proxy}/toxics", body, proxy="p").status_code == 400
    api.toxic()
    reply = api.call("PATCH", "/proxies/{proxy}/toxics/{toxic}", {"toxicity": toxicity}, proxy="p", toxic="t")
    assert reply.status_code == 400


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(api: _Client, constant: str) -> None:
    # Python's decoder took them: the toxic was then answered with Infinity, which no JSON
    # client reads.
    api.proxy()
    raw = f'{{"type": "noop", "toxicity": {constant}}}'.encode()
    reply = api.call("POST", "/proxies/{proxy}/toxics", raw=raw, proxy="p")
    assert reply.status_code == 400 and reply.json()["error"].startswith("bad request body: invalid character")


def test_an_attribute_of_another_type_must_still_be_an_int64(api: _Client) -> None:
    # The description types every attribute name: a latency toxic given {"rate": "fast"} was
    # 200 (ignored), a request the description calls invalid.
    api.proxy()
    api.toxic()
    template = "/proxies/{proxy}/toxics/{toxic}"
    assert api.call("PATCH", template, {"attributes": {"rate": "fast"}}, proxy="p", toxic="t").status_code == 400
    reply = api.call("PATCH", template, {"attributes": {"rate": 5, "latency": 7}}, proxy="p", toxic="t")
    assert reply.json()["attributes"] == {"latency": 7, "jitter": 0}  # rate: not a latency toxic's


# -- schemathesis against a live server ----------------------------------------------------------


def fuzz_command(url: str, examples: int, seed: int) -> list[str]:
    """docs/network.md's command (there with more examples)."""
    return [sys.executable, "-m", "schemathesis.cli", "run", str(SPEC), "--url", url, "--checks", "all",
            "--max-examples", str(examples), "--seed", str(seed), "--workers", "1", "--no-color"]


def test_schemathesis_finds_nothing_against_a_live_server(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, "-m", "chaos.net.toxiproxy", "--port", "0", "--port-file",
                               str(port_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            if port_file.exists() or server.poll() is not None:
                break
            time.sleep(0.05)
        assert port_file.exists(), server.stderr.read() if server.stderr else ""
        url = f"http://{LOOPBACK}:{port_file.read_text()}"
        # cwd: schemathesis keeps its Hypothesis database there.
        run = subprocess.run(fuzz_command(url, FUZZ_EXAMPLES, FUZZ_SEED), cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
        summary = run.stdout[-4000:]
        assert run.returncode == 0, summary
        assert re.search(r"(\d+) generated, \1 passed", summary), summary
        assert server.poll() is None, "the server died under the fuzz"
    finally:
        server.terminate()
        server.wait(timeout=10)
