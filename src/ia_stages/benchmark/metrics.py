"""Clustering metrics and the paper's geometric diagnostics."""

from __future__ import annotations

import numpy as np

# scipy.optimize and sklearn.metrics are imported where they are used: they cost seconds of
# start-up in every pipeline job that imports this module for its numpy-only functions.


def accuracy(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """Clustering accuracy with the best one-to-one matching of clusters to classes (Hungarian).

    Unmatched clusters (more clusters than classes) count as errors.
    """
    # lazy: scipy.optimize, for the accuracy only (the theory and tables jobs load none)
    from scipy.optimize import linear_sum_assignment

    t = np.unique(labels_true, return_inverse=True)[1]
    p = np.unique(labels_pred, return_inverse=True)[1]
    counts = np.zeros((p.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(counts, (p, t), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / t.size)


def nmi(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """Normalised mutual information (arithmetic normalisation, scikit-learn)."""
    from sklearn.metrics import normalized_mutual_info_score  # lazy: scikit-learn, for NMI only

    return float(normalized_mutual_info_score(labels_true, labels_pred))


def ari(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """Adjusted Rand index (scikit-learn)."""
    from sklearn.metrics import adjusted_rand_score  # lazy: scikit-learn, for ARI only

    return float(adjusted_rand_score(labels_true, labels_pred))


def block_diagonality(W: np.ndarray, labels: np.ndarray) -> float:
    """Share of W's mass in the true-class blocks: sum_{label_i = label_j} W_ij / sum W."""
    W = np.asarray(W, dtype=float)
    same = labels[:, None] == labels[None, :]
    return float(W[same].sum() / W.sum())


def max_within_class(dist: np.ndarray, labels: np.ndarray) -> float:
    """max over pairs of one class of ``dist[i, j]`` (e.g. manifold distances d(S_i, S_j)).

    NaN when no class has two samples.
    """
    same = (labels[:, None] == labels[None, :]) & ~np.eye(labels.size, dtype=bool)
    return float(np.max(dist[same])) if same.any() else float("nan")


def feature_norms(X: np.ndarray) -> np.ndarray:
    """L2 norm of every sample of ``X`` ``(n, ...)``."""
    X = np.asarray(X, dtype=float)
    return np.sqrt((X * X).reshape(X.shape[0], -1).sum(1))


def manifold_distances(sqdist_unit: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Manifold distances d(S_i, S_j) (eq. 3.2) of raw features from unit-norm ones.

    With u = a u_hat, v = b v_hat and a norm-preserving group,
    ||u - v o tau||^2 = a^2 + b^2 - 2ab <u_hat, v_hat o tau> and
    <u_hat, v_hat o tau> = 1 - ||u_hat - v_hat o tau||^2 / 2.

    Parameters
    ----------
    sqdist_unit : ``(n, n)`` kappa^max squared distances of the unit-norm features
    norms : ``(n,)`` L2 norms of the raw features
    """
    a, b = norms[:, None], norms[None, :]
    d2 = a * a + b * b - 2 * a * b * (1 - sqdist_unit / 2)
    return np.sqrt(np.maximum(d2, 0.0))
