"""Class averages: every cluster's invariant mean, each member's pose onto it and its distance.

What cryo-EM users call a class average is here the invariant mean (Algorithm 1) of a
cluster's images with equal weights, started from the kappa^max alignment of every member
onto the cluster's medoid (the member with the least summed kappa^max distance to the others).
Each image's pose and distance are then measured by one kappa^max of the class averages
against the images: the pose tau_i with v_i o tau_i ~ its class average, and the distance
kappa^max measures (smoothed, unit-norm; 0..2, the read-out's units). The estimator's
``cluster_means_``/``poses_``/``distances_`` and ``clusters.csv`` are these.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import group_of
from ia_stages.ia.distances import kmax as kmax_of
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import KappaMaxResult, KnnResult
from ia_stages.settings.tree import Settings


@dataclass
class ClassAverages:
    """Output of :func:`class_averages` (K clusters, n samples).

    means : ``(K, H, W)`` the class averages (invariant means of the clusters)
    params : ``(n, n_params)`` pose tau_i with v_i o tau_i ~ means[labels[i]]
    distance : ``(n,)`` kappa^max distance of v_i to its class average (0..2)
    sizes : ``(K,)`` members per cluster
    medoids : ``(K,)`` index of the member the cluster's alignment starts from
    """

    means: Any
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


def knn_medoids(knn: KnnResult, labels: np.ndarray) -> np.ndarray:
    """Every cluster's medoid from the kNN lists alone (the kNN path has no n x n matrix):
    the member with the most members of its cluster in its list, ties broken by the least
    summed distance to them, then by index. ``(K,)`` sample indices.

    Example
    -------
    >>> knn_medoids(knn, labels)  # doctest: +SKIP
    """
    idx = knn.indices
    ok = idx >= 0
    same = ok & (labels[np.where(ok, idx, 0)] == labels[:, None])
    count = same.sum(1)
    spread = np.where(same, np.sqrt(np.maximum(knn.sqdist, 0.0)), 0.0).sum(1)
    out = []
    for k in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == k)
        order = np.lexsort((members, spread[members], -count[members]))
        out.append(members[order[0]])
    return np.asarray(out, dtype=np.int64)


ALIGN_CHUNK = 2048  # images aligned onto the class averages at once (memory, not results)


def align_to(means: Any, V: Any, settings: Settings, labels: np.ndarray | None = None,
             progress: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Every image's pose onto ``means[labels]`` (the nearest mean when ``labels`` is None).

    Returns ``labels (n,)``, ``params (n, n_params)`` and ``distance (n,)`` from the
    kappa^max of the means ``(K, H, W)`` against ``V`` ``(n, H, W)``, taken ``ALIGN_CHUNK``
    images at a time (the polar scan's memory grows with the images scanned at once; every
    pair's result is its own). With ``labels`` each image is aligned onto its own mean only
    (n pairs, not K n); ``progress`` is called with the number of pairs aligned.

    Example
    -------
    >>> labels, params, distance = align_to(averages.means, V, settings, labels)  # doctest: +SKIP
    """
    if labels is None:
        parts = [
            kmax_of(V[c0 : c0 + ALIGN_CHUNK], settings, U=means, progress=progress)
            for c0 in range(0, V.shape[0], ALIGN_CHUNK)
        ]
        sq = np.concatenate([to_numpy(km.sqdist) for km in parts], 1)  # (K, n)
        labels = np.argmin(sq, axis=0).astype(np.int64)
        cols = np.arange(V.shape[0])
        params = np.concatenate([to_numpy(km.params) for km in parts], 1)[labels, cols]
        return labels, params, np.sqrt(np.maximum(sq[labels, cols], 0.0))
    labels = np.asarray(labels, dtype=np.int64)
    xp = array_module(V)
    params = np.empty((V.shape[0], group_of(settings).n_params))
    sq = np.empty(V.shape[0])
    for k in np.unique(labels):
        members = np.flatnonzero(labels == k)
        for c0 in range(0, members.size, ALIGN_CHUNK):
            idx = members[c0 : c0 + ALIGN_CHUNK]
            km = kmax_of(
                V[xp.asarray(idx)], settings, U=means[int(k) : int(k) + 1], progress=progress
            )
            params[idx], sq[idx] = to_numpy(km.params)[0], to_numpy(km.sqdist)[0]
    return labels, params, np.sqrt(np.maximum(sq, 0.0))


def class_averages(
    V: Any,
    labels: np.ndarray,
    kmax: KappaMaxResult,
    settings: Settings,
    progress: Any = None,
) -> ClassAverages:
    """Invariant mean of every cluster of ``V`` and every member's pose and distance.

    Parameters
    ----------
    V : ``(n, H, W)`` images (numpy or cupy)
    labels : ``(n,)`` cluster of every image, 0..K-1
    kmax : kappa^max of ``V`` with itself: ``params[i, j]`` aligns v_j onto v_i, ``sqdist``
        picks each cluster's medoid. On the kNN path a
        :class:`~ia_stages.readout.graph.KnnDistances`: :func:`knn_medoids` picks the medoids
        and one kappa^max of each medoid against its members gives the starts
    settings : :class:`~ia_stages.settings.Settings`: Algorithm 1's ``mean`` (its
        ``max_images`` is ignored: members count equally, at most ``average_members`` of
        them, those nearest the medoid) and the kappa^max of the poses
    progress : called with the number of (average, member) pairs aligned (n in all)

    Returns
    -------
    ClassAverages

    Example
    -------
    >>> avg = class_averages(V, labels, kmax_of(V, settings), settings)  # doctest: +SKIP
    """
    labels = np.asarray(labels)
    n = V.shape[0]
    if labels.shape != (n,):
        raise ValueError(f"labels must be ({n},), got {labels.shape}")
    xp = array_module(V)
    mean = replace(settings.mean, max_images=None)
    lists = getattr(kmax, "knn", None)  # a KnnDistances: the kNN path
    meds = medoids(to_numpy(kmax.sqdist), labels) if lists is None else knn_medoids(lists, labels)
    means = []
    for k, med in enumerate(meds):
        members = np.flatnonzero(labels == k)
        if members.size == 1:
            means.append(V[int(members[0])])
            continue
        idx = xp.asarray(members)
        if lists is None:
            start, d2 = kmax.params[int(med)][idx], kmax.sqdist[int(med)][idx]
        else:  # v_i onto the medoid, for the members only
            onto = kmax_of(V[idx], settings, U=V[int(med) : int(med) + 1])
            start, d2 = onto.params[0], onto.sqdist[0]
        keep = xp.asarray(nearest_members(to_numpy(d2), mean.average_members))
        group = group_of(settings)
        res = invariant_mean(V[idx[keep]], xp.ones(keep.size), start[keep], mean, group)
        means.append(res.mean)
    means = xp.stack(means)
    _, params, distance = align_to(means, V, settings, labels, progress)
    sizes = np.bincount(labels, minlength=meds.size)
    return ClassAverages(means, params, distance, sizes, meds)


def nearest_members(sqdist: np.ndarray, limit: int | None) -> np.ndarray:
    """Positions of the ``limit`` members nearest the medoid (all when ``limit`` is None or
    not smaller), in their original order; equal distances keep the earlier member.

    Example
    -------
    >>> nearest_members(np.array([0.3, 0.0, 0.1, 0.2]), 2)
    array([1, 2])
    """
    if limit is None or sqdist.size <= limit:
        return np.arange(sqdist.size)
    return np.sort(np.argsort(sqdist, kind="stable")[:limit])


def merge_clusters(labels: np.ndarray, averages: ClassAverages, settings: Settings) -> np.ndarray:
    """Join clusters that are sub-styles of one class, judged on their class averages.

    Clusters a and b are joined when each one's class average is the other's nearest and
    d(a, b) <= ``settings.readout.merge`` * (r_a + r_b), with d the kappa^max distance between
    the two class averages and r the mean kappa^max distance of a cluster's members to its
    class average. Only mutual nearest pairs join, in one round, so joins never chain
    (connected components of the ratio graph alone chained 10 digit classes into 3).
    ``merge`` 0 returns ``labels`` unchanged.

    Parameters
    ----------
    labels : ``(n,)`` clusters 0..K-1
    averages : their :class:`ClassAverages` (from :func:`class_averages`)
    settings : :class:`~ia_stages.settings.Settings`

    Returns
    -------
    ``(n,)`` int64 labels 0..K'-1, K' <= K, numbered by first appearance of the old labels

    Example
    -------
    >>> merged = merge_clusters(labels, class_averages(V, labels, km, s), s)  # doctest: +SKIP
    """
    ratio = float(settings.readout.merge)
    K = int(labels.max()) + 1
    if ratio <= 0 or K < 2:
        return np.asarray(labels, dtype=np.int64)
    km = kmax_of(averages.means, settings)
    d = np.sqrt(np.maximum(to_numpy(km.sqdist), 0.0))
    d = 0.5 * (d + d.T)
    spread = np.bincount(labels, averages.distance, K) / np.bincount(labels, minlength=K)
    np.fill_diagonal(d, np.inf)
    nearest = np.argmin(d, axis=1)
    mutual = nearest[nearest] == np.arange(K)
    link = np.zeros((K, K), dtype=bool)
    for a in np.flatnonzero(mutual):
        b = nearest[a]
        link[a, b] = d[a, b] <= ratio * (spread[a] + spread[b])
    _, comp = connected_components(coo_matrix(link), directed=False)
    _, merged = np.unique(comp[labels], return_inverse=True)
    return merged.astype(np.int64)


def cluster_averages(
    V: Any,
    labels: np.ndarray,
    kmax: KappaMaxResult,
    settings: Settings,
    progress: Any = None,
) -> tuple[np.ndarray, ClassAverages]:
    """The final clusters and their class averages: :func:`class_averages`, then, without K
    (``settings.n_clusters`` None: neither a K nor a range of K given), :func:`merge_clusters`
    and the class averages of the joined clusters. The estimator and the pipeline's
    ``classes`` stage both call this.

    Returns ``(labels (n,), ClassAverages)``.
    """
    averages = class_averages(V, labels, kmax, settings, progress)
    if settings.n_clusters is not None or settings.readout.merge <= 0:
        return np.asarray(labels, dtype=np.int64), averages
    merged = merge_clusters(labels, averages, settings)
    if int(merged.max()) == int(labels.max()):
        return merged, averages
    return merged, class_averages(V, merged, kmax, settings, progress)
