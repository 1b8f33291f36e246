"""Docker Engine plumbing for the ``docker`` backend: clients per host, the run's labels and
the blast-radius guard, and the run-scoped resource kinds (image, network, container).

Everything the backend creates carries ``trainchaos.run=<run id>`` (and containers
``trainchaos.node=<i>``), and every change to an engine object goes through ``owned``: an
object without the run's label is never stopped, paused, disconnected, updated or removed,
whatever a scenario or a game-day plan says. ``trainchaos cleanup`` finds leftovers by the
same label (``scan``) on the default engine (``DOCKER_HOST`` or the local socket) and every
engine ``TRAINCHAOS_DOCKER_HOSTS`` names (comma-separated: the other hosts of a multi-host
staging cluster) and, from the resource journal, on every host a run used.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading
from typing import Any, ClassVar

from chaos import contract
from chaos.errors import EXIT_BAD_INPUT, ChaosError, ToolError
from chaos.runfiles.resources import PREFIX, Leftover, ResourceKind, register_kind

__all__ = [
    "DOCKER_HOSTS_ENV",
    "LABEL_NODE",
    "LABEL_RUN",
    "BlastRadiusError",
    "client",
    "default_host",
    "engine_problem",
    "is_local_host",
    "owned",
    "scanned_hosts",
]

LABEL_RUN = "trainchaos.run"
LABEL_NODE = "trainchaos.node"
LOCAL_SOCKET = "unix:///var/run/docker.sock"
DOCKER_HOSTS_ENV = contract.DOCKER_HOSTS_ENV


class BlastRadiusError(ChaosError):
    """An engine object without the run's label was about to be touched: refused, and the
    object is left as it was. Bad input (a plan or scenario aimed outside the run)."""

    exit_code = EXIT_BAD_INPUT


def default_host() -> str:
    return os.environ.get("DOCKER_HOST") or LOCAL_SOCKET


def scanned_hosts() -> list[str]:
    """The engines a leftover scan looks at, each once: the default one and every one of
    ``TRAINCHAOS_DOCKER_HOSTS``; those that do not answer are left out (nothing to find)."""
    named = [h.strip() for h in os.environ.get(DOCKER_HOSTS_ENV, "").split(",") if h.strip()]
    return [host for host in dict.fromkeys([default_host(), *named]) if not engine_problem(host)]


def is_local_host(url: str) -> bool:
    """An engine on this machine: its containers can bind-mount the controller's files."""
    return url.startswith("unix://") or url.startswith("npipe://")


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def client(url: str | None = None) -> Any:
    """A (cached) Docker SDK client for ``url`` (default: ``default_host``)."""
    import docker

    url = url or default_host()
    with _clients_lock:
        if url not in _clients:
            # ssh:// hosts go through the docker CLI's ssh helper (use_ssh_client): the same
            # ~/.ssh config and agent a user's `docker -H ssh://...` uses.
            _clients[url] = docker.DockerClient(base_url=url, timeout=60,
                                                use_ssh_client=url.startswith("ssh://"))
        return _clients[url]


def engine_problem(url: str) -> str | None:
    """Why the engine at ``url`` cannot be used (None: it answers)."""
    try:
        import docker  # noqa: F401
    except ImportError:
        return "the Docker SDK for Python is not installed (pip install docker)"
    try:
        client(url).ping()
    except Exception as exc:
        with _clients_lock:
            _clients.pop(url, None)
        return (f"no docker engine answers at {url} ({type(exc).__name__}: {str(exc)[:160]}); "
                "start dockerd, or set DOCKER_HOST / backend.docker.hosts")
    return None


def owned(obj: Any, run_id: str | None, what: str = "") -> Any:
    """``obj`` (a container, network or image) if it carries the run's label (any run's
    when ``run_id`` is None); else BlastRadiusError, before anything is done to it."""
    labels = (getattr(obj, "labels", None) or (obj.attrs.get("Labels") if hasattr(obj, "attrs") else None)
              or {})
    have = labels.get(LABEL_RUN)
    name: Any = getattr(obj, "name", None) or getattr(obj, "short_id", "?")
    # Labels alone are not enough: a container inherits its image's labels, so one started
    # by someone else from the run's image would carry the run's label too. Containers and
    # networks of a run are also named after it.
    named = not isinstance(getattr(obj, "name", None), str) or name.startswith(run_id or PREFIX)
    if have is None or (run_id is not None and have != run_id) or not named:
        raise BlastRadiusError(
            f"refusing to touch {what or type(obj).__name__.lower()} {name!r}: it is not the run's (label "
            f"{LABEL_RUN}={have!r}, wanted {run_id or '<a run id>'}, and a name starting with "
            f"{run_id or PREFIX!r}); trainchaos only touches containers, networks and images it created "
            "for the run")
    return obj


def _run_labels(run_id: str, **extra: str) -> dict[str, str]:
    return {LABEL_RUN: run_id, **extra}


def _not_found() -> type[Exception]:
    import docker.errors

    return docker.errors.NotFound


# --------------------------------------------------------------------------- resource kinds


def _get(collection: Any, name: str) -> Any | None:
    """The object ``name`` of an engine collection (images, networks, containers), or None
    when the engine has no such object."""
    try:
        return collection.get(name)
    except _not_found():
        return None


@register_kind
class DockerImage(ResourceKind):
    """The run's image when none is given: an empty filesystem (``docker import`` of an empty
    tarball, nothing pulled) that runs the controller's own Python through read-only bind
    mounts."""

    kind: ClassVar[str] = "docker_image"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w"):
            pass
        api = client(spec["host"]).api
        # The label is set at import (a Dockerfile LABEL instruction), so the image is found
        # by it like every other object of the run.
        out = api.import_image_from_data(buf.getvalue(), repository=spec["name"], tag="latest",
                                         changes=[f'LABEL {LABEL_RUN}="{run_id}"'])
        image = client(spec["host"]).images.get(f"{spec['name']}:latest")
        return {"id": image.id, "import": str(out)[:200]}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        image = _get(client(spec["host"]).images, f"{spec['name']}:latest")
        if image is None:
            return
        owned(image, spec.get("run_id"), "image")
        client(spec["host"]).images.remove(image.id, force=True)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return _get(client(spec["host"]).images, f"{spec['name']}:latest") is not None

    @classmethod
    def scan(cls) -> list[Leftover]:
        return [Leftover(cls.kind, (img.tags or [img.short_id])[0], img.labels.get(LABEL_RUN),
                         {"host": host, "name": (img.tags or [img.id])[0].rsplit(":", 1)[0],
                          "run_id": img.labels.get(LABEL_RUN)})
                for host in scanned_hosts() for img in client(host).images.list(filters={"label": LABEL_RUN})]


@register_kind
class DockerNetwork(ResourceKind):
    """The run's own bridge network: the nodes' fabric, and the only way to the controller's
    rendezvous store (served on the bridge's gateway address)."""

    kind: ClassVar[str] = "docker_network"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        import docker.types

        pool = docker.types.IPAMPool(subnet=spec["subnet"], gateway=spec["gateway"])
        net = client(spec["host"]).networks.create(
            spec["name"], driver="bridge", labels=_run_labels(run_id),
            ipam=docker.types.IPAMConfig(pool_configs=[pool]),
            # No masquerading: a node reaches its peers and the controller's store, nothing
            # beyond the run's bridge (with --iptables=false this is moot but says intent).
            options={"com.docker.network.bridge.enable_ip_masquerade": "false",
                     # The host's end of the fabric, named like every interface of ours.
                     **({"com.docker.network.bridge.name": spec["bridge"]} if spec.get("bridge") else {})})
        return {"id": net.id}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        net = _get(client(spec["host"]).networks, spec["name"])
        if net is None:
            return
        owned(net, spec.get("run_id"), "network")
        net.reload()
        for cont in net.containers:
            # A container of the run still attached (its own teardown failed): it goes first.
            if cont.labels.get(LABEL_RUN) == spec.get("run_id"):
                DockerContainer.destroy({"host": spec["host"], "name": cont.name, "run_id": spec.get("run_id")}, {})
        net.remove()

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return _get(client(spec["host"]).networks, spec["name"]) is not None

    @classmethod
    def scan(cls) -> list[Leftover]:
        return [Leftover(cls.kind, net.name, (net.attrs.get("Labels") or {}).get(LABEL_RUN),
                         {"host": host, "name": net.name, "run_id": (net.attrs.get("Labels") or {}).get(LABEL_RUN)})
                for host in scanned_hosts() for net in client(host).networks.list(filters={"label": LABEL_RUN})
                if net.name.startswith((net.attrs.get("Labels") or {}).get(LABEL_RUN) or PREFIX)]


@register_kind
class DockerContainer(ResourceKind):
    """One node of the run. ``spec["create"]`` holds the SDK's ``containers.create`` keyword
    arguments; the container is created and started here."""

    kind: ClassVar[str] = "docker_container"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(spec["create"])
        labels = {**kwargs.pop("labels", {}), LABEL_RUN: run_id}
        cont = client(spec["host"]).containers.create(name=spec["name"], labels=labels, **kwargs)
        cont.start()
        return {"id": cont.id}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        cont = _get(client(spec["host"]).containers, spec["name"])
        if cont is None:
            return
        owned(cont, spec.get("run_id"), "container")
        # A paused container cannot be killed: thaw it first (a game day may have frozen it).
        if cont.status == "paused":
            cont.unpause()
        cont.remove(force=True, v=True)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return _get(client(spec["host"]).containers, spec["name"]) is not None

    @classmethod
    def scan(cls) -> list[Leftover]:
        # Named after their run as well: a container someone started from a run's image
        # inherits the label, and is not ours.
        return [Leftover(cls.kind, c.name, c.labels.get(LABEL_RUN),
                         {"host": host, "name": c.name, "run_id": c.labels.get(LABEL_RUN)})
                for host in scanned_hosts()
                for c in client(host).containers.list(all=True, filters={"label": LABEL_RUN})
                if c.name.startswith(c.labels.get(LABEL_RUN) or PREFIX)]


def container_of(host: str, name: str, run_id: str) -> Any:
    """The run's container ``name`` on ``host``, checked against the run's label."""
    cont = _get(client(host).containers, name)
    if cont is None:
        raise ToolError(f"container {name} is gone from {host}")
    return owned(cont, run_id, "container")
