"""The kNN path's sample distances by the exact preset against the screen's search: their cost,
their difference and what the read-outs make of each.

Usage: python bench/sample_search.py RUN [--iterations 0 1]
       python bench/sample_search.py digits:DIGITS:COPIES

With ``digits:DIGITS:COPIES`` (e.g. ``digits:5000:20``, 100,000 images) the stack is
:func:`ia_stages.data.large.digit_copies` (``bench/cluster_large.py``'s), the sample is the one
the default settings draw for its n (seed 0), and only the two searches' cost and difference
are printed (no stores, no read-outs).

RUN is an ``ia-stages cluster`` output folder whose dataset took the kNN path (e.g. from
``bench/cluster_large.py``). For every iteration given, the sample's all-pairs kappa^max
(:func:`ia_stages.readout.graph.sample_sqdist`, what the silhouette that chooses Leiden's
resolution, the stopping rule and the linkage stability use) is computed here twice in one
process, with the exact preset (the stored one; the script checks it equals the store's) and
with the first pass's screen (:func:`ia_stages.kmax.candidates.first_pass_search`). Printed:
CPU and wall seconds of each and their ratio, the distribution of screen minus exact d2 over
the pairs, and the read-outs of the run's iterations with each sample (the iteration the
stopping rule keeps, clusters and ACC without K; ACC with K = the number of labels).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from ia_stages.ia.settings import ia_config, ia_settings
from readout_sample import from_run  # bench/, beside this script

from ia_stages.benchmark.metrics import accuracy
from ia_stages.ia.loop import read_iterations
from ia_stages.pipeline.config import load_config
from ia_stages.readout.graph import sample_sqdist
from ia_stages.settings.path import first_pass_search
from ia_stages.settings.sizing import sized


def timed_sample(V, pick, s, search) -> tuple[np.ndarray, float, float]:
    """The d2 among ``V[pick]`` under ``search`` and its (CPU, wall) seconds."""
    c, w = time.process_time(), time.perf_counter()
    sq = sample_sqdist(V, pick, s.beta, s.normalization, s.group, search, s.sigma)
    return sq, time.process_time() - c, time.perf_counter() - w


def on_digit_copies(spec: str) -> None:
    """The sample of ``digits:DIGITS:COPIES`` under the default settings, by both searches."""
    from ia_stages.data.large import digit_copies
    from ia_stages.readout.graph import sample_indices

    _, digits, copies = spec.split(":")
    X = digit_copies(int(copies), n_digits=int(digits), noise=0.0, seed=0).data
    n = X.shape[0]
    s = sized(ia_settings(), n)
    pick = sample_indices(n, s.path.sample_size(n), 0)
    exact = s.knn_search()
    screen = first_pass_search(exact, s.knn_features(n))
    for search in (screen, exact):  # load the compiled kernels before timing
        timed_sample(X, pick[:3], s, search)
    sq_s, c_s, w_s = timed_sample(X, pick, s, screen)
    sq_e, c_e, w_e = timed_sample(X, pick, s, exact)
    diff = (sq_s - sq_e)[np.triu_indices(pick.size, 1)]
    print(
        f"{n} digit copies, sample {pick.size} ({diff.size} pairs): exact {c_e:.1f} CPU s "
        f"({w_e:.1f} wall), screen {c_s:.1f} CPU s ({w_s:.1f} wall): {c_s / c_e:.2f}x CPU; "
        f"screen - exact d2 median {np.median(diff):.1e}, min {diff.min():.2f}, "
        f"max {diff.max():.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--iterations", type=int, nargs="+", default=[0, 1])
    a = ap.parse_args()
    if a.run.startswith("digits:"):
        on_digit_copies(a.run)
        return
    runs = {"exact": [], "screen": []}
    for t in a.iterations:
        labels, s, V, kd, seed = from_run(Path(a.run), t)
        exact = s.knn_search()
        screen = first_pass_search(exact, s.knn_features(kd.n))
        sq_e, c_e, w_e = timed_sample(V, kd.sample, s, exact)
        sq_s, c_s, w_s = timed_sample(V, kd.sample, s, screen)
        stored = np.abs(sq_e - kd.sample_sqdist).max()
        iu = np.triu_indices(kd.sample.size, 1)
        diff = (sq_s - sq_e)[iu]
        q = np.quantile(diff, [0.5, 0.99, 0.999, 1.0])
        print(
            f"iteration {t}: sample {kd.sample.size} ({iu[0].size} pairs), n = {kd.n}; exact "
            f"{c_e:.1f} CPU s ({w_e:.1f} wall), screen {c_s:.1f} CPU s ({w_s:.1f} wall): "
            f"{c_s / c_e:.2f}x CPU; exact recomputed vs stored max |diff| {stored:.1e}"
        )
        print(
            f"  screen - exact d2: median {q[0]:.1e}, 99% {q[1]:.1e}, 99.9% {q[2]:.1e}, "
            f"max {q[3]:.1e}, below exact by > 1e-6: {(diff < -1e-6).sum()}, "
            f"above by > 1e-3: {(diff > 1e-3).sum()} of {diff.size}"
        )
        runs["exact"].append(kd)
        runs["screen"].append(replace(kd, sample_sqdist=sq_s))
    K = int(np.unique(labels).size)
    cfg = load_config(Path(a.run) / "config.yaml")
    base = ia_settings(**ia_config(cfg, next(iter(cfg["ia"]["datasets"]))))
    for name, kds in runs.items():
        parts, chosen, reason = read_iterations(kds, s, None, seed)
        with_k, _, _ = read_iterations(kds, sized(base, kd.n, K), K, seed)
        rows = ", ".join(
            f"it {t}: {np.unique(p).size} clusters ACC {accuracy(labels, p):.3f}, "
            f"K {accuracy(labels, pk):.3f}"
            for t, p, pk in zip(a.iterations, parts, with_k, strict=True)
        )
        print(f"read-outs with the {name} sample: {rows}; kept iteration {chosen} ({reason})")


if __name__ == "__main__":
    main()
