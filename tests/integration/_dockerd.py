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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

__all__ = ["docker_host", "engine_answers", "private_dockerd"]


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
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise RuntimeError("dockerd not installed (make install adds docker.io)")
    # Short: the socket path must stay under 108 bytes.
    root = tempfile.mkdtemp(prefix="tc-dockerd-", dir="/tmp")
    sock = os.path.join(root, "d.sock")
    log = open(os.path.join(root, "dockerd.log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [dockerd, "--iptables=false", "--ip-masq=false", "--bridge=none",
         "--storage-driver=vfs", "--data-root", os.path.join(root, "data"),
         "--exec-root", os.path.join(root, "exec"), "--pidfile", os.path.join(root, "dockerd.pid"),
         "-H", f"unix://{sock}", "--log-level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"unix://{sock}"
    try:
        deadline = time.monotonic() + timeout_s
        while not engine_answers(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                with open(os.path.join(root, "dockerd.log"), encoding="utf-8", errors="replace") as fh:
                    raise RuntimeError(f"dockerd did not come up: {fh.read()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)
        log.close()
        # vfs layers and container state can hold mounts (shm): unmount before removing.
        with open("/proc/mounts", encoding="utf-8") as fh:
            mounts = [line.split()[1] for line in fh if root in line.split()[1]]
        for mnt in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


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
