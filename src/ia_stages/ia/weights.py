"""Attention weights: which samples each column of W attends to, and with which weights.

The paper's dense W (every sample, one bandwidth) or sparse weights over each column's kappa^max
nearest samples (:class:`ia_stages.kmax.KnnResult`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ia_stages.kmax.neighbours import SYMMETRIES, KnnResult

ATTENTION_KINDS = ("dense", "knn")
BANDWIDTHS = ("kth", "fixed")


@dataclass(frozen=True)
class AttentionSettings:
    """Which samples each column of W attends to, and with which weights.

    kind : 'dense' is the paper's W = column-normalised kappa^max (every sample, one bandwidth
        beta); 'knn' lets column j attend only to its k nearest samples under kappa^max
    k : neighbours per column, the column itself included (knn only); 1 <= k < n
    bandwidth : knn only; 'kth' weights neighbour i of j by exp(-d2_ij / d2_j(k)) with d2_j(k)
        the squared distance to j's k-th neighbour (adaptive mean shift); 'fixed' uses
        exp(-beta d2_ij), the dense kernel restricted to the k nearest
    symmetry : knn only; 'none' keeps j's own k nearest; 'mutual' keeps i only if j is also
        among i's k nearest; 'union' adds i when j is among i's k nearest (the columns then
        attend to up to 2k samples)
    mean_steps : None, or the Algorithm 1 steps of every knn column's mean (instead of the
        mean settings' ``steps``); 0 is the weighted mean of the neighbours at their kappa^max
        alignments
    """

    kind: str = "dense"
    k: int = 10
    bandwidth: str = "kth"
    symmetry: str = "none"
    mean_steps: int | None = None

    def check(self, n: int | None = None) -> None:
        """Raise ValueError naming the field when a setting is out of range (k vs n if given)."""
        if self.kind not in ATTENTION_KINDS:
            raise ValueError(f"attention.kind must be one of {ATTENTION_KINDS}, got {self.kind!r}")
        if self.bandwidth not in BANDWIDTHS:
            raise ValueError(
                f"attention.bandwidth must be one of {BANDWIDTHS}, got {self.bandwidth!r}"
            )
        if self.symmetry not in SYMMETRIES:
            raise ValueError(
                f"attention.symmetry must be one of {SYMMETRIES}, got {self.symmetry!r}"
            )
        if self.mean_steps is not None and (
            isinstance(self.mean_steps, bool)
            or not isinstance(self.mean_steps, int | np.integer)
            or self.mean_steps < 0
        ):
            raise ValueError(f"attention.mean_steps must be None or >= 0, got {self.mean_steps!r}")
        if self.kind == "knn" and (self.k < 1 or (n is not None and self.k >= n and n > 1)):
            raise ValueError(f"attention.k must satisfy 1 <= k < n (n={n}), got {self.k}")


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
    elif settings.bandwidth == "fixed":
        logits = -beta * sq
    else:
        raise ValueError(
            f"attention.bandwidth must be one of {BANDWIDTHS}, got {settings.bandwidth!r}"
        )
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
