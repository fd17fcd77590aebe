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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2, AffineFamily, check_lists_group, has_mirror
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.validation import check_images, constant_images
from ia_stages.kmax.compile_ahead import search_compiled_ahead, worth_compiling_ahead
from ia_stages.kmax.features import feature_neighbours, invariant_features
from ia_stages.kmax.knn import _check_k, _Lists
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.polar import (
    angle_synthesis,
    centroid_translation,
    centroids,
    scan_spectra,
)
from ia_stages.kmax.refine import sumsq_rows
from ia_stages.kmax.rings import lattice_pair_scores, pair_joint_peaks, pair_peaks
from ia_stages.kmax.search import (
    FLOATS,
    REFINE_BATCH,
    _pair_layout,
    _refine_candidates,
    centre_offsets,
    lattice_neighbours,
    mirrored_centroids,
    mirrored_lattice,
    settle,
    settle_check,
    settle_mirrored,
)
from ia_stages.kmax.settle import settle_bytes
from ia_stages.settings.features import DEFAULT_FEATURES, FeatureSettings
from ia_stages.settings.path import first_pass_search
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings

COLUMN_BLOCK = 256  # moving images whose lattice spectra are held at once (the exact preset's
# lattice: 0.57 MB per 40 x 40 image; per-pair results do not depend on it)
PAIR_BATCH = 256  # pairs scored at once (each holds the spectra of all its centres)
# on a GPU: larger launches (its memory holds them; one thread per pair needs many pairs)
GPU_COLUMN_BLOCK = 4096
GPU_PAIR_BATCH = 16384
# the refinement's targets per pixel: two float32 coordinates and a float64 value, laid out
# 2 + 1/4 times (36 bytes), and the chunk's own images, their floored and half-resolution
# copies while its layout is made (18)
TARGET_BYTES_PER_PIXEL = 54
MERGE_BATCH = 500_000  # refined pairs merged into the lists at once
SPECTRA_BATCH = 4096  # images whose centroid ring spectra are made at once (bounds memory)


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
    once), :func:`refine_rows` over all rows, :func:`knn_from_pairs`, and with
    ``features.n_expand`` the expansion pass (:func:`expansion_candidates`, refined, merged).
    A run sharded into row blocks (the pipeline's ``knn`` stage) gives the same lists. On a
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
    pairs = refine_rows(Un, cand, range(n), k, beta, group, first, sigma, progress)
    result = knn_from_pairs(n, k, pairs, beta, uu, group)
    clock.lap("refine")
    if has_second_pass(settings, features, k):
        skip = pairs.a * n + pairs.b
        # a first-pass pair outside both its images' lists stays beaten by their k - 1 listed
        # pairs (the second pass only lowers a d2): the lists' pairs alone are kept
        pairs = pairs.subset(np.isin(skip, listed_keys(result), assume_unique=True))
        more = second_pass(
            Un, result, skip, range(n), beta, group, settings, sigma, features, progress
        )
        refined = skip.size + int(np.count_nonzero(~np.isin(more.a * n + more.b, skip)))
        del skip
        result = knn_from_pairs(n, k, CandidatePairs.concat([pairs, more]), beta, uu, group)
        result.pairs_scanned = result.pairs_refined = refined
        clock.lap("expand")
    result.seconds = clock.totals()
    return result


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


def refine_rows(
    Un: np.ndarray,
    cand: np.ndarray,
    rows: range,
    k: int,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    progress: Callable[[int], None] | None = None,
) -> CandidatePairs:
    """The exact refinement of one row block: every candidate pair (a, b), a < b, whose later
    image b lies in ``rows``.

    A pair is (i, j) for j in i's list, whichever of the two proposed it, refined as
    (min, max) with the later image warped onto the earlier, as the all-pairs search does.
    Each pair belongs to exactly one block (its b's), so the blocks' pairs
    (:meth:`CandidatePairs.concat`) are the unsharded run's, each refined once; and a block
    needs the lattice spectra of its own rows only.

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`prepared_images`
    cand : ``(n, c)`` every sample's :func:`candidate_lists`
    rows : the block's samples
    k, beta, group, settings, sigma, progress : as :func:`kappa_max_candidates`

    Returns
    -------
    CandidatePairs

    Example
    -------
    >>> cand = candidate_lists(Un, invariant_features(Un, fs), fs)  # doctest: +SKIP
    >>> pairs = refine_rows(Un, cand, range(0, 10), 3)  # doctest: +SKIP
    """
    n = Un.shape[0]
    if cand.shape[0] != n:
        raise ValueError(f"cand: lists of {cand.shape[0]} samples, images have n={n}")
    return refine_pairs(
        Un, np.arange(n), cand, k, beta, group, settings, sigma, progress, moving=rows
    )


def refine_pairs(
    Un: np.ndarray,
    owner: np.ndarray,
    cand: np.ndarray,
    k: int,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    progress: Callable[[int], None] | None = None,
    skip: np.ndarray | None = None,
    moving: range | None = None,
) -> CandidatePairs:
    """The exact refinement of the pairs (owner[i], cand[i, j]), each pair once as (min, max).

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`prepared_images`; a cupy array runs the scan and the
        refinement on the GPU (the refinement's layout of all the pairs' images made once)
    owner : ``(m,)`` sample indices
    cand : ``(m, c)`` each owner's candidates; entries < 0 and the owner itself are ignored
    k, beta, group, settings, sigma, progress : as :func:`kappa_max_candidates`
    skip : sorted keys ``a * n + b`` (a < b) of pairs already refined, left out
    moving : only the pairs whose later image b lies in this range (None: all)

    Returns
    -------
    CandidatePairs

    Example
    -------
    >>> pairs = refine_pairs(Un, np.arange(3), np.array([[1], [2], [0]]), 2)  # doctest: +SKIP
    """
    check_lists_group(group, "the candidate mode")
    n = Un.shape[0]
    i = np.repeat(owner, cand.shape[1])
    j = cand.ravel()
    ok = (j >= 0) & (j != i)
    i, j = i[ok], j[ok]
    key = pair_keys(i, j, n)
    if moving is not None:
        later = key % n
        key = key[(later >= moving.start) & (later < moving.stop)]
        del later
    key = np.unique(key)
    del i, j, ok
    if skip is not None and skip.size:
        key = key[~np.isin(key, skip, assume_unique=True)]
    a, b = key // n, key % n  # a < b: the later image b is warped onto a
    del key
    out = CandidatePairs(
        a, b, np.empty(a.size), np.empty((a.size, group.n_params)), np.empty(a.size)
    )
    if k == 1 or a.size == 0:
        return out
    # the images these pairs touch: the scan's spectra and the refinement's layout are made
    # for those alone, in local indices; on the CPU they are read from Un a batch at a time
    # (a copy of nearly all images would cost as much memory as Un itself)
    xp = array_module(Un)
    mirror = has_mirror(group)
    need = np.unique(np.concatenate([a, b]))
    Ul = _Rows(Un, need) if xp is np else (Un if need.size == n else Un[xp.asarray(need)])
    uu = sumsq_rows(Ul, SPECTRA_BATCH)
    scan = _PairScan(Ul, settings, mirror)
    if need.size == n:  # every image: local indices are the sample indices
        la, lb = a, b
    else:
        la, lb = np.searchsorted(need, a), np.searchsorted(need, b)  # a < b keeps la < lb
    width = COLUMN_BLOCK if xp is np else GPU_COLUMN_BLOCK
    if xp is np:
        # on the CPU the targets are laid out once per chunk of images that memory_mb holds
        # (not once per block of moving images: each block's pairs reach most images), and
        # each block's moving images per block
        step = _targets_per_chunk(Ul.shape[1:], settings)
        chunks = [range(f, min(f + step, need.size)) for f in range(0, need.size, step)]
    else:
        # on a GPU the refinement's layout (several copies of each image) of all images, once
        chunks = [range(0, need.size)]
        layout = _pair_layout(Ul, Ul, sigma, settings, mirror)
    check = fixed_check = None
    for chunk in chunks:
        ours = np.flatnonzero((la >= chunk.start) & (la < chunk.stop))
        if ours.size == 0:
            continue
        if xp is np:
            fixed_side = images = None  # the last chunk's layout goes before this one's is made
            fixed_side = _pair_layout(Ul[chunk.start : chunk.stop], Ul[:1], sigma, settings)
            targets = Ul[chunk.start : chunk.stop]
            fixed_check = settle_check(targets, targets[:1], sigma, settings)
        elif check is None:
            check = settle_check(Ul, _with_mirrors(Ul) if mirror else Ul, sigma, settings)
        by_b = ours[np.argsort(lb[ours], kind="stable")]  # one moving image's pairs together
        cols, first = np.unique(lb[by_b], return_index=True)
        bounds = np.r_[first, by_b.size]
        for c0 in range(0, cols.size, width):
            block = cols[c0 : c0 + width]
            sel = by_b[bounds[c0] : bounds[min(c0 + width, cols.size)]]
            starts, scanned = scan.starts(la[sel], lb[sel], block, uu)
            if xp is np:
                moving_side = _pair_layout(Ul[:1], Ul[block], sigma, settings, mirror)
                images = fixed_side.with_moving(moving_side)
                fixed, moving = la[sel] - chunk.start, np.searchsorted(block, lb[sel])
                if fixed_check is not None:
                    V = Ul[block]
                    check = fixed_check.with_moving(_with_mirrors(V) if mirror else V)
            else:
                images, fixed, moving = layout, la[sel], lb[sel]
            n_moving = block.size if xp is np else need.size
            n_plain = settings.n_candidates if mirror else None
            for r in range(0, sel.size, REFINE_BATCH):
                s, part = sel[r : r + REFINE_BATCH], slice(r, r + REFINE_BATCH)
                won = xp.zeros(s.size, dtype=bool)
                p, d2 = _refine_candidates(images, fixed[part], moving[part],
                                           xp.asarray(starts[part]), settings, beta, n_plain,
                                           won if mirror else None)  # fmt: skip
                if check is not None and mirror:  # as the all-pairs search's
                    p, d2, won = settle_mirrored(check, images, fixed[part], moving[part], p,
                                                 d2, won, n_moving, settings, beta)  # fmt: skip
                elif check is not None:
                    p, d2 = settle(check, images, fixed[part], moving[part], p, d2, settings,
                                   beta)  # fmt: skip
                out.params[s] = group.of_mirror_image(to_numpy(p), to_numpy(won))
                out.sqdist[s] = to_numpy(d2)
            out.scanned[sel] = scanned
            if progress is not None:
                progress(int(sel.size))
    return out


def _with_mirrors(V: Any) -> Any:
    """``V`` followed by its mirror images (columns reversed), as the settling check of a
    search with mirror images takes its moving images."""
    xp = array_module(V)
    return xp.concatenate([V, V[..., ::-1]])


def _targets_per_chunk(shape: tuple[int, ...], settings: SearchSettings) -> int:
    """How many images' refinement targets the CPU lays out at once: as many as
    ``settings.memory_mb`` holds at the layout's bytes per pixel (pixel coordinates and value,
    float64, at full resolution twice over — all pixels, and those split at ``full_floor`` —
    and at half resolution), at least one."""
    per_image = TARGET_BYTES_PER_PIXEL * int(np.prod(shape)) + settle_bytes(shape, settings)
    return max(1, int(settings.memory_mb * 2**20 // per_image))


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
       neighbours (:func:`expansion_candidates`), less the pairs in ``skip``, refined with the
       first pass's search; when that is the screen, those whose screened d2 would enter the
       first w places of either image's list (at most its w-th d2) refined again with
       ``settings``.

    :meth:`CandidatePairs.concat` of the first pass and this one keeps each pair's better
    optimum, and :func:`knn_from_pairs` makes the final lists.

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


class _Rows:
    """The images ``Un[need]`` (``need`` sorted sample indices), read from ``Un`` only where
    indexed: a slice or an index array gives those images (a copy of them alone), so that a
    refinement touching nearly all images holds no second copy of them.

    Example
    -------
    >>> rows = _Rows(np.arange(12.0).reshape(6, 1, 2), np.array([1, 4, 5]))
    >>> rows.shape, rows[1:3][:, 0, 0].tolist(), rows[np.array([0, 2])][:, 0, 1].tolist()
    ((3, 1, 2), [8.0, 10.0], [3.0, 11.0])
    """

    def __init__(self, Un: np.ndarray, need: np.ndarray) -> None:
        self.Un, self.need = Un, need
        self.whole = need.size == Un.shape[0]  # need = 0..n-1: Un itself
        self.shape = (need.size, *Un.shape[1:])
        self.dtype = Un.dtype

    def __getitem__(self, at: slice | np.ndarray) -> np.ndarray:
        return self.Un[at] if self.whole else self.Un[self.need[at]]


class _PairScan:
    """The polar scan of chosen pairs (a, b): scores of a's centroid rings against b's rings
    about each lattice centre, and starts by the search's peak rule; with ``mirror`` also
    the starts of b's mirror image, after b's."""

    def __init__(self, Un: Any, settings: SearchSettings, mirror: bool = False) -> None:
        self.Un, self.settings = Un, settings
        self.xp = xp = array_module(Un)
        self.M = settings.n_angles
        n = Un.shape[0]
        self.m = np.concatenate(
            [to_numpy(centroids(Un[s : s + SPECTRA_BATCH])) for s in range(0, n, SPECTRA_BATCH)]
        )
        self.shape = Un.shape[1:]
        lattice = centre_offsets(settings.centre_offset, settings.centre_rings)
        self.offs = lattice
        self.neighbours = lattice_neighbours(lattice)
        self.synthesis = xp.asarray(angle_synthesis(self.M))
        self.interp = interp = settings.interpolation
        self.A = None  # (K, n, 2R): every image's rings about its centroid, made in batches
        for s in range(0, n, SPECTRA_BATCH):
            part = slice(s, min(s + SPECTRA_BATCH, n))
            centre = xp.asarray(self.m[None, part])
            A = scan_spectra(Un[part], centre, self.M, interpolation=interp)[:, :, 0]
            if self.A is None:
                self.A = xp.empty((A.shape[0], n, A.shape[2]))
            self.A[:, part] = A
        self.mirror = mirror
        if mirror:
            self.lattice_f = mirrored_lattice(lattice)
            self.m_f = to_numpy(mirrored_centroids(self.m, self.shape[1]))

    def centroid_sqdist(self, a: np.ndarray, b: np.ndarray, uu: np.ndarray) -> np.ndarray:
        """Coarse d2 ``(m,)`` of pairs (a, b): best rotation about both centroids."""
        xp = self.xp
        R = self.A.shape[2] // 2
        out = np.empty(a.size)
        step = 16 * PAIR_BATCH
        for p in range(0, a.size, step):
            ia, ib = xp.asarray(a[p : p + step]), xp.asarray(b[p : p + step])
            u, v = self.A[:, ia], self.A[:, ib]  # (K, m, 2R)
            re = (u * v).sum(-1)
            im = (u[..., R:] * v[..., :R] - u[..., :R] * v[..., R:]).sum(-1)
            G = xp.stack([re, im], 1).reshape(2 * u.shape[0], -1)  # rows 2k + part
            best = to_numpy((G.T @ self.synthesis).max(1))
            out[p : p + step] = (
                uu[a[p : p + step]] + uu[b[p : p + step]] - 2.0 * (2.0 * np.pi / self.M) * best
            )
        return out

    def starts(
        self, a: np.ndarray, b: np.ndarray, cols: np.ndarray, uu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Starts ``(m, n_candidates, 3)`` (with ``mirror`` ``(m, 2 n_candidates, 3)``: b's,
        then its mirror image's) and scan d2 ``(m,)`` of pairs whose b is among the sorted
        ``cols`` (the lattice spectra of those images alone are computed)."""
        xp = self.xp
        centres = xp.asarray(self.m[None, cols] + self.offs[:, None])
        B = scan_spectra(self.Un[xp.asarray(cols)], centres, self.M, interpolation=self.interp)
        c = self.settings.n_candidates
        sides = 1 + self.mirror
        starts = np.empty((a.size, c * sides, 3))
        scanned = np.empty(a.size)
        batch = PAIR_BATCH if xp is np else GPU_PAIR_BATCH
        for p in range(0, a.size, batch):
            s = slice(p, p + batch)
            ia, ib = a[s], b[s]
            m = ia.size
            scores = xp.empty((m, B.shape[2], self.M), dtype=np.float32)
            jb = np.searchsorted(cols, ib)
            best = np.full(m, -np.inf)
            for side in range(sides):
                if side == 0:
                    theta, best_o = self._peaks(self.A, B, ia, jb, scores, c)
                    m_v = self.m[ib]
                else:
                    # a against the mirror image of b scores as the mirror image of a (its
                    # centroid spectra conjugated, this batch's alone) against b, at the
                    # mirrored centre and the opposite angle: b's lattice spectra are not
                    # copied
                    A_f = self.A[:, xp.asarray(ia)]
                    A_f[..., A_f.shape[2] // 2 :] *= -1.0
                    theta, best_o = self._peaks(A_f, B, np.arange(m), jb, scores, c)
                    theta, best_o = np.mod(-theta, 2 * np.pi), self.lattice_f[best_o]
                    m_v = self.m_f[ib]
                centre = m_v[:, None, :] + self.offs[best_o]
                shift = centroid_translation(theta, self.m[ia], centre, self.shape)
                starts[s, side * c : (side + 1) * c] = np.concatenate([theta[..., None], shift], -1)
                best = np.maximum(best, to_numpy(scores.reshape(m, -1).max(1)).astype(np.float64))
            scanned[s] = uu[ia] + uu[ib] - 2.0 * (2.0 * np.pi / self.M) * best
        return starts, scanned

    def _peaks(
        self, A: Any, B: Any, ia: np.ndarray, jb: np.ndarray, scores: Any, c: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores of pairs (ia[p], jb[p]) (rings ``A`` about the centroids, ``B`` about the
        lattice) into ``scores (m, n_o, M)`` and their ``c`` peaks (theta, centre), by the
        compiled kernels: numba's CPU threads, or CUDA for cupy."""
        m = ia.size
        joint = self.settings.peaks == "joint"
        if self.xp is np:
            lattice_pair_scores(A, B, ia, jb, self.synthesis, scores)
            rows, zero = np.arange(m), np.zeros(m, dtype=np.int64)
            if joint:
                return pair_joint_peaks(scores[:, None], rows, zero, c, self.neighbours)
            return pair_peaks(scores[:, None], rows, zero, c)
        from ia_stages.kmax.cuda import (
            lattice_pair_scores_cuda,
            pair_joint_peaks_cuda,
            pair_peaks_cuda,
        )

        xp = self.xp
        lattice_pair_scores_cuda(A, B, xp.asarray(ia), xp.asarray(jb), self.synthesis, scores)
        rows, zero = xp.arange(m), xp.zeros(m, dtype=np.int64)
        if joint:
            found = pair_joint_peaks_cuda(scores[:, None], rows, zero, c, self.neighbours)
        else:
            found = pair_peaks_cuda(scores[:, None], rows, zero, c)
        return to_numpy(found[0]), to_numpy(found[1])


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
