"""Did-you-mean by meaning as well as by spelling.

Spelling alone sends users to the wrong fault: ``corrupt_checkpoint`` is closest in letters
to ``crash_during_checkpoint``, ``storage_latency`` to ``latency`` (a network fault),
``power_loss`` to ``packet_loss``. Each fault family carries a table of what users call a
failure -> its fault types that express it, each with one line of why (``meanings()``
gathers them, ``FamilySpec.meanings``); the words are normalised to canonical tokens here
(``_SYNONYMS``), the vocabulary every family's phrases are written in; :data:`PARAM_MEANINGS`
does the same for parameter names (``delay`` -> ``delay_ms``, ``bits`` on a bitflip). A name
that the table knows gets the table's answer; any other gets the closest spelling.

Suggestions are cached per distinct (name, candidates): a file with thousands of faults of
one unknown type computes the answer once.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable

__all__ = ["PARAM_MEANINGS", "meanings", "meant_types", "misplaced_param", "suggest_param", "suggest_type", "spelling"]

# Words users write for the same thing: each maps to one canonical token.
_SYNONYMS = {
    "corruption": "corrupt", "corrupted": "corrupt", "corrupting": "corrupt", "rot": "corrupt",
    "bitrot": "corrupt", "ckpt": "checkpoint", "checkpoints": "checkpoint", "snapshot": "checkpoint",
    "disk": "storage", "io": "storage", "filesystem": "storage", "fs": "storage", "nfs": "storage",
    "file": "storage", "files": "storage", "write": "storage", "writes": "storage",
    "read": "storage", "reads": "storage",
    "latency": "slow", "delay": "slow", "delayed": "slow", "slowdown": "slow", "lag": "slow",
    "slowness": "slow", "throttle": "slow", "throttled": "slow", "throttling": "slow",
    "power": "power", "outage": "outage", "blackout": "outage", "brownout": "outage",
    "loss": "loss", "lost": "loss", "lose": "loss", "failure": "fail", "failed": "fail",
    "fails": "fail", "crash": "fail", "crashed": "fail", "down": "fail", "dead": "fail",
    "death": "fail", "die": "fail", "dies": "fail",
    "stress": "stress", "hog": "stress", "burn": "stress", "load": "stress", "saturate": "stress",
    "contention": "stress", "cpu": "cpu", "cpus": "cpu", "processor": "cpu",
    "noisy": "noisy", "neighbor": "neighbour", "neighbours": "neighbour", "neighbors": "neighbour",
    "partition": "partition", "partitioned": "partition", "split": "partition",
    "isolate": "partition", "isolation": "partition", "brain": "brain",
    "bit": "bit", "bits": "bit", "flip": "flip", "flipped": "flip", "flips": "flip",
    "sdc": "sdc", "silent": "silent", "drain": "drain", "drained": "drain",
    "maintenance": "drain", "cordon": "drain", "evict": "drain", "eviction": "drain",
    "preempt": "preempt", "preemption": "preempt", "preempted": "preempt", "requeue": "preempt",
    "oom": "oom", "memory": "memory", "mem": "memory", "ram": "memory",
    "gpu": "gpu", "cuda": "gpu", "xid": "gpu", "nccl": "network", "ecc": "gpu", "device": "gpu",
    "network": "network", "net": "network", "packet": "packet", "packets": "packet",
    "drop": "loss", "drops": "loss", "dropped": "loss", "jitter": "slow",
    "bandwidth": "bandwidth", "throughput": "bandwidth", "link": "link", "links": "link",
    "flap": "flap", "flapping": "flap", "hang": "hang", "hung": "hang", "freeze": "hang",
    "frozen": "hang", "stall": "stall", "stuck": "hang", "deadlock": "hang",
    "straggler": "straggler", "slow_rank": "straggler", "kill": "kill", "killed": "kill",
    "sigkill": "kill", "node": "node", "host": "node", "machine": "node", "server": "node",
    "rank": "rank", "worker": "rank", "process": "rank", "rack": "rack", "tor": "rack",
    "full": "full", "enospc": "full", "space": "full", "error": "error", "errors": "error",
    "eio": "error", "torn": "torn", "partial": "torn", "unfsynced": "unfsynced",
    "fsync": "unfsynced", "cache": "unfsynced", "pause": "hang", "paused": "hang",
    "container": "container", "docker": "container", "disconnect": "partition",
    "toxiproxy": "toxic", "toxic": "toxic", "proxy": "toxic", "service": "toxic",
}

def meanings() -> list[tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, str], ...]]]:
    """Every family's table of what users call a failure -> its fault types that express it,
    each with one line of why (``FamilySpec.meanings``), the families in name order."""
    from chaos.faults.family import families

    return [row for spec in families().values() for row in spec.meanings]


PARAM_MEANINGS: dict[str, tuple[tuple[str, str], ...]] = {
    # a parameter name users write -> ((parameter, why), ...); only those the type has count
    "delay": (("delay_ms", "milliseconds"), ("latency_ms", "milliseconds")),
    "latency": (("latency_ms", "milliseconds"), ("delay_ms", "milliseconds")),
    "jitter": (("jitter_ms", "milliseconds"),),
    "duration": (("duration_s", "seconds"), ("duration_steps", "steps")),
    "seconds": (("duration_s", "seconds"),),
    "timeout": (("duration_s", "seconds"),),
    "loss": (("percent", "0-100"),), "rate": (("rate_mbit", "Mbit/s"), ("percent", "0-100")),
    "drop": (("percent", "0-100"),), "probability_percent": (("percent", "0-100"),),
    "bandwidth": (("bandwidth_mbps", "MB/s"), ("rate_mbit", "Mbit/s")),
    "mbps": (("bandwidth_mbps", "MB/s"), ("rate_mbit", "Mbit/s")),
    "memory": (("memory_mb", "MiB"),), "mem": (("memory_mb", "MiB"),),
    "cpu": (("cpus", "CPUs"), ("factor", "how many times slower each step is")),
    "slowdown": (("factor", "how many times slower each step is"),),
    "error": (("errno", "EIO, ENOSPC... or its number"),), "code": (("errno", "EIO... or its number"), ("xid", "the Xid code")),
    "signum": (("signal", "SIGKILL, SIGTERM..."),), "sig": (("signal", "SIGKILL, SIGTERM..."),),
    "file": (("path", "a glob below the tier"),), "files": (("path", "a glob below the tier"),),
    "pattern": (("path", "a glob below the tier"),), "glob": (("path", "a glob below the tier"),),
    "operations": (("ops", "which file operations"),), "op": (("ops", "which file operations"),),
    "nbits": (("bits", "how many bits"),), "num_bits": (("bits", "how many bits"),),
    "bit_index": (("bit", "the bit's index"),),
}

_TOKEN = re.compile(r"[a-z]+|[0-9]+")


def _tokens(word: str) -> frozenset[str]:
    word = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", word).lower()
    raw = _TOKEN.findall(word)
    return frozenset(_SYNONYMS.get(t, t) for t in raw)


def spelling(word: object, candidates: Iterable[str]) -> str | None:
    if not isinstance(word, str):
        return None
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def meant_types(word: str, known: Iterable[str]) -> list[tuple[str, str]]:
    """(fault type, why) for what ``word`` means, best phrases only, known types only."""
    tokens = _tokens(word)
    known = set(known)
    best, out = 0, list[tuple[str, str]]()
    for phrases, types in meanings():
        score = max((len(p) for p in phrases if set(p) <= tokens), default=0)
        if score == 0 or score < best:
            continue
        if score > best:
            best, out = score, []
        out += [t for t in types if t[0] in known and t not in out]
    return out


@functools.lru_cache(maxsize=1024)
def _suggest_type(word: str, known: tuple[str, ...]) -> str:
    meant = [t for t in meant_types(word, known) if t[0] != word]
    if meant:
        return "; did you mean " + " or ".join(f"{name!r} ({why})" for name, why in meant) + "?"
    close = spelling(word, known)
    return f"; did you mean {close!r}?" if close else ";"


def suggest_type(word: object, known: Iterable[str]) -> str:
    """"; did you mean 'io_corrupt' (why) or ...?" for an unknown fault type, else ";"."""
    if not isinstance(word, str):
        return ";"
    return _suggest_type(word, tuple(known))


@functools.lru_cache(maxsize=1024)
def _suggest_param(word: str, allowed: tuple[str, ...], owner: str) -> str:
    from chaos.faults.base import known_types

    owner_type = known_types().get(owner)
    trap = owner_type.param_hint(word) if owner_type is not None else None
    if trap is not None:
        return f"; {trap};"
    key = word.lower()
    meant = [(name, why) for name, why in PARAM_MEANINGS.get(key, ())
             if name in allowed and name != word]
    if not meant and key.endswith(("_ms", "_s", "_mb", "_mbit", "_mbps")):
        meant = [(name, why) for name, why in PARAM_MEANINGS.get(key.rsplit("_", 1)[0], ())
                 if name in allowed and name != word]
    if meant:
        return "; did you mean " + " or ".join(f"{name!r} ({why})" for name, why in meant) + "?"
    close = spelling(word, allowed)
    if close:
        return f"; did you mean {close!r}?"
    elsewhere = [name for name, t in known_types().items()
                 if name != owner and word in t.params_model.model_fields]
    if elsewhere:
        return f"; {word!r} is a parameter of {', '.join(elsewhere[:4])}, not of {owner};"
    return ";"


def suggest_param(word: object, allowed: Iterable[str], owner: str) -> str:
    """"; did you mean 'delay_ms' (milliseconds)?" for an unknown parameter of fault type
    ``owner``; the type's own hint where it has one (``FaultType.param_hint``: the bitflip
    ``bits`` trap); a parameter of another type named."""
    if not isinstance(word, str):
        return ";"
    return _suggest_param(word, tuple(allowed), owner)


def misplaced_param(owner: type, key: object) -> str | None:
    """A fault type's own parameter written under target or beside type: where it goes."""
    where = getattr(owner, "misplaced_params_where", None)
    if where is None or not isinstance(key, str):
        return None
    from chaos.faults.base import known_types

    owners = [name for name, t in known_types().items() if key in t.params_model.model_fields]
    if not owners:
        return None
    more = " ..." if len(owners) > 4 else ""
    return (f"; {key!r} is a parameter of {', '.join(owners[:4])}{more}: it belongs in the "
            f"fault's params ({{params: {{{key}: ...}}}}), not in {where};")
