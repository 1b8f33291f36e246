"""What the node logs tell (chaos.workload.logprogress): the torchrun agents' reports of dead workers,
as detections of the right rank -- and a survivor's exception not mistaken for a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.workload.logprogress import LogProgress

_AGENT = "I1204 13:11:22.128000 16734 torch/distributed/elastic/agent/server/api.py:553]   "


def _group(restart: int, ranks: str) -> list[str]:
    return [_AGENT + f"restart_count={restart}", _AGENT + f"global_ranks=[{ranks}]"]


def _failed(code: int, local: int) -> str:
    return ("E1204 13:11:25.861000 16734 torch/distributed/elastic/multiprocessing/api.py:1002] "
            f"failed (exitcode: {code}) local_rank: {local} (pid: 16742) of binary: python3")


def _raised(prefix: str) -> list[str]:
    """A survivor's uncaught exception after its peer died, then torch's teardown abort (as a
    DCP job's node log held it, 2026-12-04)."""
    return [f"{prefix}Traceback (most recent call last):",
            f'{prefix}  File "examples/dcp/train.py", line 201, in train',
            f"{prefix}RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:28039: "
            "Connection reset by peer.",
            "terminate called without an active exception"]


def _detections(tmp_path: Path, lines: list[str], report_exit_codes: bool = False) -> list[dict]:
    log = tmp_path / "node-0.log"
    log.write_text("\n".join(lines) + "\n")
    progress = LogProgress(None, str(tmp_path), report_exit_codes=report_exit_codes)
    return [e for e in progress.poll({0: str(log)}) if e["kind"] == "detected"]


@pytest.mark.parametrize("prefix", ["[rank3]: ", "[default1]:[rank3]: "])
def test_an_abort_after_an_uncaught_exception_is_the_exception_not_a_crash(tmp_path, prefix):
    lines = _group(0, "2, 3") + _raised(prefix) + [_failed(-6, 1)]
    assert _detections(tmp_path, lines) == []  # an error exit: the stack's, not a crash to blame
    (found,) = _detections(tmp_path, lines, report_exit_codes=True)
    # ... and the exception was a connection its peer ended: the rank noticed a peer's
    # failure; it is not blamed for it (secondary: chaos.metrics.per_fault)
    assert found["suspect"] is None and found["secondary"] is True
    assert "raised an uncaught exception" in found["reason"] and "after a peer ended its connection" in found["reason"]


def test_an_exit_after_a_lost_peer_is_secondary_and_another_exception_blames_its_rank(tmp_path):
    """A survivor that raised on a connection its killed peer reset and exited at once (a
    warm rank leaves without the interpreter's teardown) may be reported before the peer's
    own agent reports the kill: it must not be the one blamed."""
    (lost,) = _detections(tmp_path, _group(0, "0") + _raised("[rank0]: ")[:3] + [_failed(1, 0)],
                          report_exit_codes=True)
    assert lost["suspect"] is None and lost["secondary"] and lost["reason"].startswith(
        "torchrun agent: worker local_rank 0 exited with code 1 after a peer ended its connection")
    other = ["[rank0]: Traceback (most recent call last):", "[rank0]: ValueError: bad batch"]
    (own,) = _detections(tmp_path, _group(0, "0") + other + [_failed(1, 0)], report_exit_codes=True)
    assert own["suspect"] == "rank-0" and "secondary" not in own
    # the words alone, in a line that is no uncaught exception of the rank: not a lost peer
    (plain,) = _detections(tmp_path, _group(0, "0") + ["[rank0]: retrying: Connection reset by peer"]
                           + [_failed(1, 0)], report_exit_codes=True)
    assert plain["suspect"] == "rank-0"


def test_an_abort_without_an_exception_and_other_signals_are_crashes(tmp_path):
    (abort,) = _detections(tmp_path, _group(0, "2, 3") + [_failed(-6, 1)])
    assert (abort["suspect"], abort["reason"]) == ("rank-3", "torchrun agent: worker local_rank 1 killed by signal 6")
    # a SIGKILL is a kill whatever the rank printed before; another rank's exception is not this one's
    (kill,) = _detections(tmp_path, _group(0, "2, 3") + _raised("[rank3]: ") + [_failed(-9, 1)])
    assert kill["reason"].endswith("killed by signal 9")
    (other,) = _detections(tmp_path, _group(0, "2, 3") + _raised("[rank2]: ") + [_failed(-6, 1)])
    assert other["suspect"] == "rank-3" and other["reason"].endswith("killed by signal 6")


def test_an_exception_is_forgotten_when_the_group_restarts(tmp_path):
    lines = _group(0, "0") + _raised("") + _group(1, "0") + [_failed(-6, 0)]
    (found,) = _detections(tmp_path, lines)
    assert found["incarnation"] == 1 and found["reason"].endswith("killed by signal 6")
    # the node's only worker, its traceback unprefixed: the same group, so an exception
    assert _detections(tmp_path, _group(0, "0") + _raised("") + [_failed(-6, 0)]) == []
