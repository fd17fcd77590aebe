"""How many IA iterations to run: every iteration's read-out on sets sized as users have them.

Runs the default estimator's algorithm (:func:`ia_stages.ia.loop.run_ia`, preset 'images')
for two iterations with the stopping rule off, and prints per set, with and without K, each
iteration's clusters, ACC, community stability (the 'stability' rule's statistic) and the
adjusted Rand index to the previous iteration's read-out. Letters are rendered from outlines
and digits rotated by scipy (``bench/sizes.py``).

    python bench/iterations.py                 # letters 12-100, digits 300 (2 samples), 1000 (3)
"""

from __future__ import annotations

import time

import numpy as np
from ia_stages.ia.settings import ia_settings
from sizes import LETTER_SETS, digits, letters
from sklearn.metrics import adjusted_rand_score

from ia_stages.benchmark.metrics import accuracy
from ia_stages.ia.loop import run_ia
from ia_stages.readout.stopping import community_stability


def sets() -> list[tuple[str, np.ndarray, np.ndarray]]:
    out = [(f"letters {n}", *letters(*LETTER_SETS[n])) for n in LETTER_SETS]
    for n, seed in ((300, 0), (300, 1), (1000, 0), (1000, 1), (1000, 2)):
        out.append((f"digits {n} seed {seed}", *digits(n, seed)))
    return out


def main() -> None:
    settings = ia_settings(iterations=2, stop={"rule": "none"})
    for name, X, y in sets():
        for K in (None, int(np.unique(y).size)):
            t0 = time.process_time()
            res = run_ia(X, settings, n_clusters=K, seed=0)
            graph = res.settings.readout.graph()
            stab = [
                community_stability(k.sqdist, graph, res.settings.stop.n_seeds) for k in res.kmax
            ]
            P = res.partitions
            cols = []
            for t in range(P.shape[0]):
                prev = f" ari_prev={adjusted_rand_score(P[t - 1], P[t]):.3f}" if t else ""
                cols.append(
                    f"t{t}: clusters={np.unique(P[t]).size:2d} acc={accuracy(y, P[t]):.3f} "
                    f"stability={stab[t]:.3f}{prev}"
                )
            cpu = time.process_time() - t0
            print(f"{name:18s} K={K} | " + " | ".join(cols) + f" | cpu_s={cpu:.0f}", flush=True)


if __name__ == "__main__":
    main()
