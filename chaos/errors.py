"""The one exception root of trainchaos; the CLI catches only it and maps it to an exit code."""

from __future__ import annotations

__all__ = ["ChaosError", "ScenarioError", "ValidationIssue", "ToolError", "EXIT_OK",
           "EXIT_TARGET_MISSED", "EXIT_BAD_INPUT", "EXIT_TOOL_FAILED", "EXIT_INTERRUPTED"]

from dataclasses import dataclass

EXIT_OK = 0
EXIT_TARGET_MISSED = 1
EXIT_BAD_INPUT = 2
EXIT_TOOL_FAILED = 3
EXIT_INTERRUPTED = 130
"""SIGINT/SIGTERM: every fault was reverted first."""


class ChaosError(Exception):
    """Root of every error trainchaos raises on purpose."""

    exit_code = EXIT_TOOL_FAILED


@dataclass(frozen=True)
class ValidationIssue:
    """One problem in an input file: where (``faults[1].trigger.at_step``) and what."""

    file: str
    location: str
    message: str

    def __str__(self) -> str:
        # Bounded: a 1 MB key or value quoted back whole would flood a terminal or a CI log.
        where = f"{self.file}: {_clip(self.location, 160)}" if self.location else self.file
        return f"{where}: {_clip(self.message, 500)}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text):,} characters)"


class ScenarioError(ChaosError):
    """Bad scenario input. Carries every issue found, not only the first."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class ToolError(ChaosError):
    """trainchaos itself failed (not the system under test)."""

    exit_code = EXIT_TOOL_FAILED
