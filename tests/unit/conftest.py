"""Fixtures shared by the unit tests."""

from __future__ import annotations

import socket

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank_group():
    """A real one-rank gloo group on loopback, for the harness's collectives."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()
