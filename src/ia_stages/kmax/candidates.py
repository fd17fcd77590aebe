"""The candidate kNN mode of kappa^max: nearest in invariant-feature space, refined exactly.

For n in the tens of thousands the exact kNN mode (:mod:`ia_stages.kmax.knn`) still scans all
n^2 pairs. This mode never does:

1. **Features**: rotation- and translation-invariant features of every image
   (:func:`ia_stages.kmax.features.invariant_features`), O(n).
2. **Candidates**: each image's ``n_candidates`` (c) nearest in feature space
   (:func:`ia_stages.kmax.features.feature_neighbours`), by blocked matrix products.
3. **Coarse filter** (``n_refine`` > 0): the polar scan about the two centroids alone scores
   every candidate pair (one ring correlation, no lattice of centres); each image keeps its
   ``n_refine`` candidates of lowest coarse d2.
4. **Exact refinement of the candidate pairs only**: the polar scan of those pairs alone (the
   same spectra, lattice of centres and peak rule as the all-pairs search) gives their starts,
   the compiled per-pair search (``settings``, the exact preset by default) refines them, and
   each image keeps its k nearest, itself first: a :class:`ia_stages.kmax.KnnResult`.

With ``features.screen`` (the default) step 4 is a cascade: every candidate pair is first
refined by the default search (the screen), and only each image's k nearest by it are refined
again with the exact preset (:func:`second_pass`); each pair keeps the better optimum.

Each candidate pair is refined once (twice where screened and listed) and counts for both of
its images. The lists are exact
wherever every true neighbour is among the candidates of one of the pair's two images;
``bench/knn_graph.py recall`` measures that recall against the all-pairs kappa^max.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2, AffineFamily, has_mirror
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.validation import check_images, constant_images
from ia_stages.kmax.candidate_pairs import (
    CandidatePairs,
    expansion_candidates,
    knn_from_pairs,
    listed_keys,
)
from ia_stages.kmax.compile_ahead import search_compiled_ahead, worth_compiling_ahead
from ia_stages.kmax.features import feature_neighbours, invariant_features
from ia_stages.kmax.knn import _check_k
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.pair_refinement import _PairScan, refine_pairs, refine_rows
from ia_stages.kmax.search import FLOATS
from ia_stages.settings.features import DEFAULT_FEATURES, FeatureSettings
from ia_stages.settings.path import first_pass_search
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings


def kappa_max_candidates(
    X: Any,
    k: int,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
    features: FeatureSettings = DEFAULT_FEATURES,
    candidates: np.ndarray | None = None,
) -> KnnResult:
    """Each sample's k nearest under kappa^max (itself first), refined on candidates only.

    The steps a sharded run takes as separate jobs, here in one call:
    :func:`prepared_images`, :func:`invariant_features` and :func:`candidate_lists` (global,
    once), then :func:`knn_passes`: :func:`first_pass` over all rows, :func:`.knn_from_pairs`,
    and where :func:`has_second_pass` the second pass (:func:`second_pass`: the screened lists
    refined exactly, the expansion's candidates refined), merged. A run sharded into row
    blocks (the pipeline's ``knn`` stage) gives the same lists. On a
    fresh install the search kernel is compiled in a background process while the features
    and candidates are made (:mod:`ia_stages.kmax.compile_ahead`; the time only).

    Parameters
    ----------
    X : ``(n, H, W)`` images; for cupy arrays the features, candidates, scan and refinement
        run on the GPU (the same kernels' CUDA builds), the lists' bookkeeping on the host
    k : list length, the sample included: 1 <= k < n
    beta, normalization, sigma : as :func:`ia_stages.kmax.kappa_max`
    group : :class:`~ia_stages.core.groups.SE2` (default), or SE(2) with mirror images
        (``make_group("se2", mirror=True)``; :func:`~ia_stages.core.groups.lists_group`): the
        features are then mirror invariant, every pair's search takes starts from the scan
        of the later image and of its mirror image (ranked, pruned and refined together, as
        :func:`ia_stages.kmax.search.kappa_max_with_mirrors`), and ``params`` hold the mirror
        flag (:meth:`~ia_stages.core.groups.AffineFamily.of_mirror_image`)
    settings : the per-pair search of the candidate pairs (default the exact preset
        :data:`ia_stages.kmax.EXACT_SEARCH`; ``method`` must be 'polar')
    progress : called with the number of pairs refined after every block
    features : :class:`ia_stages.kmax.features.FeatureSettings`; its ``n_candidates`` (c)
        must be >= k; None sizes it to n (:meth:`~ia_stages.kmax.features.FeatureSettings.sized`)
    candidates : None (the default: each sample's c nearest in invariant-feature space), or
        ``(n, m)`` int sample indices, each sample's candidates given (entries < 0 and the
        sample itself are ignored; :func:`check_candidates`): no features are computed. IA's
        later iterations pass the previous iteration's lists

    Memory: the images (float64), the refinement's targets of as many images as
    ``settings.memory_mb`` holds (on a GPU: the layout of all images), the features
    (n x ``n_dims``), one block of candidate search (``batch`` x n float32), the lattice
    spectra of ``COLUMN_BLOCK`` images and the refined pairs (at most n c); never n^2.

    Returns
    -------
    KnnResult with ``(n, k)`` arrays; ``pairs_scanned`` counts the candidate pairs scored,
    ``seconds`` has 'features', 'candidates', 'refine', 'total' and their 'cpu_' variants.

    Example
    -------
    >>> from ia_stages.data.datasets import make_digits_dataset  # doctest: +SKIP
    >>> res = kappa_max_candidates(X, k=10)  # doctest: +SKIP
    >>> res.indices.shape  # doctest: +SKIP
    (n, 10)
    """
    clock = _Clock()
    xp = array_module(X)
    features = features.sized(int(X.shape[0]), int(k))
    first = first_pass_search(settings, features)
    ahead = candidates is None and worth_compiling_ahead(int(X.shape[0]), xp.__name__)
    with search_compiled_ahead(beta, normalization, group, first, sigma, on=ahead) as ready:
        Un = prepared_images(X, k, sigma, normalization, settings, features)
        n = Un.shape[0]
        uu = (Un**2).reshape(n, -1).sum(1)
        if xp is not np:
            Un = xp.asarray(Un)
        if candidates is None:
            F = invariant_features(Un, features, mirror=has_mirror(group))
            clock.lap("features")
            cand = candidate_lists(Un, F, features, settings, clock=clock)
            del F
        else:
            cand = check_candidates(candidates, n)
        ready()
    result = knn_passes(Un, cand, k, uu, beta, group, settings, sigma, features, progress, clock)
    result.seconds = clock.totals()
    return result


def knn_passes(
    Un: Any,
    cand: np.ndarray,
    k: int,
    uu: np.ndarray,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    features: FeatureSettings = DEFAULT_FEATURES,
    progress: Callable[[int], None] | None = None,
    clock: Any = None,
) -> KnnResult:
    """Every sample's k nearest (itself first) from its candidates: the passes of the
    candidates mode over all rows, in one process.

    :func:`first_pass` over every row, :func:`.knn_from_pairs`, and where
    :func:`has_second_pass`, :func:`second_pass` over those lists, merged with the first
    pass's listed pairs by :func:`.knn_from_pairs`. A run sharded into row blocks (the
    pipeline's ``knn-block``, ``knn-expand`` and ``knn-gather`` jobs) calls the same steps
    per block and gives the same lists; :func:`kappa_max_candidates` and the one-job
    ``knn-whole`` stage call this.

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`prepared_images` (numpy, or cupy: the scan and refinement on
        the GPU)
    cand : ``(n, c)`` every sample's candidates (:func:`candidate_lists`, or given)
    k : list length, the sample included
    uu : ``(n,)`` the squared norms of the prepared images (for ``margin_used``)
    beta, group, settings, sigma, features, progress : as :func:`kappa_max_candidates`
    clock : an internal timer (laps 'refine' and, with a second pass, 'expand')

    Returns
    -------
    KnnResult with ``(n, k)`` arrays; ``pairs_refined`` (and ``pairs_scanned``) counts each
    pair refined once however many passes refined it.

    Example
    -------
    >>> Un = prepared_images(X, 3, features=fs)  # doctest: +SKIP
    >>> cand = candidate_lists(Un, invariant_features(Un, fs), fs)  # doctest: +SKIP
    >>> knn_passes(Un, cand, 3, sumsq_rows(Un), features=fs).indices.shape  # doctest: +SKIP
    (n, 3)
    """
    n = Un.shape[0]
    rows = range(n)
    pairs = first_pass(Un, cand, rows, k, beta, group, settings, sigma, features, progress)
    result = knn_from_pairs(n, k, pairs, beta, uu, group)
    if clock is not None:
        clock.lap("refine")
    if not has_second_pass(settings, features, k):
        return result
    skip = pairs.a * n + pairs.b
    # a first-pass pair outside both its images' lists stays beaten by their k - 1 listed
    # pairs (the second pass only lowers a d2): the lists' pairs alone are kept
    pairs = pairs.subset(np.isin(skip, listed_keys(result), assume_unique=True))
    more = second_pass(Un, result, skip, rows, beta, group, settings, sigma, features, progress)
    refined = skip.size + int(np.count_nonzero(~np.isin(more.a * n + more.b, skip)))
    del skip
    result = knn_from_pairs(n, k, CandidatePairs.concat([pairs, more]), beta, uu, group)
    result.pairs_scanned = result.pairs_refined = refined
    if clock is not None:
        clock.lap("expand")
    return result


def first_pass(
    Un: Any,
    cand: np.ndarray,
    rows: range,
    k: int,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    features: FeatureSettings = DEFAULT_FEATURES,
    progress: Callable[[int], None] | None = None,
) -> CandidatePairs:
    """The first pass of row block ``rows``: :func:`.refine_rows` with the first pass's search
    (:func:`~ia_stages.settings.path.first_pass_search`: the screen with ``features.screen``,
    else ``settings``).

    Parameters
    ----------
    Un, cand : as :func:`knn_passes`
    rows : the block's samples (``range(n)``: all)
    k, beta, group, settings, sigma, features, progress : as :func:`kappa_max_candidates`

    Returns
    -------
    CandidatePairs

    Example
    -------
    >>> pairs = first_pass(Un, cand, range(0, 10), 3)  # doctest: +SKIP
    """
    search = first_pass_search(settings, features)
    return refine_rows(Un, cand, rows, k, beta, group, search, sigma, progress)


def check_candidates(candidates: Any, n: int) -> np.ndarray:
    """Given candidate lists as int64 ``(n, m)``, after checking them (one line naming
    ``candidates``: not 2-D, another number of rows than the n images, no column, not
    integers, an index outside -1..n-1).

    Example
    -------
    >>> check_candidates(np.array([[1], [0], [-1]]), 3).shape
    (3, 1)
    """
    c = np.asarray(to_numpy(candidates))
    if c.ndim != 2 or c.shape[0] != n or c.shape[1] < 1:
        raise ValueError(f"candidates must be (n={n}, m >= 1) sample indices, got {c.shape}")
    if c.dtype.kind not in "iu":
        raise ValueError(f"candidates must be integer sample indices, got dtype {c.dtype}")
    if c.size and (c.min() < -1 or c.max() >= n):
        raise ValueError(f"candidates must be sample indices in 0..{n - 1} (or -1), got "
                         f"{c.min()}..{c.max()}")  # fmt: skip
    return c.astype(np.int64)


def listed_candidates(knn: KnnResult) -> np.ndarray:
    """Each sample's neighbours in the lists of ``knn``, its own (first) place left out:
    ``(n, k - 1)``, the candidate pairs of IA's later iterations on the kNN path.

    Example
    -------
    >>> from ia_stages.kmax.neighbours import knn_from_dense
    >>> sq = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 2.0], [4.0, 2.0, 0.0]])
    >>> listed_candidates(knn_from_dense(sq, 2)).tolist()
    [[1], [0], [1]]
    """
    return np.asarray(knn.indices)[:, 1:]


def has_second_pass(settings: SearchSettings, features: FeatureSettings, k: int) -> bool:
    """Whether the candidates mode runs :func:`second_pass`: to refine the screened lists
    with ``settings`` (when the screen is another search) or to expand them
    (``features.n_expand`` > 0, lists of k > 2)."""
    screened = first_pass_search(settings, features) != settings
    return k > 1 and (screened or (features.n_expand > 0 and k > 2))


def prepared_images(
    X: Any,
    k: int,
    sigma: float = 2.0,
    normalization: str = "unit",
    settings: SearchSettings = EXACT_SEARCH,
    features: FeatureSettings = DEFAULT_FEATURES,
) -> np.ndarray:
    """The images as the candidates mode compares them (smoothed by ``sigma``, normalised),
    float64 on the host, after checking ``k``, ``features`` and the images (one-line errors
    naming the setting: c < k, c >= n, a constant image, a search other than 'polar').

    Example
    -------
    >>> X = np.random.default_rng(0).random((8, 16, 16))
    >>> prepared_images(X, k=3, features=FeatureSettings(n_candidates=4)).shape
    (8, 16, 16)
    """
    k = _check_k(k, X)
    c = features.sized(int(X.shape[0]), k).n_candidates
    if c < k:
        raise ValueError(f"features.n_candidates (c = {c}) must be >= k = {k}")
    if features.n_refine and features.n_refine < k:
        raise ValueError(f"features.n_refine (r = {features.n_refine}) must be 0 or >= k = {k}")
    if c >= X.shape[0]:
        raise ValueError(
            f"features.n_candidates (c = {c}) must be < n = {X.shape[0]} (the number of images)"
        )
    X = check_images(X, "X", dtype=FLOATS)
    if settings.method != "polar":
        raise ValueError(
            f"settings.method must be 'polar' for the candidates mode, got {settings.method!r}"
        )
    X = np.asarray(to_numpy(X), dtype=np.float64)
    constant = constant_images(X)
    if constant.size:
        i = int(constant[0])
        raise ValueError(
            f"X: image {i} is constant (every pixel {float(X[i].flat[0]):g}; {constant.size} "
            "such images): it has no rotation-invariant features for mode='candidates'"
        )
    return smooth_normalize(X, sigma, normalization)


def candidate_lists(
    Un: np.ndarray,
    F: Any,
    features: FeatureSettings = DEFAULT_FEATURES,
    settings: SearchSettings = EXACT_SEARCH,
    rows: range | None = None,
    clock: Any = None,
) -> np.ndarray:
    """Each sample's candidates: its ``features.n_candidates`` nearest in feature space (of
    all n), optionally filtered to the ``n_refine`` of lowest centroid-scan d2.

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`prepared_images` (numpy, or cupy: the scan on the GPU)
    F : ``(n, D)`` :func:`~ia_stages.kmax.features.invariant_features` of ``Un`` (all n:
        its PCA is fitted on all images once)
    features, settings : as :func:`kappa_max_candidates`
    rows : the samples whose lists to make (None: all)
    clock : an internal timer (laps 'candidates', 'filter')

    Returns
    -------
    ``(len(rows), c)`` int64 sample indices, nearest first (c = ``n_refine`` when filtering)

    Example
    -------
    >>> cand = candidate_lists(Un, invariant_features(Un, fs), fs)  # doctest: +SKIP
    """
    n = Un.shape[0]
    c = features.sized(n).n_candidates
    rows = range(0, n) if rows is None else range(rows.start, min(rows.stop, n))
    cand = to_numpy(feature_neighbours(F, c, features.batch, rows=rows))
    if clock is not None:
        clock.lap("candidates")
    if features.n_refine and features.n_refine < c:
        owner = np.arange(rows.start, rows.stop)
        need = np.unique(np.concatenate([owner, cand.ravel()]))
        Ul = Un[array_module(Un).asarray(need)]
        uu = to_numpy((Ul**2).reshape(need.size, -1).sum(1))
        local = np.searchsorted(need, cand.ravel())
        coarse = _PairScan(Ul, settings).centroid_sqdist(
            np.repeat(np.searchsorted(need, owner), c), local, uu
        )
        keep = np.argsort(coarse.reshape(-1, c), axis=1, kind="stable")[:, : features.n_refine]
        cand = np.take_along_axis(cand, keep, 1)
        if clock is not None:
            clock.lap("filter")
    return cand


def second_pass(
    Un: Any,
    knn: KnnResult,
    skip: np.ndarray,
    rows: range,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    features: FeatureSettings = DEFAULT_FEATURES,
    progress: Callable[[int], None] | None = None,
) -> CandidatePairs:
    """The second pass over the first pass's lists, for the pairs whose later image is in
    ``rows`` (a row block; ``range(n)``: all).

    1. With a screened first pass (:func:`first_pass_search` is not ``settings``): every
       pair listed in the first w places refined again with ``settings`` (w =
       ``features.exact_places(k)``; k by default).
    2. With ``features.n_expand`` (x) > 0 and k > 2: each row's x best neighbours of
       neighbours (:func:`.expansion_candidates`), less the pairs in ``skip``, refined with the
       first pass's search; when that is the screen, those whose screened d2 would enter the
       first w places of either image's list (at most its w-th d2) refined again with
       ``settings``.

    :meth:`.CandidatePairs.concat` of the first pass and this one keeps each pair's better
    optimum, and :func:`.knn_from_pairs` makes the final lists.

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`prepared_images` (numpy or cupy)
    knn : the first pass's lists of all n samples (k long, itself first)
    skip : sorted keys ``a * n + b`` (a < b) of the first pass's pairs
    rows : the block's samples
    beta, group, settings, sigma, features, progress : as :func:`kappa_max_candidates`

    Returns
    -------
    CandidatePairs, each pair once with its better optimum

    Example
    -------
    >>> more = second_pass(Un, knn, pairs.a * n + pairs.b, range(n))  # doctest: +SKIP
    """
    n, k = knn.indices.shape
    w = features.exact_places(k)
    screen = first_pass_search(settings, features)
    screened = screen != settings
    parts = []
    if screened:
        listed = knn.indices[:, 1:w]
        exact = refine_pairs(
            Un, np.arange(n), listed, k, beta, group, settings, sigma, progress, moving=rows
        )
        parts.append(exact)
    if features.n_expand and k > 2:
        cand = expansion_candidates(knn, range(n), features.n_expand)
        more = refine_pairs(
            Un, np.arange(n), cand, k, beta, group, screen, sigma, progress, skip, rows
        )
        parts.append(more)
        if screened:
            kth = np.asarray(knn.sqdist, dtype=np.float64)[:, w - 1]
            enter = (more.sqdist <= kth[more.a]) | (more.sqdist <= kth[more.b])
            a, b = more.a[enter], more.b[enter, None]
            parts.append(refine_pairs(Un, a, b, k, beta, group, settings, sigma, progress))
    if not parts:
        return CandidatePairs.none(group.n_params)
    return CandidatePairs.concat(parts)


class _Clock:
    """Wall-clock and CPU seconds per stage."""

    def __init__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.t, self.c = self.t0, self.c0
        self.laps: dict = {}

    def lap(self, name: str) -> None:
        t, c = time.perf_counter(), time.process_time()
        self.laps[name], self.laps[f"cpu_{name}"] = t - self.t, c - self.c
        self.t, self.c = t, c

    def totals(self) -> dict:
        t, c = time.perf_counter(), time.process_time()
        return {**self.laps, "total": t - self.t0, "cpu_total": c - self.c0}
