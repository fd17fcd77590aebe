"""The candidate kNN mode of kappa^max: nearest in invariant-feature space, refined exactly.

For n in the tens of thousands the exact kNN mode (:mod:`ia_stages.kmax.knn`) still scans all
n^2 pairs. This mode never does:

1. **Features**: rotation- and translation-invariant features of every image
   (:func:`ia_stages.kmax.features.invariant_features`), O(n).
2. **Candidates**: each image's ``n_candidates`` (c) nearest in feature space
   (:func:`ia_stages.kmax.features.feature_neighbours`), by blocked matrix products.
3. **Coarse filter** (``n_refine`` > 0): the polar scan about the two centroids alone scores
   every candidate pair (one ring correlation, no lattice of centres); each image keeps its
   ``n_refine`` candidates of lowest coarse d2.
4. **Exact refinement of the candidate pairs only**: the polar scan of those pairs alone (the
   same spectra, lattice of centres and peak rule as the all-pairs search) gives their starts,
   the compiled per-pair search (``settings``, the exact preset by default) refines them, and
   each image keeps its k nearest, itself first: a :class:`ia_stages.kmax.KnnResult`.

Each candidate pair is refined once and counts for both of its images. The lists are exact
wherever every true neighbour is among the candidates of one of the pair's two images;
``bench/scale.py`` measures that recall against the all-pairs kappa^max.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import SE2
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.validation import check_images, constant_images
from ia_stages.kmax.features import (
    DEFAULT_FEATURES,
    FeatureSettings,
    feature_neighbours,
    invariant_features,
)
from ia_stages.kmax.knn import _check_k, _Lists, _Refiner
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.polar import (
    angle_synthesis,
    centroid_translation,
    centroids,
    scan_spectra,
)
from ia_stages.kmax.rings import pair_joint_peaks, pair_peaks
from ia_stages.kmax.search import (
    EXACT_SEARCH,
    FLOATS,
    SearchSettings,
    centre_offsets,
    lattice_neighbours,
)

COLUMN_BLOCK = 2048  # moving images whose lattice spectra are held at once
PAIR_BATCH = 256  # pairs scored at once (each holds the spectra of all its centres)


def kappa_max_candidates(
    X: Any,
    k: int,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
    features: FeatureSettings = DEFAULT_FEATURES,
) -> KnnResult:
    """Each sample's k nearest under kappa^max (itself first), refined on candidates only.

    Parameters
    ----------
    X : ``(n, H, W)`` images (cupy arrays are copied to the host)
    k : list length, the sample included: 1 <= k < n
    beta, normalization, group, sigma : as :func:`ia_stages.kmax.kappa_max`
    settings : the per-pair search of the candidate pairs (default the exact preset
        :data:`ia_stages.kmax.EXACT_SEARCH`; ``method`` must be 'polar')
    progress : called with the number of pairs refined after every block
    features : :class:`ia_stages.kmax.features.FeatureSettings`; its ``n_candidates`` (c)
        must be >= k

    Memory: the images and their refinement layout (a few copies of X in float64), the
    features (n x ``n_dims``), one block of candidate search (``batch`` x n float32) and the
    lattice spectra of ``COLUMN_BLOCK`` images; never n^2.

    Returns
    -------
    KnnResult with ``(n, k)`` arrays; ``pairs_scanned`` counts the candidate pairs scored,
    ``seconds`` has 'features', 'candidates', 'refine', 'total' and their 'cpu_' variants.

    Example
    -------
    >>> from ia_stages.data.datasets import make_digits_dataset  # doctest: +SKIP
    >>> res = kappa_max_candidates(X, k=10)  # doctest: +SKIP
    >>> res.indices.shape  # doctest: +SKIP
    (n, 10)
    """
    clock = _Clock()
    k = _check_k(k, X)
    c = features.n_candidates
    if c < k:
        raise ValueError(f"features.n_candidates (c = {c}) must be >= k = {k}")
    if features.n_refine and features.n_refine < k:
        raise ValueError(f"features.n_refine (r = {features.n_refine}) must be 0 or >= k = {k}")
    if c >= X.shape[0]:
        raise ValueError(
            f"features.n_candidates (c = {c}) must be < n = {X.shape[0]} (the number of images)"
        )
    X = check_images(X, "X", dtype=FLOATS)
    if settings.method != "polar":
        raise ValueError(
            f"settings.method must be 'polar' for the candidates mode, got {settings.method!r}"
        )
    X = np.asarray(to_numpy(X), dtype=np.float64)
    constant = constant_images(X)
    if constant.size:
        i = int(constant[0])
        raise ValueError(
            f"X: image {i} is constant (every pixel {float(X[i].flat[0]):g}; {constant.size} "
            "such images): it has no rotation-invariant features for mode='candidates'"
        )
    n = X.shape[0]
    Un = normalize(smooth(X, sigma), normalization)
    uu = (Un**2).reshape(n, -1).sum(1)

    F = invariant_features(Un, features)
    clock.lap("features")
    cand = feature_neighbours(F, c, features.batch)
    del F
    clock.lap("candidates")

    scan = _PairScan(Un, settings)
    if features.n_refine and features.n_refine < c:
        coarse = scan.centroid_sqdist(np.repeat(np.arange(n), c), cand.ravel(), uu)
        keep = np.argsort(coarse.reshape(n, c), axis=1, kind="stable")[:, : features.n_refine]
        cand = np.take_along_axis(cand, keep, 1)
        clock.lap("filter")
    i = np.repeat(np.arange(n), cand.shape[1])
    j = cand.ravel()
    key = np.unique(np.minimum(i, j) * n + np.maximum(i, j))
    a, b = key // n, key % n  # a < b: the later image b is warped onto a

    result = KnnResult.itself_only(n, k, group.n_params)
    if k == 1:
        return result
    refiner = _Refiner(Un, group, settings, beta, sigma)
    lists = _Lists(n, k - 1, (group.n_params + 1,))
    for b0 in range(0, n, COLUMN_BLOCK):
        sel = np.flatnonzero((b >= b0) & (b < b0 + COLUMN_BLOCK))
        if sel.size == 0:
            continue
        starts, scanned = scan.starts(a[sel], b[sel], b0, min(b0 + COLUMN_BLOCK, n), uu)
        refiner.refine(a[sel], b[sel], starts, scanned, lists)
        if progress is not None:
            progress(int(sel.size))
    lists.fill(result, beta, uu)
    result.pairs_scanned = result.pairs_refined = int(key.size)
    clock.lap("refine")
    result.seconds = clock.totals()
    return result


class _PairScan:
    """The polar scan of chosen pairs (a, b): scores of a's centroid rings against b's rings
    about each lattice centre, and starts by the search's peak rule."""

    def __init__(self, Un: np.ndarray, settings: SearchSettings) -> None:
        self.Un, self.settings = Un, settings
        self.M = settings.n_angles
        self.m = centroids(Un)
        self.shape = Un.shape[1:]
        lattice = centre_offsets(settings.centre_offset, settings.centre_rings)
        self.offs = lattice
        self.neighbours = lattice_neighbours(lattice)
        self.synthesis = angle_synthesis(self.M)
        interp = settings.interpolation
        self.A = scan_spectra(Un, self.m[None], self.M, interpolation=interp)[:, :, 0]
        self.interp = interp

    def centroid_sqdist(self, a: np.ndarray, b: np.ndarray, uu: np.ndarray) -> np.ndarray:
        """Coarse d2 ``(m,)`` of pairs (a, b): best rotation about both centroids."""
        R = self.A.shape[2] // 2
        out = np.empty(a.size)
        step = 16 * PAIR_BATCH
        for p in range(0, a.size, step):
            u, v = self.A[:, a[p : p + step]], self.A[:, b[p : p + step]]  # (K, m, 2R)
            re = (u * v).sum(-1)
            im = (u[..., R:] * v[..., :R] - u[..., :R] * v[..., R:]).sum(-1)
            G = np.stack([re, im], 1).reshape(2 * u.shape[0], -1)  # rows 2k + part
            best = (G.T @ self.synthesis).max(1)
            out[p : p + step] = (
                uu[a[p : p + step]] + uu[b[p : p + step]] - 2.0 * (2.0 * np.pi / self.M) * best
            )
        return out

    def starts(
        self, a: np.ndarray, b: np.ndarray, b0: int, b1: int, uu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Starts ``(m, n_candidates, 3)`` and scan d2 ``(m,)`` of pairs with b in b0:b1."""
        centres = self.m[None, b0:b1] + self.offs[:, None]
        B = scan_spectra(self.Un[b0:b1], centres, self.M, interpolation=self.interp)
        K, R2 = B.shape[0], B.shape[3]
        R = R2 // 2
        c = self.settings.n_candidates
        starts = np.empty((a.size, c, 3))
        scanned = np.empty(a.size)
        for p in range(0, a.size, PAIR_BATCH):
            s = slice(p, p + PAIR_BATCH)
            ia, ib = a[s], b[s]
            m = ia.size
            u = self.A[:, ia]  # (K, m, 2R)
            both = np.stack([u, np.concatenate([u[..., R:], -u[..., :R]], -1)], 2)
            v = B[:, ib - b0]  # (K, m, n_o, 2R)
            G = np.matmul(both, v.transpose(0, 1, 3, 2))  # (K, m, 2, n_o)
            n_o = G.shape[3]
            G = G.transpose(1, 3, 0, 2).reshape(m, n_o, 2 * K)
            scores = (G @ self.synthesis).astype(np.float32)[:, None]  # (m, 1, n_o, M)
            rows, zero = np.arange(m), np.zeros(m, dtype=np.int64)
            if self.settings.peaks == "joint":
                theta, best_o = pair_joint_peaks(scores, rows, zero, c, self.neighbours)
            else:
                theta, best_o = pair_peaks(scores, rows, zero, c)
            centre = self.m[ib][:, None, :] + self.offs[best_o]
            shift = centroid_translation(theta, self.m[ia], centre, self.shape)
            starts[s] = np.concatenate([theta[..., None], shift], -1)
            best = scores.reshape(m, -1).max(1).astype(np.float64)
            scanned[s] = uu[ia] + uu[ib] - 2.0 * (2.0 * np.pi / self.M) * best
        return starts, scanned


class _Clock:
    """Wall-clock and CPU seconds per stage."""

    def __init__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.t, self.c = self.t0, self.c0
        self.laps: dict = {}

    def lap(self, name: str) -> None:
        t, c = time.perf_counter(), time.process_time()
        self.laps[name], self.laps[f"cpu_{name}"] = t - self.t, c - self.c
        self.t, self.c = t, c

    def totals(self) -> dict:
        t, c = time.perf_counter(), time.process_time()
        return {**self.laps, "total": t - self.t0, "cpu_total": c - self.c0}
