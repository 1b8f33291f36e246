"""Toxiproxy for trainchaos: named TCP services of a run (the rendezvous store) behind
Toxiproxy proxies, and the ``toxic`` fault's way to them.

When ``TOXIPROXY_URL`` names a running Toxiproxy server, the run uses it; otherwise it starts
the embedded server (``chaos.net.toxiproxy.server``, Toxiproxy's HTTP API, checked against
upstream's own tests; differences in docs/network.md) as a run-scoped resource, its API on loopback on a free port (the server's own
default, ``python -m chaos.net.toxiproxy``, is 127.0.0.1:8474 as upstream's). Either way the
run's proxies are run-scoped resources too (deleted through the API at the end, so a shared
server is left as it was found), and every call goes through the ``toxiproxy-python``
client, as a user's own tooling would.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, ClassVar
from urllib.parse import urlparse

from chaos.errors import ToolError
from chaos.net.linkemu import child_exited
from chaos.runfiles.resources import HelperProcess, Leftover, ResourceKind, register_kind

__all__ = ["TOXIPROXY_URL_ENV", "EmbeddedToxiproxy", "ToxiproxyProxy", "client", "external_url", "find_proxy"]

TOXIPROXY_URL_ENV = "TOXIPROXY_URL"
READY_TIMEOUT_S = 15.0


def external_url() -> str | None:
    url = os.environ.get(TOXIPROXY_URL_ENV, "").strip()
    return url or None


def client(url: str) -> Any:
    """A ``toxiproxy.Toxiproxy`` talking to ``url`` (the client keeps host and port on a
    class: set them before each use)."""
    from toxiproxy import Toxiproxy
    from toxiproxy.api import APIConsumer

    parsed = urlparse(url if "://" in url else f"http://{url}")
    if not parsed.hostname:
        raise ToolError(f"{TOXIPROXY_URL_ENV}={url!r} names no host")
    APIConsumer.host, APIConsumer.port = parsed.hostname, parsed.port or 8474
    return Toxiproxy()


def find_proxy(url: str, name: str) -> Any:
    """The named proxy, through the client; ToolError when the server does not have it."""
    try:
        found = client(url).get_proxy(name)
    except Exception as exc:  # requests' connection errors and the client's own
        raise ToolError(f"Toxiproxy at {url}: {exc}") from exc
    if found is None:
        raise ToolError(f"Toxiproxy at {url} has no proxy {name!r}")
    return found


@register_kind
class EmbeddedToxiproxy(HelperProcess):
    """The embedded Toxiproxy server of one run. spec: ``host`` (the API's address),
    ``port_file``, ``log``; details add ``url``."""

    kind: ClassVar[str] = "toxiproxy_server"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        port_file = spec["port_file"]
        if os.path.exists(port_file):
            os.unlink(port_file)
        argv = [sys.executable, "-m", "chaos.net.toxiproxy", "--host", spec.get("host", "127.0.0.1"),
                "--port", "0", "--port-file", port_file]
        details = super().create(run_id, {"argv": argv, "name": "toxiproxy", "log": spec.get("log")})
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not os.path.exists(port_file):
            if child_exited(details["pid"]) or time.monotonic() > deadline:
                raise ToolError("the embedded Toxiproxy server did not come up"
                                + (f" (see {spec['log']})" if spec.get("log") else ""))
            time.sleep(0.05)
        with open(port_file, encoding="utf-8") as fh:
            details["url"] = f"http://{spec.get('host', '127.0.0.1')}:{int(fh.read())}"
        return details


@register_kind
class ToxiproxyProxy(ResourceKind):
    """One proxy on a Toxiproxy server (embedded or ``TOXIPROXY_URL``'s). spec: ``url``,
    ``name``, ``listen``, ``upstream``; details: ``listen`` as the server reports it (the
    port it picked for ``:0``)."""

    kind: ClassVar[str] = "toxiproxy_proxy"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        if not spec["name"].startswith("trainchaos-"):
            raise ToolError(f"refusing to create proxy {spec['name']!r}: not named trainchaos-...")
        try:
            made = client(spec["url"]).create(upstream=spec["upstream"], name=spec["name"], listen=spec["listen"],
                                              enabled=True)
        except Exception as exc:
            raise ToolError(f"Toxiproxy at {spec['url']}: cannot create proxy {spec['name']}: {exc}") from exc
        return {"listen": made.listen}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        try:
            found = client(spec["url"]).get_proxy(spec["name"])
        except Exception:
            return  # the server is gone (the embedded one is released after its proxies)
        if found is not None:
            found.destroy()

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        try:
            return client(spec["url"]).get_proxy(spec["name"]) is not None
        except Exception:
            return False

    @classmethod
    def scan(cls) -> list[Leftover]:
        return []  # on a shared server, a run's proxies are found from its journal only
