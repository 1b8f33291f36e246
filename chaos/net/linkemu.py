"""The userspace link emulator: delay and jitter on chosen directed links of a ``netns`` run.

This kernel has no ``sch_netem`` (nor do many CI sandboxes), so a delayed link is routed
through a TUN device instead. One emulator process per run holds, for every node, a TUN
device ``tc-<short>-e<i>`` inside that node's namespace and a raw IP socket bound to the
node's veth. Nothing is routed through it while no latency fault is on: the clean fabric
stays at kernel speed. A latency fault on the directed link a -> b

1. tells the emulator the delay of (a, address of b) over its control socket, then
2. adds ``<b>/32 dev tc-<short>-e<a>`` in a's namespace: a's kernel hands every packet for
   b to the TUN device; the emulator holds it for the delay and writes it, unchanged, to
   a's veth through the raw socket (``SO_BINDTODEVICE`` makes the kernel pick the veth's
   connected route, not the /32 through the TUN, so it never loops).

Reverting deletes the route first (new packets go straight again), then the delay. The TUN
devices are not persistent: they vanish, with every route through them, when the emulator
process exits, whatever killed it. So after a SIGKILLed controller, killing the emulator
(``trainchaos cleanup`` finds it by the run id in its environment) restores the kernel path.

The emulator lives in the root namespace (it enters each node's namespace only to open the
TUN device and the raw socket there, via ``setns``) and listens on an abstract UNIX socket
``@trainchaos-linkemu-<run id>``: one JSON request per line, one JSON reply per line.

Delays: ``delay_ms`` plus a uniform draw from [-jitter_ms, +jitter_ms], from a generator
seeded per link. By default a link stays FIFO (a packet never leaves before the one sent
before it, as on a wire whose queueing delay varies); ``reorder`` lets each packet leave at
its own drawn time, as netem does. A link queues at most ``QUEUE_LIMIT`` packets (netem's
``limit``); more are dropped.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import heapq
import json
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any, ClassVar

from chaos.errors import ToolError
from chaos.runfiles.resources import HelperProcess, Leftover, register_kind

__all__ = ["LinkEmulator", "LinkEmulatorClient", "control_address", "tun_name"]

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
QUEUE_LIMIT = 10000
READY_TIMEOUT_S = 15.0
_TUN_RE = re.compile(r"tc-[0-9a-f]{8}-e\d+")


def tun_name(short: str, node: int) -> str:
    """The emulator's TUN device in node ``node``'s namespace (at most 15 characters)."""
    return f"tc-{short}-e{node}"


def control_address(run_id: str) -> str:
    """The emulator's control socket: abstract (no file to leave behind), root namespace."""
    return "\0trainchaos-linkemu-" + run_id


# -- the emulator process ------------------------------------------------------------------


def _peer_uid(conn: socket.socket) -> int:
    """The connecting process's user: an abstract socket has no file permissions, so any
    local user's process could otherwise connect (docs/security.md)."""
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(uid)

def _setns(path_or_fd: str | int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path_or_fd, os.O_RDONLY) if isinstance(path_or_fd, str) else path_or_fd
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns: {os.strerror(err)}")
    finally:
        if isinstance(path_or_fd, str):
            os.close(fd)


class _Port:
    """One node's end of the emulator: its TUN device and the raw socket onto its veth."""

    def __init__(self, node: int, netns: str, tun: str, dev: str, mtu: int) -> None:
        self.node, self.netns, self.tun, self.dev = node, netns, tun, dev
        root = os.open("/proc/self/ns/net", os.O_RDONLY)
        try:
            _setns(os.path.join("/run/netns", netns))
            # Both opened inside the node's namespace: the TUN device is made in the
            # namespace its file was opened in, a socket stays in the one it was made in.
            self.fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            fcntl.ioctl(self.fd, TUNSETIFF, struct.pack("16sH22x", tun.encode(), IFF_TUN | IFF_NO_PI))
            self.out = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            self.out.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
            self.out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        finally:
            _setns(root)
            os.close(root)
        subprocess.run(["ip", "-n", netns, "link", "set", tun, "mtu", str(mtu), "up"], check=True,
                       capture_output=True, timeout=30)


class _Link:
    def __init__(self, delay_ms: float, jitter_ms: float, reorder: bool, seed: int) -> None:
        self.delay = delay_ms / 1000.0
        self.jitter = jitter_ms / 1000.0
        self.reorder = reorder
        self.rng = random.Random(seed)
        self.last_release = 0.0
        self.queued = 0

    def release_time(self, now: float) -> float:
        t = now + self.delay + (self.rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0)
        if not self.reorder:
            t = max(t, self.last_release)
            self.last_release = t
        return t


class Emulator:
    def __init__(self, ports: list[_Port], address: str) -> None:
        self.ports = {p.fd: p for p in ports}
        self.by_node = {p.node: p for p in ports}
        self.links: dict[tuple[int, str], _Link] = {}
        self.stats: dict[str, dict[str, int]] = {}
        self.queue: list[tuple[float, int, int, bytes, str]] = []
        self.seq = 0
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ctl.bind(address)
        self.ctl.listen(16)
        self.conns: dict[int, tuple[socket.socket, bytes]] = {}
        self.stop = False

    def _stat(self, node: int, dst: str, key: str) -> None:
        entry = self.stats.setdefault(f"{node}>{dst}", {"delayed": 0, "direct": 0, "dropped": 0})
        entry[key] += 1

    def _receive(self, port: _Port, now: float) -> None:
        for _ in range(256):
            try:
                pkt = os.read(port.fd, 65535)
            except BlockingIOError:
                return
            if len(pkt) < 20 or pkt[0] >> 4 != 4:
                continue  # IPv4 only: the fabric has no IPv6 addresses
            dst = socket.inet_ntoa(pkt[16:20])
            link = self.links.get((port.node, dst))
            if link is None:  # a route outliving its delay (mid-revert): straight on
                self._send(port, pkt, dst)
                self._stat(port.node, dst, "direct")
                continue
            if link.queued >= QUEUE_LIMIT:
                self._stat(port.node, dst, "dropped")
                continue
            link.queued += 1
            self.seq += 1
            heapq.heappush(self.queue, (link.release_time(now), self.seq, port.node, pkt, dst))
            self._stat(port.node, dst, "delayed")

    def _send(self, port: _Port, pkt: bytes, dst: str) -> None:
        try:
            port.out.sendto(pkt, (dst, 0))
        except OSError:
            self._stat(port.node, dst, "dropped")  # ENOBUFS and the like: lost, as on a wire

    def _release_due(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, _, node, pkt, dst = heapq.heappop(self.queue)
            link = self.links.get((node, dst))
            if link is not None:
                link.queued -= 1
            self._send(self.by_node[node], pkt, dst)

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "set":
            node, dst = int(request["node"]), str(request["dst"])
            if node not in self.by_node:
                return {"ok": False, "error": f"no port for node {node}"}
            self.links[(node, dst)] = _Link(float(request["delay_ms"]), float(request.get("jitter_ms", 0)),
                                            bool(request.get("reorder", False)), int(request.get("seed", 0)))
            return {"ok": True}
        if op == "clear":
            self.links.pop((int(request["node"]), str(request["dst"])), None)
            return {"ok": True}
        if op == "stats":
            return {"ok": True, "stats": self.stats, "queued": len(self.queue)}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _serve_control(self, sock: socket.socket) -> None:
        conn, buf = self.conns[sock.fileno()]
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:
            del self.conns[sock.fileno()]
            conn.close()
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                reply = self._handle(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                reply = {"ok": False, "error": str(exc)}
            conn.sendall(json.dumps(reply).encode() + b"\n")
        self.conns[sock.fileno()] = (conn, buf)

    def run(self) -> None:
        while not self.stop:
            now = time.monotonic()
            self._release_due(now)
            timeout = max(0.0, self.queue[0][0] - time.monotonic()) if self.queue else 0.5
            readers: list[int | socket.socket] = [*self.ports, self.ctl, *(c for c, _ in self.conns.values())]
            try:
                ready, _, _ = select.select(readers, [], [], timeout)
            except InterruptedError:
                continue
            now = time.monotonic()
            for r in ready:
                if r is self.ctl:
                    conn, _ = self.ctl.accept()
                    if _peer_uid(conn) != os.getuid():
                        conn.close()  # another user's process: it may not re-time the run's links
                        continue
                    self.conns[conn.fileno()] = (conn, b"")
                elif isinstance(r, int):
                    self._receive(self.ports[r], now)
                else:
                    self._serve_control(r)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.net.linkemu")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--port", action="append", default=[],
                        help="node,netns,tun,veth: one per node")
    parser.add_argument("--mtu", type=int, default=1500)
    args = parser.parse_args(argv)
    ports = []
    for spec in args.port:
        node, netns, tun, dev = spec.split(",")
        ports.append(_Port(int(node), netns, tun, dev, args.mtu))
    emulator = Emulator(ports, control_address(args.run_id))

    def _stop(signum: int, frame: Any) -> None:
        emulator.stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print("ready", flush=True)
    emulator.run()
    return 0


# -- the controller's side ------------------------------------------------------------------

class LinkEmulatorClient:
    """Talks to a run's emulator over its control socket."""

    def __init__(self, run_id: str, timeout_s: float = 10.0) -> None:
        self.address = control_address(run_id)
        self.timeout_s = timeout_s

    def request(self, **request: Any) -> dict[str, Any]:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(self.address)
                sock.sendall(json.dumps(request).encode() + b"\n")
                buf = b""
                while b"\n" not in buf:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
        except OSError as exc:
            raise ToolError(f"link emulator of {self.address[1:]}: {exc}") from exc
        try:
            reply = json.loads(buf.split(b"\n", 1)[0])
        except ValueError as exc:
            raise ToolError(f"link emulator answered {buf[:80]!r}") from exc
        if not reply.get("ok"):
            raise ToolError(f"link emulator refused {request.get('op')}: {reply.get('error')}")
        return reply


@register_kind
class LinkEmulator(HelperProcess):
    """The run's link emulator process and its TUN devices (which live exactly as long as
    the process: destroying it removes them, and every route through them, with it).

    spec: ``ports`` ([node, netns, tun, veth] per node), ``mtu``, ``log``."""

    kind: ClassVar[str] = "link_emulator"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        for _node, netns, tun, dev in spec["ports"]:
            if not (netns.startswith("tc-") and tun.startswith("tc-") and dev.startswith("tc-")) or len(tun) > 15:
                raise ToolError(f"refusing an emulator port {netns}/{tun}/{dev}: not named tc-...")
        argv = [sys.executable, "-m", "chaos.net.linkemu", "--run-id", run_id, "--mtu", str(int(spec.get("mtu", 1500)))]
        for port in spec["ports"]:
            argv += ["--port", ",".join(map(str, port))]
        details = super().create(run_id, {"argv": argv, "name": "link-emulator", "log": spec.get("log")})
        client = LinkEmulatorClient(run_id, timeout_s=2.0)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                client.request(op="ping")
                return details
            except ToolError as exc:
                if child_exited(details["pid"]) or time.monotonic() > deadline:
                    log = spec.get("log")
                    tail = ""
                    if log and os.path.exists(log):
                        with open(log, encoding="utf-8", errors="replace") as fh:
                            tail = fh.read()[-400:].strip()
                    raise ToolError(f"the link emulator did not come up ({exc}){': ' + tail if tail else ''}") from exc
            time.sleep(0.05)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        if cls._ours(details):
            return True
        return any(_tun_present(netns, tun) for _node, netns, tun, _dev in spec.get("ports", []))

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        super().destroy(spec, details)
        # A TUN device goes with the last process holding it; wait for the kernel to drop it.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
                _tun_present(netns, tun) for _node, netns, tun, _dev in spec.get("ports", [])):
            time.sleep(0.05)

    @classmethod
    def scan(cls) -> list[Leftover]:
        """TUN devices of ours whose run's controller is gone (the emulator still holding
        them is an orphaned run process, which cleanup kills by its run id)."""
        from chaos.net import fabric

        found = []
        try:
            names = sorted(os.listdir("/run/netns"))
        except OSError:
            return []
        for ns in names:
            if not ns.startswith("tc-"):
                continue
            links = fabric.interface_aliases(netns=ns)
            run_id, live = fabric.alias_owner(links.get("lo", ""))
            if live:
                continue
            found += [Leftover(cls.kind, f"{ns}/{name}", run_id, {"ports": [[-1, ns, name, ""]]})
                      for name in links if _TUN_RE.fullmatch(name)]
        return found


def child_exited(pid: int) -> bool:
    """Whether a child this process started has exited (reaping it). Asked while it comes
    up: until it has exec'd, its environment is still ours, so ``_ours`` cannot tell yet."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not os.path.exists(f"/proc/{pid}")
    return done == pid


def _tun_present(netns: str, tun: str) -> bool:
    if not os.path.exists(os.path.join("/run/netns", netns)):
        return False
    proc = subprocess.run(["ip", "-n", netns, "link", "show", tun], capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


def add_route(netns: str, dst: str, tun: str, src: str) -> None:
    proc = subprocess.run(["ip", "-n", netns, "route", "replace", f"{dst}/32", "dev", tun, "src", src],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise ToolError(f"ip -n {netns} route replace {dst}/32 dev {tun}: {proc.stderr.strip()}")


def del_route(netns: str, dst: str, tun: str) -> None:
    """Idempotent: a route already gone (with its TUN device, or its namespace) is fine."""
    if not tun.startswith("tc-") or not os.path.exists(os.path.join("/run/netns", netns)):
        return
    proc = subprocess.run(["ip", "-n", netns, "route", "del", f"{dst}/32", "dev", tun],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 and _route_present(netns, dst, tun):
        raise ToolError(f"ip -n {netns} route del {dst}/32 dev {tun}: {proc.stderr.strip()}")


def _route_present(netns: str, dst: str, tun: str) -> bool:
    proc = subprocess.run(["ip", "-n", netns, "route", "show", f"{dst}/32", "dev", tun],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode == 0 and bool(proc.stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
