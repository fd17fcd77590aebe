"""Compile the package's cached numba kernels once, before the test workers start.

numba caches each ``cache=True`` kernel on disk the first time a process compiles it. On a
fresh clone every pipeline job and test worker that starts before the cache exists compiles
the same kernels at the same time (a kappa^max block job: tens of seconds cold, a few warm). Run
by tests/conftest.py in the controller process; on a warm cache it only loads them.

Compiling is one core's work per process, and the dense search's kernel is most of it, so a
second process compiles, beside it, the kernels that do not call the search (the group
refinement, the invariant mean's warps, the letters' renderer, the candidates mode's
selection and lattice scan); then every entry point runs once, loading what the two made and
compiling the rest.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np


def _shapes() -> np.ndarray:
    from ia_stages.data.datasets import shapes3

    return shapes3(n_per_class=3, size=32, shift_px=(2, 2), rng=np.random.default_rng(0)).data


def beside_the_search() -> None:
    """The kernels no dense search calls, each run once on small inputs."""
    from ia_stages.core.groups import make_group
    from ia_stages.data.render import letter, render
    from ia_stages.ia.invariant_mean import invariant_mean
    from ia_stages.kmax.group_refine import refine_pairs
    from ia_stages.settings.attention import MeanSettings

    X = _shapes()
    pairs = np.arange(3, dtype=np.int64)
    q0 = np.zeros((3, 6))
    for interpolation in ("keys", "bspline"):
        refine_pairs(X, X, pairs, pairs[::-1].copy(), q0, make_group("affine"), interpolation)
    invariant_mean(X, np.ones(len(X)), settings=MeanSettings(steps=2))
    render(letter("F", height=12.0), (24, 24), np.zeros((1, 3)))
    _candidate_kernels(X)


def _candidate_kernels(X: np.ndarray) -> None:
    """The candidates mode's own kernels (feature-space selection, lattice scan, joint peaks)
    on small inputs, as that mode calls them."""
    from ia_stages.core.smoothing import normalize, smooth
    from ia_stages.kmax.features import feature_neighbours
    from ia_stages.kmax.polar import angle_synthesis, centroids, scan_spectra
    from ia_stages.kmax.rings import lattice_pair_scores, pair_joint_peaks
    from ia_stages.kmax.search import centre_offsets, lattice_neighbours

    feature_neighbours(X.reshape(len(X), -1).astype(np.float32), 3)
    U, M = normalize(smooth(X, 1.0)), 16
    A = scan_spectra(U, centroids(U)[None], M)[:, :, 0]
    B = scan_spectra(U, centroids(U)[None] + centre_offsets(1.0, 1)[:, None], M)
    pairs = np.arange(len(X), dtype=np.int64)
    scores = np.empty((len(X), B.shape[2], M), dtype=np.float32)
    lattice_pair_scores(A, B, pairs, pairs[::-1].copy(), angle_synthesis(M), scores)
    nbr = lattice_neighbours(centre_offsets(1.0, 1))
    pair_joint_peaks(scores[:, None], pairs, np.zeros_like(pairs), 2, nbr)


def main() -> None:
    from ia_stages import InvariantAttentionClustering, kappa_max

    beside = subprocess.Popen([sys.executable, "-m", "tests.warm_numba", "--beside"])
    X = _shapes()
    kappa_max(X)  # the dense search: ring spectra, peaks, refinement, warps
    if beside.wait() != 0:
        raise RuntimeError("tests.warm_numba --beside failed")
    kappa_max(X, k=3)  # the kNN mode's selection
    small = {"config": {"iterations": 1}, "random_state": 0}
    InvariantAttentionClustering(3, **small).fit(X)  # means, class averages
    knn = {"iterations": 1, "path": {"mode": "candidates"}}
    InvariantAttentionClustering(3, config=knn, random_state=0).fit(X)
    for group in ("similarity", "affine"):
        InvariantAttentionClustering(3, group=group, **small).fit(X)
    beside_the_search()  # loads what the other process compiled


if __name__ == "__main__":
    beside_the_search() if sys.argv[1:] == ["--beside"] else main()
