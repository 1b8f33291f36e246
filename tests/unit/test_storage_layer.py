"""The fault layer's file operations without a mount (FaultFS called as the kernel would
call it): pass-through, rules applied per operation, unfsynced data dropped on a crash, and
the control channel's bad cases. The real mount is exercised in tests/integration."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest

from chaos.errors import ToolError
from chaos.storage.control import MountControl
from chaos.storage.faultfs import FaultFS
from chaos.storage.rules import Caller, Rule, RuleSet


@pytest.fixture
def fs(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    layer = FaultFS(fd, lambda: Caller(rank=0, node=0), track_unfsynced=True)
    yield layer
    layer.shutdown()
    os.close(fd)


def _write(fs: FaultFS, path: str, data: bytes, fsync: bool) -> None:
    fh = fs.create(path, 0o644, os.O_WRONLY)
    try:
        fs.write(path, data, 0, fh)
        if fsync:
            fs.fsync(path, 0, fh)
    finally:
        fs.release(path, fh)


def test_pass_through_writes_the_directory_below(fs, tmp_path):
    fs.mkdir("/d", 0o755)
    _write(fs, "/d/a", b"hello", fsync=True)
    fs.rename("/d/a", "/d/b")
    assert (tmp_path / "d" / "b").read_bytes() == b"hello"
    assert fs.getattr("/d/b")["st_size"] == 5 and "b" in fs.readdir("/d", 0)
    fh = fs.open("/d/b", os.O_RDONLY)
    assert fs.read("/d/b", 100, 1, fh) == b"ello"
    fs.release("/d/b", fh)


def test_drop_restores_what_was_fsynced(fs, tmp_path):
    _write(fs, "/synced", b"A" * 100, fsync=True)
    _write(fs, "/lost", b"B" * 100, fsync=False)
    fh = fs.open("/synced", os.O_WRONLY)
    fs.write("/synced", b"C" * 10, 50, fh)  # an unfsynced overwrite of fsynced data
    fs.release("/synced", fh)
    fs.rename("/lost", "/renamed")  # a rename cannot hide a file's unfsynced data
    assert fs.drop_unfsynced() == 2
    assert (tmp_path / "synced").read_bytes() == b"A" * 100
    assert (tmp_path / "renamed").read_bytes() == b""
    assert fs.drop_unfsynced() == 0  # nothing pending any more


def test_truncate_through_open_is_undone_too(fs, tmp_path):
    _write(fs, "/f", b"x" * 64, fsync=True)
    fh = fs.open("/f", os.O_WRONLY | os.O_TRUNC)
    fs.release("/f", fh)
    assert (tmp_path / "f").read_bytes() == b""
    fs.drop_unfsynced()
    assert (tmp_path / "f").read_bytes() == b"x" * 64


def test_rules_act_per_operation(fs, tmp_path):
    fs.set_rules(RuleSet([Rule(rule_id="e", action="error", errno=errno.EROFS, ops=("create",),
                               paths=("ro/*",)),
                          Rule(rule_id="c", action="corrupt", ops=("read",), paths=("data",), bits=1)]))
    fs.mkdir("/ro", 0o755)
    with pytest.raises(OSError) as info:
        fs.create("/ro/x", 0o644, os.O_WRONLY)
    assert info.value.errno == errno.EROFS
    (tmp_path / "data").write_bytes(bytes(64))
    fh = fs.open("/data", os.O_RDONLY)
    assert fs.read("/data", 64, 0, fh) != bytes(64)
    fs.release("/data", fh)
    assert fs.hits == {"e": 1, "c": 1}


def test_disk_full_gives_a_short_write_then_enospc(fs):
    fs.set_rules(RuleSet([Rule(rule_id="d", action="disk_full", bytes_left=10, ops=("write",))]))
    fh = fs.create("/f", 0o644, os.O_WRONLY)
    assert fs.write("/f", b"x" * 8, 0, fh) == 8
    assert fs.write("/f", b"x" * 8, 8, fh) == 2
    with pytest.raises(OSError) as info:
        fs.write("/f", b"x", 10, fh)
    assert info.value.errno == errno.ENOSPC
    fs.release("/f", fh)


def test_a_stall_holds_the_operation_until_the_rule_goes(fs):
    stall = Rule(rule_id="s", action="stall", ops=("write",))
    fs.set_rules(RuleSet([stall]))
    fh = fs.create("/f", 0o644, os.O_WRONLY)
    done = threading.Event()
    threading.Thread(target=lambda: (fs.write("/f", b"x", 0, fh), done.set()), daemon=True).start()
    assert not done.wait(0.3), "the write went through a stall"
    fs.set_rules(RuleSet([]))
    assert done.wait(5), "the write stayed blocked after the stall ended"
    fs.release("/f", fh)


def test_callers_of_other_ranks_are_not_hit(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    layer = FaultFS(fd, lambda: Caller(rank=1, node=1))
    layer.set_rules(RuleSet([Rule(rule_id="e", action="error", ranks=(0,))]))
    fh = layer.create("/f", 0o644, os.O_WRONLY)
    assert layer.write("/f", b"ok", 0, fh) == 2
    layer.release("/f", fh)
    os.close(fd)


def test_control_without_a_daemon_is_a_tool_error(tmp_path):
    control = MountControl(str(tmp_path))
    started = time.monotonic()
    with pytest.raises(ToolError, match="did not apply rules version 1"):
        control.add_rule({"rule_id": "x", "action": "stall"}, timeout_s=0.2)
    assert time.monotonic() - started < 2
    assert control.remove_rule("nothing-there") is None


def test_a_torn_write_keeps_only_the_first_part(fs, tmp_path):
    _write(fs, "/old", b"O" * 100, fsync=True)
    fh = fs.open("/old", os.O_WRONLY)
    fs.write("/old", b"N" * 100, 0, fh)  # rewritten, not fsynced
    fs.release("/old", fh)
    _write(fs, "/new", b"X" * 100, fsync=False)
    assert fs.drop_unfsynced(torn={"fraction": 0.3, "seed": 1}) == 2
    assert (tmp_path / "old").read_bytes() == b"N" * 30 + b"O" * 70
    assert (tmp_path / "new").read_bytes() == b"X" * 30


def test_a_seeded_torn_write_repeats(tmp_path):
    cuts = []
    for attempt in range(2):
        directory = tmp_path / str(attempt)
        directory.mkdir()
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        layer = FaultFS(fd, lambda: Caller(), track_unfsynced=True)
        for name in ("a", "b"):
            _write(layer, f"/{name}", b"x" * 1000, fsync=False)
        layer.drop_unfsynced(torn={"fraction": None, "seed": 7})
        cuts.append([os.path.getsize(directory / n) for n in ("a", "b")])
        os.close(fd)
    assert cuts[0] == cuts[1] and cuts[0] != [1000, 1000]
