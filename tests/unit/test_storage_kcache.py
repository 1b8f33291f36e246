"""The fault layer's kernel cache without a mount: caching is on only while no rule and no
crash point is armed, the kernel forgets before the first one acts (never after), forgets
again when unfsynced data is dropped behind it, and what it is told to forget covers the
whole tree. The real mount is exercised in tests/integration/test_storage_mount.py."""

from __future__ import annotations

import os

import pytest

from chaos.storage.faultfs import FaultFS
from chaos.storage.kcache import KernelCache, cached_names
from chaos.storage.rules import Caller, Rule, RuleSet


class _Call:
    """A stand-in for one libfuse function: records its arguments."""

    def __init__(self, calls: list, name: str, result: int = 0) -> None:
        self.calls, self.name, self.result = calls, name, result
        self.argtypes = self.restype = None

    def __call__(self, *args):
        self.calls.append((self.name, *args))
        return self.result


class _Lib:
    def __init__(self) -> None:
        self.calls: list = []
        self.fuse_invalidate_path = _Call(self.calls, "inode", -2)  # -ENOENT: not cached is fine
        self.fuse_get_session = _Call(self.calls, "session", 4242)
        self.fuse_lowlevel_notify_inval_entry = _Call(self.calls, "entry")


class _Config:
    entry_timeout = attr_timeout = 0.0


@pytest.fixture
def fs(tmp_path):
    (tmp_path / "step-1").mkdir()
    (tmp_path / "step-1" / "state.pt").write_bytes(b"s")
    (tmp_path / "LATEST").write_text("step-1\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    layer = FaultFS(fd, lambda: Caller(rank=0, node=0), track_unfsynced=True)
    lib, config = _Lib(), _Config()
    layer.kcache.attach(lib, 1111, config)
    lib.calls.clear()
    yield layer, lib, config
    layer.shutdown()
    os.close(fd)


def test_the_tree_to_forget_is_every_path_and_the_roots_entries(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"")
    (tmp_path / "top").write_bytes(b"")
    os.symlink("/nonexistent", tmp_path / "link")  # not followed
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        roots, paths = cached_names(fd)
    finally:
        os.close(fd)
    assert sorted(roots) == ["a", "link", "top"]
    assert sorted(paths) == ["/", "/a", "/a/b", "/a/b/f", "/link", "/top"]


def test_caching_is_on_while_nothing_is_armed(fs):
    layer, _lib, config = fs
    assert layer.kcache.on and config.entry_timeout == config.attr_timeout == layer.kcache.timeout_s > 0


def test_the_kernel_forgets_before_the_first_rule_acts(fs):
    layer, lib, config = fs
    seen = []
    forget = layer.kcache._forget
    layer.kcache._forget = lambda fd: (seen.append((list(layer.rules.rules), config.entry_timeout)), forget(fd))
    rule = Rule(rule_id="e", action="error", ops=("getattr",))
    layer.set_rules(RuleSet([rule]))
    assert seen == [([], 0.0)], "forgotten after the rule was in place, or while replies were still cached"
    assert not layer.kcache.on and config.entry_timeout == config.attr_timeout == 0.0
    inodes = sorted(args[1] for name, *args in lib.calls if name == "inode")
    entries = sorted(args[2] for name, *args in lib.calls if name == "entry")
    assert inodes == [b"/", b"/LATEST", b"/step-1", b"/step-1/state.pt"]
    assert entries == [b"LATEST", b"step-1"]
    assert all(args[0] == 4242 and args[1] == 1 for name, *args in lib.calls if name == "entry")
    last_inode = max(i for i, call in enumerate(lib.calls) if call[0] == "inode")
    assert last_inode < min(i for i, call in enumerate(lib.calls) if call[0] == "entry")

    lib.calls.clear()
    layer.set_rules(RuleSet([rule, Rule(rule_id="s", action="slow", latency_s=0.001)]))
    assert lib.calls == [], "a second rule: nothing was cached meanwhile"
    layer.set_rules(RuleSet([]))
    assert layer.kcache.on and config.attr_timeout == layer.kcache.timeout_s
    layer.set_rules(RuleSet([rule]))
    assert layer.kcache.forgets == 2, "caching was on again: forgotten again"
    with pytest.raises(OSError):
        layer.getattr("/LATEST")


def test_a_crash_point_turns_caching_off_until_disarmed(fs):
    layer, lib, _config = fs
    layer.arm_crash_point({"save": "*step-00000020*", "after": -1}, emit=lambda kind, **fields: None)
    assert not layer.kcache.on and layer.kcache.forgets == 1
    layer.arm_crash_point(None, emit=lambda kind, **fields: None)
    assert layer.kcache.on


def test_pages_are_kept_until_the_first_arming_and_never_after(fs):
    """An open keeps a file's cached pages only while no rule or crash point ever acted: a
    page cached while a rule corrupted or cut a write would outlive the rule."""
    layer, _lib, _config = fs
    assert layer.kcache.keep_pages
    layer.drop_unfsynced()  # a power loss with nothing armed: forgotten, pages still trusted
    assert layer.kcache.keep_pages and layer.kcache.forgets == 1
    layer.set_rules(RuleSet([Rule(rule_id="c", action="corrupt", ops=("write",))]))
    assert not layer.kcache.keep_pages
    layer.set_rules(RuleSet([]))
    assert layer.kcache.on and not layer.kcache.keep_pages, "entries and attributes again, pages never"


def test_a_crash_point_ends_kept_pages_too(fs):
    layer, _lib, _config = fs
    layer.arm_crash_point({"save": "*step-00000020*", "after": 2}, emit=lambda kind, **fields: None)
    layer.arm_crash_point(None, emit=lambda kind, **fields: None)
    assert layer.kcache.on and not layer.kcache.keep_pages


def test_attaching_turns_off_only_the_kernels_auto_inval_data(tmp_path):
    """Kept pages would be dropped anyway whenever a stat shows the mtime a write moved."""
    from chaos.storage.kcache import FUSE_CAP_AUTO_INVAL_DATA

    class Conn:
        want = 0x14F819

    conn = Conn()
    KernelCache().attach(_Lib(), 1111, _Config(), conn)
    assert conn.want == 0x14F819 & ~FUSE_CAP_AUTO_INVAL_DATA and FUSE_CAP_AUTO_INVAL_DATA & 0x14F819


def test_dropped_unfsynced_data_is_forgotten_only_where_it_was_cached(fs):
    layer, lib, _config = fs
    fh = layer.create("/new", 0o644, os.O_WRONLY)
    layer.write("/new", memoryview(b"unsynced"), 0, fh)
    layer.release("/new", fh)
    assert layer.drop_unfsynced() == 1 and layer.kcache.forgets == 1
    assert b"/new" in [args[1] for name, *args in lib.calls if name == "inode"]
    layer.set_rules(RuleSet([Rule(rule_id="s", action="slow", latency_s=0.0)]))
    forgets = layer.kcache.forgets
    layer.drop_unfsynced()
    assert layer.kcache.forgets == forgets, "nothing cached while armed: no notification"


def test_after_detach_nothing_reaches_libfuse(fs):
    layer, lib, config = fs
    layer.destroy("/")
    layer.set_rules(RuleSet([Rule(rule_id="e", action="error")]))
    assert lib.calls == [] and not layer.kcache.on


def test_unattached_cache_keeps_its_state_and_touches_nothing(tmp_path):
    cache = KernelCache()
    cache.enable()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        cache.disable(fd)
    finally:
        os.close(fd)
    assert not cache.on and cache.forgets == 1


def test_read_into_fills_the_callers_buffer_and_corrupts_it_in_place(fs, tmp_path):
    layer, _lib, _config = fs
    fh = layer.open("/step-1/state.pt", os.O_RDONLY)
    buf = bytearray(8)
    assert layer.read_into("/step-1/state.pt", memoryview(buf), 0, fh) == 1 and buf[:1] == b"s"
    layer.set_rules(RuleSet([Rule(rule_id="c", action="corrupt", ops=("read",), bits=1)]))
    assert layer.read_into("/step-1/state.pt", memoryview(buf), 0, fh) == 1 and buf[:1] != b"s"
    layer.release("/step-1/state.pt", fh)
