"""Invariance error of kappa^max: |kappa^max(u o s, v o s') - kappa^max(u, v)| / kappa^max(u, v).

Usage: python bench/invariance.py [--trials 8] [--beta 1.0]

For each pair of the three shapes3 base images (72 px) and each kernel smoothing sigma, draws
random transforms s, s' (rotation anywhere in (-180, 180], shift U[-4, 4] px) and prints the
largest and median relative error, and the same error at the pipeline's beta = 30.
"""

from __future__ import annotations

import argparse

import numpy as np

from ia_stages import SE2, kappa_max, warp
from ia_stages.base_shapes import draw_base_shapes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--beta", type=float, default=1.0)
    args = ap.parse_args()
    shapes = draw_base_shapes(72)
    images = np.stack([shapes["crab"], shapes["seven"], shapes["pikachu"]])
    rng = np.random.default_rng(0)
    print(
        f"{'sigma':>6} {'max rel err':>12} {'median':>10} {'max |d2 err|':>13} "
        f"{'max rel err @beta=30':>21}"
    )
    for sigma in (0.0, 1.0, 1.5, 2.0):
        rel, d2err = [], []
        for a, b in ((0, 1), (1, 2), (2, 0)):
            ref = kappa_max(images[[a, b]], beta=args.beta, sigma=sigma)
            for _ in range(args.trials):
                s = SE2().sample(rng, 2, (-180, 180), (4, 4))
                got = kappa_max(warp(images[[a, b]], s), beta=args.beta, sigma=sigma)
                rel.append(abs(got.value[0, 1] - ref.value[0, 1]) / ref.value[0, 1])
                d2err.append(abs(got.sqdist[0, 1] - ref.sqdist[0, 1]))
        at30 = np.expm1(30.0 * np.max(d2err))  # relative kappa error for the same d2 error
        print(
            f"{sigma:>6.1f} {np.max(rel):>12.2e} {np.median(rel):>10.2e} "
            f"{np.max(d2err):>13.2e} {at30:>21.2e}"
        )


if __name__ == "__main__":
    main()
