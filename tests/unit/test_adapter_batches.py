"""chaos.adapters.batches: the indices of every batch a DataLoader fetches, queued in order
and reported with the step that trains them, without changing what the loader yields.

In one process with the probe attached to a temporary events directory.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from chaos import probe
from chaos.adapters.batches import BatchRecorder


@pytest.fixture
def steps(tmp_path, monkeypatch):
    """The probe of this process, attached to a fresh events directory; the samples and epoch
    of each ``step_end`` written, read back."""
    events_dir = tmp_path / "events"
    monkeypatch.setenv(probe.ENV_EVENTS_DIR, str(events_dir))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(probe, "_probe", None)

    def read() -> list[tuple[list[list[int]], int | None]]:
        probe.get()._file.flush()
        events = [json.loads(line) for path in sorted(events_dir.glob("*.jsonl"))
                  for line in path.read_text().splitlines()]
        return [(e.get("samples"), e.get("epoch")) for e in events if e["kind"] == "step_end"]

    yield read
    probe.get().close()


def _data(n: int = 12) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1))


def _ranges(ids: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in sorted(ids):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def _train(loader: DataLoader, recorder: BatchRecorder, step: int = 0, epoch: int | None = None) -> list[list[int]]:
    """One pass: each batch reported, then its step's end; the values each batch held."""
    seen = []
    for (x,) in loader:
        recorder.report_trained(epoch=epoch)
        step += 1
        probe.step_end(step)
        seen.append([int(v) for v in x.squeeze(1).tolist()])
    return seen


def test_each_step_reports_the_indices_its_batch_was_fetched_with(steps):
    data = _data()
    sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3)
    sampler.set_epoch(4)
    plain = [[int(v) for v in x.squeeze(1).tolist()] for (x,) in DataLoader(data, batch_size=2, sampler=sampler)]
    recorder = BatchRecorder()
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    assert recorder.hook(loader)
    # The loader yields what it yielded unhooked; the value of sample i is i, so the
    # reported indices are the batch's values.
    assert _train(loader, recorder, epoch=4) == plain
    assert steps() == [(_ranges(batch), 4) for batch in plain]


def test_batches_fetched_ahead_are_reported_in_fetch_order(steps):
    recorder = BatchRecorder()
    loader = DataLoader(_data(), batch_size=3)
    recorder.hook(loader)
    it = iter(loader)
    next(it), next(it)  # a lookahead: two fetched before the first step trains
    recorder.report_trained(ahead=1)
    probe.step_end(1)
    next(it)
    recorder.report_trained(ahead=1)
    probe.step_end(2)
    recorder.report_trained(ahead=0)  # the loader's last batch: nothing fetched after it
    probe.step_end(3)
    assert recorder.report_trained() is None  # nothing else fetched
    assert steps() == [([[0, 3]], None), ([[3, 6]], None), ([[6, 9]], None)]


def test_batches_fetched_and_never_trained_are_dropped(steps):
    """A resume that skips by iterating past the trained batches fetches them all."""
    recorder = BatchRecorder()
    loader = DataLoader(_data(), batch_size=3)
    recorder.hook(loader)
    it = iter(loader)
    for _ in range(3):  # batches 0 and 1 skipped, 2 trained, with 3 fetched ahead
        next(it)
    next(it)
    recorder.report_trained(ahead=1)
    probe.step_end(1)
    assert steps() == [([[6, 9]], None)]


def test_a_new_loader_over_the_same_dataset_is_seen_and_epochs_follow_set_epoch(steps):
    """A ``skip_first_batches`` loader is a new DataLoader over the same dataset object: the
    hook on the dataset sees it; the label is the epoch the loader last set."""
    data = _data()
    recorder = BatchRecorder()

    class EpochLoader(DataLoader):
        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

    first = EpochLoader(data, batch_size=4)
    recorder.hook(first)
    recorder.follow_epoch(first)
    first.set_epoch(2)
    assert first.epoch == 2  # the loader's own set_epoch still runs
    resumed = DataLoader(data, batch_size=4, sampler=range(8, 12))
    _train(resumed, recorder)
    assert steps() == [([[8, 12]], 2)]


def test_fetches_while_not_recording_are_not_queued(steps):
    training = [False]
    recorder = BatchRecorder(recording=lambda: training[0])
    loader = DataLoader(_data(), batch_size=6)
    recorder.hook(loader)
    list(loader)  # an evaluation pass
    assert not recorder.pending
    training[0] = True
    _train(loader, recorder)
    assert [s for s, _ in steps()] == [[[0, 6]], [[6, 12]]]


def test_a_dataset_with_its_own_getitems_is_read_through_it(steps):
    subset = Subset(_data(), [5, 7, 9, 11])
    recorder = BatchRecorder()
    loader = DataLoader(subset, batch_size=2)
    recorder.hook(loader)
    assert _train(loader, recorder) == [[5, 7], [9, 11]]
    assert [s for s, _ in steps()] == [[[0, 2]], [[2, 4]]]  # the subset's own indices


def test_a_second_recorder_takes_the_dataset_over(steps):
    data = _data(4)
    old, new = BatchRecorder(), BatchRecorder()
    old.hook(DataLoader(data, batch_size=2))
    loader = DataLoader(data, batch_size=2)
    assert new.hook(loader) and new.hook(loader)  # hooking twice is harmless
    _train(loader, new)
    assert not old.pending
    assert [s for s, _ in steps()] == [[[0, 2]], [[2, 4]]]


def test_loaders_whose_fetches_it_cannot_see_are_left_alone_with_one_note(steps, capsys):
    recorder = BatchRecorder()
    assert not recorder.hook(DataLoader(_data(), batch_size=2, num_workers=2))
    assert not recorder.hook(DataLoader(range(10)))  # a range takes no attribute
    err = capsys.readouterr().err
    assert err.count("no sample indices reported") == 1 and "worker processes" in err


def test_an_abandoned_steps_samples_are_discarded(steps):
    probe.samples(range(0, 4))
    probe.get().discard_samples()  # torchft's adapter: the step was not committed
    probe.samples(range(0, 4))
    probe.step_end(1)
    assert [s for s, _ in steps()] == [[[0, 4]]]
