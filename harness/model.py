"""The models the harness trains, their deterministic construction and a bitwise state digest.

Both models map token ids ``[B, T]`` to logits ``[B, T, V]`` so the training loop and its loss
are the same for either:

- ``TinyGPT``: a decoder-only character-level transformer (~0.35 M parameters with the
  defaults), small enough to train in seconds on a CPU yet a real language model, so loss
  curves and recovery behave like those of a real job.
- ``TinyMLP``: each position sees only the previous few characters; a fraction of the cost,
  for tests that need a model but not a good one.

No weight tying between the embedding and the head: a tied parameter is used twice per step,
which makes DDP's gradient-ready order (and its bucket assignment) harder to reason about
when a fault hits mid-backward.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from chaos import probe
from harness.config import ModelConfig

__all__ = [
    "TinyGPT",
    "TinyMLP",
    "build_model",
    "build_optimizer",
    "count_parameters",
    "state_digest",
]

_INIT_STD = 0.02
"""Std of the normal init of every weight matrix (GPT-2's choice)."""


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position attends only to itself and the past."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # [B, T, C] -> [B, heads, T, C / heads]
        q, k, v = (t.view(batch, seq, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        # dropout 0: any randomness in the forward pass would have to be replayed exactly
        # on resume for the final weights to match the baseline bitwise.
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(batch, seq, width))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention and a 4x GELU MLP, each with a residual."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Decoder-only character-level transformer: token + learned position embeddings,
    ``n_layers`` pre-LN blocks, a final LayerNorm and an (untied) linear head."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, seq_len: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self._init_weights(n_layers)

    def _init_weights(self, n_layers: int) -> None:
        for name, param in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(param)
            elif param.dim() == 1:  # LayerNorm gains
                nn.init.ones_(param)
            else:
                # Residual output projections are scaled down (GPT-2) so the residual stream's
                # variance does not grow with depth.
                residual = name.endswith(("attn.proj.weight", "mlp.2.weight"))
                std = _INIT_STD / math.sqrt(2 * n_layers) if residual else _INIT_STD
                nn.init.normal_(param, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _check_input(idx, self.seq_len)
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class TinyMLP(nn.Module):
    """Each position's logits from the embeddings of its last ``context`` characters.

    Positions before the start of the sequence contribute zero vectors, so position ``t``
    never sees ``t + 1`` (causal) and every position gets logits, like ``TinyGPT``.
    """

    def __init__(self, vocab_size: int, d_model: int, seq_len: int, context: int = 4) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.context = context
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.mlp = nn.Sequential(
            nn.Linear(context * d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, vocab_size),
        )
        for name, param in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(param)
            else:
                nn.init.normal_(param, mean=0.0, std=_INIT_STD)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _check_input(idx, self.seq_len)
        seq = idx.shape[1]
        emb = self.tok_emb(idx)  # [B, T, D]
        padded = F.pad(emb, (0, 0, self.context - 1, 0))  # zero rows before position 0
        # Window i holds, for each position t, the embedding of character t - (context-1) + i.
        windows = torch.cat([padded[:, i:i + seq] for i in range(self.context)], dim=2)
        return self.mlp(windows)


def _check_input(idx: torch.Tensor, seq_len: int) -> None:
    if idx.dim() != 2:
        raise ValueError(f"expected token ids [batch, seq], got shape {tuple(idx.shape)}")
    if idx.shape[1] > seq_len:
        raise ValueError(f"sequence of {idx.shape[1]} tokens is longer than the context ({seq_len})")


def build_model(cfg: ModelConfig, vocab_size: int, seed: int) -> nn.Module:
    """The model ``cfg.name`` with weights that depend only on (cfg, vocab_size, seed).

    The global RNG is seeded inside a fork so that building a model neither depends on nor
    disturbs the caller's RNG state (which the caller may have restored from a checkpoint).
    """
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be > 0, got {vocab_size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cfg.name == "tiny-gpt":
            model: nn.Module = TinyGPT(vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.seq_len)
        elif cfg.name == "mlp":
            model = TinyMLP(vocab_size, cfg.d_model, cfg.seq_len)
        else:
            raise ValueError(f"unknown model {cfg.name!r}; known: tiny-gpt, mlp")
    flatten_parameters(model)
    return model


def flatten_parameters(model: nn.Module) -> torch.Tensor | None:
    """Move every parameter of ``model`` into one contiguous buffer, in name order, and
    return the buffer (None, and nothing moved, where the parameters differ in dtype or
    device).

    The values do not change; each parameter becomes a view of its slice (as Megatron's
    contiguous parameter buffer does). Why: the corruption detectors read every parameter
    byte at every step (harness.sdc_checksum), and one stream of 1.5 MB costs less than
    42 tensors scattered over the heap, in calls and above all in cache misses (the
    parameters are cold after the forward: 62 vs 148 us a checksum here); in name order,
    the sha256 digest of the parameters is one pass over the buffer too. The optimizer and
    ``load_state_dict`` write into the parameters in place, so they stay views; a
    checkpoint saves the buffer once (``torch.save`` keeps views of one storage together).
    """
    params = [param for _, param in sorted(model.named_parameters())]
    if not params or len({(p.dtype, p.device) for p in params}) != 1:
        return None
    flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
    offset = 0
    with torch.no_grad():
        for param in params:
            view = flat[offset:offset + param.numel()].view_as(param)
            view.copy_(param)
            param.data = view
            offset += param.numel()
    return flat


def build_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    """The optimizer the harness trains with (also what ``trainchaos validate`` builds to
    name the optimizer state a bit flip may target)."""
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters."""
    return sum(p.numel() for p in model.parameters())


def state_digest(model: nn.Module) -> str:
    """SHA-256 over every parameter and buffer (``chaos.probe.model_digest``: one definition
    for the harness and any user script that publishes its final state through the probe)."""
    return probe.model_digest(model)
