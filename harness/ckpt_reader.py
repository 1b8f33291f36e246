"""Reading a checkpoint back: nothing is trusted that was not verified (the manifest, every
file's size and sha256, the step, what ``torch.load`` accepts). A checkpoint that fails is
``Invalid`` with the reason reported to the user; ``ChecksumMismatch`` when the bytes on
disk are not the bytes written (silent corruption).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Any

import torch

from harness.ckpt_layout import (
    FINAL_RE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    STATE_FILE,
    STEP,
    CheckpointError,
    ChecksumMismatch,
    Invalid,
)

__all__ = ["read_checkpoint", "read_verified"]


def read_checkpoint(path: str) -> dict[str, Any]:
    """The state of the checkpoint directory ``path`` (``.../step-NNNNNNNN``), verified as
    :meth:`harness.checkpoint.CheckpointManager.load` verifies it (manifest, sizes, sha256, the step); raises
    :class:`CheckpointError` saying why it is unusable. For readers outside the job:
    trainchaos's checkpoint checkers (chaos.workload.harness)."""
    match = FINAL_RE.match(os.path.basename(os.path.normpath(path)))
    if match is None:
        raise CheckpointError(f"{path}: not a checkpoint directory (step-NNNNNNNN)")
    try:
        return read_verified(path, int(match.group(1)), True)
    except Invalid as exc:
        raise CheckpointError(str(exc)) from None


def read_verified(path: str, step: int, verify_checksum: bool) -> dict[str, Any]:
    """The state of the checkpoint at ``path`` if its manifest checks out, else Invalid."""
    manifest_path = os.path.join(path, MANIFEST_FILE)
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise Invalid(f"no {MANIFEST_FILE} (the write never completed)") from None
    except (OSError, ValueError) as exc:
        raise Invalid(f"unreadable {MANIFEST_FILE}: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise Invalid(f"malformed {MANIFEST_FILE}: no 'files' mapping")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise Invalid(
            f"format version {manifest.get('format_version')!r}, this reader knows {FORMAT_VERSION}"
        )
    if manifest.get("step") != step:
        raise Invalid(f"manifest says step {manifest.get('step')!r}, directory says {step}")
    files = manifest["files"]
    if STATE_FILE not in files:
        raise Invalid(f"{MANIFEST_FILE} does not list {STATE_FILE}")

    contents: dict[str, bytes] = {}
    for name, meta in files.items():
        if not isinstance(name, str) or os.path.basename(name) != name or name in (".", ".."):
            raise Invalid(f"{MANIFEST_FILE} lists a bad file name {name!r}")
        try:
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
        except OSError as exc:
            raise Invalid(f"{name}: cannot read: {exc.strerror or exc}") from None
        try:
            size, digest = int(meta["bytes"]), str(meta["sha256"])
        except (KeyError, TypeError, ValueError):
            raise Invalid(f"{MANIFEST_FILE} entry of {name} lacks bytes/sha256") from None
        if len(data) != size:
            raise Invalid(f"{name}: {len(data)} bytes, manifest says {size} (truncated or torn)")
        if verify_checksum and hashlib.sha256(data).hexdigest() != digest:
            raise ChecksumMismatch(f"{name}: sha256 mismatch (content changed after it was written)")
        contents[name] = data

    # Load the very bytes that were verified (re-reading the file could see other bytes).
    try:
        state = torch.load(io.BytesIO(contents[STATE_FILE]), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means unusable
        raise Invalid(f"{STATE_FILE}: torch.load failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise Invalid(f"{STATE_FILE} holds a {type(state).__name__}, not a state dict")
    if STEP in state and state[STEP] != step:
        raise Invalid(f"{STATE_FILE} says step {state[STEP]!r}, manifest says {step}")
    return state
