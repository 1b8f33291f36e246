"""Toxiproxy's own API tests (upstream's api_test.go and the API-visible cases of
proxy_test.go), ported to the embedded server: real HTTP on loopback, the requests upstream's
Go client makes, the statuses, messages and JSON shapes upstream's tests assert. Upstream's
fixed ports (3310, 7070...) are free loopback ports here; everything else is as upstream
asserts it, except where docs/network.md lists a difference (the version string, 409 or 400
where upstream answers 500)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from chaos.net.toxiproxy.server import VERSION
from tests.unit._toxiproxy_support import (
    LOOPBACK,
    Api,
    LineEcho,
    Server,
    connect,
    free_port,
    is_up,
    read_line,
    running_server,
)


@pytest.fixture
def server() -> Iterator[Server]:
    with running_server() as s:
        yield s


@pytest.fixture
def api(server: Server) -> Iterator[Api]:
    a = server.api()
    yield a
    a.close()


def _toxic(toxics: list[dict], name: str) -> dict | None:
    return next((t for t in toxics if t["name"] == name), None)


# -- the HTTP layer ----------------------------------------------------------------------------


def test_request_id(api: Api) -> None:
    api.user_agent = "curl"
    reply = api.get("/version")
    assert reply.status == 200 and reply.headers["X-Toxiproxy-Request-Id"]


def test_browser_gets_403(api: Api) -> None:
    api.user_agent = ("Mozilla/5.0 (Linux; Android 4.4.2); Nexus 5 Build/KOT49H) AppleWebKit/537.36"
                      "(KHTML, like Gecko) Chrome/33.0.1750.117 Mobile Safari/537.36 OPR/20.0.1396.72047")
    assert api.get("/proxies").status == 403


def test_non_browser_gets_200(api: Api) -> None:
    api.user_agent = "Wget/2.1"
    assert api.get("/proxies").status == 200


def test_version_endpoint_returns_version(api: Api) -> None:
    reply = api.get("/version")
    # Upstream's test expects its build's version ("git"); the format is the same.
    assert reply.raw == f'{{"version": "{VERSION}"}}\n'.encode()
    assert reply.headers["Content-Type"] == "application/json;charset=utf-8"


def test_unknown_path_is_404_and_other_method_405(api: Api) -> None:
    assert api.get("/nope").status == 404
    assert api.delete("/proxies").status == 405
    assert api.request("PUT", "/proxies/x").status == 405
    assert api.get("/populate").status == 405


@pytest.mark.parametrize(("method", "path", "raw"), [
    ("POST", "/populate", b'{"name": "one"}'),
    ("POST", "/proxies", b"[]"),
    ("POST", "/proxies", b'"text"'),
    ("POST", "/proxies", b"{not json"),
    ("POST", "/proxies", b""),
    ("POST", "/proxies/p", b"[1, 2]"),
    ("PATCH", "/proxies/p", b"42"),
    ("POST", "/proxies/p/toxics", b"[]"),
    ("POST", "/proxies/p/toxics", b'{"type": "latency", "attributes": [1]}'),
    ("POST", "/proxies/p/toxics", b'{"type": "latency", "attributes": {"latency": "slow"}}'),
    ("POST", "/proxies/p/toxics", b'{"type": "latency", "attributes": {"latency": 1.5}}'),
    ("POST", "/proxies/p/toxics", b'{"type": "latency", "toxicity": "high"}'),
    ("POST", "/proxies/p/toxics/t", b"true"),
    ("PATCH", "/proxies/p/toxics/t", b'{"attributes": {"latency": null, "jitter": "x"}}'),
])
def test_bad_bodies_get_a_400_on_a_connection_that_stays_usable(api: Api, method: str, path: str,
                                                                 raw: bytes) -> None:
    upstream = f"{LOOPBACK}:{free_port()}"
    assert api.create_proxy("p", f"{LOOPBACK}:0", upstream).status == 201
    assert api.add_toxic("p", "t", "latency").status == 200
    reply = api.request(method, path, raw=raw)
    assert reply.status == 400, reply
    assert reply.json["status"] == 400 and reply.json["error"].startswith("bad request body"), reply.json
    assert api.get("/proxies").status == 200  # the same keep-alive connection answers on


def test_an_empty_body_is_upstreams_eof(api: Api) -> None:
    reply = api.post("/proxies", raw=b"")
    assert reply.error == (400, "bad request body: EOF")
    # upstream sends its error objects through Go's http.Error: as text, one line
    assert reply.raw == b'{"error":"bad request body: EOF","status":400}\n'
    assert reply.headers["Content-Type"] == "text/plain; charset=utf-8"


def test_only_the_first_json_value_is_read(api: Api) -> None:
    raw = b'{"name": "p", "upstream": "127.0.0.1:1", "listen": "127.0.0.1:0"} trailing'
    assert api.post("/proxies", raw=raw).status == 201


# -- proxies -----------------------------------------------------------------------------------


def test_index_with_no_proxies(api: Api) -> None:
    reply = api.get("/proxies")
    assert reply.status == 200 and reply.json == {}


def test_create_proxy_blank_name(api: Api) -> None:
    assert api.create_proxy("", "", "").error == (400, "missing required field: name")


def test_create_proxy_blank_upstream(api: Api) -> None:
    assert api.create_proxy("test", "", "").error == (400, "missing required field: upstream")


def test_listing_proxies(api: Api) -> None:
    port = free_port()
    assert api.create_proxy("mysql_master", f"localhost:{port}", "localhost:20001").status == 201
    proxies = api.get("/proxies").json
    proxy = proxies["mysql_master"]
    assert (proxy["name"], proxy["listen"], proxy["upstream"]) == (
        "mysql_master", f"127.0.0.1:{port}", "localhost:20001")
    assert proxy["toxics"] == []


def test_create_and_get_proxy(api: Api) -> None:
    port = free_port()
    created = api.create_proxy("mysql_master", f"localhost:{port}", "localhost:20001")
    assert created.status == 201
    assert set(created.json) == {"name", "listen", "upstream", "enabled", "toxics"}
    proxy = api.get("/proxies/mysql_master").json
    assert proxy == {"name": "mysql_master", "listen": f"127.0.0.1:{port}", "upstream": "localhost:20001",
                     "enabled": True, "toxics": []}


def test_create_proxy_with_save(api: Api) -> None:
    # The Go client's Save() posts the whole proxy, toxics (null) included.
    port = free_port()
    body = {"name": "mysql_master", "listen": f"localhost:{port}", "upstream": "localhost:20001",
            "enabled": True, "toxics": None}
    assert api.post("/proxies", body).status == 201
    proxy = api.get("/proxies/mysql_master").json
    assert proxy["listen"] == f"127.0.0.1:{port}" and proxy["enabled"] is True
    assert is_up(proxy["listen"])


def test_create_disabled_proxy(api: Api) -> None:
    port = free_port()
    body = {"name": "mysql_master", "listen": f"localhost:{port}", "upstream": "localhost:20001",
            "enabled": False, "toxics": None}
    assert api.post("/proxies", body).status == 201
    proxy = api.get("/proxies/mysql_master").json
    # Never started: the address as given, not resolved.
    assert (proxy["listen"], proxy["enabled"]) == (f"localhost:{port}", False)
    assert not is_up(f"127.0.0.1:{port}")


def test_create_disabled_proxy_and_enable(api: Api) -> None:
    port = free_port()
    body = {"name": "mysql_master", "listen": f"localhost:{port}", "upstream": "localhost:20001", "enabled": False}
    assert api.post("/proxies", body).status == 201
    proxy = api.get("/proxies/mysql_master").json
    assert proxy["enabled"] is False
    proxy["enabled"] = True
    enabled = api.post("/proxies/mysql_master", proxy)
    assert enabled.status == 200 and enabled.json["listen"] == f"127.0.0.1:{port}"
    assert is_up(enabled.json["listen"])
    proxy = enabled.json
    proxy["enabled"] = False
    assert api.post("/proxies/mysql_master", proxy).status == 200
    assert not is_up(proxy["listen"])


def test_delete_proxy(api: Api) -> None:
    created = api.create_proxy("mysql_master", f"localhost:{free_port()}", "localhost:20001").json
    assert len(api.get("/proxies").json) == 1
    assert is_up(created["listen"])
    reply = api.delete("/proxies/mysql_master")
    assert reply.status == 204 and reply.raw == b""
    assert not is_up(created["listen"])
    assert api.get("/proxies").json == {}
    assert api.delete("/proxies/mysql_master").error == (404, "proxy not found")


def test_create_proxy_port_conflict(api: Api) -> None:
    port = free_port()
    assert api.create_proxy("mysql_master", f"localhost:{port}", "localhost:20001").status == 201
    # Upstream answers 500; here 409 (docs/network.md: no request gets a 5xx).
    assert api.create_proxy("test", f"localhost:{port}", "localhost:20001").error == (
        409, f"listen tcp 127.0.0.1:{port}: bind: address already in use")
    assert api.delete("/proxies/mysql_master").status == 204
    assert api.create_proxy("test", f"localhost:{port}", "localhost:20001").status == 201


def test_create_proxy_name_conflict(api: Api) -> None:
    assert api.create_proxy("mysql_master", f"localhost:{free_port()}", "localhost:20001").status == 201
    assert api.create_proxy("mysql_master", f"localhost:{free_port()}", "localhost:20001").error == (
        409, "proxy already exists")
    assert api.delete("/proxies/mysql_master").status == 204
    assert api.create_proxy("mysql_master", f"localhost:{free_port()}", "localhost:20001").status == 201


def test_unknown_proxy_is_404_on_every_call(api: Api) -> None:
    for reply in (api.get("/proxies/nope"), api.post("/proxies/nope", {"enabled": True}),
                  api.get("/proxies/nope/toxics"), api.add_toxic("nope", "", "latency"),
                  api.get("/proxies/nope/toxics/t"), api.remove_toxic("nope", "t")):
        assert reply.error == (404, "proxy not found")


def test_reset_state(api: Api) -> None:
    created = api.create_proxy("mysql_master", f"localhost:{free_port()}", "localhost:20001").json
    latency = api.add_toxic("mysql_master", "", "latency", "downstream", 1, {"latency": 100, "jitter": 10})
    assert latency.json["attributes"] == {"latency": 100, "jitter": 10}
    assert api.post("/proxies/mysql_master", {"enabled": False}).json["enabled"] is False
    reply = api.post("/reset", raw=b"")
    assert reply.status == 204
    proxy = api.get("/proxies").json["mysql_master"]
    assert proxy["enabled"] is True and proxy["toxics"] == []
    assert api.toxics("mysql_master") == []
    assert is_up(created["listen"])


def test_disabled_proxy_stays_disabled_when_its_upstream_changes(api: Api) -> None:
    created = api.create_proxy("p", f"{LOOPBACK}:0", "localhost:20001").json
    assert api.post("/proxies/p", {"enabled": False}).json["enabled"] is False
    moved = api.patch("/proxies/p", {"upstream": "localhost:20002"})
    assert moved.status == 200
    assert (moved.json["upstream"], moved.json["enabled"]) == ("localhost:20002", False)
    assert not is_up(created["listen"])
    # and an enabled one stays enabled, on its new upstream
    assert api.post("/proxies/p", {"enabled": True}).json["enabled"] is True
    assert api.patch("/proxies/p", {"upstream": "localhost:20003"}).json["enabled"] is True


def test_proxy_update_listen(api: Api) -> None:
    """proxy_test.go TestProxyUpdate: a new listen address restarts the proxy there; the
    same one leaves it; enabled false takes it down."""
    echo = LineEcho()
    before = api.create_proxy("p", f"{LOOPBACK}:0", echo.addr).json["listen"]
    moved = api.patch("/proxies/p", {"listen": "localhost:0"}).json["listen"]
    assert moved not in (before, "localhost:0") and moved.startswith("127.0.0.1:")
    assert is_up(moved) and not is_up(before)
    assert api.patch("/proxies/p", {"listen": moved}).json["listen"] == moved
    assert is_up(moved)
    assert api.patch("/proxies/p", {"listen": moved, "enabled": False}).json["enabled"] is False
    assert not is_up(moved)
    echo.close()


def test_proxy_update_with_hostname_keeps_connections(api: Api) -> None:
    """proxy_test.go TestProxyUpdateWithHostname: ``localhost:P`` for a proxy on
    ``127.0.0.1:P`` is no change: open connections survive."""
    echo = LineEcho()
    listen = api.create_proxy("p", f"{LOOPBACK}:0", echo.addr).json["listen"]
    with connect(listen) as sock:
        sock.sendall(b"before\n")
        assert read_line(sock) == b"before\n"
        port = listen.rsplit(":", 1)[1]
        assert api.patch("/proxies/p", {"listen": f"localhost:{port}", "enabled": True}).json["listen"] == listen
        sock.sendall(b"after\n")
        assert read_line(sock) == b"after\n"
    echo.close()


def test_proxy_to_down_upstream_closes_the_client(api: Api) -> None:
    """proxy_test.go TestProxyToDownUpstream."""
    listen = api.create_proxy("p", f"{LOOPBACK}:0", f"{LOOPBACK}:{free_port()}").json["listen"]
    with connect(listen) as sock:
        assert sock.recv(1) == b""


def test_proxy_messages_pass_whole() -> None:
    """proxy_test.go TestProxySimpleMessage / BigMessage / TwoPartMessage: what the client
    wrote, then closed, reaches the server whole."""
    with running_server() as server:
        api = server.api()
        got: list[bytes] = []
        srv = socket.socket()
        srv.bind((LOOPBACK, 0))
        srv.listen(4)

        def serve_one() -> None:
            conn, _ = srv.accept()
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                got.append(data)

        listen = api.create_proxy("p", f"{LOOPBACK}:0", f"{LOOPBACK}:{srv.getsockname()[1]}").json["listen"]
        for parts in ([b"hello world"], [b"ab" * 32 * 1024], [b"hello world", b"hello world"]):
            thread = threading.Thread(target=serve_one)
            thread.start()
            with connect(listen) as sock:
                for part in parts:
                    sock.sendall(part)
            thread.join(10)
            assert got.pop() == b"".join(parts)
        srv.close()
        api.close()


# -- populate --------------------------------------------------------------------------------


def _entry(name: str, listen: str, upstream: str, enabled: bool = True) -> dict:
    return {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled}


def test_populate_proxy(api: Api) -> None:
    p1, p2 = free_port(), free_port()
    reply = api.post("/populate", [_entry("one", f"localhost:{p1}", "localhost:7171"),
                                   _entry("two", f"localhost:{p2}", "localhost:7474")])
    assert reply.status == 201
    proxies = reply.json["proxies"]
    assert [p["name"] for p in proxies] == ["one", "two"]
    assert all(is_up(p["listen"]) for p in proxies)


def test_populate_default_enabled(api: Api) -> None:
    raw = f'[{{"name": "test", "listen": "localhost:{free_port()}", "upstream": "localhost:7171"}}]'.encode()
    assert api.post("/populate", raw=raw).status == 201
    proxies = api.get("/proxies").json
    assert list(proxies) == ["test"] and is_up(proxies["test"]["listen"])


def test_populate_disabled_proxy(api: Api) -> None:
    p1, p2 = free_port(), free_port()
    reply = api.post("/populate", [_entry("one", f"localhost:{p1}", "localhost:7171", enabled=False),
                                   _entry("two", f"localhost:{p2}", "localhost:7474")])
    assert reply.status == 201 and [p["name"] for p in reply.json["proxies"]] == ["one", "two"]
    assert not is_up(f"localhost:{p1}") and is_up(f"localhost:{p2}")


def test_populate_existing_proxy(api: Api) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    assert api.create_proxy("one", f"localhost:{p1}", "localhost:7171").status == 201
    assert api.create_proxy("two", f"localhost:{p2}", "localhost:7474").status == 201
    assert api.add_toxic("one", "", "latency", "downstream").status == 200
    reply = api.post("/populate", [
        _entry("one", f"localhost:{p1}", "localhost:7171"),  # the same once resolved: kept
        _entry("two", f"127.0.0.1:{p3}", "localhost:7676"),  # another: replaced
    ])
    assert reply.status == 201
    proxies = reply.json["proxies"]
    assert [p["name"] for p in proxies] == ["one", "two"]
    assert [p["listen"] for p in proxies] == [f"127.0.0.1:{p1}", f"127.0.0.1:{p3}"]
    toxics = api.toxics("one")
    assert len(toxics) == 1 and toxics[0]["type"] == "latency"  # the proxy was not replaced
    assert all(is_up(p["listen"]) for p in proxies)
    assert not is_up(f"127.0.0.1:{p2}")


def test_populate_with_bad_name(api: Api) -> None:
    reply = api.post("/populate", [_entry("one", f"localhost:{free_port()}", "localhost:7171"),
                                   _entry("", "", "")])
    assert reply.error == (400, "missing required field: name at proxy 2")
    assert api.get("/proxies").json == {}


def test_populate_proxy_with_bad_data_should_return_error(api: Api) -> None:
    reply = api.post("/populate", [_entry("one", f"localhost:{free_port()}", "localhost:7171"),
                                   _entry("two", "local373", "localhost:7474"),
                                   _entry("three", f"localhost:{free_port()}", "localhost:7676")])
    # Upstream answers 500; here 400, a malformed address (docs/network.md).
    assert reply.status == 400 and reply.json["error"] == "listen tcp: address local373: missing port in address"
    assert [p["name"] for p in reply.json["proxies"]] == ["one"]  # made before the failure
    assert list(api.get("/proxies").json) == ["one"]


def test_populate_add_toxic(api: Api) -> None:
    reply = api.post("/populate", [_entry("one", f"localhost:{free_port()}", "localhost:7171")])
    assert reply.status == 201 and [p["name"] for p in reply.json["proxies"]] == ["one"]
    assert api.add_toxic("one", "", "latency", "downstream").status == 200


def test_populate_takes_a_list_only(api: Api) -> None:
    reply = api.post("/populate", {"name": "one", "upstream": "localhost:7171"})
    assert reply.status == 400 and reply.json["error"].startswith("bad request body")
    empty = api.post("/populate", [])
    assert empty.status == 201 and empty.json == {"proxies": None}  # Go's empty slice


# -- toxics ----------------------------------------------------------------------------------


@pytest.fixture
def mysql(api: Api) -> str:
    assert api.create_proxy("mysql_master", f"localhost:{free_port()}", "localhost:20001").status == 201
    return "mysql_master"


def test_listing_toxics(api: Api, mysql: str) -> None:
    assert api.toxics(mysql) == []


def test_add_toxic(api: Api, mysql: str) -> None:
    latency = api.add_toxic(mysql, "foobar", "latency", "downstream", 1, {"latency": 100, "jitter": 10})
    assert latency.status == 200
    assert latency.json == {"attributes": {"latency": 100, "jitter": 10}, "name": "foobar", "type": "latency",
                            "stream": "downstream", "toxicity": 1}
    toxic = _toxic(api.toxics(mysql), "foobar")
    assert toxic is not None and (toxic["type"], toxic["stream"], toxic["toxicity"]) == ("latency", "downstream", 1)
    assert toxic["attributes"] == {"latency": 100, "jitter": 10}
    assert api.get(f"/proxies/{mysql}/toxics/foobar").json == toxic


def test_add_multiple_toxics(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "latency1", "latency", "downstream").status == 200
    assert api.add_toxic(mysql, "latency2", "latency", "downstream").status == 200
    toxics = api.toxics(mysql)
    assert [(t["name"], t["type"], t["stream"]) for t in toxics] == [
        ("latency1", "latency", "downstream"), ("latency2", "latency", "downstream")]
    assert toxics[1]["toxicity"] == 1 and toxics[1]["attributes"] == {"latency": 0, "jitter": 0}


def test_add_conflicting_toxic(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "foobar", "latency", "downstream").status == 200
    assert api.add_toxic(mysql, "foobar", "slow_close", "downstream").error == (409, "toxic already exists")
    toxics = api.toxics(mysql)
    assert [(t["name"], t["type"], t["stream"]) for t in toxics] == [("foobar", "latency", "downstream")]


def test_add_conflicting_toxics_multistream(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "foobar", "latency", "upstream").status == 200
    assert api.add_toxic(mysql, "foobar", "latency", "downstream").error == (409, "toxic already exists")
    assert [(t["name"], t["stream"]) for t in api.toxics(mysql)] == [("foobar", "upstream")]


def test_add_conflicting_toxics_multistream_defaults(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "", "latency", "upstream").status == 200
    assert api.add_toxic(mysql, "", "latency", "downstream").status == 200
    assert [(t["name"], t["type"], t["stream"], t["toxicity"]) for t in api.toxics(mysql)] == [
        ("latency_upstream", "latency", "upstream", 1), ("latency_downstream", "latency", "downstream", 1)]


def test_toxics_are_listed_upstream_chain_first(api: Api, mysql: str) -> None:
    for name, stream in (("d1", "downstream"), ("u1", "upstream"), ("d2", "downstream")):
        assert api.add_toxic(mysql, name, "noop", stream).status == 200
    assert [t["name"] for t in api.toxics(mysql)] == ["u1", "d1", "d2"]


def test_add_toxic_with_toxicity(api: Api, mysql: str) -> None:
    latency = api.add_toxic(mysql, "", "latency", "downstream", 0.2, {"latency": 100, "jitter": 10})
    assert (latency.json["toxicity"], latency.json["attributes"]) == (0.2, {"latency": 100, "jitter": 10})
    toxic = _toxic(api.toxics(mysql), "latency_downstream")
    assert toxic is not None and toxic["toxicity"] == 0.2


def test_add_noop(api: Api, mysql: str) -> None:
    noop = api.add_toxic(mysql, "foobar", "noop", "", 1)
    assert noop.status == 200
    assert noop.json == {"attributes": {}, "name": "foobar", "type": "noop", "stream": "downstream", "toxicity": 1}
    assert _toxic(api.toxics(mysql), "foobar") == noop.json


def test_update_toxics(api: Api, mysql: str) -> None:
    # The Go client sends toxicity -1 as 1 on add, and leaves it out of an update.
    assert api.add_toxic(mysql, "", "latency", "downstream", 1, {"latency": 100, "jitter": 10}).status == 200
    updated = api.patch(f"/proxies/{mysql}/toxics/latency_downstream", {"attributes": {"latency": 1000},
                                                                        "toxicity": 0.5})
    assert updated.status == 200
    assert (updated.json["toxicity"], updated.json["attributes"]) == (0.5, {"latency": 1000, "jitter": 10})
    updated = api.patch(f"/proxies/{mysql}/toxics/latency_downstream", {"attributes": {"latency": 500}})
    assert (updated.json["toxicity"], updated.json["attributes"]) == (0.5, {"latency": 500, "jitter": 10})
    toxic = _toxic(api.toxics(mysql), "latency_downstream")
    assert toxic is not None and (toxic["toxicity"], toxic["attributes"]) == (0.5, {"latency": 500, "jitter": 10})
    # POST is upstream's deprecated spelling of the same update
    assert api.post(f"/proxies/{mysql}/toxics/latency_downstream", {"toxicity": 0.25}).json["toxicity"] == 0.25


def test_remove_toxic(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "", "latency", "downstream").status == 200
    assert _toxic(api.toxics(mysql), "latency_downstream") is not None
    reply = api.remove_toxic(mysql, "latency_downstream")
    assert reply.status == 204 and reply.raw == b""
    assert api.toxics(mysql) == []
    assert api.remove_toxic(mysql, "latency_downstream").error == (404, "toxic not found")


def test_unknown_toxic_is_404(api: Api, mysql: str) -> None:
    assert api.get(f"/proxies/{mysql}/toxics/nope").error == (404, "toxic not found")
    assert api.patch(f"/proxies/{mysql}/toxics/nope", {"toxicity": 1}).error == (404, "toxic not found")


def test_invalid_stream(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "", "latency", "walrustream").error == (
        400, "stream was invalid, can be either upstream or downstream")


def test_invalid_toxic_type(api: Api, mysql: str) -> None:
    assert api.add_toxic(mysql, "", "earthquake", "upstream").error == (400, "invalid toxic type")
    assert api.post(f"/proxies/{mysql}/toxics", {}).error == (400, "invalid toxic type")


def test_stream_is_parsed_without_case_and_reported_as_given(api: Api, mysql: str) -> None:
    toxic = api.add_toxic(mysql, "", "latency", "UpStream").json
    assert (toxic["name"], toxic["stream"]) == ("latency_UpStream", "UpStream")
