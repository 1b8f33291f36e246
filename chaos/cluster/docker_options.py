"""The ``docker`` backend's options (``backend: {docker: {...}}``) and the preflight that
checks them against the engines they name: split from ``chaos.cluster.docker`` as
``slurm_cli`` holds Slurm's (the backend module keeps the nodes' lifecycle).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

from pydantic import Field, field_validator, model_validator

from chaos.cluster.docker_engine import client, default_host, engine_problem, is_local_host
from chaos.model.types import StrictModel

if TYPE_CHECKING:
    from chaos.model.scenario import Scenario

__all__ = ["DockerOptions", "placed_host", "preflight_problems"]


class DockerOptions(StrictModel):
    """``backend: {docker: {...}}``: where the node containers run and what they run."""

    hosts: list[str] = Field(default_factory=list)
    """Docker engines, as the docker CLI names them (``unix:///var/run/docker.sock``,
    ``ssh://staging-2``, ``tcp://10.0.0.5:2376``); nodes are placed round-robin. Empty: the
    engine of ``DOCKER_HOST``, else the local socket."""
    image: str | None = None
    """The training image (already on every host: nothing is pulled). Null: an empty image
    of the run's own that runs this machine's Python, virtualenv and project through
    read-only bind mounts (local engines only)."""
    python: str | None = None
    """The interpreter inside the image that runs torchrun and the harness. Null: this
    controller's interpreter (without ``image``), else ``python``."""
    mounts: list[str] = Field(default_factory=list)
    """Further host paths bind-mounted read-only at the same path (a dataset, a CA bundle)."""
    cpus: float | None = Field(None, gt=0)
    """CPU limit of each node container (``--cpus``); null: none. Faults may change it live."""
    memory: str | None = None
    """Memory limit of each node container (``--memory``, e.g. ``2g``); null: none."""
    shm_size: str = "256m"
    """Size of each container's /dev/shm (DataLoader workers pass tensors through it)."""
    shared_run_dir: bool = False
    """Remote hosts see the controller's run directory at the same path (NFS, a cluster
    filesystem): required for any non-local host, whose events are files there."""
    subnets: dict[str, str] = Field(default_factory=dict)
    """Routed hosts: each engine's container subnet (host -> IPv4 network, e.g.
    ``198.18.10.0/24``), routed to it from every other host and from the controller
    (docs/docker.md, "Several hosts"); node i gets the address .10+i of its host's subnet.
    Every host of ``hosts`` needs one, and ``store_address`` is then required. Empty: one
    subnet drawn per run, the same on every host (containers on different hosts cannot
    reach each other)."""
    store_address: str | None = None
    """The controller's address that every host's containers are routed to, where the
    rendezvous store listens (an address of this machine). Null: the gateway of the run's
    bridge (one engine on this machine)."""

    @field_validator("subnets")
    @classmethod
    def _subnets_are_disjoint_networks(cls, subnets: dict[str, str]) -> dict[str, str]:
        seen: dict[str, ipaddress.IPv4Network] = {}
        for host, text in subnets.items():
            try:
                net = ipaddress.IPv4Network(text)
            except ValueError as exc:
                raise ValueError(f"{host}: {text!r} is not an IPv4 network with its host bits zero "
                                 f"(e.g. 198.18.10.0/24): {exc}") from None
            if net.num_addresses < 16:
                raise ValueError(f"{host}: {text} is too small: node i is .10+i of its host's subnet")
            for other, known in seen.items():
                if net.overlaps(known):
                    raise ValueError(f"{host}: {text} overlaps {other}'s {known}: each host's containers "
                                     "need a subnet of their own, or no route can tell them apart")
            seen[host] = net
        return subnets

    @field_validator("store_address")
    @classmethod
    def _store_address_is_an_address(cls, text: str | None) -> str | None:
        if text is not None:
            try:
                ipaddress.ip_address(text)
            except ValueError:
                raise ValueError(f"{text!r} is not an IP address (the controller's address the "
                                 "hosts route to, e.g. 198.18.0.1)") from None
        return text

    @model_validator(mode="after")
    def _every_host_routed(self) -> DockerOptions:
        if not self.subnets:
            return self
        unknown = [h for h in self.subnets if h not in self.hosts]
        if unknown:
            raise ValueError(f"subnets: {unknown[0]} is not one of hosts ({', '.join(self.hosts) or 'none'})")
        missing = [h for h in dict.fromkeys(self.hosts) if h not in self.subnets]
        if missing:
            raise ValueError(f"subnets: host {missing[0]} has no subnet; with routed hosts every host "
                             "needs its own")
        if self.store_address is None:
            raise ValueError("store_address: required with subnets (the controller's address every "
                             "host routes to, where the rendezvous store listens)")
        return self


def placed_host(hosts: list[str], node: int) -> str:
    """The engine node ``node`` runs on: round-robin over ``hosts`` (a host named twice
    takes twice the nodes)."""
    return hosts[node % len(hosts)]


def preflight_problems(scenario: Scenario) -> list[str]:
    """What keeps ``scenario`` from running on its docker engines (the backend's
    ``preflight``): an engine that does not answer, a remote host without an image or a
    shared run directory, an image missing on a local engine."""
    options = DockerOptions.model_validate(scenario.backend.options or {})
    hosts = list(options.hosts) or [default_host()]
    problems = []
    for host in hosts:
        problem = engine_problem(host)
        if problem:
            problems.append(f"docker: {problem}")
            continue
        if not is_local_host(host):
            if options.image is None:
                problems.append(f"docker.image: host {host} is remote: it needs a training image "
                                "(the default image runs this machine's Python through bind mounts)")
            if not options.shared_run_dir:
                problems.append(f"docker.shared_run_dir: host {host} is remote: the run directory "
                                "must be on a filesystem it shares at the same path (events are "
                                "files); set shared_run_dir: true once it is")
        elif options.image is not None:
            try:
                client(host).images.get(options.image)
            except Exception:
                problems.append(f"docker.image: {options.image!r} is not on {host} (nothing is "
                                "pulled: `docker load` or build it there first)")
    return problems + _routing_problems(options, scenario.topology.total_nodes)


def _routing_problems(options: DockerOptions, total_nodes: int) -> list[str]:
    """Routed hosts: the store's address is one of this machine's, and each host's subnet
    holds the addresses of the nodes placed there (.10+i)."""
    problems = []
    if options.store_address is not None:
        family = socket.AF_INET6 if ":" in options.store_address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((options.store_address, 0))
            except OSError as exc:
                problems.append(f"docker.store_address: {options.store_address} is not an address of this "
                                f"machine ({exc.strerror}); the rendezvous store listens there")
    for node in range(total_nodes if options.subnets else 0):
        host = placed_host(options.hosts, node)
        net = ipaddress.IPv4Network(options.subnets[host]) if host in options.subnets else None
        if net is not None and net.network_address + 10 + node >= net.broadcast_address:
            problems.append(f"docker.subnets: {host}'s {net} has no address .{10 + node} for node {node}")
    return problems
