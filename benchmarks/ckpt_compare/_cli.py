"""The command line the comparison's scripts share: where to save, how long, how often
(``benchmarks/ckpt_chaos_compare.py`` passes ``--out {ckpt_dir} --steps N --every K``)."""

from __future__ import annotations

import argparse


def cadence_parser() -> argparse.ArgumentParser:
    """A parser with ``--out``, ``--steps`` and ``--every``; a script adds its own options."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=5)
    return parser
