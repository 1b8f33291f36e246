"""The long fuzz soak (``make test-fuzz``, FUZZ_EXAMPLES documents): schema-drawn and
shipped scenarios, mutated (tests/unit/_fuzz_support.py), each through what ``trainchaos
validate`` and ``run --dry-run`` do. Unlike the unit tests it does not stop at the first
escape: it counts them, and prints the figures docs/testing.md ("Fuzzing") quotes.

    python tests/fuzz_soak.py --examples 100000 [--seed N] [--pool 400]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit._fuzz_support import (  # noqa: E402 (the repository root on the path first)
    SHIPPED,
    hostile_documents,
    judge,
    location_of,
    problems,
    schema_hostile_documents,
    schema_pool,
    write,
)


class _Enough(Exception):
    """--max-minutes ran out: Hypothesis has no other way to end a run early."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool", type=int, default=400, help="schema-drawn documents the mutations start from")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop drawing after this long and print the figures of what ran")
    args = parser.parse_args()

    from chaos.scenario.load import load_scenario

    load_scenario(str(SHIPPED[0]))  # torch's import before any clock
    started = time.monotonic()
    pool = schema_pool(args.pool)
    print(f"pool: {len(pool)} schema-drawn documents in {time.monotonic() - started:.0f} s", flush=True)
    directory = Path(tempfile.mkdtemp(prefix="trainchaos-fuzz-"))
    times: list[float] = []
    codes: collections.Counter[int] = collections.Counter()
    where: collections.Counter[str] = collections.Counter()
    escapes: dict[str, str] = {}

    # Four in five documents from the schema, one in five a shipped scenario mutated.
    documents = st.one_of(schema_hostile_documents(pool), schema_hostile_documents(pool),
                          schema_hostile_documents(pool), schema_hostile_documents(pool), hostile_documents())

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(text=documents)
    def one(text: str) -> None:
        if args.max_minutes is not None and time.monotonic() - started > 60 * args.max_minutes:
            raise _Enough
        path = write(text, directory)
        verdict = judge(path)
        times.append(verdict.elapsed_s)
        codes[verdict.code] += 1
        for issue in verdict.issues[:1]:
            where[location_of(issue)] += 1
        found = problems(verdict, path)
        if found:
            escapes.setdefault(found[0][:160].replace(str(directory), "<dir>"), text[:400])
        if len(times) % 1000 == 0:
            print(f"  {len(times)} documents, {len(escapes)} escapes, {time.monotonic() - started:.0f} s", flush=True)

    try:
        one()
    except _Enough:
        print(f"stopped after {args.max_minutes:g} minutes")
    ms = sorted(t * 1000 for t in times)
    print(f"documents: {len(ms)} ({codes[0]} accepted, {codes[2]} rejected (exit 2), "
          f"{sum(n for c, n in codes.items() if c not in (0, 2))} other exits) in {time.monotonic() - started:.0f} s")
    print("rejections by location (first issue's top key): "
          + ", ".join(f"{k} {n}" for k, n in where.most_common()))
    print(f"time per document: p50 {statistics.median(ms):.1f} ms, p99 {ms[int(0.99 * (len(ms) - 1))]:.1f} ms, "
          f"max {ms[-1]:.1f} ms")
    print(f"escapes: {len(escapes)}")
    for problem, text in escapes.items():
        print(f"- {problem}\n    {text[:300]!r}")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())
