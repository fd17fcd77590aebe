"""The refined candidate pairs of the candidates mode and the lists made from them.

:class:`CandidatePairs` holds what one row block (or pass) refines; :meth:`CandidatePairs.concat`
joins blocks and passes, each pair once with its better optimum; :func:`knn_from_pairs` merges
them into each sample's k nearest. The pairs' keys (:func:`pair_keys`, :func:`listed_keys`) and
the neighbours of neighbours that a second pass refines (:func:`expansion_candidates`) are
bookkeeping on those lists alone: nothing here reads an image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.kmax.knn import _Lists
from ia_stages.kmax.neighbours import KnnResult

MERGE_BATCH = 500_000  # refined pairs merged into the lists at once


@dataclass
class CandidatePairs:
    """Candidate pairs a < b refined exactly: what one row block of the candidates mode
    computes, and what :func:`knn_from_pairs` turns into kNN lists.

    a, b : ``(m,)`` int64 sample indices, a < b, each pair once, sorted by (a, b)
    sqdist : ``(m,)`` refined kappa^max squared distance of the pair
    params : ``(m, n_params)`` the alignment of v_b onto v_a (the later image warped onto the
        earlier, as the all-pairs search)
    scanned : ``(m,)`` the pair's polar-scan d2 (for :attr:`KnnResult.margin_used`)
    """

    a: np.ndarray
    b: np.ndarray
    sqdist: np.ndarray
    params: np.ndarray
    scanned: np.ndarray

    def subset(self, keep: np.ndarray) -> CandidatePairs:
        """The pairs where the boolean ``keep`` ``(m,)`` is true."""
        return CandidatePairs(*(getattr(self, f)[keep] for f in _PAIR_FIELDS))

    @classmethod
    def none(cls, n_params: int) -> CandidatePairs:
        """No pairs (``n_params`` alignment parameters each)."""
        return cls(*(np.zeros(0, np.int64) for _ in "ab"), np.zeros(0), np.zeros((0, n_params)),
                   np.zeros(0))  # fmt: skip

    @classmethod
    def concat(cls, parts: list[CandidatePairs]) -> CandidatePairs:
        """The pairs of several row blocks or passes, each pair once, sorted by (a, b): where
        a pair was refined more than once (screened, then exactly) the lower sqdist, on a
        tie the earlier part's (a pair two blocks share is refined identically in both)."""
        a, b = np.concatenate([q.a for q in parts]), np.concatenate([q.b for q in parts])
        if a.size == 0:  # e.g. a row block whose expansion found no new pair
            return cls.none(parts[0].params.shape[1])
        d2 = np.concatenate([q.sqdist for q in parts])
        order = np.lexsort((d2, b, a))
        del d2
        a, b = a[order], b[order]
        first = order[np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])]]
        del a, b, order
        # each field gathered from its parts (no concatenated copy of every field)
        offsets = np.cumsum([0] + [q.a.size for q in parts])
        part = np.searchsorted(offsets, first, side="right") - 1
        mine = [np.flatnonzero(part == p) for p in range(len(parts))]
        local = [first[m] - offsets[p] for p, m in enumerate(mine)]
        fields = []
        for f in _PAIR_FIELDS:
            like = getattr(parts[0], f)
            out = np.empty((first.size, *like.shape[1:]), dtype=like.dtype)
            for q, m, at in zip(parts, mine, local, strict=True):
                out[m] = getattr(q, f)[at]
            fields.append(out)
        return cls(*fields)


_PAIR_FIELDS = ("a", "b", "sqdist", "params", "scanned")


def listed_keys(knn: KnnResult) -> np.ndarray:
    """Sorted keys ``a * n + b`` (a < b) of the pairs in the lists of ``knn``, each once.

    Example
    -------
    >>> knn = KnnResult.itself_only(3, 2, 3)
    >>> knn.indices[:, 1] = [2, 2, 0]
    >>> listed_keys(knn).tolist()
    [2, 5]
    """
    idx = np.asarray(knn.indices)
    n = idx.shape[0]
    i = np.repeat(np.arange(n), idx.shape[1] - 1)
    j = idx[:, 1:].ravel()
    ok = j >= 0
    return np.unique(pair_keys(i[ok], j[ok], n))


def pair_keys(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """The keys ``min * n + max`` of the unordered pairs (i, j) of ``n`` samples: one
    integer per pair, the same for (i, j) and (j, i), sorted as (a, b) with a < b.

    Example
    -------
    >>> pair_keys(np.array([2, 0]), np.array([0, 1]), 3).tolist()
    [2, 1]
    """
    return np.minimum(i, j) * n + np.maximum(i, j)


def expansion_candidates(knn: KnnResult, rows: range, n_expand: int) -> np.ndarray:
    """Each row's ``n_expand`` best neighbours of its neighbours that are not in its list.

    A sample l in the list of one of row i's list members j is ranked by the bound
    min_j d(i, j) + d(j, l) (d = sqrt d2: kappa^max's distance obeys the triangle inequality
    up to the search's tolerance); the lowest are kept. The refined lists of the first pass
    thus propose the pairs the features missed (one step of NN-descent).

    Parameters
    ----------
    knn : the lists of all n samples (itself first)
    rows : the rows to expand
    n_expand : candidates per row, >= 1

    Returns
    -------
    ``(len(rows), n_expand)`` int64 sample indices, -1 where a row has fewer

    Example
    -------
    >>> knn = KnnResult.itself_only(3, 2, 3)  # doctest: +SKIP
    >>> expansion_candidates(knn, range(3), 4).shape  # doctest: +SKIP
    (3, 4)
    """
    idx = np.asarray(knn.indices)
    d = np.sqrt(np.maximum(np.asarray(knn.sqdist, dtype=np.float64), 0.0))
    n = idx.shape[0]
    r = np.arange(rows.start, min(rows.stop, n))
    nb = idx[r, 1:]  # (m, k - 1)
    two = idx[nb, 1:].reshape(r.size, -1)  # (m, (k - 1)^2)
    bound = (d[r, 1:, None] + d[nb, 1:]).reshape(r.size, -1)
    bound[(two < 0) | (nb < 0).repeat(nb.shape[1], 1)] = np.inf
    bound[(two[:, :, None] == idx[r][:, None, :]).any(-1)] = np.inf  # itself, its own list
    key = (np.arange(r.size)[:, None] * n + two).ravel()
    order = np.lexsort((bound.ravel(), key))
    repeat = np.r_[False, key[order][1:] == key[order][:-1]]
    flat = bound.ravel()
    flat[order[repeat]] = np.inf  # each sample once per row, at its best bound
    best = np.argsort(flat.reshape(r.size, -1), axis=1, kind="stable")[:, :n_expand]
    out = np.take_along_axis(two, best, 1)
    out[~np.isfinite(np.take_along_axis(bound, best, 1))] = -1
    return out


def knn_from_pairs(
    n: int,
    k: int,
    pairs: CandidatePairs,
    beta: float,
    uu: np.ndarray,
    group: SE2 | AffineFamily = SE2(),
) -> KnnResult:
    """Every sample's k nearest (itself first) among the refined pairs it belongs to.

    A pair (a, b) counts for both samples: for b with the inverted alignment. The pairs are
    merged in (a, b) order, so equal distances are broken the same way however the pairs were
    sharded. ``uu``: the squared norms of the prepared images (for ``margin_used``).

    Example
    -------
    >>> knn = knn_from_pairs(n, 10, CandidatePairs.concat(blocks), 1.0, uu)  # doctest: +SKIP
    """
    result = KnnResult.itself_only(n, k, group.n_params)
    if k == 1:
        return result
    lists = _Lists(n, k - 1, (group.n_params + 1,))
    order = np.lexsort((pairs.b, pairs.a))
    for s0 in range(0, order.size, MERGE_BATCH):
        s = order[s0 : s0 + MERGE_BATCH]
        a, b, p, sc = pairs.a[s], pairs.b[s], pairs.params[s], pairs.scanned[s]
        info = np.concatenate([np.c_[p, sc], np.c_[group.inverse(p), sc]])
        lists.merge(
            np.concatenate([a, b]), np.concatenate([b, a]),
            np.concatenate([pairs.sqdist[s], pairs.sqdist[s]]), info,
        )  # fmt: skip
    lists.fill(result, beta, uu)
    result.pairs_scanned = result.pairs_refined = int(pairs.a.size)
    return result
