"""The emulated fabric of one ``netns`` run, as run-scoped resources.

Each node is a network namespace ``tc-<short>-n<i>`` joined by a veth pair
(``tc-<short>-h<i>`` on the bridge, ``tc-<short>-p<i>`` inside the node) to the run's bridge
``tc-<short>-br``. ``<short>`` is 8 hex digits of the run id: Linux interface names hold at
most 15 characters. Addresses come from 198.18.0.0/15 (RFC 2544 benchmarking range), one
/24 per run: the bridge is ``.1`` (the controller's rendezvous store listens there), node
``i`` is ``.10+i``. Nothing of it exists outside the run's own interfaces and namespaces.

Every interface and namespace carries an alias ``trainchaos run=<run id> controller=<tag>``
(on the bridge and host-side veths; on ``lo`` inside a namespace), so that ``scan`` can tell
which run left it and whether that run's controller still lives, whatever state directory the
run was registered in. ``destroy`` refuses any name without the ``tc-`` prefix.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import shutil
import subprocess
from typing import Any, ClassVar

from chaos.errors import ToolError
from chaos.runfiles.resources import Leftover, ResourceKind, register_kind
from chaos.util.procs import controller_alive, controller_tag

__all__ = ["Bridge", "NetNamespace", "Veth", "bridge_name", "fabric_names", "ip", "node_namespace",
           "pick_subnet", "short_id"]

NAME_PREFIX = "tc-"
FABRIC_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
IFNAMSIZ = 15
_ALIAS_RE = re.compile(r"trainchaos run=(\S+) controller=(\S+)")


def ip(*args: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``ip`` (inside ``netns`` when given); raises ToolError with its stderr on failure."""
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ToolError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def short_id(run_id: str) -> str:
    """8 hex digits naming the run in interface names (the run id's own when it has them)."""
    m = re.fullmatch(r"trainchaos-([0-9a-f]{8,})", run_id)
    return m.group(1)[:8] if m else hashlib.sha1(run_id.encode(), usedforsecurity=False).hexdigest()[:8]


def bridge_name(run_id: str) -> str:
    return f"{NAME_PREFIX}{short_id(run_id)}-br"


def node_namespace(run_id: str, node: int) -> str:
    return f"{NAME_PREFIX}{short_id(run_id)}-n{node}"


def fabric_names(run_id: str, node: int) -> tuple[str, str]:
    """(host-side veth on the bridge, node-side veth inside the namespace)."""
    s = short_id(run_id)
    return f"{NAME_PREFIX}{s}-h{node}", f"{NAME_PREFIX}{s}-p{node}"


def alias(run_id: str) -> str:
    return f"trainchaos run={run_id} controller={controller_tag()}"


def _ours(name: str) -> bool:
    return name.startswith(NAME_PREFIX) and len(name) <= 255 and "/" not in name


def _root_addresses() -> set[ipaddress.IPv4Network]:
    """The networks of this namespace's addresses, and those it routes elsewhere: a subnet
    another host's containers use (a routed docker host, ``docs/docker.md``) is as taken as
    one on an interface here."""
    out = ip("-o", "-4", "addr", "show", check=False).stdout
    nets: set[ipaddress.IPv4Network] = set()
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+/\d+)", out):
        nets.add(ipaddress.IPv4Interface(m.group(1)).network)
    for line in ip("-4", "route", "show", check=False).stdout.splitlines():
        dest = line.split(" ", 1)[0]
        if dest and dest[0].isdigit():
            nets.add(ipaddress.IPv4Network(dest, strict=False))
    return nets


def pick_subnet(run_id: str) -> ipaddress.IPv4Network:
    """A /24 of 198.18.0.0/15 no interface or route of this namespace uses yet, starting from one
    drawn from the run id (so concurrent runs rarely even probe the same one)."""
    subnets = list(FABRIC_RANGE.subnets(new_prefix=24))
    used = _root_addresses()
    start = int(hashlib.sha1(run_id.encode(), usedforsecurity=False).hexdigest(), 16) % len(subnets)
    for k in range(len(subnets)):
        net = subnets[(start + k) % len(subnets)]
        if not any(net.overlaps(u) for u in used):
            return net
    raise ToolError("no free /24 left in 198.18.0.0/15 for the run's fabric")


def interface_aliases(netns: str | None = None) -> dict[str, str]:
    """Interface name -> its alias ('' without one), in the root namespace or ``netns``."""
    if shutil.which("ip") is None:
        return {}  # no iproute2: nothing of ours can exist either
    proc = ip("-o", "link", "show", check=False, netns=netns)
    links = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\d+: ([^:@]+)[@:]", line)
        if m:
            am = re.search(r"alias (.*)$", line)
            links[m.group(1).strip()] = am.group(1).strip() if am else ""
    return links


def alias_owner(alias_text: str) -> tuple[str | None, bool]:
    """(run id, whether its controller still lives) from an alias of ours."""
    m = _ALIAS_RE.search(alias_text or "")
    if not m:
        return None, False
    return m.group(1), controller_alive(m.group(2))


def _scan_links(kind: str, suffix_re: str) -> list[Leftover]:
    found = []
    for name, text in sorted(interface_aliases().items()):
        if not (name.startswith(NAME_PREFIX) and re.fullmatch(NAME_PREFIX + r"[0-9a-f]{8}-" + suffix_re, name)):
            continue
        run_id, live = alias_owner(text)
        # A live controller's interfaces are never leftovers, whichever state directory
        # registered its run (cleanup compares with its own registry only).
        if not live:
            found.append(Leftover(kind, name, run_id, {"name": name}))
    return found


def _del_link(name: str) -> None:
    """Delete an interface of ours if it is there. A veth whose namespace end was just
    deleted with its namespace vanishes by itself a moment later: losing that race is fine."""
    if not _ours(name) or name not in interface_aliases():
        return
    proc = ip("link", "del", name, check=False)
    if proc.returncode != 0 and name in interface_aliases():
        raise ToolError(f"ip link del {name}: {proc.stderr.strip()}")


@register_kind
class NetNamespace(ResourceKind):
    """A node's network namespace, with ``lo`` up."""

    kind: ClassVar[str] = "netns"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        name = spec["name"]
        if not _ours(name):
            raise ToolError(f"refusing to create namespace {name}: not named {NAME_PREFIX}...")
        ip("netns", "add", name)
        ip("link", "set", "lo", "up", netns=name)
        ip("link", "set", "lo", "alias", alias(run_id), netns=name)
        return {}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        name = spec["name"]
        if _ours(name) and cls.exists(spec, details):
            ip("netns", "del", name)

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return os.path.exists(os.path.join("/run/netns", spec["name"]))

    @classmethod
    def scan(cls) -> list[Leftover]:
        try:
            names = sorted(os.listdir("/run/netns"))
        except OSError:
            return []
        found = []
        for name in names:
            if not re.fullmatch(NAME_PREFIX + r"[0-9a-f]{8}-n\d+", name):
                continue
            run_id, live = alias_owner(interface_aliases(netns=name).get("lo", ""))
            if not live:
                found.append(Leftover(cls.kind, name, run_id, {"name": name}))
        return found


@register_kind
class Bridge(ResourceKind):
    """The run's bridge, with the controller's address on it (``spec.address``, CIDR)."""

    kind: ClassVar[str] = "bridge"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        name = spec["name"]
        if not _ours(name) or len(name) > IFNAMSIZ:
            raise ToolError(f"refusing to create bridge {name!r}")
        ip("link", "add", name, "type", "bridge")
        ip("link", "set", name, "alias", alias(run_id))
        if spec.get("address"):
            ip("addr", "add", spec["address"], "dev", name)
        ip("link", "set", name, "up")
        return {}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        _del_link(spec["name"])

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return spec["name"] in interface_aliases()

    @classmethod
    def scan(cls) -> list[Leftover]:
        return _scan_links(cls.kind, "br")


@register_kind
class Veth(ResourceKind):
    """A veth pair from the bridge into a node's namespace: ``name`` on the bridge, ``peer``
    inside ``netns`` with ``address`` (CIDR). Deleting one end deletes both, at once (a
    namespace's own deletion would take its end only asynchronously)."""

    kind: ClassVar[str] = "veth"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        name, peer, netns = spec["name"], spec["peer"], spec["netns"]
        if not (_ours(name) and _ours(peer)) or max(len(name), len(peer)) > IFNAMSIZ:
            raise ToolError(f"refusing to create veth {name!r}/{peer!r}")
        mtu = str(int(spec.get("mtu", 1500)))
        ip("link", "add", name, "mtu", mtu, "type", "veth", "peer", "name", peer, "mtu", mtu)
        ip("link", "set", name, "alias", alias(run_id))
        ip("link", "set", name, "master", spec["bridge"])
        ip("link", "set", name, "up")
        ip("link", "set", peer, "netns", netns)
        ip("addr", "add", spec["address"], "dev", peer, netns=netns)
        ip("link", "set", peer, "up", netns=netns)
        return {}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        _del_link(spec["name"])

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return spec["name"] in interface_aliases()

    @classmethod
    def scan(cls) -> list[Leftover]:
        return _scan_links(cls.kind, r"h\d+")


def missing_capabilities() -> list[str]:
    """What this machine lacks for namespaced nodes: the ``ip`` and ``nft`` commands, and the
    right to make a namespace (tried for real: a throwaway namespace made and removed;
    ``ip netns add`` needs CAP_NET_ADMIN and CAP_SYS_ADMIN, it bind-mounts the namespace)."""
    missing = [f"the {cmd!r} command is not installed (Debian: apt-get install {pkg})"
               for cmd, pkg in (("ip", "iproute2"), ("nft", "nftables")) if shutil.which(cmd) is None]
    if shutil.which("ip") is None:
        return missing
    probe = f"{NAME_PREFIX}preflight-{os.getpid()}"
    try:
        made = ip("netns", "add", probe, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return [*missing, f"cannot run ip: {exc}"]
    if made.returncode != 0:
        missing.append("CAP_NET_ADMIN is missing: cannot create a network namespace "
                       f"({made.stderr.strip() or 'ip netns add failed'}); run as root or grant "
                       "CAP_NET_ADMIN and CAP_SYS_ADMIN")
    else:
        ip("netns", "del", probe, check=False)
    return missing
