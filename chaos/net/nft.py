"""nftables rules inside a node's namespace, and tbf qdiscs on its link: what the network
faults put in effect.

Every rule drops on the *receiving* side (an ``input`` hook in the receiving node's
namespace): a sender never learns from its own kernel that the packet is lost (an ``output``
drop would fail its ``send`` with EPERM at once, which no real fabric does), so a cut looks
like one: connects and collectives time out. Each fault owns one table per namespace,
``inet trainchaos-<fault id>``; deleting the table undoes the fault, and deleting the
namespace (``trainchaos cleanup``) takes the table with it.
"""

from __future__ import annotations

import os
import re
import subprocess

from chaos.errors import ToolError

__all__ = ["ALL_INPUT", "add_input_drops", "attach_namespace", "delete_table", "forget_namespace", "namespace_exists",
           "table_name", "tbf_add", "tbf_del"]

ALL_INPUT = "meta nfproto { ipv4, ipv6 }"
"""A match for every IP packet: the rule that drops all a node receives (loopback aside)."""


def table_name(fault_id: str) -> str:
    return "trainchaos-" + re.sub(r"[^A-Za-z0-9_-]", "_", fault_id)[:40]


def namespace_exists(netns: str) -> bool:
    return os.path.exists(os.path.join("/run/netns", netns))


def _run(argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ToolError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def attach_namespace(name: str, pid: int) -> None:
    """Name the network namespace of process ``pid`` (a container's) ``name`` under
    /run/netns, so that rules can be put in it like in a netns node's."""
    _run(["ip", "netns", "attach", name, str(pid)])


def forget_namespace(name: str) -> None:
    """Remove the name ``attach_namespace`` gave; the namespace lives on with its process."""
    if namespace_exists(name):
        _run(["ip", "netns", "delete", name], check=False)


def add_input_drops(netns: str, table: str, rules: list[str]) -> None:
    """Create ``inet <table>`` in ``netns`` with an input chain holding ``rules`` (each a
    match expression; ``drop`` is appended). Loopback traffic is never touched."""
    body = "\n".join(f"    {rule} drop" for rule in rules)
    script = (f"table inet {table} {{\n  chain input {{\n"
              "    type filter hook input priority -10; policy accept;\n"
              f"    iifname \"lo\" accept\n{body}\n  }}\n}}\n")
    _run(["ip", "netns", "exec", netns, "nft", "-f", "-"], stdin=script)


def delete_table(netns: str, table: str) -> None:
    """Delete the table if it (and its namespace) still exist; idempotent."""
    if not table.startswith("trainchaos-") or not namespace_exists(netns):
        return
    listed = _run(["ip", "netns", "exec", netns, "nft", "list", "tables"], check=False).stdout
    if f"table inet {table}" in listed.splitlines():
        _run(["ip", "netns", "exec", netns, "nft", "delete", "table", "inet", table])


def tbf_add(dev: str, rate_mbit: float, netns: str | None = None) -> None:
    """Shape ``dev``'s egress to ``rate_mbit`` with a token bucket (tbf)."""
    rate_kbit = max(8, int(rate_mbit * 1000))
    # Burst: 64 KiB at least, or 10 ms at the rate. A packet bigger than the bucket never
    # leaves (a 9000-byte jumbo frame on a 6 KiB bucket stalls TCP until it times out), and
    # the kernel needs some depth to reach the rate at its timer resolution.
    burst = max(65536, rate_kbit * 1000 // 8 // 100)
    prefix = ["ip", "netns", "exec", netns] if netns else []
    _run([*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate_kbit}kbit",
          "burst", str(burst), "latency", "100ms"])


def tbf_del(dev: str, netns: str | None = None) -> None:
    """Remove the root qdisc of ``dev`` if the device (and namespace) still exist."""
    if not dev.startswith("tc-") or (netns and not namespace_exists(netns)):
        return
    prefix = ["ip", "netns", "exec", netns] if netns else []
    shown = _run([*prefix, "tc", "qdisc", "show", "dev", dev], check=False)
    if shown.returncode != 0 or " tbf " not in shown.stdout:
        return
    _run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"])
