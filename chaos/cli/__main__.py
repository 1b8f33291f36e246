"""``python -m chaos.cli``: the same as before the module became a package."""

from __future__ import annotations

from chaos.cli import main

main()
