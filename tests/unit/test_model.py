"""The models: size, deterministic init, shapes, causality, the bitwise state digest, and
the one buffer the parameters lie in."""

from __future__ import annotations

import io

import pytest
import torch

from harness.config import ModelConfig
from harness.model import (
    TinyGPT,
    TinyMLP,
    build_model,
    build_optimizer,
    count_parameters,
    flatten_parameters,
    state_digest,
)

VOCAB = 58  # characters in the shipped text


def test_default_tiny_gpt_size_is_in_range() -> None:
    model = build_model(ModelConfig(), VOCAB, seed=0)
    assert isinstance(model, TinyGPT)
    assert 200_000 <= count_parameters(model) <= 1_000_000


@pytest.mark.parametrize("name", ["tiny-gpt", "mlp"])
def test_init_depends_only_on_seed(name: str) -> None:
    cfg = ModelConfig(name=name)
    torch.manual_seed(1)
    a = build_model(cfg, VOCAB, seed=5)
    torch.manual_seed(2)  # the caller's RNG state must not matter
    b = build_model(cfg, VOCAB, seed=5)
    assert state_digest(a) == state_digest(b)
    assert state_digest(build_model(cfg, VOCAB, seed=6)) != state_digest(a)


def test_build_model_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    build_model(ModelConfig(), VOCAB, seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(("name", "cls"), [("tiny-gpt", TinyGPT), ("mlp", TinyMLP)])
def test_forward_gives_logits_per_position(name: str, cls: type) -> None:
    cfg = ModelConfig(name=name, seq_len=16, d_model=32, n_heads=4, n_layers=2)
    model = build_model(cfg, VOCAB, seed=0)
    assert isinstance(model, cls)
    for seq in (16, 5):
        logits = model(torch.randint(0, VOCAB, (3, seq)))
        assert logits.shape == (3, seq, VOCAB)
    with pytest.raises(ValueError, match="longer than the context"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("name", ["tiny-gpt", "mlp"])
def test_models_are_causal(name: str) -> None:
    """Changing a later token never changes an earlier position's logits."""
    model = build_model(ModelConfig(name=name, seq_len=16, d_model=32, n_layers=2), VOCAB, seed=0)
    x = torch.randint(0, VOCAB, (2, 16))
    changed = x.clone()
    changed[:, 10] = (changed[:, 10] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(x), model(changed)
    # allclose, not equal: an attention kernel may tile differently for different inputs.
    assert torch.allclose(before[:, :10], after[:, :10], atol=1e-6)
    assert not torch.allclose(before[:, 10], after[:, 10], atol=1e-4)


def test_digest_changes_when_one_bit_flips() -> None:
    model = build_model(ModelConfig(name="mlp"), VOCAB, seed=0)
    before = state_digest(model)
    with torch.no_grad():
        weight = next(model.parameters())
        weight.view(-1).view(torch.int32)[123] ^= 1  # lowest mantissa bit of one value
    assert state_digest(model) != before


def test_digest_ignores_a_ddp_style_wrapper() -> None:
    model = build_model(ModelConfig(name="mlp"), VOCAB, seed=0)
    wrapper = torch.nn.DataParallel(model)
    assert state_digest(wrapper) == state_digest(model)


def _tiles_in_name_order(model: torch.nn.Module) -> bool:
    """Whether the parameters lie one right after the other, in name order, in one storage."""
    params = [param for _, param in sorted(model.named_parameters())]
    storage = params[0].untyped_storage().data_ptr()
    end = params[0].data_ptr()
    for param in params:
        if param.untyped_storage().data_ptr() != storage or param.data_ptr() != end:
            return False
        end += param.numel() * param.element_size()
    return end - params[0].data_ptr() == params[0].untyped_storage().nbytes()


@pytest.mark.parametrize(("name", "cls"), [("tiny-gpt", TinyGPT), ("mlp", TinyMLP)])
def test_parameters_lie_in_one_buffer_in_name_order_with_the_same_values(name: str, cls: type) -> None:
    """The corruption detectors read the parameters as one buffer (harness.sdc_checksum): the
    buffer must hold exactly the values the model was built with, and stay the parameters'
    memory through what training does to them -- an optimizer step, a checkpoint's
    ``load_state_dict`` -- while a checkpoint stays one copy of the weights."""
    cfg = ModelConfig(name=name, seq_len=16, d_model=32, n_heads=4, n_layers=2)
    model = build_model(cfg, VOCAB, seed=3)
    assert _tiles_in_name_order(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        scattered = cls(VOCAB, 32, 2, 4, 16) if cls is TinyGPT else cls(VOCAB, 32, 16)
    assert not _tiles_in_name_order(scattered)
    assert state_digest(scattered) == state_digest(model)
    addresses = [p.data_ptr() for p in model.parameters()]

    optimizer = build_optimizer(model, lr=1e-2)
    model(torch.randint(0, VOCAB, (2, 16))).sum().backward()
    optimizer.step()
    assert [p.data_ptr() for p in model.parameters()] == addresses
    assert state_digest(model) != state_digest(scattered)  # it trained, in the buffer
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    assert buffer.tell() < 1.2 * count_parameters(model) * 4 + 50_000  # one copy, not one per view
    model.load_state_dict(scattered.state_dict())
    assert [p.data_ptr() for p in model.parameters()] == addresses
    assert state_digest(model) == state_digest(scattered)


def test_parameters_of_different_dtypes_are_left_where_they_are() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3).double())
    addresses = [p.data_ptr() for p in model.parameters()]
    assert flatten_parameters(model) is None
    assert [p.data_ptr() for p in model.parameters()] == addresses
