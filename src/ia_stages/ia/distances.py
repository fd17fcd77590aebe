"""kappa^max under a settings tree: the kernel, smoothing, group and search of one run.

Every kappa^max that Invariant Attention computes (each iteration's, the class averages',
the poses') is one of these calls, so that a tree fixes them all: :func:`kmax` (every pair,
or one set of images against another), :func:`knn_distances` (the kNN path) and
:func:`sample_sqdist` (the kNN path's sample).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.groups import group_of
from ia_stages.kmax import KappaMaxResult, KnnResult, kappa_max
from ia_stages.kmax.candidates import listed_candidates
from ia_stages.readout.graph import KnnDistances, sample_indices
from ia_stages.readout.graph import sample_sqdist as sample_pairs
from ia_stages.settings.path import first_pass_search
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings
from ia_stages.settings.sizing import knn_features, knn_width
from ia_stages.settings.tree import Settings


def kmax(V: Any, s: Settings, U: Any = None, progress: Any = None) -> KappaMaxResult:
    """kappa^max of ``V`` with itself (``U`` None) or of ``U`` against ``V`` under the tree's
    kernel (beta, normalization, sigma), group and search.

    Example
    -------
    >>> km = kmax(images, Settings())  # doctest: +SKIP
    """
    args = (V,) if U is None else (U, V)
    return kappa_max(
        *args,
        beta=s.beta,
        normalization=s.normalization,
        group=group_of(s),
        settings=s.search,
        sigma=s.sigma,
        progress=progress,
    )


def knn_search(s: Settings) -> SearchSettings:
    """The per-pair search of the kNN path's candidate pairs: ``search`` (``path.search``
    'ia', the default) or the exact preset ('exact')."""
    return EXACT_SEARCH if s.path.search == "exact" else s.search


def knn_sample_search(s: Settings) -> SearchSettings:
    """The per-pair search of the kNN path's sample: the first pass's screen
    (``path.sample_search`` 'screen') or :func:`knn_search` ('exact').

    Example
    -------
    >>> knn_sample_search(Settings()) == SearchSettings(memory_mb=EXACT_SEARCH.memory_mb)
    True
    """
    if s.path.sample_search == "exact":
        return knn_search(s)
    return first_pass_search(knn_search(s), s.path.features)


def later_candidates(s: Settings, previous: KnnResult | None) -> np.ndarray | None:
    """The candidate pairs of an iteration after the input's: the ``previous`` lists'
    neighbours (each sample's own place left out) with ``path.later_candidates`` 'lists',
    else None (found in invariant-feature space).

    Example
    -------
    >>> knn = KnnResult.itself_only(3, 2, 3)
    >>> knn.indices[:, 1] = [2, 2, 0]
    >>> later_candidates(Settings(), knn).tolist()
    [[2], [2], [0]]
    """
    if previous is None or s.path.later_candidates != "lists":
        return None
    return listed_candidates(previous)


def sample_sqdist(V: Any, pick: np.ndarray, s: Settings) -> np.ndarray:
    """``(m, m)`` kappa^max squared distances among the images ``V[pick]`` by
    :func:`knn_sample_search` (the kNN path's sample,
    :class:`~ia_stages.readout.graph.KnnDistances`)."""
    return sample_pairs(
        V, pick, s.beta, s.normalization, group_of(s), knn_sample_search(s), s.sigma
    )


def knn_distances(
    V: Any, s: Settings, seed: int = 0, progress: Any = None, previous: KnnResult | None = None
) -> KnnDistances:
    """kappa^max of ``V`` by the kNN path: every sample's :func:`~ia_stages.settings.
    knn_width` nearest (:func:`ia_stages.kmax.kappa_max` with ``mode='candidates'``) and the
    all-pairs kappa^max among ``path.sample_size(n)`` samples drawn with ``seed``; never an
    n x n array.

    Parameters
    ----------
    V : ``(n, H, W)`` features (numpy or cupy)
    s : Settings
        The run's tree (neighbour counts sized or not: the lists are sized without K).
    seed : int, default 0
        Seed of the sample.
    progress : callable or None, default None
        Called with the number of candidate pairs refined.
    previous : KnnResult or None, default None
        The previous iteration's lists (None for the input images): with
        ``path.later_candidates`` 'lists' their indices are the candidates.

    Returns
    -------
    KnnDistances

    Example
    -------
    >>> s = Settings.from_dict({"path": {"mode": "candidates"}})
    >>> kd = knn_distances(V, s)  # doctest: +SKIP
    """
    n = int(V.shape[0])
    knn = kappa_max(
        V,
        k=knn_width(s, n),
        mode="candidates",
        beta=s.beta,
        normalization=s.normalization,
        group=group_of(s),
        settings=knn_search(s),
        sigma=s.sigma,
        features=knn_features(s, n),
        progress=progress,
        candidates=later_candidates(s, previous),
    )
    pick = sample_indices(n, s.path.sample_size(n), seed)
    return KnnDistances(knn, pick, sample_sqdist(V, pick, s))
