"""Replays `shrink` needs to find k culprit samples among n (issue 11).

The sample search (`torchtriage._repro._shrink.ddmin`) is run against an oracle standing for one
replay each: "together" fails only when every culprit is in the candidate (an interaction: a
pair of samples, a sample and its duplicate), "any" fails as soon as one culprit is in it (one
NaN sample is enough; the 1-minimal answer is then one culprit). Culprit positions are drawn at
random (seeded); the counts are the worst and the mean over the draws, against the bound
2·k·log2(n) + 4. No model runs: the count is what the search costs, each unit one replay.

    python benchmarks/shrink.py [--draws N]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from torchtriage._repro._shrink import ddmin


def count(n: int, culprits: set[int], together: bool) -> tuple[int, list[int]]:
    seen: dict[tuple[int, ...], bool] = {}

    def test(s: list[int]) -> bool:
        key = tuple(s)
        if key not in seen:
            have = culprits & set(s)
            seen[key] = have == culprits if together else bool(have)
        return seen[key]

    test(list(range(n)))  # the initial check of the full batch
    found = ddmin(list(range(n)), test)
    return len(seen), found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=50)
    args = p.parse_args()
    rng = random.Random(0)
    print(f"{'n':>6} {'k':>2} {'oracle':>9} {'worst':>6} {'mean':>6} {'bound':>6}")
    for n in (256, 4096):
        for k in (1, 2):
            for together in (True, False):
                if k == 1 and not together:
                    continue  # same as "together" for one culprit
                counts = []
                for _ in range(args.draws):
                    culprits = set(rng.sample(range(n), k))
                    c, found = count(n, culprits, together)
                    assert (set(found) == culprits) if together else (len(found) == 1 and found[0] in culprits)
                    counts.append(c)
                bound = 2 * k * math.log2(n) + 4
                print(f"{n:>6} {k:>2} {'together' if together else 'any':>9} {max(counts):>6} "
                      f"{sum(counts) / len(counts):>6.1f} {bound:>6.0f}")


if __name__ == "__main__":
    main()
