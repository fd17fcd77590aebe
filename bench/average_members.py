"""Class averages from every member against the ``mean.average_members`` nearest the medoid:
wall time and how far the members lie from each.

Usage: python bench/average_members.py RUN STACK [--caps 256 512]

``RUN`` is an ``ia-stages cluster`` output folder of the kNN path (as ``bench/cluster_large.py``
leaves it: ``clusters.csv`` and ``results/images/ia/iter0/knn.zarr``), ``STACK`` the ``.npz``
stack it clustered. With the run's clusters and lists, :func:`ia_stages.ia.class_averages.
class_averages` is timed with every member entering each average (the reference,
``average_members`` None) and with each cap. Printed for the clusters larger than the cap:
the members' mean kappa^max distance to their average under the cap over the same under the
reference (median and worst cluster; 1 = as close), and the kappa^max distance between the
capped and the reference average over the cluster's spread.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from ia_stages.ia.settings import ia_settings

from ia_stages.ia.class_averages import class_averages
from ia_stages.pipeline.stages.knn import read_knn
from ia_stages.settings.sizing import sized


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("stack", type=Path)
    ap.add_argument("--caps", type=int, nargs="+", default=[256, 512])
    a = ap.parse_args()
    with np.load(a.stack) as z:
        X = np.asarray(z["images"] if "images" in z.files else z[z.files[0]], dtype=np.float64)
    n = X.shape[0]
    labels = pd.read_csv(a.run / "clusters.csv")["cluster"].to_numpy()
    lists = read_knn(a.run / "results/images/ia/iter0/knn.zarr", n)
    base = sized(ia_settings(), n)
    sizes = np.bincount(labels)
    K = sizes.size
    print(f"n = {n}, {K} clusters, sizes median {np.median(sizes):.0f}, largest {sizes.max()}")

    def averages(cap):
        t = time.perf_counter()
        out = class_averages(
            X, labels, lists, replace(base, mean=replace(base.mean, average_members=cap))
        )
        return out, time.perf_counter() - t

    ref, wall = averages(None)
    ref_spread = np.bincount(labels, ref.distance, K) / sizes
    print(f"every member: {wall:.1f} s wall")
    for cap in a.caps:
        got, wall = averages(cap)
        big = np.flatnonzero(sizes > cap)
        spread = np.bincount(labels, got.distance, K) / sizes
        ratio = spread[big] / ref_spread[big]
        d2 = [base.kmax(ref.means[k : k + 1], U=got.means[k : k + 1]).sqdist[0, 0] for k in big]
        apart = np.sqrt(np.maximum(np.asarray(d2, dtype=float), 0.0)) / ref_spread[big]
        print(f"average_members {cap}: {wall:.1f} s wall; {big.size} clusters larger "
              f"({sizes[big].sum()} members): members' mean distance to the average over the "
              f"reference's median {np.median(ratio):.4f} worst {ratio.max():.4f}; capped "
              f"average from the reference / spread median {np.median(apart):.3f} worst "
              f"{apart.max():.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
