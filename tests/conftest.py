"""Shared fixtures. The repository root is importable (pyproject sets pythonpath too)."""
