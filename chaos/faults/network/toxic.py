"""``toxic``: a Toxiproxy toxic on a proxied TCP service (the rendezvous store), or the
proxy taken down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field

from chaos.cluster.capabilities import ServiceProxies
from chaos.errors import ToolError
from chaos.faults.base import FaultParams, ParamsContext, TargetKind, register
from chaos.faults.network.fabric import NetFault
from chaos.model.types import MAX_SECONDS

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["ToxicFault"]


ToxicKind = Literal["latency", "bandwidth", "timeout", "reset_peer", "slow_close", "slicer", "limit_data", "down"]


class ToxicParams(FaultParams):
    toxic: ToxicKind
    """A Toxiproxy toxic, with upstream's semantics, or ``down`` (the proxy disabled: its
    connections closed, new connects refused)."""
    proxy: Literal["rendezvous"] = "rendezvous"
    """The proxied service (listed under backend: {netns: {proxy_services: [...]}})."""
    stream: Literal["upstream", "downstream"] = "downstream"
    """upstream: data from the clients to the service; downstream: from the service back."""
    toxicity: float = Field(1.0, gt=0, le=1)
    """Chance that the toxic applies to a connection (drawn per connection, as upstream)."""
    attributes: dict[str, Annotated[int, Field(le=2**31 - 1)]] = {}
    """The toxic's attributes, as Toxiproxy names them: latency {latency, jitter} (ms),
    bandwidth {rate} (KB/s), timeout {timeout} (ms, 0: never closes), reset_peer {timeout}
    (ms), slow_close {delay} (ms), slicer {average_size, size_variation} (bytes) and
    {delay} (us), limit_data {bytes}; down takes none. Left out: 0."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds until the toxic is removed (or the proxy enabled again); null: until the
    run ends."""


@register
@dataclass
class ToxicFault(NetFault):
    type_name: ClassVar[str] = "toxic"
    summary: ClassVar[str] = "Apply a Toxiproxy toxic (or take the proxy down) on a proxied TCP service."
    mechanism: ClassVar[str] = (
        "Toxiproxy's HTTP API through the toxiproxy-python client: TOXIPROXY_URL's server, "
        "else the run's embedded server; the service is reached through its proxy only")
    fidelity: ClassVar[str] = (
        "Stands for a sick TCP service or the path to it: a store that stalls, resets, "
        "closes slowly, trickles or cuts its replies (toxics act on the byte stream of each "
        "connection, at the proxy), or is gone (down). Exercises the job's store timeouts, "
        "retries and reconnects at rendezvous and restart. Acts on the proxied service's "
        "connections only, not on packets: collectives between nodes are untouched (use the "
        "link faults for those). Its failure class is network for down, timeout, reset_peer "
        "and limit_data, slow for latency, bandwidth, slicer and slow_close.")
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("job",)
    requires: ClassVar[tuple[type, ...]] = (ServiceProxies,)
    params_model: ClassVar[type[FaultParams]] = ToxicParams

    def __post_init__(self) -> None:
        # A stalled, reset or vanished service is a failure; a slower one is not.
        kind = self.params.get("toxic")
        self.failure_class = "slow" if kind in ("latency", "bandwidth", "slicer", "slow_close") else "network"  # type: ignore[misc]  # a ClassVar shadowed per instance on purpose

    @classmethod
    def check_params(cls, params: ToxicParams, context: ParamsContext) -> list[tuple[tuple[str | int, ...], str]]:
        from chaos.net.toxiproxy.toxics import ATTRIBUTES

        allowed = ATTRIBUTES.get(params.toxic, ())
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for key, value in params.attributes.items():
            if key not in allowed:
                problems.append((("attributes", key), f"{params.toxic} has no attribute {key!r}; "
                                 + (f"allowed: {', '.join(allowed)}" if allowed else "it takes none")))
            elif value < 0:
                problems.append((("attributes", key), f"{value} is negative: {key} is at least 0"))
        return problems

    def _proxy(self, ctx: InjectionContext) -> tuple[str, Any]:
        from chaos.net import toxiproxy as toxi

        service = self.params.get("proxy", "rendezvous")
        proxied = ctx.require(ServiceProxies).service_proxy(service)
        if proxied is None:
            raise ToolError(f"service {service!r} is not behind a Toxiproxy proxy in this run")
        url, name = proxied
        return url, toxi.find_proxy(url, name)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        url, proxy = self._proxy(ctx)
        kind = self.params["toxic"]
        record: dict[str, Any] = {"tables": [], "qdiscs": [], "url": url, "proxy": proxy.name, "toxic": kind}
        try:
            if kind == "down":
                proxy.disable()
            else:
                record["toxic_name"] = f"trainchaos-{self.fault_id}"
                proxy.add_toxic(type=kind, name=record["toxic_name"], stream=self.params.get("stream", "downstream"),
                                toxicity=float(self.params.get("toxicity", 1.0)),
                                attributes=dict(self.params.get("attributes") or {}))
        except Exception as exc:
            raise ToolError(f"Toxiproxy at {url}: {kind} on {proxy.name}: {exc}") from exc
        self._record = record
        self._schedule(ctx)
        return record

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record or getattr(self, "_record", {}))

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        from chaos.net import toxiproxy as toxi

        if not record.get("url") or not record.get("proxy"):
            return
        try:
            proxy = toxi.client(record["url"]).get_proxy(record["proxy"])
        except Exception:
            return  # the server is gone (the embedded one ends with its run): nothing left
        if proxy is None:
            return
        try:
            if record.get("toxic") == "down":
                proxy.enable()
            elif record.get("toxic_name") and proxy.get_toxic(record["toxic_name"]) is not None:
                proxy.destroy_toxic(record["toxic_name"])
        except Exception as exc:
            raise ToolError(f"Toxiproxy at {record['url']}: cannot undo {record.get('toxic')} "
                            f"on {record['proxy']}: {exc}") from exc
