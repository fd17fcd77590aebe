"""Table 1's K-given read-outs over many seeds, from a finished benchmark run's stores.

The default run scores every randomised method with ``benchmark.seeds`` seeds (2); on 100
images one image is 0.01 of ACC, so a gap between two rows may be the seeds' spread. This
script reruns the stored kappa^max-based methods (no kappa^max or invariant mean is computed
again) with seed indices 0..S-1 and prints each method's ACC: mean, standard deviation, min,
max, and how often IA's kept iteration is at or above each baseline on the same seed index.

Usage::

    python bench/seed_spread.py RUN [--seeds 20] [--datasets mnist_rot affnist]

RUN is the folder ``snakemake --cores all`` ran in (its ``config/config.yaml`` and
``results/``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from ia_stages.ia.settings import ia_iterations

from ia_stages.benchmark.metrics import accuracy
from ia_stages.pipeline.config import cluster_settings, data_of, load_config
from ia_stages.pipeline.stages.common import load_features
from ia_stages.pipeline.stages.run_method import method_seed, predict

K_GIVEN = ["spectral_kmax", "spectral_knn", "community_knn_k", "ia_k"]
FOUND = ["community_knn", "ia"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--config", type=Path, default=None, help="default: RUN/config/config.yaml")
    args = ap.parse_args()
    cfg = load_config(args.config or args.run / "config" / "config.yaml")
    names = args.datasets or [
        d for d in cfg["datasets"] if data_of(d) in cfg["benchmark"]["datasets"]
    ]
    for dataset in names:
        T = ia_iterations(cfg, dataset)
        if not (args.run / f"results/{dataset}/ia").exists():
            print(f"\n{dataset}: no IA stores in {args.run}; skipped")
            continue
        data_path = args.run / f"results/data/{data_of(dataset)}.zarr"
        data = load_features(data_path)
        labels = data["label"].values
        # every iteration's store: IA's read-outs take them all, predict() gives the baselines
        # iteration 0's; each is read once for all methods and seeds
        paths = [args.run / f"results/{dataset}/ia/iter{t}/kmax.zarr" for t in range(T + 1)]
        stored: dict = {}
        acc: dict[str, np.ndarray] = {}
        for method in K_GIVEN + FOUND:
            row = []
            for s in range(args.seeds):
                settings = cluster_settings(cfg, dataset, method, s)
                seed = method_seed(settings)
                rng = np.random.default_rng(seed)
                pred, _ = predict(
                    method, data, data_path, settings, paths, rng, seed % 2**31, stored
                )
                row.append(accuracy(labels, pred))
            acc[method] = np.array(row)
        print(f"\n{dataset} (n = {labels.size}, {args.seeds} seed indices): ACC")
        print(f"{'method':18s} {'mean':>6s} {'std':>6s} {'min':>6s} {'max':>6s}  first 2")
        for method, a in acc.items():
            first = " ".join(f"{v:.3f}" for v in a[:2])
            spread = f"{a.mean():6.3f} {a.std():6.3f} {a.min():6.3f} {a.max():6.3f}"
            print(f"{method:18s} {spread}  {first}")
        for ia, rivals in (("ia_k", K_GIVEN[:-1]), ("ia", FOUND[:-1])):
            for r in rivals:
                share = np.mean(acc[ia] >= acc[r])
                print(f"  {ia} >= {r} on {share:.0%} of seed indices; mean gap "
                      f"{(acc[ia] - acc[r]).mean():+.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
