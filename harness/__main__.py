"""Entry point: ``torchrun ... -m harness [options]`` (``python -m harness --help``)."""

from __future__ import annotations

import sys

from harness.config_load import config_from_args


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_args(argv)
    # Imported after parsing so that --help and bad options answer without loading torch.
    from harness.train import run

    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
