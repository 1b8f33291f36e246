"""The ``docker`` backend's options (``backend: {docker: {...}}``) and the preflight that
checks them against the engines they name: split from ``chaos.cluster.docker`` as
``slurm_cli`` holds Slurm's (the backend module keeps the nodes' lifecycle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from chaos.cluster.docker_engine import client, default_host, engine_problem, is_local_host
from chaos.model.types import StrictModel

if TYPE_CHECKING:
    from chaos.model.scenario import Scenario

__all__ = ["DockerOptions", "preflight_problems"]


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
    return problems
