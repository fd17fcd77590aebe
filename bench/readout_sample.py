"""How the kNN path's read-out without K depends on its sample: clusters and ACC against the
sample's seed and size, on one stored kNN graph.

Usage: python bench/readout_sample.py RUN [--iteration 1] [--sizes 300 1000] [--seeds 0 1 2 3]

RUN is an ``ia-stages cluster`` output folder whose dataset took the kNN path (e.g. from
``bench/cluster_large.py``). Its kNN store of ``--iteration`` gives the lists; for every size
and seed a new random sample of the iteration's features gets its exact all-pairs kappa^max
(the settings the run used), and IA's read-out (:func:`ia_stages.ia.loop.read_out`, no K) is
run on the lists with that sample, as the ``classes`` stage would. Printed per row: size, seed,
clusters, ACC, NMI, the resolution the silhouette chose, and the seconds the sample's kappa^max
took; the run's own read-out (its stored sample) is the reference row.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from ia_stages.benchmark.metrics import accuracy, nmi
from ia_stages.ia.loop import read_out
from ia_stages.ia.settings import ia_config, ia_settings, sized
from ia_stages.pipeline.config import load_config
from ia_stages.pipeline.stages.knn import read_knn
from ia_stages.pipeline.store import read_store
from ia_stages.readout.graph import KnnDistances, sample_indices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--iteration", type=int, default=1)
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 1000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    a = ap.parse_args()

    run = Path(a.run)
    cfg = load_config(run / "config.yaml")
    name = next(iter(cfg["ia"]["datasets"]))
    res = run / "results" / name
    labels = pd.read_csv(run / "clusters.csv")["label"].values
    n = labels.size
    s = sized(ia_settings(**ia_config(cfg, name)), n)
    t = a.iteration
    V = read_store(res / "ia" / f"iter{t}" / "features.zarr")["features"].values if t else None
    if V is None:
        V = read_store(run / "results" / "data" / f"{name}.zarr")["features"].values
    stored = read_knn(res / "ia" / f"iter{t}" / "knn.zarr", n)
    print(f"{run}: n = {n}, iteration {t}, read-out graph k = {s.readout.k}")
    print("size  seed  clusters    ACC    NMI  kappa^max s")

    def row(size: str, seed: str, kd: KnnDistances, sec: float) -> None:
        lab = read_out(kd, s.readout, None, int(cfg["seed"]))
        print(f"{size:>4}  {seed:>4}  {lab.max() + 1:8d}  {accuracy(labels, lab):.3f}  "
              f"{nmi(labels, lab):.3f}  {sec:11.1f}", flush=True)  # fmt: skip

    row(str(stored.sample.size), "run", stored, 0.0)
    for size in a.sizes:
        for seed in a.seeds:
            pick = sample_indices(n, size, 1000 + seed)
            t0 = time.perf_counter()
            kd = KnnDistances(stored.knn, pick, s.sample_sqdist(V, pick))
            row(str(size), str(seed), kd, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
