"""How the kNN path's read-out without K depends on its sample and on its own (Leiden) seed:
clusters and ACC against the sample's seed and size, and against the read-out seed, on one
stored kNN graph.

Usage: python bench/readout_sample.py RUN [--iteration 1] [--sizes 300 1000] [--seeds 0 1 2 3]
       [--readout-seeds 1 2 3] [--per-resolution]

RUN is an ``ia-stages cluster`` output folder whose dataset took the kNN path (e.g. from
``bench/cluster_large.py``), or ``digits:N``: N MNIST digits rotated by scipy, clustered by the
estimator with the kNN path forced (its kept iteration; ``--iteration`` ignored). Its kNN store
of ``--iteration`` gives the lists; for every size and sample draw a new random sample of the
iteration's features gets its exact all-pairs kappa^max (the settings the run used), and IA's
read-out (:func:`ia_stages.ia.loop.read_out`, no K) is run on the lists with that sample and
the run's read-out seed, as the ``classes`` stage would; ``--readout-seeds`` reads out the
run's own sample with other read-out seeds. Printed per row: size, sample draw, read-out seed,
clusters, ACC, NMI and the seconds the sample's kappa^max took; the run's own read-out (its
own sample and seed) is the first row. ``--per-resolution`` adds every resolution's partition
as clusters:mean silhouette on the sample (t), t = the paired difference of the samples'
silhouettes to the read-out's chosen partition over its standard error (with the finite
population correction sqrt(1 - s/n)): t below ~2 means the sample cannot tell the two apart.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from ia_stages.ia.settings import ia_config, ia_settings
from sklearn.metrics import silhouette_samples

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy, nmi
from ia_stages.ia.loop import read_out
from ia_stages.pipeline.config import load_config
from ia_stages.pipeline.stages.knn import read_knn
from ia_stages.pipeline.store import read_store
from ia_stages.readout.graph import KnnDistances, leiden_knn, sample_indices
from ia_stages.settings.sizing import sized


def from_run(run: Path, t: int) -> tuple:
    """Labels, sized settings, features and stored kNN distances of iteration ``t`` of an
    ``ia-stages cluster`` output folder, and the read-outs' seed."""
    cfg = load_config(run / "config.yaml")
    name = next(iter(cfg["ia"]["datasets"]))
    res = run / "results" / name
    labels = pd.read_csv(run / "clusters.csv")["label"].values
    n = labels.size
    s = sized(ia_settings(**ia_config(cfg, name)), n)
    store = (
        res / "ia" / f"iter{t}" / "features.zarr" if t else run / "results/data" / f"{name}.zarr"
    )
    V = read_store(store)["features"].values
    return labels, s, V, read_knn(res / "ia" / f"iter{t}" / "knn.zarr", n), int(cfg["seed"])


def from_digits(n: int) -> tuple:
    """The same for ``n`` MNIST digits rotated by scipy (``bench/sizes.py``'s), clustered by
    the default estimator with the kNN path forced; its kept iteration."""
    from sizes import digits  # bench/, beside this script

    X, labels = digits(n)
    est = InvariantAttentionClustering(kmax_mode="candidates", random_state=0).fit(X)
    res = est.result_
    V = X if res.n_iter == 0 else res.features
    return labels, res.settings, V, res.kmax[res.n_iter], res.seed


def per_resolution(kd: KnnDistances, s, seed: int, chosen: np.ndarray) -> str:
    """Every resolution's partition on the sample: clusters:mean silhouette(t against the
    read-out's ``chosen`` labels), as :func:`ia_stages.readout.graph.leiden_silhouette`
    scores them (it scores the first partition of each count only)."""
    g = s.readout.graph()
    lists = kd.lists(int(g["k"]) + 1)
    D = np.sqrt(np.maximum(kd.sample_sqdist, 0.0))
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    n, size = kd.n, kd.sample.size
    scores = []
    for r in sorted(g["resolutions"]):
        on = leiden_knn(lists, seed, r)[kd.sample]
        if 2 <= np.unique(on).size < size:
            scores.append((int(on.max()) + 1, silhouette_samples(D, on, metric="precomputed")))
    if not scores:
        return ""
    best = silhouette_samples(D, chosen[kd.sample], metric="precomputed")
    fpc = np.sqrt(max(1.0 - size / n, 0.0))
    out = []
    for m, v in scores:
        d = best - v
        se = d.std(ddof=1) / np.sqrt(size) * fpc
        out.append(f"{m}:{v.mean():.3f}({d.mean() / se if se > 0 else 0.0:.1f})")
    return "  " + " ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="an ia-stages cluster output folder, or digits:N")
    ap.add_argument("--iteration", type=int, default=1)
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 1000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument(
        "--readout-seeds", type=int, nargs="*", default=[],
        help="read-out (Leiden) seeds to try on the run's own sample",
    )  # fmt: skip
    ap.add_argument("--per-resolution", action="store_true", help="every partition's score")
    a = ap.parse_args()

    run, t = a.run, a.iteration
    if run.startswith("digits:"):
        labels, s, V, stored, run_seed = from_digits(int(run.split(":")[1]))
    else:
        labels, s, V, stored, run_seed = from_run(Path(run), t)
    n = labels.size
    print(f"{run}: n = {n}, iteration {t}, read-out graph k = {s.readout.k}, run seed {run_seed}")
    print("size  sample  leiden  clusters    ACC    NMI  kappa^max s")

    def row(size: int, draw: str, kd: KnnDistances, leiden: int, sec: float) -> None:
        lab = read_out(kd, s.readout, None, leiden)
        more = per_resolution(kd, s, leiden, lab) if a.per_resolution else ""
        print(f"{size:>4}  {draw:>6}  {leiden:>6}  {lab.max() + 1:8d}  "
              f"{accuracy(labels, lab):.3f}  {nmi(labels, lab):.3f}  {sec:11.1f}{more}",
              flush=True)  # fmt: skip

    row(stored.sample.size, "run", stored, run_seed, 0.0)
    for leiden in a.readout_seeds:  # the run's own sample, another read-out seed
        row(stored.sample.size, "run", stored, leiden, 0.0)
    for size in a.sizes:  # another sample, the run's read-out seed
        for draw in a.seeds:
            pick = sample_indices(n, size, 1000 + draw)
            t0 = time.perf_counter()
            kd = KnnDistances(stored.knn, pick, s.sample_sqdist(V, pick))
            row(size, str(draw), kd, run_seed, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
