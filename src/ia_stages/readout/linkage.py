"""Cluster read-out without the number of classes: group samples whose features lie on the
same transformation manifold (small kappa^max distance) by agglomerative clustering."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from ia_stages.settings.tree import check_setting


def cluster_by_distance(
    sqdist: Any, threshold: float, method: str = "average", n_clusters: int | None = None
) -> np.ndarray:
    """Labels ``(n,)`` (0, 1, ...) from a symmetric squared-distance matrix ``(n, n)``.

    Samples are merged while the ``method`` linkage distance (on sqrt(sqdist)) stays below
    ``threshold``; with ``n_clusters`` the tree is cut into that many clusters instead.
    For Invariant Attention pass kappa^max's ``sqdist`` (manifold distances of unit-norm
    features); for kernel attention the plain squared distances.
    """
    check_setting("readout.linkage", method)
    d = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    n = d.shape[0]
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    d = 0.5 * (d + d.T)
    np.fill_diagonal(d, 0.0)
    Z = linkage(squareform(d, checks=False), method=method)
    if n_clusters is not None:
        labels = fcluster(Z, t=n_clusters, criterion="maxclust")
    else:
        labels = fcluster(Z, t=threshold, criterion="distance")
    _, relabelled = np.unique(labels, return_inverse=True)
    return relabelled.astype(np.int64)
