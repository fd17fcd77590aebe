"""Leiden on a stored kappa^max kNN graph: leidenalg's optimiser (what the read-outs run,
:func:`ia_stages.readout.graph.leiden_knn`) against igraph's own Leiden
(``Graph.community_leiden``), at every resolution of the read-out's grid.

Usage: python bench/leiden.py RUN [--iteration 1] [--seeds 0 1 2]
       python bench/leiden.py digits:N

RUN is an ``ia-stages cluster`` output folder whose dataset took the kNN path (e.g. from
``bench/cluster_large.py``); ``digits:N`` is N MNIST digits rotated by scipy, clustered by the
estimator with the kNN path forced (``bench/readout_sample.py``'s). The graph is the read-out's
(its sized k) on iteration ``--iteration``'s lists. Printed per resolution and seed: seconds,
communities and modularity at that resolution for both, and the ratios (time: leidenalg over
igraph; modularity: igraph minus leidenalg, higher is better), then the totals.

igraph's Leiden was every read-out's for one commit (22ae8e7 .. c298abb) and was reverted:
20 times faster on 20,000 images, but on 300 rotated digits in a folder it split one digit on
2 of 4 estimator seeds where leidenalg found the 3 classes on all 4 (README, "Read-outs").
Since session 15 it runs the read-outs with K (``readout.graph.with_k_engine``), whose rule
keeps the highest-modularity K-partition; both engines here are
:func:`ia_stages.readout.graph.leiden_knn`'s.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from readout_sample import from_digits, from_run  # bench/, beside this script

from ia_stages.readout.graph import igraph_of, leiden_knn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--iteration", type=int, default=1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    a = ap.parse_args()
    if a.run.startswith("digits:"):
        _, s, _, knn, _ = from_digits(int(a.run.split(":")[1]))
    else:
        _, s, _, knn, _ = from_run(Path(a.run), a.iteration)
    lists = knn.lists(s.readout.k + 1)
    g = igraph_of(lists)
    print(f"graph: {g.vcount()} vertices, {g.ecount()} edges (read-out k = {s.readout.k})")
    totals = np.zeros(2)
    for r in s.readout.resolutions:
        for seed in a.seeds:
            t = time.perf_counter()
            old = leiden_knn(lists, seed, r, g)
            t_old = time.perf_counter() - t
            t = time.perf_counter()
            new = leiden_knn(lists, seed, r, g, "igraph")
            t_new = time.perf_counter() - t
            totals += (t_old, t_new)
            q_old = g.modularity(old.tolist(), resolution=r)
            q_new = g.modularity(new.tolist(), resolution=r)
            print(
                f"resolution {r:4.2f} seed {seed}: leidenalg {t_old:6.2f} s {old.max() + 1:4d}"
                f" communities Q {q_old:.4f} | igraph {t_new:6.2f} s {new.max() + 1:4d}"
                f" communities Q {q_new:.4f} | time ratio {t_old / t_new:5.1f}"
                f" Q difference {q_new - q_old:+.4f}"
            )
    print(
        f"total: leidenalg {totals[0]:.1f} s, igraph {totals[1]:.1f} s,"
        f" ratio {totals[0] / totals[1]:.1f}"
    )


if __name__ == "__main__":
    main()
