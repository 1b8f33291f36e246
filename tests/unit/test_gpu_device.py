"""The CUDA path on a real device (docs/gpu.md): marked gpu, skipped where torch sees no CUDA
device (tests/conftest.py). What the device check (benchmarks/gpu_check.sh) runs besides the
scenarios: each real device fault does what its fidelity says, the detectors' arithmetic on
device tensors equals the host's, and the harness's gradient exchange works for a CUDA bucket.
One process each, a few seconds; the poisoned context gets a process of its own."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from chaos.probe import cuda as probe_cuda
from chaos.probe.bitflip_bits import flip_
from harness.sdc_checksum import ParamDigest, bits_checksum, device_checksum
from tests.unit.test_stall_faults import _beats_while

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_a_checksum_of_device_tensors_equals_the_host_checksum_of_their_bits() -> None:
    torch.manual_seed(0)
    host = [torch.randn(3), torch.randn(5, 4), torch.randn(7).half(), torch.randn(20_000), torch.randn(33).double()]
    on_device = [t.cuda() for t in host]
    assert device_checksum(on_device) == bits_checksum(host)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 3))
    assert ParamDigest(model.cuda())() == ParamDigest(model.cpu())()


def test_a_bit_flips_in_device_memory() -> None:
    weights = torch.ones(16, device="cuda")
    before, after = flip_(weights, 5, 30)  # float32's top exponent bit: 1.0 -> 2^128 (inf)
    assert before == 1.0 and after == float("inf") and weights.is_cuda
    assert int((weights != 1.0).sum()) == 1


def test_asking_for_more_than_the_device_has_is_torchs_own_oom() -> None:
    with pytest.raises(torch.cuda.OutOfMemoryError):
        probe_cuda.exhaust_memory(None)
    torch.empty(1024, device="cuda")  # the allocator still serves what fits


def test_a_device_sleep_blocks_the_thread_while_the_heartbeat_runs() -> None:
    blocked, beats = _beats_while(probe_cuda.device_sleep, 1.5)
    assert 1.4 <= blocked < 3.0
    assert beats >= 50, "the synchronize must release the GIL: the heartbeat thread runs on"


def test_a_poisoned_context_fails_every_later_cuda_call_of_the_process() -> None:
    script = (
        "import torch\n"
        "from chaos.probe.cuda import poison_context\n"
        "try:\n"
        "    poison_context()\n"
        "except RuntimeError as exc:\n"
        "    print('FIRST', str(exc).splitlines()[0])\n"
        "try:\n"
        "    torch.ones(2, device='cuda').sum().item()\n"
        "except RuntimeError as exc:\n"
        "    print('AFTER', str(exc).splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "FIRST CUDA error: device-side assert triggered" in done.stdout, done.stdout + done.stderr
    assert "AFTER CUDA error" in done.stdout, done.stdout + done.stderr


def test_the_gradient_exchange_of_a_cuda_bucket_goes_through_the_host(tmp_path: Path) -> None:
    """DDP over gloo with the harness's hook on a CUDA model (a group of one): the averaged
    gradient comes back on the device and equals a plain backward's."""
    import torch.distributed as dist

    from harness.dist import GradientGather, deterministic_allreduce_hook

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        torch.manual_seed(0)
        plain = torch.nn.Linear(16, 4).cuda()
        wrapped = torch.nn.Linear(16, 4).cuda()
        wrapped.load_state_dict(plain.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(wrapped, device_ids=[torch.cuda.current_device()])
        gather = GradientGather()
        ddp.register_comm_hook(gather, deterministic_allreduce_hook)
        x = torch.randn(8, 16, device="cuda")
        plain(x).square().sum().backward()
        ddp(x).square().sum().backward()
        for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True):
            assert b.grad is not None and b.grad.is_cuda
            assert torch.equal(a.grad, b.grad)
        assert gather.local_norms() is not None
    finally:
        dist.destroy_process_group()
