"""``python -m harness``: a documented command line, and bad options rejected in one line.

Run as a subprocess (the way torchrun runs it); --help and option errors answer before torch
is imported, so these stay fast.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from harness.config import SECTIONS as CONFIG_SECTIONS
from harness.config import HarnessConfig

# Every section's flags: a section added to harness.config is checked without a change here.
SECTIONS = {"": HarnessConfig, **{name.replace("_", "-") + "-": cls for name, cls in CONFIG_SECTIONS.items()}}


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def help_text() -> str:
    result = harness("--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return " ".join(result.stdout.split())  # argparse wraps help: compare with spaces collapsed


def every_flag() -> list[str]:
    """Every flag; an option that is on by default also has its --no- form."""
    flags = []
    for prefix, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            if f.name in CONFIG_SECTIONS:
                continue
            flags.append("--" + prefix + f.name.replace("_", "-"))
            if f.default is True:
                flags.append("--no-" + prefix + f.name.replace("_", "-"))
    return flags


def test_help_lists_every_option_with_a_description(help_text: str) -> None:
    flags = every_flag()
    assert {"--steps", "--model-name", "--checkpoint-keep", "--failure-watchdog-s"} <= set(flags)
    options = help_text[help_text.index("options:"):]  # past the usage line
    assert set(re.findall(r" (--[a-z][a-z-]*)", options)) - {"--help"} == set(flags)
    for flag in flags:
        # "--flag METAVAR  Some description." in the options list (not only the usage line),
        # with a description before the "(default: ...)" that every option gets.
        # ("--flag, --no-flag  Description." for an option that is on by default)
        described = re.search(re.escape(flag) + r"(?:, --no-[a-z-]+)?(?>(?: [A-Z_.]+(?= )| \{[^}]*\})?) "
                              r"(?!\(default)\w", options)
        assert described, f"{flag} is not documented in --help"


@pytest.mark.parametrize(("flag", "words"), [
    ("--steps", "Optimizer steps to train. (default: 200)"),
    ("--model-name {tiny-gpt,mlp}", "(default: tiny-gpt)"),
    ("--checkpoint-keep", "Checkpoints kept (newest first); at least 2. (default: 3)"),
    ("--checkpoint-mode {sync,async}", "sync: training waits for the write"),
    ("--allow-fresh-start", "Start from scratch when every checkpoint is corrupt"),
    ("--failure-watchdog-s", "a peer silent this long is declared hung"),
])
def test_help_describes_options_and_their_defaults(help_text: str, flag: str, words: str) -> None:
    start = help_text.find("options:")
    section = help_text[help_text.index(flag, start):]
    next_flag = section.find(" --", len(flag))
    assert words in section[:next_flag if next_flag > 0 else None]


@pytest.mark.parametrize(("args", "option", "allowed"), [
    (["--steps", "-1"], "--steps", "> 0"),
    (["--checkpoint-keep", "1"], "--checkpoint-keep", "at least 2"),
    (["--model-name", "foo"], "--model-name", "'tiny-gpt', 'mlp'"),
    (["--checkpoint-mode", "bogus"], "--checkpoint-mode", "'sync', 'async'"),
    (["--model-d-model", "90", "--model-n-heads", "4"], "--model-d-model", "divisible by --model-n-heads"),
    (["--failure-watchdog-s", "0.5"], "--failure-watchdog-s", "at least twice --failure-heartbeat-s"),
])
def test_invalid_option_exits_2_with_one_clear_message(args: list[str], option: str, allowed: str) -> None:
    result = harness(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    (error,) = errors
    assert error.startswith("python -m harness: error: ")
    assert option in error and allowed in error, error
