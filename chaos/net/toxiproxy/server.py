"""The embedded Toxiproxy server: Toxiproxy's HTTP API (v2) with upstream's paths, bodies,
status codes and error objects, so that ``toxiproxy-python``, upstream's Go client or any
other Toxiproxy client drives it as it would the real server.

    GET    /version                            {"version": "..."}
    GET    /proxies                            {name: proxy with its toxics}
    POST   /proxies                            create (name, upstream, listen, enabled): 201
    POST   /populate                           [proxy, ...]: create or replace each: 201
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
/ missing required field / invalid toxic type / invalid stream / a listen address that is
not host:port, 404 proxy or toxic not found, 409 proxy or toxic already exists / a proxy that
cannot listen here (upstream: 500); 404 for an unknown path, 405 (with ``Allow``) for a known
path with another method, 403 for browsers. No request gets a 5xx: openapi.yaml beside this
file describes every answer, and schemathesis holds the server to it. Every change of
toxics is in force on the open connections when its call returns. Where it differs from
upstream: docs/network.md.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from base64 import b32encode
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from chaos.net.toxiproxy.proxy import (
    AddressError,
    ListenError,
    Proxy,
    check_listen,
    format_address,
    resolve_listen,
)
from chaos.net.toxiproxy.toxics import ATTRIBUTES, Toxic, json_type, parse_attributes

__all__ = ["VERSION", "ApiError", "ToxiproxyServer", "serve"]

VERSION = "2.12.0-trainchaos"
"""Upstream's version this follows, marked as the embedded one."""
TEXT = "text/plain; charset=utf-8"
DEFAULT_LISTEN = "127.0.0.1:0"
"""A proxy created without ``listen``: loopback, any port (upstream: every interface)."""
FLOAT32_MAX = 3.4028234663852886e38
"""A toxic's toxicity is Go's float32: a number beyond it is refused, as Go's decoder does."""


class ApiError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


PROXY_NOT_FOUND = ("proxy not found", 404)
TOXIC_NOT_FOUND = ("toxic not found", 404)


def _bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def _missing(what: str) -> ApiError:
    return ApiError(f"missing required field: {what}", 400)


def _not_json(constant: str) -> Any:
    raise ValueError(f"invalid character {constant[0]!r} looking for beginning of value")


def decode_body(raw: bytes) -> Any:
    """The first JSON value of a body, as Go's json.Decoder reads it (what follows it is not
    read); an empty body is Go's ``EOF``. NaN and Infinity are not JSON (Python's decoder
    takes them; a toxicity of NaN would then be answered as invalid JSON)."""
    text = raw.decode("utf-8", errors="replace").lstrip(" \t\r\n")
    if not text:
        raise _bad_body("EOF")
    try:
        value, _ = json.JSONDecoder(parse_constant=_not_json).raw_decode(text)
    except ValueError as exc:
        raise _bad_body(str(exc)) from exc
    return value


def _fields(body: Any, into: str, types: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """The typed fields of a JSON object as Go decodes it into a struct: null (also for the
    whole body) leaves a field unset, unknown keys are ignored, a wrong type is a 400."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise _bad_body(f"json: cannot unmarshal {json_type(body)} into Go value of type {into}")
    out = {}
    for key, kind in types.items():
        value = body.get(key)
        if value is None:
            continue
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        if not ok:
            raise _bad_body(f"json: cannot unmarshal {json_type(value)} into Go struct field {into}.{key}")
        out[key] = value
    return out


def _toxicity(fields: dict[str, Any], default: float) -> float:
    """The toxicity field as Go's float32 decodes it: a number beyond its range is a 400
    (Python's float would take it, and 1e400 would come back as Infinity, not JSON)."""
    value = fields.get("toxicity", default)
    if not abs(value) <= FLOAT32_MAX:  # an int compares exactly, however large
        raise _bad_body(f"json: cannot unmarshal number {value} into Go struct field ToxicWrapper.toxicity of type float32")
    return float(value)


_PROXY_FIELDS: dict[str, type | tuple[type, ...]] = {"name": str, "listen": str, "upstream": str, "enabled": bool}


class ToxiproxyServer:
    """The proxies and their toxics; every method is one API call."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.lock = threading.RLock()

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError(*PROXY_NOT_FOUND)
        return proxy

    # -- proxies -------------------------------------------------------------------------------

    @staticmethod
    def _listen_error(exc: ListenError) -> ApiError:
        """400 for an address that is not host:port; 409 for one this machine cannot listen
        on now (taken, not its own, a name that does not resolve), a conflict with its state
        and not a fault of the server (upstream answers 500 for both)."""
        return ApiError(str(exc), 400 if isinstance(exc, AddressError) else 409)

    @classmethod
    def _start(cls, proxy: Proxy) -> None:
        try:
            proxy.start()
        except ListenError as exc:
            raise cls._listen_error(exc) from exc

    @classmethod
    def _check_listen(cls, listen: str) -> None:
        """A malformed address is refused when given, also for a proxy created disabled
        (upstream takes it and fails when the proxy is enabled)."""
        try:
            check_listen(listen)
        except AddressError as exc:
            raise cls._listen_error(exc) from exc

    def create_proxy(self, body: Any) -> dict[str, Any]:
        fields = _fields(body, "toxiproxy.Proxy", _PROXY_FIELDS)
        for key in ("name", "upstream"):
            if not fields.get(key):
                raise _missing(key)
        listen = fields.get("listen") or DEFAULT_LISTEN
        self._check_listen(listen)
        with self.lock:
            if fields["name"] in self.proxies:
                raise ApiError("proxy already exists", 409)
            proxy = Proxy(fields["name"], listen, fields["upstream"])
            if fields.get("enabled", True):
                self._start(proxy)
            self.proxies[proxy.name] = proxy
            return proxy.to_json()

    @classmethod
    def _differs(cls, proxy: Proxy, listen: str, upstream: str) -> bool:
        """Upstream's Proxy.Differs: the new listen address resolved, against the one the
        proxy reports (an address that does not resolve: 400 or 409, as ``_listen_error``)."""
        try:
            family, sockaddr = resolve_listen(listen)
        except ListenError as exc:
            raise cls._listen_error(exc) from exc
        resolved = format_address(family, sockaddr)
        if listen.startswith(":"):
            resolved = listen  # Go prints an address with no host as ":port"
        return proxy.listen != resolved or proxy.upstream != upstream

    def update_proxy(self, name: str, body: Any) -> dict[str, Any]:
        with self.lock:
            proxy = self._proxy(name)
            fields = _fields(body, "toxiproxy.Proxy", _PROXY_FIELDS)
            listen = fields.get("listen", proxy.listen)
            upstream = fields.get("upstream", proxy.upstream)
            enabled = fields.get("enabled", proxy.enabled)
            if self._differs(proxy, listen, upstream):
                proxy.stop()
                proxy.listen, proxy.upstream = listen, upstream
            # As upstream: the state asked for (by default the one the proxy was in), so a
            # disabled proxy given a new upstream stays disabled.
            if enabled != proxy.enabled:
                if enabled:
                    self._start(proxy)
                else:
                    proxy.stop()
            return proxy.to_json()

    def delete_proxy(self, name: str) -> None:
        with self.lock:
            proxy = self._proxy(name)
            del self.proxies[name]
        proxy.stop()

    def populate(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Upstream's /populate: a list of proxies, all checked before any is made; each then
        created, kept (same listen and upstream: toxics and state kept) or replaced. A
        failure stops there: its status, its error and the proxies made so far."""
        if body is not None and not isinstance(body, list):
            raise _bad_body(f"json: cannot unmarshal {json_type(body)} into Go value of type []toxiproxy.Proxy")
        entries = [_fields(item, "toxiproxy.Proxy", _PROXY_FIELDS) for item in body or []]
        for i, entry in enumerate(entries, 1):
            for key in ("name", "upstream"):
                if not entry.get(key):
                    raise _missing(f"{key} at proxy {i}")
        done: list[Proxy] = []
        error: ApiError | None = None
        with self.lock:
            for entry in entries:
                try:
                    done.append(self._add_or_replace(entry))
                except ApiError as exc:
                    error = exc
                    break
            listed = [p.to_json() for p in done] or None  # Go's empty slice marshals as null
        if error is not None:
            return error.status, {**error.to_json(), "proxies": listed}
        return 201, {"proxies": listed}

    def _add_or_replace(self, entry: dict[str, Any]) -> Proxy:
        listen = entry.get("listen") or DEFAULT_LISTEN
        self._check_listen(listen)
        existing = self.proxies.get(entry["name"])
        if existing is not None:
            if not self._differs(existing, listen, entry["upstream"]):
                return existing
            existing.stop()
        proxy = Proxy(entry["name"], listen, entry["upstream"])
        if entry.get("enabled", True):
            self._start(proxy)
        self.proxies[proxy.name] = proxy
        return proxy

    def reset(self) -> None:
        # Under the lock, as every other change of a proxy's state (a start racing an update
        # would listen twice).
        with self.lock:
            for proxy in list(self.proxies.values()):
                self._start(proxy)  # a proxy that cannot listen again: 500, the rest left as is
                for toxic in proxy.toxics():
                    proxy.remove_toxic(toxic)

    def shutdown(self) -> None:
        with self.lock:
            proxies = list(self.proxies.values())
        for proxy in proxies:
            proxy.stop()

    # -- toxics --------------------------------------------------------------------------------

    def add_toxic(self, name: str, body: Any) -> dict[str, Any]:
        with self.lock:
            proxy = self._proxy(name)
            fields = _fields(body, "toxics.ToxicWrapper", {"name": str, "type": str, "stream": str,
                                                           "toxicity": (int, float), "attributes": (dict,)})
            toxicity = _toxicity(fields, 1.0)
            stream = fields.get("stream", "downstream")
            direction = stream.lower()
            if direction not in ("upstream", "downstream"):
                raise ApiError("stream was invalid, can be either upstream or downstream", 400)
            kind = fields.get("type", "")
            toxic_name = fields.get("name") or f"{kind}_{stream}"
            if kind not in ATTRIBUTES:
                raise ApiError("invalid toxic type", 400)
            if proxy.find_toxic(toxic_name) is not None:
                raise ApiError("toxic already exists", 409)
            try:
                attributes = parse_attributes(kind, fields.get("attributes"), {})
            except ValueError as exc:
                raise _bad_body(str(exc)) from exc
            toxic = Toxic(name=toxic_name, type=kind, stream=stream, direction=direction,
                          toxicity=toxicity, attributes=attributes)
            proxy.add_toxic(toxic)
            return toxic.to_json()

    def _toxic(self, proxy: Proxy, name: str) -> Toxic:
        toxic = proxy.find_toxic(name)
        if toxic is None:
            raise ApiError(*TOXIC_NOT_FOUND)
        return toxic

    def update_toxic(self, name: str, toxic_name: str, body: Any) -> dict[str, Any]:
        with self.lock:
            toxic = self._toxic(self._proxy(name), toxic_name)
            fields = _fields(body, "toxics.ToxicWrapper", {"toxicity": (int, float), "attributes": (dict,)})
            toxicity = _toxicity(fields, toxic.toxicity)
            try:
                attributes = parse_attributes(toxic.type, fields.get("attributes"), toxic.attributes)
            except ValueError as exc:
                raise _bad_body(str(exc)) from exc
            self._proxy(name).update_toxic(toxic, toxicity, attributes)
            return toxic.to_json()

    def delete_toxic(self, name: str, toxic_name: str) -> None:
        with self.lock:
            proxy = self._proxy(name)
            toxic = self._toxic(proxy, toxic_name)
        proxy.remove_toxic(toxic)

    # -- routing -------------------------------------------------------------------------------

    def routes(self, path: str) -> dict[str, Any] | None:
        """Method -> handler(body bytes) -> (status, JSON body or None) for a path; None for
        a path the API does not have. A handler decodes the body only where upstream's reads
        one."""
        parts = [unquote(p) for p in urlsplit(path).path.split("/")[1:]]
        if parts == ["version"]:
            return {"GET": lambda body: (200, {"version": VERSION})}
        if parts == ["reset"]:
            return {"POST": lambda body: self._no_content(self.reset)}
        if parts == ["populate"]:
            return {"POST": lambda body: self.populate(decode_body(body))}
        if parts == ["proxies"]:
            return {"GET": lambda body: (200, self._index()),
                    "POST": lambda body: (201, self.create_proxy(decode_body(body)))}
        if len(parts) < 2 or parts[0] != "proxies" or not parts[1]:
            return None
        name = parts[1]
        if len(parts) == 2:
            def update_proxy(body: bytes) -> tuple[int, Any]:
                return 200, self.update_proxy(name, decode_body(body))

            return {"GET": lambda body: (200, self._show(name)), "POST": update_proxy, "PATCH": update_proxy,
                    "DELETE": lambda body: self._no_content(self.delete_proxy, name)}
        if parts[2] != "toxics":
            return None
        if len(parts) == 3:
            return {"GET": lambda body: (200, [t.to_json() for t in self._locked_proxy(name).toxics()]),
                    "POST": lambda body: (200, self.add_toxic(name, decode_body(body)))}
        if len(parts) != 4 or not parts[3]:
            return None
        toxic = parts[3]

        def update_toxic(body: bytes) -> tuple[int, Any]:
            return 200, self.update_toxic(name, toxic, decode_body(body))

        return {"GET": lambda body: (200, self._toxic(self._locked_proxy(name), toxic).to_json()),
                "POST": update_toxic, "PATCH": update_toxic,
                "DELETE": lambda body: self._no_content(self.delete_toxic, name, toxic)}

    def route(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """(status, JSON body or None) for one request (404, 405: no body); ApiError for an
        error object."""
        handlers = self.routes(path)
        if handlers is None:
            return 404, None
        if method not in handlers:
            return 405, None
        return handlers[method](body)

    @staticmethod
    def _no_content(call: Any, *args: Any) -> tuple[int, None]:
        call(*args)
        return 204, None

    def _locked_proxy(self, name: str) -> Proxy:
        with self.lock:
            return self._proxy(name)

    def _index(self) -> dict[str, Any]:
        with self.lock:
            return {n: p.to_json() for n, p in self.proxies.items()}

    def _show(self, name: str) -> dict[str, Any]:
        with self.lock:
            return self._proxy(name).to_json()


def _request_id() -> str:
    """An xid-like id (20 characters of base32hex), as upstream's X-Toxiproxy-Request-Id."""
    return b32encode(os.urandom(12)).decode().translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
                                                                      "0123456789abcdefghijklmnopqrstuv"))[:20]


def _handler(server: ToxiproxyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without this, Nagle holds the body for
            # the client's delayed ACK (40 ms a call). Go's server sets it too.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
            pass

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length > 0 else b""

        def _reply(self, status: int, data: bytes, content_type: str | None, request_id: bool,
                   allow: str | None = None) -> None:
            self.send_response(status)
            if allow is not None:
                self.send_header("Allow", allow)
            if content_type:
                self.send_header("Content-Type", content_type)
            if content_type == TEXT:
                self.send_header("X-Content-Type-Options", "nosniff")
            if request_id:
                self.send_header("X-Toxiproxy-Request-Id", _request_id())
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            """An error object, sent as upstream's http.Error sends it (text/plain)."""
            data = json.dumps({"error": message, "status": status}, separators=(",", ":")) + "\n"
            self._reply(status, data.encode(), TEXT, True)

        def _serve(self) -> None:
            try:
                body = self._body()
            except (ValueError, OSError):
                self.close_connection = True
                self._reply(400, b"400 Bad Request\n", TEXT, False)
                return
            # Upstream's middleware refuses browsers (a web page must not drive the API), on
            # the paths the API has.
            if (self.headers.get("User-Agent") or "").startswith("Mozilla/") and server.routes(self.path):
                self._reply(403, b"User agent not allowed\n", TEXT, True)
                return
            try:
                status, payload = server.route(self.command, self.path, body)
            except ApiError as exc:
                self._error(exc.status, exc.message)
                return
            except Exception as exc:  # a bug here must still answer, never drop the connection
                self._error(500, f"internal error: {exc}")
                return
            if status == 404 and payload is None:
                self._reply(404, b"404 page not found\n", TEXT, False)
            elif status == 405:
                # RFC 9110 wants the methods the path has (upstream's router sends none).
                self._reply(405, b"", None, False, allow=", ".join(sorted(server.routes(self.path) or ())))
            elif payload is None:
                self._reply(status, b"", None, True)
            elif self.path.split("?")[0] == "/version":
                self._reply(status, f'{{"version": "{VERSION}"}}\n'.encode(), "application/json;charset=utf-8", True)
            else:
                self._reply(status, json.dumps(payload, separators=(",", ":")).encode(), "application/json", True)

        def __getattr__(self, name: str) -> Any:
            # Every method goes to the router (404 or 405 with Allow), as Go's server takes
            # any method token: http.server would answer a method without a do_ handler
            # (TRACE, CONNECT, anything) with 501.
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

    return Handler


def serve(host: str, port: int) -> tuple[ThreadingHTTPServer, ToxiproxyServer]:
    """Bind the API (port 0: any free port); the caller runs ``serve_forever``."""
    state = ToxiproxyServer()
    httpd = ThreadingHTTPServer((host, port), _handler(state))
    httpd.daemon_threads = True
    return httpd, state
