"""What the group refinement costs and what fewer evaluations would lose, on digits.

Usage: python bench/group_refine_cost.py [--n 150] [--kind affnist] [--group affine_wide]
       [--iters 60 6+2 8] [--floor 1e-3] [--k 10] [--beta 20]

On ``--n`` affNIST-style digits (``ia_stages.data.datasets.affnist``, seed 0; ``--kind mnist_rot``:
digits rotated by our generator; ``--kind scirot``: MNIST digits rotated by scipy, as
``bench/groups_accuracy.py`` makes them), the all-pairs kappa^max under SE(2) and under the group
(``bench/groups_accuracy.py``'s names) with each ``--floor`` (the group's ``floor``: the
refinement sums over the pixels where either image reaches it; 0: every pixel) and each
``--iters`` (the refinement's most
evaluations per pair; ``H+F``: H evaluations on 2 x 2 block means first, the group's
``half_iters``, then F at full resolution), the estimator's default search and smoothing
(sigma 1 px). Printed per
setting: CPU seconds (``time.process_time``, all threads) as microseconds per pair and as a
ratio to SE(2) in the same run; against the first setting (the reference): the largest and
the 99th percentile of the excess d2, and the recall of every sample's ``--k`` nearest (the
lists IA's kNN attention and read-out use). Also the drop d2(SE(2)) - d2(group) of the
reference (quantiles): how much the extra freedom moves a pair, i.e. how large a margin a rule
that skips far pairs would need.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from ia_stages.core.groups import make_group
from ia_stages.data.datasets import affnist, mnist
from ia_stages.kmax import kappa_max

GROUPS = {
    "similarity": {"name": "similarity"},
    "affine": {"name": "affine"},
    "affine_wide": {"name": "affine", "scale": (0.67, 1.5), "anisotropy": 2.25, "shear": 0.4},
}


def knn_lists(sqdist: np.ndarray, k: int) -> np.ndarray:
    d = sqdist + np.diag(np.full(len(sqdist), np.inf))
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--kind", choices=["affnist", "mnist_rot", "scirot"], default="affnist")
    ap.add_argument("--group", choices=sorted(GROUPS), default="affine_wide")
    ap.add_argument("--iters", nargs="+", default=["60", "6+2", "8"],
                    help="evaluations, or HALF+FULL (6+3: 6 at half resolution first)")  # fmt: skip
    ap.add_argument("--floor", type=float, nargs="+", default=[1e-3])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--beta", type=float, default=20.0)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    if a.kind == "affnist":
        X = affnist(a.n, rng=rng).data
    elif a.kind == "scirot":
        from groups_accuracy import data  # this folder's script: digits rotated by scipy

        X = data("scirot", a.n)[0]
    else:
        X = mnist(a.n, rng=rng, rotation_deg=(0.0, 360.0)).data
    pairs = a.n * (a.n - 1) // 2
    kw = {"beta": a.beta, "sigma": 1.0}
    kappa_max(X[:3], group=make_group(**GROUPS[a.group], iters=1), **kw)  # compile
    t0 = time.process_time()
    se2 = kappa_max(X, **kw)
    ref_us = 1e6 * (time.process_time() - t0) / pairs
    print(f"{a.kind} n={a.n} ({pairs} pairs), group {a.group}, beta {a.beta}, CPU of all threads")
    print(f"se2            {ref_us:8.1f} us/pair  ratio 1.00")
    first = None
    for floor, it in itertools.product(a.floor, a.iters):
        half, _, full = it.rpartition("+")
        g = make_group(**GROUPS[a.group], iters=int(full), half_iters=int(half or 0), floor=floor)
        t0 = time.process_time()
        r = kappa_max(X, group=g, **kw)
        us = 1e6 * (time.process_time() - t0) / pairs
        line = f"floor {floor:g} iters {it:<8} {us:8.1f} us/pair  ratio {us / ref_us:4.2f}"
        if first is None:
            first = r
            drop = (se2.sqdist - r.sqdist)[np.triu_indices(a.n, 1)]
            q = np.quantile(drop, [0.5, 0.9, 0.99, 1.0])
            line += "  drop d2(se2) - d2(group): median {:.3f} q90 {:.3f} q99 {:.3f} max {:.3f}"
            line = line.format(*q)
            # rules that would skip the refinement of far pairs, with the margin the drops
            # need (the largest seen here): below prune_kappa either way / in no kNN list
            iu = np.triu_indices(a.n, 1)
            d_se2, margin = se2.sqdist[iu], q[-1]
            radius = np.sort(se2.sqdist + np.diag(np.full(a.n, np.inf)), axis=1)[:, a.k - 1]
            far_kappa = d_se2 > -np.log(1e-5) / a.beta + margin
            far_knn = d_se2 - margin > np.maximum(radius[iu[0]], radius[iu[1]])
            line += (f"\n               pairs a safe skip spares: kappa < 1e-5 "
                     f"{far_kappa.mean():.3f}, outside both {a.k}-NN radii "
                     f"{far_knn.mean():.3f}")  # fmt: skip
        else:
            excess = (r.sqdist - first.sqdist)[np.triu_indices(a.n, 1)]
            mine, ref = knn_lists(r.sqdist, a.k), knn_lists(first.sqdist, a.k)
            recall = np.mean([len(set(x) & set(y)) / a.k for x, y in zip(mine, ref, strict=True)])
            line += (f"  excess d2 vs the first: min {excess.min():.2e} q99 "
                     f"{np.quantile(excess, 0.99):.2e} "
                     f"max {excess.max():.2e}  {a.k}-NN recall {recall:.4f}")  # fmt: skip
        print(line, flush=True)


if __name__ == "__main__":
    main()
