"""A throwaway Docker engine for the docker backend's tests (and ``python -m`` for a shell).

When no engine answers (``DOCKER_HOST`` or the default socket), one is started with a data
root, exec root, pidfile and socket of its own under one temp directory, without touching
the host's firewall (``--iptables=false``) or creating the default ``docker0`` bridge
(``--bridge=none``: the runs make their own networks), and stopped (directory removed)
after. Nothing is pulled: the backend builds its image locally (``docker import``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

__all__ = ["RoutedHosts", "docker_host", "engine_answers", "private_dockerd", "routed_dockerds"]


def engine_answers(url: str | None) -> bool:
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.DockerClient(base_url=url, timeout=5) if url else docker.from_env(timeout=5)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def private_dockerd(timeout_s: float = 60.0) -> Iterator[str]:
    """Yields the ``unix://`` URL of a dockerd started here; stops it after."""
    with _dockerd(timeout_s) as (url, proc, root):
        _wait_answers(url, proc, root, timeout_s)
        yield url


@contextlib.contextmanager
def _dockerd(timeout_s: float, netns: str | None = None) -> Iterator[tuple[str, subprocess.Popen, str]]:
    """A dockerd with a data root, exec root, pidfile and socket of its own under one temp
    directory (in network namespace ``netns`` when given), not yet answering; stopped and its
    directory removed after."""
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise RuntimeError("dockerd not installed (make install adds docker.io)")
    # Short: the socket path must stay under 108 bytes.
    root = tempfile.mkdtemp(prefix="tc-dockerd-", dir="/tmp")
    sock = os.path.join(root, "d.sock")
    log = open(os.path.join(root, "dockerd.log"), "wb")  # noqa: SIM115
    # nsenter, not `ip netns exec`: that one remounts /sys for the namespace, and the cgroup
    # hierarchy under /sys/fs/cgroup goes with it (no container could start).
    enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
    proc = subprocess.Popen(
        [*enter, dockerd, "--iptables=false", "--ip-masq=false", "--bridge=none",
         "--storage-driver=vfs", "--data-root", os.path.join(root, "data"),
         "--exec-root", os.path.join(root, "exec"), "--pidfile", os.path.join(root, "dockerd.pid"),
         "-H", f"unix://{sock}", "--log-level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield f"unix://{sock}", proc, root
    finally:
        _stop(proc)
        log.close()
        # vfs layers and container state can hold mounts (shm): unmount before removing.
        with open("/proc/mounts", encoding="utf-8") as fh:
            mounts = [line.split()[1] for line in fh if root in line.split()[1]]
        for mnt in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _wait_answers(url: str, proc: subprocess.Popen, root: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not engine_answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(os.path.join(root, "dockerd.log"), encoding="utf-8", errors="replace") as fh:
                raise RuntimeError(f"dockerd did not come up: {fh.read()[-2000:]}")
        time.sleep(0.2)


@dataclass(frozen=True)
class RoutedHosts:
    """Engines as separate hosts would be, each with its containers' own routed subnet."""

    hosts: list[str]
    subnets: dict[str, str]
    """Engine -> the subnet its containers get (``backend.docker.subnets``)."""
    store_address: str
    """This machine's address on the fabric: every host routes to it."""

    def backend(self, hosts: list[str] | None = None) -> dict[str, object]:
        """``backend:`` of a scenario whose nodes go round-robin over ``hosts`` (default: each
        engine once)."""
        return {"docker": {"hosts": hosts or self.hosts, "subnets": self.subnets,
                           "store_address": self.store_address}}


def routed_unavailable() -> str | None:
    """Why two routed engines cannot start here (a reason to skip on), or None."""
    from tests.integration._support import missing

    return missing("docker") or ("two routed engines need root, ip and nsenter"
                                 if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter"))
                                 else None)


@contextlib.contextmanager
def routed_dockerds(count: int = 2, timeout_s: float = 60.0) -> Iterator[RoutedHosts]:
    """``count`` dockerds, each in a network namespace of its own (``tc-<t>-e<k>``), as
    separate hosts on one L2 fabric: a bridge here (``tc-<t>-fab``, this machine's address
    .1, where the controller's rendezvous store listens) and a veth to each namespace (.10+k).
    Each host's containers get a /24 of their own; every host routes the other hosts'
    subnets to them and this machine routes all of them: the routing docs/docker.md asks of
    a staging cluster. Everything is removed after (engines, namespaces, links, routes),
    also when the start fails half way."""
    from chaos.net import fabric

    token = secrets.token_hex(4)
    bridge = f"tc-{token}-fab"
    with contextlib.ExitStack() as undo:
        fab = fabric.pick_subnet(f"{token}-fabric")
        fabric.ip("link", "add", bridge, "type", "bridge")
        undo.callback(fabric.ip, "link", "del", bridge, check=False)
        fabric.ip("addr", "add", f"{fab.network_address + 1}/{fab.prefixlen}", "dev", bridge)
        fabric.ip("link", "set", bridge, "up")
        hops, subnets, namespaces = [], [], []
        for k in range(count):
            ns, outer, inner = f"tc-{token}-e{k}", f"tc-{token}-r{k}", f"tc-{token}-v{k}"
            fabric.ip("netns", "add", ns)
            undo.callback(fabric.ip, "netns", "del", ns, check=False)
            fabric.ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            undo.callback(fabric.ip, "link", "del", outer, check=False)
            fabric.ip("link", "set", outer, "master", bridge, "up")
            hop = str(fab.network_address + 10 + k)
            fabric.ip("addr", "add", f"{hop}/{fab.prefixlen}", "dev", inner, netns=ns)
            fabric.ip("link", "set", inner, "up", netns=ns)
            fabric.ip("link", "set", "lo", "up", netns=ns)
            subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                           check=True, capture_output=True)
            # Picked with the routes before it in place: each host's subnet is free of the others'.
            subnet = fabric.pick_subnet(f"{token}-{k}")
            fabric.ip("route", "add", str(subnet), "via", hop)
            undo.callback(fabric.ip, "route", "del", str(subnet), check=False)
            hops.append(hop)
            subnets.append(str(subnet))
            namespaces.append(ns)
        for k, ns in enumerate(namespaces):
            for j, (other_hop, other_subnet) in enumerate(zip(hops, subnets, strict=True)):
                if j != k:
                    fabric.ip("route", "add", other_subnet, "via", other_hop, netns=ns)
        engines = [undo.enter_context(_dockerd(timeout_s, ns)) for ns in namespaces]
        for url, proc, root in engines:
            _wait_answers(url, proc, root, timeout_s)
        hosts = [url for url, _, _ in engines]
        yield RoutedHosts(hosts, dict(zip(hosts, subnets, strict=True)), str(fab.network_address + 1))


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # containerd (and its shims) run in dockerd's session: none may outlive it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """The engine the tests use, as ``DOCKER_HOST`` (set for the session: the controller's
    subprocesses and ``trainchaos cleanup`` find it there): one that answers already, else
    a private dockerd for the session. Tests that use it are marked ``docker``; the skip
    here is for one that is not."""
    from tests.integration._support import missing

    if reason := missing("docker"):
        pytest.skip(reason)
    before = os.environ.get("DOCKER_HOST")
    with contextlib.ExitStack() as stack:
        url = before if engine_answers(before) else stack.enter_context(private_dockerd())
        os.environ["DOCKER_HOST"] = url
        try:
            yield url
        finally:
            from chaos.cluster import docker_engine

            docker_engine._clients.pop(url, None)
            if before is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = before


if __name__ == "__main__":
    # A dockerd for a shell session: prints DOCKER_HOST, runs until Ctrl-C or SIGTERM (also
    # when started in the background, where SIGINT starts out ignored).
    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    with private_dockerd() as url:
        print(f"export DOCKER_HOST={url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause() if sys.platform != "win32" else time.sleep(1e9)
