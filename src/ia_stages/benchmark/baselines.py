"""Clustering baselines for the benchmark, all with the number of clusters K given.

- pixel K-means and a diagonal-covariance Gaussian mixture on flattened pixels (scikit-learn);
- spectral clustering and k-medoids on the kappa^max affinity / manifold distances;
- TI K-means (transformation-invariant K-means, eq. 2 of the DTI clustering paper): assign
  every image to the prototype with the smallest SE(2)-aligned distance, found by the global
  kappa^max search, and update each prototype as the invariant mean (Algorithm 1) of its
  members, starting from their alignments onto it.

Pure functions on arrays; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import SE2
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import KappaMaxResult, SearchSettings, kappa_max
from ia_stages.settings.attention import MeanSettings


def kmeans_pixels(X: np.ndarray, n_clusters: int, seed: int, n_init: int = 10) -> np.ndarray:
    """K-means on flattened pixels. ``X`` ``(n, ...)``; returns labels ``(n,)``."""
    # lazy: scikit-learn takes seconds to load; the tables' jobs load none
    from sklearn.cluster import KMeans

    flat = np.asarray(X, dtype=float).reshape(len(X), -1)
    km = KMeans(n_clusters=n_clusters, n_init=n_init, random_state=seed)
    return km.fit_predict(flat).astype(np.int64)


def gmm_pixels(X: np.ndarray, n_clusters: int, seed: int, reg_covar: float = 1e-3) -> np.ndarray:
    """Gaussian mixture with diagonal covariances on flattened pixels; labels ``(n,)``.

    ``reg_covar`` is added to every variance (pixels are in [0, 1]); full covariances are out
    of reach with more pixels than images.
    """
    # lazy: scikit-learn takes seconds to load; the tables' jobs load none
    from sklearn.mixture import GaussianMixture

    flat = np.asarray(X, dtype=float).reshape(len(X), -1)
    gm = GaussianMixture(
        n_components=n_clusters, covariance_type="diag", reg_covar=reg_covar, random_state=seed
    )
    return gm.fit_predict(flat).astype(np.int64)


@dataclass
class KMedoidsResult:
    """labels ``(n,)``, medoids ``(K,)`` sample indices, cost = sum of distances to medoids."""

    labels: np.ndarray
    medoids: np.ndarray
    cost: float
    n_iter: int


def kmedoids(
    D: np.ndarray, n_clusters: int, rng: np.random.Generator, max_iter: int = 100
) -> KMedoidsResult:
    """k-medoids by alternation (Voronoi iteration) from a k-medoids++ start.

    Parameters
    ----------
    D : ``(n, n)`` symmetric non-negative distances (e.g. kappa^max manifold distances)
    n_clusters : K <= n

    At convergence every sample is assigned to its nearest medoid and every medoid minimises
    the sum of distances to the members of its cluster.
    """
    D = np.asarray(D, dtype=float)
    n = D.shape[0]
    if not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be in 1..{n}, got {n_clusters}")
    medoids = [int(rng.integers(n))]
    for _ in range(1, n_clusters):
        dmin = D[:, medoids].min(1)
        dmin[medoids] = 0.0
        p = dmin**2
        if p.sum() <= 0:  # all remaining samples coincide with a medoid
            p = np.ones(n)
            p[medoids] = 0.0
        medoids.append(int(rng.choice(n, p=p / p.sum())))
    med = np.asarray(medoids)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (reported after the loop)
        labels = np.argmin(D[:, med], axis=1)
        labels[med] = np.arange(n_clusters)  # a medoid is a member of its own cluster
        new = med.copy()
        for k in range(n_clusters):
            members = np.flatnonzero(labels == k)
            new[k] = members[np.argmin(D[np.ix_(members, members)].sum(1))]
        if np.array_equal(new, med):
            break
        med = new
    labels = np.argmin(D[:, med], axis=1)
    labels[med] = np.arange(n_clusters)
    cost = float(D[np.arange(n), med[labels]].sum())
    return KMedoidsResult(labels.astype(np.int64), med, cost, n_iter)


@dataclass
class TIKMeansResult:
    """Output of :func:`ti_kmeans`.

    labels : ``(n,)``
    prototypes : ``(K, H, W)`` invariant means of the clusters
    objective : per iteration, sum over samples of the smallest aligned squared distance
        (smoothed, unit-norm images, as kappa^max measures it), of the best start
    n_iter : iterations of the best start
    """

    labels: np.ndarray
    prototypes: np.ndarray
    objective: list[float] = field(default_factory=list)
    n_iter: int = 0


def ti_kmeans(
    X: Any,
    n_clusters: int,
    rng: np.random.Generator,
    beta: float = 20.0,
    normalization: str = "unit",
    sigma: float = 2.0,
    search: SearchSettings = SearchSettings(),
    mean_settings: MeanSettings = MeanSettings(),
    iterations: int = 10,
    n_init: int = 1,
    kmax0: KappaMaxResult | None = None,
    group: SE2 = SE2(),
) -> TIKMeansResult:
    """Transformation-invariant K-means (DTI paper, eq. 2) with SE(2) alignments.

    Parameters
    ----------
    X : ``(n, H, W)`` images
    n_clusters : K
    rng : draws the initial prototypes (K distinct samples) of every start
    beta, normalization, sigma, search : the kappa^max search that aligns prototypes to images
    mean_settings : Algorithm 1 settings of the prototype update
    iterations : maximum assignment/update rounds per start (stops when labels repeat)
    n_init : starts; the one with the lowest final objective is returned
    kmax0 : kappa^max of ``X`` with itself, if already computed: the first assignment of a
        start (prototypes = samples) is then read from it instead of searched again

    Returns
    -------
    TIKMeansResult
    """
    n = X.shape[0]
    if not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be in 1..{n}, got {n_clusters}")
    best: TIKMeansResult | None = None
    for _ in range(n_init):
        res = _ti_kmeans_once(
            X, n_clusters, rng, beta, normalization, sigma, search, mean_settings, iterations,
            kmax0, group,
        )  # fmt: skip
        if best is None or res.objective[-1] < best.objective[-1]:
            best = res
    return best


def _ti_kmeans_once(
    X: Any,
    K: int,
    rng: np.random.Generator,
    beta: float,
    normalization: str,
    sigma: float,
    search: SearchSettings,
    mean_settings: MeanSettings,
    iterations: int,
    kmax0: KappaMaxResult | None,
    group: SE2,
) -> TIKMeansResult:
    """One start of :func:`ti_kmeans` (prototypes: K random samples)."""
    n = X.shape[0]
    idx = np.sort(rng.choice(n, K, replace=False))
    P = X[idx]
    if kmax0 is not None:
        sq, params = to_numpy(kmax0.sqdist)[idx], to_numpy(kmax0.params)[idx]
    else:
        sq, params = _align(P, X, beta, normalization, sigma, search, group)
    labels, objective, it, converged = None, [], 0, False
    for it in range(1, iterations + 1):  # noqa: B007 (reported after the loop)
        new = np.argmin(sq, axis=0)
        objective.append(float(sq[new, np.arange(n)].sum()))
        if labels is not None and np.array_equal(new, labels):
            converged = True
            break
        labels = new
        P = _update(X, P, labels, params, sq, mean_settings, group)
        sq, params = _align(P, X, beta, normalization, sigma, search, group)
    if not converged:  # the last update moved the prototypes: assign to them once more
        labels = np.argmin(sq, axis=0)
        objective.append(float(sq[labels, np.arange(n)].sum()))
    return TIKMeansResult(labels.astype(np.int64), to_numpy(P), objective, it)


def _align(
    P: Any,
    X: Any,
    beta: float,
    normalization: str,
    sigma: float,
    search: SearchSettings,
    group: SE2,
) -> tuple[np.ndarray, np.ndarray]:
    """Aligned squared distances ``(K, n)`` and params ``(K, n, 3)`` (X[i] o tau ~ P[k])."""
    km = kappa_max(P, X, beta, normalization, group, search, sigma=sigma)
    return to_numpy(km.sqdist), to_numpy(km.params)


def _update(
    X: Any,
    P: Any,
    labels: np.ndarray,
    params: np.ndarray,
    sq: np.ndarray,
    mean_settings: MeanSettings,
    group: SE2,
) -> Any:
    """Invariant mean of every cluster; an empty cluster takes the worst-fitted sample."""
    P = P.copy()
    K = P.shape[0]
    fit = sq[labels, np.arange(X.shape[0])]
    for k in range(K):
        members = np.flatnonzero(labels == k)
        if members.size == 0:
            worst = int(np.argmax(fit))
            P[k] = X[worst]
            fit[worst] = -np.inf
            continue
        res = invariant_mean(
            X[members], np.ones(members.size), params[k, members], mean_settings, group
        )
        P[k] = res.mean
    return P
