"""Class averages: every cluster's invariant mean, each member's pose onto it and its distance.

What cryo-EM users call a class average is here the invariant mean (Algorithm 1) of a
cluster's images with equal weights, started from the kappa^max alignment of every member
onto the cluster's medoid. Each member's pose tau_i (v_i o tau_i ~ mu) comes out of the same
optimisation; its distance to the class average is measured after that alignment, on
normalised images as kappa^max measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.core.smoothing import normalize
from ia_stages.core.warp import warp_norm_preserving
from ia_stages.ia.invariant_mean import MeanSettings, invariant_mean
from ia_stages.readout.linkage import cluster_by_distance


@dataclass
class ClassAverages:
    """Output of :func:`class_averages` (K clusters, n samples).

    means : ``(K, H, W)`` the class averages (invariant means of the clusters)
    params : ``(n, n_params)`` pose tau_i with v_i o tau_i ~ means[labels[i]]
    distance : ``(n,)`` distance of v_i o tau_i to its class average, both normalised
    sizes : ``(K,)`` members per cluster
    medoids : ``(K,)`` index of the member the cluster's alignment starts from
    """

    means: np.ndarray
    params: np.ndarray
    distance: np.ndarray
    sizes: np.ndarray
    medoids: np.ndarray


def medoids(sqdist: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Index of every cluster's medoid (least summed kappa^max distance to its members).

    sqdist : ``(n, n)`` squared kappa^max distances; labels : ``(n,)`` in 0..K-1.
    Returns ``(K,)`` sample indices.
    """
    d = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    out = []
    for k in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == k)
        out.append(members[np.argmin(d[np.ix_(members, members)].sum(1))])
    return np.asarray(out, dtype=np.int64)


def class_averages(
    V: Any,
    labels: np.ndarray,
    kmax_params: np.ndarray,
    kmax_sqdist: np.ndarray,
    settings: MeanSettings = MeanSettings(),
    normalization: str = "unit",
    group: SE2 | AffineFamily = SE2(),
) -> ClassAverages:
    """Invariant mean of every cluster of ``V`` and every member's pose and distance.

    Parameters
    ----------
    V : ``(n, H, W)`` images
    labels : ``(n,)`` cluster of every image, 0..K-1
    kmax_params : ``(n, n, n_params)`` kappa^max of ``V``: ``params[i, j]`` aligns v_j onto v_i
    kmax_sqdist : ``(n, n)`` its squared distances (to pick each cluster's medoid)
    settings : Algorithm 1's settings; ``max_images`` is ignored (all members count equally)
    normalization : how images are normalised before the distance ('unit' or 'none')

    Returns
    -------
    ClassAverages
    """
    labels = np.asarray(labels)
    n = V.shape[0]
    if labels.shape != (n,):
        raise ValueError(f"labels must be ({n},), got {labels.shape}")
    settings = replace(settings, max_images=None)
    meds = medoids(kmax_sqdist, labels)
    K = meds.size
    params = np.zeros((n, len(group.param_names)))
    means = []
    for k in range(K):
        members = np.flatnonzero(labels == k)
        start = np.asarray(kmax_params)[meds[k], members]
        res = invariant_mean(V[members], np.ones(members.size), start, settings, group)
        means.append(to_numpy(res.mean))
        params[members] = to_numpy(res.params)
    means = np.stack(means)
    aligned = to_numpy(warp_norm_preserving(V, params, group))
    a = normalize(aligned, normalization).reshape(n, -1)
    m = normalize(means, normalization).reshape(K, -1)[labels]
    distance = np.sqrt(((a - m) ** 2).sum(1))
    sizes = np.bincount(labels, minlength=K)
    return ClassAverages(means, params, distance, sizes, meds)


def threshold_stability(
    sqdist: np.ndarray, threshold: float, linkage: str = "average", factors: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How the read-out changes with its threshold: a stability curve for unlabelled data.

    Parameters
    ----------
    sqdist : ``(n, n)`` squared kappa^max distances of the final features
    threshold : the read-out threshold in use
    factors : multiples of ``threshold`` to try (default 0.25 to 2 in 15 geometric steps, and 1)

    Returns
    -------
    thresholds : ``(m,)``
    n_clusters : ``(m,)`` clusters found at each threshold
    ari : ``(m,)`` adjusted Rand index of each clustering against the one at ``threshold``
    """
    from sklearn.metrics import adjusted_rand_score

    if factors is None:
        factors = np.union1d(np.geomspace(0.25, 2.0, 15), [1.0])
    factors = np.asarray(factors, dtype=float)
    thresholds = threshold * factors
    chosen = cluster_by_distance(sqdist, threshold, linkage)
    preds = [cluster_by_distance(sqdist, t, linkage) for t in thresholds]
    n_clusters = np.array([np.unique(p).size for p in preds])
    ari = np.array([adjusted_rand_score(chosen, p) for p in preds])
    return thresholds, n_clusters, ari
