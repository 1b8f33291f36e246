"""Training data: the shipped text, a character vocabulary and a resumable, deterministic sampler.

The sampler is the reason this module exists. A chaos experiment judges correctness by
comparing a run that was killed and resumed with a fault-free baseline, bitwise. That only
works if the resumed run sees exactly the batches the baseline saw, so every batch is a pure
function of ``(seed, cursor)`` -- never of the global RNG, which model init, dropout or a
restarted process would disturb -- and the cursor is part of the checkpoint.

The training text lives in ``harness/data/corpus.txt`` (see ``harness/data/README.md`` for its
source). That folder has no ``__init__.py``: it holds package data only, and ``harness.data``
resolves to this module.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from importlib import resources
from typing import Any, TypeVar

import torch

__all__ = [
    "CORPUS_FILE",
    "CharVocab",
    "DeterministicSampler",
    "LoaderFeed",
    "load_text",
    "shard",
]

CORPUS_FILE = "corpus.txt"
"""Name of the shipped public-domain text inside ``harness/data/``."""

Batch = tuple[torch.Tensor, torch.Tensor]
T = TypeVar("T", torch.Tensor, tuple[torch.Tensor, ...])


def load_text(path: str = "") -> str:
    """The training text: the file at ``path`` (UTF-8), or the shipped corpus when empty."""
    if path:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:
        text = (resources.files("harness") / "data" / CORPUS_FILE).read_text(encoding="utf-8")
    if not text:
        raise ValueError(f"training text {path or CORPUS_FILE!r} is empty")
    return text


class CharVocab:
    """Character-level vocabulary: the sorted set of characters of a text.

    Sorted, so that the same text always gives the same ids on every rank and every restart
    (a ``set`` iterates in hash order, which differs between processes).
    """

    def __init__(self, text: str) -> None:
        if not text:
            raise ValueError("cannot build a vocabulary from an empty text")
        self.chars: list[str] = sorted(set(text))
        self._index = {ch: i for i, ch in enumerate(self.chars)}

    @property
    def size(self) -> int:
        """Number of distinct characters (the model's vocabulary size)."""
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Ids of ``text`` as a 1-D ``torch.long`` tensor; unknown characters are an error."""
        try:
            ids = [self._index[ch] for ch in text]
        except KeyError as exc:
            raise ValueError(f"character {exc.args[0]!r} is not in the vocabulary") from None
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """The text of a sequence of ids (a 1-D tensor or a list)."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self.chars[i] for i in values)


def _batch_seed(seed: int, cursor: int) -> int:
    """A 63-bit generator seed from (seed, cursor).

    Hashed rather than ``seed + cursor`` so that run seed 1 at cursor 0 and run seed 0 at
    cursor 1 do not share batches; 63 bits because ``Generator.manual_seed`` takes a signed
    64-bit range.
    """
    digest = hashlib.sha256(f"trainchaos-data:{seed}:{cursor}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class DeterministicSampler:
    """Random training windows where batch number ``cursor`` depends only on (seed, cursor).

    ``cursor`` counts the global batches consumed. Save :meth:`state_dict` in the checkpoint;
    a sampler restored from it continues with exactly the batches an uninterrupted run would
    have drawn next. Batches are global (all ranks draw the same one); each rank then takes
    its slice with :func:`shard`, so the data a step trains on does not depend on the world
    size.
    """

    def __init__(self, tokens: torch.Tensor, seq_len: int, global_batch: int, seed: int) -> None:
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
        if seq_len <= 0 or global_batch <= 0:
            raise ValueError(f"seq_len ({seq_len}) and global_batch ({global_batch}) must be > 0")
        if tokens.numel() < seq_len + 1:
            raise ValueError(
                f"the text has {tokens.numel()} tokens; a window of seq_len + 1 = {seq_len + 1} "
                "is needed for one input/target pair"
            )
        self.tokens = tokens.to(torch.long)
        self.seq_len = seq_len
        self.global_batch = global_batch
        self.seed = seed
        self.cursor = 0
        # Offsets 0..seq_len of one window, added to each drawn start.
        self._offsets = torch.arange(seq_len + 1)

    def batch_at(self, cursor: int) -> Batch:
        """Inputs and targets ``[global_batch, seq_len]`` of batch number ``cursor`` (pure)."""
        if cursor < 0:
            raise ValueError(f"cursor must be >= 0, got {cursor}")
        generator = torch.Generator(device="cpu")
        generator.manual_seed(_batch_seed(self.seed, cursor))
        high = self.tokens.numel() - self.seq_len  # last valid start + 1
        starts = torch.randint(0, high, (self.global_batch,), generator=generator)
        windows = self.tokens[starts[:, None] + self._offsets]
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()

    def next_batch(self) -> Batch:
        """The batch at the cursor; advances the cursor."""
        batch = self.batch_at(self.cursor)
        self.cursor += 1
        return batch

    def state_dict(self) -> dict[str, int]:
        """What a checkpoint must hold to resume the batch sequence."""
        return {"cursor": self.cursor, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; the seed must match (else the sequence would differ)."""
        missing = {"cursor", "seed"} - set(state)
        if missing:
            raise ValueError(f"data state lacks {', '.join(sorted(missing))}: got keys {sorted(state)}")
        if int(state["seed"]) != self.seed:
            raise ValueError(
                f"data state was saved with seed {state['seed']}, this run uses seed {self.seed}: "
                "resuming would replay a different batch sequence"
            )
        cursor = int(state["cursor"])
        if cursor < 0:
            raise ValueError(f"data state has a negative cursor ({cursor})")
        self.cursor = cursor

    @staticmethod
    def shard(batch: T, rank: int, world_size: int) -> T:
        """This rank's contiguous slice of a global batch; see :func:`shard`."""
        return shard(batch, rank, world_size)


def shard(batch: T, rank: int, world_size: int) -> T:
    """Rank ``rank``'s contiguous slice (along dim 0) of a tensor or a tuple of tensors.

    Contiguous slices, so that concatenating the shards in rank order gives back the global
    batch. The batch size must divide by the world size: uneven shards would weigh ranks
    differently in DDP's gradient average and break equality with a run of another size.
    """
    if world_size <= 0 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of size {world_size}")
    tensors = batch if isinstance(batch, tuple) else (batch,)
    size = tensors[0].shape[0]
    if size % world_size:
        raise ValueError(
            f"global batch ({size}) must be divisible by the world size ({world_size}): "
            "every rank takes an equal slice of each batch"
        )
    per_rank = size // world_size
    parts = tuple(t[rank * per_rank:(rank + 1) * per_rank] for t in tensors)
    return parts if isinstance(batch, tuple) else parts[0]


class _BatchAt(torch.utils.data.Dataset):
    """Batch number ``cursor`` of a sampler, computed in whichever process asks (a worker)."""

    def __init__(self, sampler: DeterministicSampler) -> None:
        self.sampler = sampler

    def __len__(self) -> int:
        return 2**62  # endless: the sampler below says which batches

    def __getitem__(self, cursor: int) -> Batch:
        return self.sampler.batch_at(cursor)


class _CursorsFrom(torch.utils.data.Sampler[int]):
    def __init__(self, start: int) -> None:
        self.start = start

    def __iter__(self) -> Iterator[int]:
        return itertools.count(self.start)


class LoaderFeed:
    """The sampler's batches, prepared ahead by DataLoader worker processes.

    Batches stay a pure function of (seed, cursor): the workers compute ``batch_at`` for the
    cursors in order, so a run with workers trains on exactly the batches of one without.
    The loader is (re)built whenever the sampler's cursor is not where it would continue
    (start, a checkpoint load).
    """

    def __init__(self, sampler: DeterministicSampler, workers: int) -> None:
        self.sampler = sampler
        self.workers = workers
        self._batches: Iterator[Batch] | None = None
        self._next_cursor = -1
        self.worker_pids: list[int] = []

    def next_batch(self) -> Batch:
        if self._batches is None or self._next_cursor != self.sampler.cursor:
            # spawn, not fork: the rank already runs threads (watchdog, liveness, a background
            # import), and a worker forked while one of them held a lock waits for it forever
            # (seen: the first batch never came). Not forkserver either: its AF_UNIX socket
            # lives in TMPDIR, the node's local directory, whose path can pass the 108-byte
            # limit (seen under pytest's temporary directories).
            loader = torch.utils.data.DataLoader(
                _BatchAt(self.sampler), batch_size=None, sampler=_CursorsFrom(self.sampler.cursor),
                num_workers=self.workers, prefetch_factor=2, multiprocessing_context="spawn")
            self._batches = iter(loader)
            self._next_cursor = self.sampler.cursor
            self.worker_pids = [w.pid for w in getattr(self._batches, "_workers", [])]
        batch = next(self._batches)
        self.sampler.cursor += 1
        self._next_cursor += 1
        return batch
