"""The training data: shipped text, vocabulary, and the resumable deterministic sampler."""

from __future__ import annotations

import pytest
import torch

from harness.data import CharVocab, DeterministicSampler, load_text, shard

SEQ_LEN, GLOBAL_BATCH = 32, 8


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    return CharVocab(load_text()).encode(load_text())


def sampler(tokens: torch.Tensor, seed: int = 3) -> DeterministicSampler:
    return DeterministicSampler(tokens, SEQ_LEN, GLOBAL_BATCH, seed)


def test_shipped_text_is_real_and_sizeable() -> None:
    text = load_text()
    assert 25_000 <= len(text.encode()) <= 40_000
    assert "Caius Marcius" in text


def test_load_text_reads_a_given_file(tmp_path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("hello world", encoding="utf-8")
    assert load_text(str(path)) == "hello world"


def test_vocab_round_trip_and_sorted_ids() -> None:
    vocab = CharVocab("banana!")
    assert vocab.chars == ["!", "a", "b", "n"] and vocab.size == 4
    ids = vocab.encode("nab!")
    assert ids.dtype == torch.long and ids.tolist() == [3, 1, 2, 0]
    assert vocab.decode(ids) == "nab!"
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        vocab.encode("z")


def test_batch_is_a_pure_function_of_seed_and_cursor(tokens: torch.Tensor) -> None:
    a, b = sampler(tokens), sampler(tokens)
    torch.manual_seed(123)  # the global RNG must play no part
    x1, y1 = a.batch_at(5)
    torch.manual_seed(456)
    x2, y2 = b.batch_at(5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (GLOBAL_BATCH, SEQ_LEN) and x1.dtype == torch.long
    assert not torch.equal(a.batch_at(6)[0], x1)
    assert not torch.equal(sampler(tokens, seed=4).batch_at(5)[0], x1)


def test_targets_are_inputs_shifted_by_one(tokens: torch.Tensor) -> None:
    x, y = sampler(tokens).batch_at(0)
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_resumed_sampler_continues_like_an_uninterrupted_one(tokens: torch.Tensor) -> None:
    uninterrupted = sampler(tokens)
    expected = [uninterrupted.next_batch() for _ in range(10)]

    first_life = sampler(tokens)
    for _ in range(4):
        first_life.next_batch()
    saved = first_life.state_dict()
    assert saved == {"cursor": 4, "seed": 3}

    resumed = sampler(tokens)
    resumed.load_state_dict(saved)
    for want_x, want_y in expected[4:]:
        x, y = resumed.next_batch()
        assert torch.equal(x, want_x) and torch.equal(y, want_y)
    assert resumed.cursor == 10


def test_load_state_dict_rejects_another_seed(tokens: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="seed 9, this run uses seed 3"):
        sampler(tokens).load_state_dict({"cursor": 2, "seed": 9})
    with pytest.raises(ValueError, match="lacks cursor"):
        sampler(tokens).load_state_dict({"seed": 3})


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_shards_concatenate_to_the_global_batch(tokens: torch.Tensor, world_size: int) -> None:
    x, y = sampler(tokens).batch_at(2)
    parts = [shard((x, y), rank, world_size) for rank in range(world_size)]
    assert all(px.shape == (GLOBAL_BATCH // world_size, SEQ_LEN) for px, _ in parts)
    assert torch.equal(torch.cat([px for px, _ in parts]), x)
    assert torch.equal(torch.cat([py for _, py in parts]), y)
    assert torch.equal(DeterministicSampler.shard(x, 0, world_size), parts[0][0])


def test_shard_rejects_uneven_world_size_and_bad_rank(tokens: torch.Tensor) -> None:
    batch = sampler(tokens).batch_at(0)
    with pytest.raises(ValueError, match=r"global batch \(8\) must be divisible by the world size \(3\)"):
        shard(batch, 0, 3)
    with pytest.raises(ValueError, match="outside a world of size 2"):
        shard(batch, 2, 2)


def test_text_shorter_than_a_window_is_rejected() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        DeterministicSampler(torch.arange(10), 16, 2, 0)


def test_loader_workers_feed_exactly_the_samplers_batches_and_follow_a_restored_cursor():
    """The batches a step trains on must not depend on whether worker processes made them."""
    from harness.data import DeterministicSampler, LoaderFeed

    tokens = torch.arange(500) % 37
    plain = DeterministicSampler(tokens, seq_len=8, global_batch=4, seed=3)
    fed = DeterministicSampler(tokens, seq_len=8, global_batch=4, seed=3)
    feed = LoaderFeed(fed, workers=1)
    for _ in range(3):
        for a, b in zip(plain.next_batch(), feed.next_batch(), strict=True):
            assert torch.equal(a, b)
    assert fed.cursor == plain.cursor == 3 and len(feed.worker_pids) == 1
    fed.load_state_dict({"cursor": 10, "seed": 3})  # a checkpoint load moves the cursor
    for a, b in zip(plain.batch_at(10), feed.next_batch(), strict=True):
        assert torch.equal(a, b)
    assert fed.cursor == 11
