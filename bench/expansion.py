"""Candidates c against expansion rounds: recall of the candidate kNN mode, round by round.

Usage: python bench/expansion.py [--digits 1000] [--sigma 2] [--rows 40] [--c 48 96]
       [--x 16:3 32:1]

On ``--digits`` x 20 digit copies (:func:`ia_stages.data.large.digit_copies`, as
``bench/scale.py``, the same reference rows), for every c: the first pass (features,
candidates, exact refinement), then for every ``x:R`` R rounds of the expansion pass
(:func:`ia_stages.kmax.candidates.expansion_candidates`, each round from the previous round's
lists, never refining a pair twice: :func:`ia_stages.kmax.candidates.second_pass` without
the screen, the library's one pass). Printed after every round: recall of the exact 9 nearest
(mean, median, worst row, share of rows below 0.9), the farthest listed neighbour's exact d2
over the true 9th's, distinct pairs refined per image and cumulative CPU seconds. One round is
what the library runs (``FeatureSettings.n_expand``).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from ia_stages.core.groups import SE2
from ia_stages.data.large import digit_copies
from ia_stages.kmax import EXACT_SEARCH, kappa_max
from ia_stages.kmax.candidates import (
    CandidatePairs,
    candidate_lists,
    knn_from_pairs,
    prepared_images,
    refine_rows,
    second_pass,
)
from ia_stages.kmax.features import invariant_features
from ia_stages.settings.features import FeatureSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--digits", type=int, default=1000)
    ap.add_argument("--sigma", type=float, default=2.0)
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--c", type=int, nargs="+", default=[48, 96])
    ap.add_argument("--x", nargs="+", default=["16:3", "32:1"], help="x:rounds")
    args = ap.parse_args()
    k, beta, group, search = 10, 1.0, SE2(), EXACT_SEARCH
    X = digit_copies(20, n_digits=args.digits, seed=0).data.astype(np.float64)
    n = X.shape[0]
    rows = np.sort(np.random.default_rng(1).choice(n, args.rows, replace=False))
    t = time.process_time()
    d2 = np.concatenate(
        [
            np.asarray(kappa_max(X[rows], X[j : j + 500], sigma=args.sigma, settings=search).sqdist)
            for j in range(0, n, 500)
        ],
        1,
    )
    print(f"n = {n}, sigma {args.sigma:g}: reference {rows.size} x {n} in "
          f"{time.process_time() - t:.0f} CPU s")  # fmt: skip
    d2[np.arange(rows.size), rows] = np.inf
    true = np.argsort(d2, 1, kind="stable")[:, : k - 1]
    kth = np.take_along_axis(d2, true[:, -1:], 1)[:, 0]

    def report(name: str, res, n_pairs: int, cpu: float) -> None:
        got = res.indices[rows, 1:]
        rec = np.array([np.isin(a, b).mean() for a, b in zip(true, got, strict=True)])
        ratio = np.take_along_axis(d2, np.maximum(got, 0), 1).max(1) / kth
        print(f"  {name:18s} recall mean {rec.mean():.4f} median {np.median(rec):.3f} worst "
              f"{rec.min():.3f} below 0.9 {np.mean(rec < 0.9):.3f} | farthest / true 9th d2 "
              f"median {np.median(ratio):.3f} worst {ratio.max():.3f} | {n_pairs / n:.1f} "
              f"pairs/image | CPU s {cpu:.0f}", flush=True)  # fmt: skip

    for c in args.c:
        fs = FeatureSettings(n_candidates=c, screen=False)
        t = time.process_time()
        Un = prepared_images(X, k, args.sigma, "unit", search, fs)
        uu = (Un**2).reshape(n, -1).sum(1)
        cand = candidate_lists(Un, invariant_features(Un, fs), fs, search)
        first = refine_rows(Un, cand, range(n), k, beta, group, search, args.sigma, None)
        lists0 = knn_from_pairs(n, k, first, beta, uu, group)
        base = time.process_time() - t
        report(f"c {c}, no expansion", lists0, first.a.size, base)
        for spec in args.x:
            x, rounds = (int(v) for v in spec.split(":"))
            t = time.process_time()
            pairs, lists = first, lists0
            for r in range(rounds):
                more = second_pass(
                    Un, lists, pairs.a * n + pairs.b, range(n), beta, group, search, args.sigma,
                    replace(fs, n_expand=x),
                )  # fmt: skip
                pairs = CandidatePairs.concat([pairs, more])
                lists = knn_from_pairs(n, k, pairs, beta, uu, group)
                cpu = base + time.process_time() - t
                report(f"c {c}, x {x} round {r + 1}", lists, pairs.a.size, cpu)


if __name__ == "__main__":
    main()
