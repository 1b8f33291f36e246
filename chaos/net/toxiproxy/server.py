"""The embedded Toxiproxy server: the part of Toxiproxy's HTTP API (v2) that trainchaos's
``toxic`` fault uses, with the same paths, bodies, status codes and error objects, so that
``toxiproxy-python`` (or any Toxiproxy client) drives it as it would the real server.

    GET    /version                            {"version": "..."}
    GET    /proxies                            {name: proxy with its toxics}
    POST   /proxies                            create (name, upstream, listen, enabled): 201
    GET    /proxies/{proxy}                    the proxy with its toxics
    POST   /proxies/{proxy} (or PATCH)         change enabled / listen / upstream
    DELETE /proxies/{proxy}                    204
    GET    /proxies/{proxy}/toxics             [toxic, ...]
    POST   /proxies/{proxy}/toxics             add (name, type, stream, toxicity, attributes)
    GET    /proxies/{proxy}/toxics/{toxic}     the toxic
    POST   /proxies/{proxy}/toxics/{toxic}     change toxicity / attributes (or PATCH)
    DELETE /proxies/{proxy}/toxics/{toxic}     204
    POST   /reset                              every proxy enabled, every toxic removed: 204

Errors are ``{"error": "...", "status": N}`` with upstream's messages: 400 bad request body
/ missing required field / invalid toxic type / invalid stream, 404 proxy or toxic not
found, 409 proxy or toxic already exists. Where it differs from upstream: docs/network.md.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from chaos.net.toxiproxy.proxy import Proxy, Toxic
from chaos.net.toxiproxy.toxics import ATTRIBUTES

__all__ = ["VERSION", "ApiError", "ToxiproxyServer", "serve"]

VERSION = "2.12.0-trainchaos"
"""The upstream API version it follows, marked as the embedded one."""


class ApiError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def _missing(name: str) -> ApiError:
    return ApiError(f"missing required field: {name}", 400)


class ToxiproxyServer:
    """The proxies and their toxics; every method is one API call."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.lock = threading.RLock()

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError("proxy not found", 404)
        return proxy

    def create_proxy(self, body: dict[str, Any]) -> dict[str, Any]:
        for key in ("name", "upstream"):
            if not body.get(key):
                raise _missing(key)
        with self.lock:
            if body["name"] in self.proxies:
                raise ApiError("proxy already exists", 409)
            try:
                proxy = Proxy(str(body["name"]), str(body.get("listen") or "127.0.0.1:0"), str(body["upstream"]),
                              enabled=body.get("enabled", True) is not False)
            except (OSError, ValueError) as exc:
                raise ApiError(f"listen {body.get('listen')}: {exc}", 500) from exc
            self.proxies[proxy.name] = proxy
            return proxy.to_json()

    def update_proxy(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            proxy = self._proxy(name)
            moved = any(k in body and body[k] != getattr(proxy, k) for k in ("listen", "upstream"))
            if moved:
                proxy.stop()
                proxy.listen = str(body.get("listen", proxy.listen))
                proxy.upstream = str(body.get("upstream", proxy.upstream))
            enabled = body.get("enabled", proxy.enabled or moved)
            try:
                if enabled:
                    proxy.start()
                else:
                    proxy.stop()
            except OSError as exc:
                raise ApiError(f"listen {proxy.listen}: {exc}", 500) from exc
            return proxy.to_json()

    def delete_proxy(self, name: str) -> None:
        with self.lock:
            self._proxy(name).stop()
            del self.proxies[name]

    def add_toxic(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            proxy = self._proxy(name)
            kind = body.get("type")
            if kind not in ATTRIBUTES:
                raise ApiError("invalid toxic type", 400)
            stream = body.get("stream") or "downstream"
            if stream not in ("upstream", "downstream"):
                raise ApiError("stream was invalid, can be either upstream or downstream", 400)
            toxic = Toxic(name=str(body.get("name") or f"{kind}_{stream}"), type=kind, stream=stream,
                          toxicity=_toxicity(body.get("toxicity", 1.0)),
                          attributes=_attributes(kind, body.get("attributes") or {}))
            with proxy.lock:
                if any(t.name == toxic.name for t in proxy.toxics):
                    raise ApiError("toxic already exists", 409)
                proxy.toxics.append(toxic)
            return toxic.to_json()

    def _toxic(self, proxy: Proxy, toxic: str) -> Toxic:
        for t in proxy.toxics_for(None):
            if t.name == toxic:
                return t
        raise ApiError("toxic not found", 404)

    def update_toxic(self, name: str, toxic_name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            proxy = self._proxy(name)
            toxic = self._toxic(proxy, toxic_name)
            with proxy.lock:
                if "toxicity" in body:
                    toxic.toxicity = _toxicity(body["toxicity"])
                if "attributes" in body:
                    toxic.attributes = {**toxic.attributes, **_attributes(toxic.type, body["attributes"] or {})}
            return toxic.to_json()

    def delete_toxic(self, name: str, toxic_name: str) -> None:
        with self.lock:
            proxy = self._proxy(name)
            toxic = self._toxic(proxy, toxic_name)
            with proxy.lock:
                proxy.toxics.remove(toxic)

    def reset(self) -> None:
        with self.lock:
            for proxy in self.proxies.values():
                with proxy.lock:
                    proxy.toxics.clear()
                try:
                    proxy.start()
                except OSError:
                    pass  # upstream ignores a proxy that cannot listen again here too

    def shutdown(self) -> None:
        with self.lock:
            for proxy in self.proxies.values():
                proxy.stop()

    def route(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """(status, JSON body or None) for one request."""
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts == ["version"] and method == "GET":
            return 200, {"version": VERSION}
        if parts == ["reset"] and method == "POST":
            self.reset()
            return 204, None
        if parts == ["proxies"]:
            if method == "GET":
                with self.lock:
                    return 200, {n: p.to_json() for n, p in self.proxies.items()}
            if method == "POST":
                return 201, self.create_proxy(body)
        if len(parts) == 2 and parts[0] == "proxies":
            if method == "GET":
                with self.lock:
                    return 200, self._proxy(parts[1]).to_json()
            if method in ("POST", "PATCH"):
                return 200, self.update_proxy(parts[1], body)
            if method == "DELETE":
                self.delete_proxy(parts[1])
                return 204, None
        if len(parts) == 3 and parts[0] == "proxies" and parts[2] == "toxics":
            if method == "GET":
                with self.lock:
                    return 200, [t.to_json() for t in self._proxy(parts[1]).toxics_for(None)]
            if method == "POST":
                return 200, self.add_toxic(parts[1], body)
        if len(parts) == 4 and parts[0] == "proxies" and parts[2] == "toxics":
            if method == "GET":
                with self.lock:
                    return 200, self._toxic(self._proxy(parts[1]), parts[3]).to_json()
            if method in ("POST", "PATCH"):
                return 200, self.update_toxic(parts[1], parts[3], body)
            if method == "DELETE":
                self.delete_toxic(parts[1], parts[3])
                return 204, None
        raise ApiError("404 page not found", 404)


def _toxicity(value: Any) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError) as exc:
        raise ApiError("bad request body: toxicity is not a number", 400) from exc
    return min(max(t, 0.0), 1.0)


def _attributes(kind: str, attrs: Any) -> dict[str, int]:
    if not isinstance(attrs, dict):
        raise ApiError("bad request body: attributes is not an object", 400)
    out = {}
    for key in ATTRIBUTES[kind]:
        if key in attrs:
            value = attrs[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ApiError(f"bad request body: {key} is not a number", 400)
            out[key] = int(value)
    return out


def _handler(server: ToxiproxyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
            pass

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw.strip() else {}
                if not isinstance(body, dict):
                    raise ApiError("bad request body", 400)
            except ValueError:
                status, payload = 400, {"error": "bad request body", "status": 400}
            else:
                try:
                    status, payload = server.route(method, self.path, body)
                except ApiError as exc:
                    status, payload = exc.status, {"error": exc.message, "status": exc.status}
            data = b"" if payload is None else (json.dumps(payload) + "\n").encode()
            self.send_response(status)
            if payload is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def do_PATCH(self) -> None:  # noqa: N802
            self._serve("PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            self._serve("DELETE")

    return Handler


def serve(host: str, port: int) -> tuple[ThreadingHTTPServer, ToxiproxyServer]:
    """Bind the API (port 0: any free port); the caller runs ``serve_forever``."""
    state = ToxiproxyServer()
    httpd = ThreadingHTTPServer((host, port), _handler(state))
    httpd.daemon_threads = True
    return httpd, state

