"""The kNN path's second pass with ``exact_width`` at the attention's k against every place
exact, on one labelled stack: seconds per step, the ratio, and how many lists differ.

Usage: python bench/exact_width.py [--digits 1000] [--copies 20] [--out DIR]

Data: ``bench/cluster_large.py``'s digit copies (made once in ``--out``). Both runs call
:func:`ia_stages.kmax.kappa_max` with ``mode='candidates'`` and IA's default settings sized to
n (list width ``knn_width``, the exact search, the screen), in this process one after the
other; only ``features.exact_width`` differs (``IASettings.knn_features``: the attention's k,
against None = every place). Printed: wall and CPU seconds per step for both, the second
pass's and the whole graph's ratio, how many rows' first w and whole lists hold the same
images, how many of the read-out graph's links differ, and the largest listed d2 of the w run
below the all-exact run's for the same pair (the later places keep the screen's optimum,
never below the exact one).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from cluster_large import add_stack_arguments, digit_stack  # bench/, beside this script
from ia_stages.ia.settings import ia_settings

from ia_stages.kmax import kappa_max
from ia_stages.readout.graph import knn_graph
from ia_stages.settings.sizing import sized


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_stack_arguments(ap)
    a = ap.parse_args()
    z = np.load(digit_stack(a))
    X = z["images"].astype(float)
    n = X.shape[0]
    s = sized(ia_settings(), n)
    k = s.knn_width(n)
    w = s.knn_features(n)
    runs = {}
    pair = ((f"exact_width={w.exact_width}", w), ("every place", replace(w, exact_width=None)))
    for name, fs in pair:
        t = time.perf_counter()
        runs[name] = r = kappa_max(
            X, k=k, mode="candidates", beta=s.beta, normalization=s.normalization,
            group=s.group, settings=s.knn_search(), sigma=s.sigma, features=fs,
        )  # fmt: skip
        sec = {key: round(v, 1) for key, v in r.seconds.items()}
        print(f"{name}: {time.perf_counter() - t:.1f} s wall; {sec}", flush=True)
    (na, a_), (nb, b_) = runs.items()
    ratio = a_.seconds["expand"] / b_.seconds["expand"]
    total = a_.seconds["total"] / b_.seconds["total"]
    print(f"second pass: {ratio:.2f} of the all-exact one's wall; whole graph {total:.2f}")
    we = int(w.exact_width)
    head = sum(set(a_.indices[i, :we]) == set(b_.indices[i, :we]) for i in range(n))
    whole = sum(set(a_.indices[i]) == set(b_.indices[i]) for i in range(n))
    print(f"rows whose first {we} hold the same images: {head} of {n}; whole lists: {whole}")
    g_a, g_b = knn_graph(a_.head(s.readout.k + 1)), knn_graph(b_.head(s.readout.k + 1))
    diff = (g_a != g_b).nnz
    print(f"read-out graph ({s.readout.k} neighbours): {diff} of {g_b.nnz} links differ")
    exact = {
        (i, int(j)): d for i in range(n) for j, d in zip(b_.indices[i], b_.sqdist[i], strict=True)
    }
    below = max(
        (exact[(i, int(j))] - d for i in range(n)
         for j, d in zip(a_.indices[i], a_.sqdist[i], strict=True) if (i, int(j)) in exact),
        default=0.0,
    )  # fmt: skip
    print(f"largest listed d2 of '{na}' below '{nb}' for the same pair: {below:.3g}")


if __name__ == "__main__":
    main()
