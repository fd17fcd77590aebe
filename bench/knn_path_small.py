"""The kNN path forced at small n: IA's defaults against the route of session 24.

Usage: python bench/knn_path_small.py

Data: ``bench/sizes.py``'s letters rendered from outlines in several fonts at any angle
(6 classes x 2 and x 8) and MNIST digits rotated by scipy (300: classes 1, 4, 7; 1,000: all
ten). The estimator runs with ``kmax_mode='candidates'`` (below ``dense_max`` the default is
the dense path), seed 0, without and with K, under three ``kmax_options``: the defaults (IA's
own search, later iterations' candidates from the previous lists), ``later_candidates:
features``, and ``search: exact`` with ``features`` (the defaults before session 25). Printed:
ACC (clusters found) and wall seconds of each fit.
"""

from __future__ import annotations

import time

import numpy as np
from sizes import digits, letters  # bench/, beside this script

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy

VARIANTS = {
    "defaults (ia, lists)": {},
    "later_candidates: features": {"later_candidates": "features"},
    "exact + features (before)": {"search": "exact", "later_candidates": "features"},
}


def main() -> None:
    sets = [
        ("letters 12", *letters(6, 2)),
        ("letters 48", *letters(6, 8)),
        ("digits 300", *digits(300)),
        ("digits 1000", *digits(1000)),
    ]
    for name, X, y in sets:
        K = len(np.unique(y))
        for variant, options in VARIANTS.items():
            row = []
            for k in (None, K):
                t = time.perf_counter()
                est = InvariantAttentionClustering(
                    k, kmax_mode="candidates", kmax_options=options, random_state=0
                ).fit(X)
                found = len(np.unique(est.labels_))
                row.append(f"{'with K' if k else 'no K'} {accuracy(y, est.labels_):.3f} "
                           f"({found}) {time.perf_counter() - t:.0f} s")  # fmt: skip
            print(f"{name:12s} {variant:28s} " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
