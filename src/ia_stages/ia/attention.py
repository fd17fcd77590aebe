"""Kernel attention (paper eq. 2.1) and Invariant Attention iterations.

Both build a similarity matrix Gamma, column-normalise it, W[i, j] = Gamma[i, j] / sum_l
Gamma[l, j], and replace feature j by a W[:, j]-weighted mean: the plain mean for kernel
attention, the invariant mean for Invariant Attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2
from ia_stages.core.smoothing import normalize, rbf_kernel
from ia_stages.core.validation import check_images
from ia_stages.ia.invariant_mean import InvariantMeanResult, _invariant_mean
from ia_stages.ia.weights import dense_weights, knn_weights
from ia_stages.kmax import KappaMaxResult
from ia_stages.kmax.neighbours import KnnResult, knn_from_dense, symmetrize
from ia_stages.settings.attention import AttentionSettings, MeanSettings
from ia_stages.settings.sizing import check_attention
from ia_stages.settings.tree import check_setting


def column_normalize(gamma: Any) -> Any:
    """W = Gamma / column sums; every column of W sums to 1. ``(n, n)``."""
    return gamma / gamma.sum(0, keepdims=True)


def attention_weights(X: Any, beta: float, normalization: str = "unit") -> Any:
    """Kernel-attention weights W ``(n, n)`` of features ``X`` ``(n, ...)``.

    RBF kernel on the normalised features, column-normalised.
    """
    flat = normalize(X, normalization).reshape(X.shape[0], -1)
    return column_normalize(rbf_kernel(flat, flat, beta))


def kernel_attention(
    X: Any, beta: float, normalization: str = "unit", iterations: int = 1
) -> tuple[Any, Any]:
    """Iterate kernel attention v_j <- sum_i v_i W_ij with the RBF kernel (eq. 2.1).

    W is the RBF kernel exp(-beta ||v_i - v_j||^2) of the (normalised) features, each column
    divided by its sum. Without invariance KA averages images that merely overlap: it is the
    baseline Invariant Attention is compared with (:doc:`/user-guide/method`).

    Parameters
    ----------
    X : array_like of shape (n, ...)
        features (images ``(n, H, W)`` or points ``(n, d)``)
    beta : float
        RBF bandwidth, > 0; the kernel sees the features after ``normalization``
    normalization : {'unit', 'none'}, default 'unit'
        'unit' scales every feature to unit L2 norm before the kernel (the averages are of
        the features as given)
    iterations : int, default 1
        number of KA steps, >= 0

    Returns
    -------
    features : ndarray of shape (iterations + 1, n, ...)
        features before and after every step
    weights : ndarray of shape (iterations, n, n)
        the W used in every step

    Examples
    --------
    Two well-separated groups of points collapse onto their means:

    >>> import numpy as np
    >>> from ia_stages import kernel_attention
    >>> X = np.array([[0.0, 0.0], [0.2, 0.0], [5.0, 5.0], [5.2, 5.0]])
    >>> feats, W = kernel_attention(X, beta=1.0, normalization="none", iterations=3)
    >>> feats.shape, W.shape
    ((4, 4, 2), (3, 4, 4))
    >>> np.round(feats[-1], 2).tolist()
    [[0.1, 0.0], [0.1, 0.0], [5.1, 5.0], [5.1, 5.0]]
    """
    check_setting("beta", beta)
    check_setting("iterations", iterations)
    check_setting("normalization", normalization)
    X = check_images(X, "X") if getattr(X, "ndim", 3) == 3 else X
    xp = array_module(X)
    feats, weights = [X], []
    for _ in range(iterations):
        cur = feats[-1]
        W = attention_weights(cur, beta, normalization)
        feats.append(xp.tensordot(W.T, cur, 1))
        weights.append(W)
    return xp.stack(feats), xp.stack(weights) if weights else xp.zeros((0,) + (X.shape[0],) * 2)


@dataclass
class InvariantAttentionStep:
    """One Invariant Attention iteration.

    features : ``(n, H, W)`` invariant means, the next features
    weights : ``(n, n)`` W computed from the input features (column-normalised kappa^max, or
        the kNN attention's sparse columns written out densely)
    kmax : kappa^max of the input features
    means : per-column :class:`InvariantMeanResult` (params ``(n, n_params)`` etc.; with kNN
        attention ``(m, n_params)`` for the column's m neighbours)
    neighbours : with kNN attention, every column's neighbours (None for dense W)
    """

    features: Any
    weights: Any
    kmax: KappaMaxResult
    means: list[InvariantMeanResult]
    neighbours: KnnResult | None = None


def invariant_attention_step(
    V: Any,
    kmax: KappaMaxResult,
    init: str = "kmax",
    mean_settings: MeanSettings = MeanSettings(),
    group: SE2 = SE2(),
    columns: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> InvariantAttentionStep:
    """Invariant means of ``V`` for the weights of a given kappa^max (all or some columns).

    Parameters
    ----------
    V : ``(n, H, W)`` current features
    kmax : kappa^max of ``V`` with itself
    init : 'kmax' starts tau_i of column j at the kappa^max alignment of V[i] onto V[j]
        (params[j, i]); 'identity' starts at the identity as in the paper
    columns : indices of the columns j to compute (default all)

    Returns
    -------
    InvariantAttentionStep with ``features`` of shape ``(len(columns), H, W)``.
    """
    check_setting("init", init)
    xp = array_module(V)
    W = column_normalize(kmax.value)
    cols = range(V.shape[0]) if columns is None else columns
    means = []
    for j in cols:
        start = kmax.params[j] if init == "kmax" else None
        means.append(_invariant_mean(V, W[:, j], start, mean_settings, group))
        if progress is not None:
            progress(1)
    feats = xp.stack([m.mean for m in means])
    return InvariantAttentionStep(features=feats, weights=W, kmax=kmax, means=means)


def knn_attention_step(
    V: Any,
    knn: KnnResult,
    weights: Any,
    init: str = "kmax",
    mean_settings: MeanSettings = MeanSettings(),
    group: SE2 = SE2(),
    columns: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[InvariantMeanResult]:
    """Invariant means of the columns of a sparse W: column j aligns only its listed samples.

    Parameters
    ----------
    V : ``(n, H, W)`` current features
    knn : every column's neighbours (``KnnResult``, indices ``(n, width)``
        with -1 for missing entries; ``params`` ``(n, width, n_params)`` the kappa^max
        alignments onto the column, needed for ``init='kmax'``)
    weights : ``(n, width)`` column weights (:func:`~ia_stages.ia.weights.knn_weights`)
    columns : indices of the columns j to compute (default all)

    Returns
    -------
    One :class:`InvariantMeanResult` per column; its ``params`` ``(m, n_params)`` are those
    of the column's m listed samples, in list order.
    """
    check_setting("init", init)
    if init == "kmax" and knn.params is None:
        raise ValueError("init='kmax' needs the kNN list's params (kappa^max alignments)")
    cols = range(knn.n) if columns is None else columns
    means = []
    for j in cols:
        keep = np.flatnonzero(knn.indices[j] >= 0)
        idx = knn.indices[j, keep]
        start = knn.params[j, keep] if init == "kmax" else None
        means.append(_invariant_mean(V[idx], weights[j, keep], start, mean_settings, group))
        if progress is not None:
            progress(1)
    return means


def sparse_neighbours(
    kmax: KappaMaxResult | KnnResult, attention: AttentionSettings, beta: float
) -> tuple[KnnResult, np.ndarray]:
    """The kNN list of a kappa^max result under ``attention`` and its weights
    ``(n, width)`` (``beta``: the kernel's bandwidth, read by ``bandwidth='fixed'``).

    ``kmax``: a dense result (its k nearest per column are taken), or the lists of the
    kNN path (:class:`~ia_stages.kmax.KnnResult`, at least ``attention.k`` wide: its first
    ``attention.k`` entries, the same lists when they are exact)."""
    if isinstance(kmax, KnnResult):
        check_attention(attention, kmax.n)
        if attention.k > kmax.k:
            raise ValueError(
                f"attention.k: {attention.k} neighbours per column, the kNN lists hold {kmax.k}"
            )
        knn = kmax.head(attention.k)
        knn = KnnResult(knn.indices, knn.sqdist, knn.params)
    else:
        check_attention(attention, int(kmax.value.shape[0]))
        knn = knn_from_dense(to_numpy(kmax.sqdist), attention.k, to_numpy(kmax.params))
    knn = symmetrize(knn, attention.symmetry)
    return knn, knn_weights(knn, attention, beta)


def attention_step(
    V: Any,
    kmax: KappaMaxResult | KnnResult,
    attention: AttentionSettings,
    beta: float,
    init: str = "kmax",
    mean_settings: MeanSettings = MeanSettings(),
    group: SE2 = SE2(),
    progress: Callable[[int], None] | None = None,
    columns: Any | None = None,
) -> InvariantAttentionStep:
    """One Invariant Attention iteration of ``V`` ``(n, H, W)`` given its kappa^max: the one
    attention step every entry point (estimator, pipeline ``means`` stage) calls.

    Parameters
    ----------
    V : ``(n, H, W)`` current features
    kmax : kappa^max of ``V`` with itself; with 'knn' attention it may be the kNN lists
        alone (:class:`~ia_stages.kmax.KnnResult`, the pipeline's kNN path): then no n x n
        array is made and ``weights`` is None (the sparse weights are
        :func:`sparse_neighbours`')
    attention : 'dense' (:func:`invariant_attention_step`, every column weighs every sample)
        or 'knn' (:func:`sparse_neighbours` then :func:`knn_attention_step`, each column aligns
        only its listed neighbours; its ``mean_steps``, when not None, replaces
        ``mean_settings.steps``)
    beta : the kernel's bandwidth, read by ``bandwidth='fixed'``
    init : 'kmax' | 'identity'
    mean_settings : Algorithm 1's settings
    progress : called with the number of columns finished
    columns : None (all) or a range of the columns to compute (the pipeline's blocks)

    Returns
    -------
    InvariantAttentionStep
        ``features`` ``(len(columns), H, W)``; ``weights`` the full ``(n, n)`` W.

    Example
    -------
    >>> km = kappa_max(V, beta=20.0)  # doctest: +SKIP
    >>> step = attention_step(V, km, AttentionSettings("knn", 4), 20.0)  # doctest: +SKIP
    """
    if attention.kind == "dense":
        if isinstance(kmax, KnnResult):
            raise ValueError("attention.kind: 'dense' needs the dense kappa^max, not kNN lists")
        return invariant_attention_step(
            V, kmax, init, mean_settings, group, columns=columns, progress=progress
        )
    check_attention(attention, int(V.shape[0]))
    if attention.mean_steps is not None:
        mean_settings = replace(mean_settings, steps=attention.mean_steps)
    knn, w = sparse_neighbours(kmax, attention, beta)
    means = knn_attention_step(
        V, knn, w, init, mean_settings, group, columns=columns, progress=progress
    )
    feats = array_module(V).stack([m.mean for m in means])
    W = None if isinstance(kmax, KnnResult) else dense_weights(knn, w)
    return InvariantAttentionStep(feats, W, kmax, means, knn)
