"""IA's later iterations on the kNN path: candidates from the previous iteration's lists
against candidates found in invariant-feature space, on the same images in one process.

Usage: python bench/later_candidates.py RUN [--iteration 1] [--dataset images]

RUN is a finished run folder of the kNN path (``bench/cluster_large.py`` makes one; its
``results/{dataset}/ia/iter{t}/features.zarr`` are iteration t's invariant means and
``iter{t-1}/knn.zarr`` the lists before them). Both routes call
:func:`ia_stages.kmax.kappa_max` with ``mode='candidates'`` and the run's own kNN settings
(search, features, list width), on iteration t's images: 'features' (each image's c nearest in
feature space, then the expansion pass) and 'lists' (each image's neighbours in iteration
t - 1's lists, then the expansion pass; ``path.later_candidates: lists``). Printed: wall
seconds and pairs refined of each and their ratio, how many rows' first 10 and whole lists
hold the same images, and, as recall, the share of each row's w nearest among both routes'
pairs (each pair at the lower of its two d2) that each route's list holds: mean and worst row.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ia_stages.kmax import kappa_max
from ia_stages.pipeline.stages.common import load_features, require_images
from ia_stages.pipeline.stages.knn import read_knn
from ia_stages.pipeline.store import read_store
from ia_stages.settings.features import FeatureSettings
from ia_stages.settings.search import SearchSettings


def union_recall(a, b, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the share of the w nearest among both lists' pairs that each list holds."""
    held_a, held_b = [], []
    for ia, da, ib, db in zip(a.indices, a.sqdist, b.indices, b.sqdist, strict=True):
        best: dict[int, float] = {}
        for j, d in zip(np.r_[ia, ib], np.r_[da, db], strict=True):
            best[int(j)] = min(float(d), best.get(int(j), np.inf))
        top = set(sorted(best, key=lambda j: (best[j], j))[:w])
        held_a.append(len(top & set(ia[:w].tolist())) / w)
        held_b.append(len(top & set(ib[:w].tolist())) / w)
    return np.array(held_a), np.array(held_b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--iteration", type=int, default=1)
    ap.add_argument("--dataset", default="images")
    a = ap.parse_args()
    base = f"{a.run}/results/{a.dataset}/ia"
    images = f"{base}/iter{a.iteration}/features.zarr"
    V = require_images(load_features(images), images).astype(np.float64)
    n = V.shape[0]
    store = read_store(f"{base}/iter{a.iteration}/knn.zarr")
    s = json.loads(store.attrs["settings"])
    previous = read_knn(f"{base}/iter{a.iteration - 1}/knn.zarr", n).knn
    common = dict(
        k=int(s["k"]), mode="candidates", beta=s["beta"], normalization=s["normalization"],
        settings=SearchSettings(**s["search"]), sigma=s["sigma"],
        features=FeatureSettings(**s["features"]),
    )  # fmt: skip
    print(f"{images}: n = {n}, lists of {s['k']}, beta {s['beta']}, sigma {s['sigma']}")
    runs = {}
    for name, cand in (("features", None), ("lists", previous.indices[:, 1:])):
        t = time.perf_counter()
        runs[name] = r = kappa_max(V, candidates=cand, **common)
        print(f"{name}: {time.perf_counter() - t:.1f} s wall, {r.pairs_refined} pairs refined",
              flush=True)  # fmt: skip
    f, li = runs["features"], runs["lists"]
    print(f"lists / features: {li.seconds['total'] / f.seconds['total']:.2f} of the wall, "
          f"{li.pairs_refined / f.pairs_refined:.2f} of the pairs")  # fmt: skip
    for w in (10, int(s["k"])):
        pairs = zip(f.indices, li.indices, strict=True)
        same = np.mean([set(x[:w]) == set(y[:w]) for x, y in pairs])
        held_f, held_l = union_recall(f, li, w)
        print(f"first {w}: same images in {same:.4f} of rows; share of the {w} nearest of both "
              f"held: features mean {held_f.mean():.4f} worst {held_f.min():.2f}, lists mean "
              f"{held_l.mean():.4f} worst {held_l.min():.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
