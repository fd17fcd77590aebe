"""The one kNN type of the package (:class:`KnnResult`) and what is done to kNN lists alone.

A kNN result holds three arrays over the n samples j and their k neighbours m:

- ``indices`` ``(n, k)``: the samples i nearest to j under kappa^max, nearest first; j itself
  is its own nearest (distance 0) and comes first;
- ``sqdist`` ``(n, k)``: their kappa^max squared distances ||v_j - v_i o tau||^2 (unit norm);
- ``params`` ``(n, k, n_params)``: the kappa^max alignment tau of v_i onto v_j.

They come from the kNN modes of kappa^max or from a dense result (:func:`knn_from_dense`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

from ia_stages.core.groups import SE2
from ia_stages.settings.tree import check_setting


@dataclass
class KnnResult:
    """Each sample's k nearest under kappa^max, itself first: the one kNN type of the package.

    Made by the kNN modes of :func:`ia_stages.kmax.kappa_max` (``k=``), by
    :func:`knn_from_dense` from a dense result, and by :func:`symmetrize`; read by sparse
    attention and by the graph read-outs, so n x n matrices are never needed downstream.

    Parameters
    ----------
    indices : ndarray of int64, shape (n, k)
        ``indices[i, 0] == i``, then the k - 1 nearest others by d2; -1 marks a missing entry
        (after :func:`symmetrize`), whose d2 is +inf
    sqdist : ndarray of shape (n, k)
        the squared distance, as :attr:`ia_stages.kmax.KappaMaxResult.sqdist`
    params : ndarray of shape (n, k, n_params) or None, default None
        optimal tau with ``X[indices[i, m]] o tau ~ X[i]``, as the dense result's
        ``params[i, indices[i, m]]``; None when not known
    value : ndarray of shape (n, k) or None, default None
        ``kappa^max(X[i], X[indices[i, m]]) = exp(-beta sqdist)``; None when no bandwidth was
        given
    pairs_scanned : int, default 0
        pairs i < j the scan scored (n (n - 1) / 2, twice where a second scan ran)
    pairs_refined : int, default 0
        distinct pairs refined
    second_scan : int, default 0
        samples whose pool was too small for the margin, so that a second scan ran
    margin_used : float, default 0.0
        the margin these lists needed: the most that a listed pair's scan d2 lies above its
        sample's k-th d2 (in units of ``knn_margin``). Above ``knn_margin`` (a warning says
        so), such a pair was found by luck and others may be missing: raise it
    seconds : dict, default {}
        wall-clock seconds spent in 'refine' and in all ('total'), and the process's CPU
        seconds (all threads) in each ('cpu_refine', 'cpu_total')

    Examples
    --------
    >>> import numpy as np
    >>> from ia_stages import kappa_max
    >>> X = np.zeros((4, 16, 16)); X[:, 4:12, 6:10] = 1.0
    >>> X[1] = np.rot90(X[0]); X[2:, 3:6, 3:6] = 1.0
    >>> knn = kappa_max(X, k=2, beta=2.0)
    >>> knn.indices[:, 0].tolist(), knn.indices.shape
    ([0, 1, 2, 3], (4, 2))
    >>> knn.to_sparse().shape
    (4, 4)
    """

    indices: np.ndarray
    sqdist: np.ndarray
    params: np.ndarray | None = None
    value: np.ndarray | None = None
    pairs_scanned: int = 0
    pairs_refined: int = 0
    second_scan: int = 0
    margin_used: float = 0.0
    seconds: dict = field(default_factory=dict)

    def to_sparse(self, field: str = "value", include_self: bool = True) -> scipy.sparse.csr_array:
        """The lists as an ``(n, n)`` sparse matrix.

        Row i holds sample i's list, so the matrix is not symmetric in general.

        Parameters
        ----------
        field : {'value', 'sqdist'}, default 'value'
            what entry ``[i, indices[i, m]]`` holds
        include_self : bool, default True
            False leaves out the diagonal (column 0)

        Returns
        -------
        scipy.sparse.csr_array
            of shape (n, n)
        """
        if field not in ("value", "sqdist"):
            raise ValueError(f"field must be 'value' or 'sqdist', got {field!r}")
        if getattr(self, field) is None:
            raise ValueError(f"field {field!r}: this kNN result has no {field} (no bandwidth)")
        n, k = self.indices.shape
        first = 0 if include_self else 1
        data = getattr(self, field)[:, first:]
        rows = np.repeat(np.arange(n), k - first)
        return scipy.sparse.csr_array(
            (data.ravel(), (rows, self.indices[:, first:].ravel())), shape=(n, n)
        )

    @classmethod
    def itself_only(cls, n: int, k: int, n_params: int) -> KnnResult:
        """Lists of width ``k`` holding only each sample itself in column 0 (d2 = 0, kappa = 1,
        identity transform); the kNN modes fill columns 1..k-1.

        Parameters
        ----------
        n : int
            samples
        k : int
            list width
        n_params : int
            parameters of a pose
        """
        indices = np.zeros((n, k), dtype=np.int64)
        indices[:, 0] = np.arange(n)
        return cls(indices, np.zeros((n, k)), np.zeros((n, k, n_params)), np.ones((n, k)))

    def head(self, width: int) -> KnnResult:
        """The lists cut to their first ``width`` entries (the ``width`` nearest, itself
        first): what a dense result's :func:`knn_from_dense` with ``width`` gives when the
        lists are exact.

        Parameters
        ----------
        width : int
            1..k
        """
        if not 1 <= width <= self.k:
            raise ValueError(f"k: lists of {self.k} neighbours cannot give {width}")
        cut = [None if a is None else a[:, :width] for a in (self.params, self.value)]
        return KnnResult(self.indices[:, :width], self.sqdist[:, :width], *cut)

    @property
    def n(self) -> int:
        """Number of samples (rows)."""
        return int(self.indices.shape[0])

    @property
    def k(self) -> int:
        """Width of the lists (the sample itself included)."""
        return int(self.indices.shape[1])


def knn_from_dense(sqdist: Any, k: int, params: Any | None = None) -> KnnResult:
    """The k nearest of every column of a dense squared-distance matrix ``(n, n)``.

    Column j lists itself first (ties of distance 0 to other samples are broken in its
    favour), then the others by increasing distance (stable: equal distances by index).
    ``params`` ``(n, n, n_params)``, kappa^max's alignments (params[j, i] aligns v_i onto
    v_j), are gathered alongside when given.
    """
    D = np.array(sqdist, dtype=float)
    n = D.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n (n={n}), got {k}")
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, -np.inf)  # self first
    idx = np.argsort(D, axis=1, kind="stable")[:, :k]
    np.fill_diagonal(D, 0.0)
    rows = np.arange(n)[:, None]
    sq = np.maximum(D[rows, idx], 0.0)
    P = None if params is None else np.asarray(params)[rows, idx]
    return KnnResult(idx.astype(np.int64), sq, P)


def symmetrize(knn: KnnResult, symmetry: str) -> KnnResult:
    """Mutual or symmetrised (union) kNN lists; 'none' returns ``knn`` unchanged.

    Missing entries are marked by index -1 and distance +inf (they get weight 0). With
    'union', a neighbour i added to j's list because j is among i's k nearest carries the
    distance and the inverted alignment of that pair (known from i's list).
    """
    if symmetry == "none":
        return knn
    check_setting("attention.symmetry", symmetry)
    n, k = knn.indices.shape
    member = {(int(j), int(i)): m for j in range(n) for m, i in enumerate(knn.indices[j])}
    if symmetry == "mutual":
        idx = knn.indices.copy()
        sq = knn.sqdist.copy()
        for j in range(n):
            for m, i in enumerate(knn.indices[j]):
                if (int(i), j) not in member:
                    idx[j, m], sq[j, m] = -1, np.inf
        return KnnResult(idx, sq, None if knn.params is None else knn.params.copy())

    extra: list[list[tuple[int, float, Any]]] = [[] for _ in range(n)]
    for i in range(n):
        for m, j in enumerate(knn.indices[i]):
            if (int(j), i) not in member:
                p = None if knn.params is None else knn.params[i, m]
                extra[int(j)].append((i, float(knn.sqdist[i, m]), p))
    width = k + max(len(e) for e in extra)
    idx = np.full((n, width), -1, dtype=np.int64)
    sq = np.full((n, width), np.inf)
    P = None
    if knn.params is not None:
        P = np.zeros((n, width, knn.params.shape[-1]))
        P[:] = SE2().identity(1, np)[0] if knn.params.shape[-1] == 3 else 0.0
    idx[:, :k], sq[:, :k] = knn.indices, knn.sqdist
    if P is not None:
        P[:, :k] = knn.params
    inv = SE2().inverse if knn.params is not None and knn.params.shape[-1] == 3 else None
    for j, row in enumerate(extra):
        for m, (i, d, p) in enumerate(row):
            idx[j, k + m], sq[j, k + m] = i, d
            if P is not None and inv is not None:
                P[j, k + m] = inv(p[None])[0]
    return KnnResult(idx, sq, P)
