"""Attention weights: which samples each column of W attends to, and with which weights.

The paper's dense W (every sample, one bandwidth) or sparse weights over each column's kappa^max
nearest samples (:class:`ia_stages.kmax.KnnResult`).
"""

from __future__ import annotations

import numpy as np

from ia_stages.kmax.neighbours import KnnResult
from ia_stages.settings.attention import AttentionSettings


def knn_weights(knn: KnnResult, settings: AttentionSettings, beta: float) -> np.ndarray:
    """Attention weights ``(n, width)`` of every column over its listed neighbours.

    Row j holds W[indices[j, m], j]; each row sums to 1. 'kth' divides the squared distances
    of column j by its k-th neighbour's (the last of its own k; floored at a tiny positive
    value so identical images do not divide by zero); 'fixed' multiplies them by beta.
    """
    sq = np.asarray(knn.sqdist, dtype=float)
    if settings.bandwidth == "kth":
        own = sq[:, : settings.k] if sq.shape[1] >= settings.k else sq
        finite = np.where(np.isfinite(own), own, -np.inf)
        h = np.maximum(finite.max(1, keepdims=True), 1e-12)
        logits = -sq / h
    else:  # 'fixed'
        logits = -beta * sq
    logits = np.where(knn.indices >= 0, logits, -np.inf)
    logits -= logits.max(1, keepdims=True)
    w = np.exp(logits)
    return w / w.sum(1, keepdims=True)


def dense_weights(knn: KnnResult, weights: np.ndarray) -> np.ndarray:
    """The n x n W (W[i, j] = weight of sample i in column j) of sparse column weights."""
    n = knn.n
    W = np.zeros((n, n))
    rows, cols = np.nonzero(knn.indices >= 0)
    np.add.at(W, (knn.indices[rows, cols], rows), weights[rows, cols])
    return W
