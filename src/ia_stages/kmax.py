"""The transformation-invariant kernel kappa^max (paper eq. 2.2) for all pairs of images.

kappa^max(u, v) = max over tau_u, tau_v of exp(-beta ||u o tau_u - v o tau_v||^2). For a group
acting by norm-preserving maps this equals max over one relative transform tau of
exp(-beta d2(tau)) with d2(tau) = ||u||^2 + ||v||^2 - 2 <u, v o tau>; we search that form.
Writing the distance through the correlation keeps the norm of v fixed, as it is for continuous
images: content moved off the canvas is not rewarded, and an all-zero image is at d2 = ||v||^2
from every v. ``params[i, j]`` is the tau with
``V[j] o tau ~ U[i]``, so ``params[j, i]`` is its inverse.

The search is global over the full circle of rotations, in two steps:

1. a coarse scan that proposes ``n_candidates`` starting transforms per pair. ``method='polar'``
   (default): every pair's correlation over ``n_angles`` rotations about the image centroids,
   translation fixed by matching the centroids, for a whole block of pairs by two real matrix
   products (:func:`ia_stages.polar.block_scores`), peaks picked by a compiled kernel
   (:mod:`ia_stages.scan_kernel`); cost per pair ~ n_angles * rings.
   ``method='grid'``: ``n_angles`` rotations times every integer shift in a window, all shifts of
   one rotation at once by FFT cross-correlation; cost per pair ~ n_angles * H * W * log.
2. a local refinement of each candidate (sub-degree, sub-pixel) on the Keys-interpolated
   objective: Newton steps with Levenberg-Marquardt damping, compiled and run in parallel over
   pairs for numpy arrays (:mod:`ia_stages.lm_kernel`); Gauss-Newton-LM in array code for cupy.

Memory: the scan works on chunks of rows whose size follows ``memory_mb``, so no n^2 x rotations
array is ever held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from threadpoolctl import threadpool_limits

from .align import pair_cost, refine_alignment
from .backend import array_module, fft_module, to_numpy
from .groups import SE2, wrap_angle
from .kernels import half_resolution, normalize, smooth
from .lm_kernel import SAME_ANGLE, SAME_SHIFT, PairImages, pair_images, search_pairs
from .polar import (
    angle_synthesis,
    block_scores,
    centroid_translation,
    centroids,
    peak_angles,
    scan_spectra,
)
from .scan_kernel import pair_peaks
from .warp import warp

REFINE_TOL = 1e-9  # stop refining a pair once a step gains less (squared distance)
# ... or where Newton's model promises its kernel value less than this fraction of prune_kappa
KAPPA_STOP_FRACTION = 0.1
# ... and the half-resolution stage also where it promises the squared distance less than this
COARSE_D2_STOP = 1e-3
# the half-resolution stage's targets lose their pixels below this fraction of their image's
# largest (digits at sigma 2: 299 -> 128 pixels; the moving images keep theirs): its squared
# distances move by < 5e-3 (digits, random transforms), a tenth of prune_margin; its optima
# only seed the full-resolution refinement
HALF_FLOOR = 1e-2
# with pruning on, a start whose half-resolution cost exceeds its pair's lowest by more than this
# is not evaluated at full resolution. Over all 44,850 pairs of 300 digits (every start refined
# alone), a gap of 0.04 already loses a pair (by 0.27 in kappa, at sigma 1), 0.05 loses none by
# > 1e-4, 0.1 none by > 3e-5; 0.1 skips 28% (sigma 1) / 14% (sigma 2) of the starts.
HALF_GAP = 0.1
# with pruning on, full-resolution starts are ranked and refined on the targets' pixels of at
# least this fraction of their image's largest (digits at sigma 2: 1,119 -> 489 pixels; their
# squared distances move by < 5e-3 as above), and each pair's winner is then refined on all
# pixels, which nearly always finds it converged
FULL_FLOOR = 1e-2


@dataclass(frozen=True)
class SearchSettings:
    """Settings of the global kappa^max search.

    method : 'polar' (rotations about the centroids, by matrix products) or 'grid' (rotations
        times every integer shift, by FFT; the brute-force reference)
    n_angles : rotations in the coarse scan (evenly spaced over 360 degrees)
    max_shift : 'grid' only: largest |shift| per axis in pixels; None = a third of the image size
    coarse_sigma : 'grid' only: total Gaussian smoothing (px) of the images the scan sees; on
        top of kappa^max's own ``sigma`` only sqrt(coarse_sigma^2 - sigma^2) is added, and
        nothing when ``sigma >= coarse_sigma``
    n_candidates : distinct rotations refined per pair
    coarse_iters : > 0 (even image sizes): every candidate is first refined with at most this
        many Newton-LM steps on 2 x 2 block means of the pair (a quarter of the pixels, a
        smoother landscape); candidates are then ordered and pruned by their full-resolution
        cost where that stage ended, and only those that can matter are refined at full
        resolution. 0: order and prune by the scan's starts as they are
    half_sigma : total Gaussian smoothing (px, full resolution) of the images before the 2 x 2
        block means of the half-resolution stage (kappa^max's own ``sigma`` included), so that
        they do not alias badly; candidates are ranked by full-resolution cost either way
    refine_iters : Levenberg-Marquardt iterations per smoothing level
    pair_chunk : pairs processed at once (bounds memory)
    prune_kappa : skip the refinement of a candidate whose kernel value cannot reach
        ``prune_kappa`` nor beat the pair's best candidate, assuming refinement lowers the
        squared distance by at most ``prune_margin`` from the candidate's cost; the
        reported value then errs by less than ``prune_kappa``. 0 refines every candidate.
    prune_margin : that bound, in squared distance of unit-norm images
    memory_mb : working memory of the scan; chunk sizes follow from it
    centre_offset : 'polar' only; > 0 also scans rotations about the 4 points this many pixels
        from each centroid along the image axes, for pairs whose best match is not
        centroid-aligned (5x the scan of the centroids alone)
    knn_margin : kNN mode (``kappa_max(..., k=...)``): the most that refinement is taken to
        lower a pair's coarse scan d2 below, in units of the pair's mean squared norm (1 for
        unit-norm images); every pair whose scan d2 is within it of a sample's k-th refined
        d2 is refined (:mod:`ia_stages.kmax_knn`)
    knn_pool : kNN mode: scan candidates kept per sample (more pairs within the margin cost a
        second scan)
    """

    method: str = "polar"
    n_angles: int = 48
    max_shift: int | None = None
    coarse_sigma: float = 1.0
    n_candidates: int = 3
    coarse_iters: int = 10
    half_sigma: float = 1.0
    refine_iters: int = 30
    pair_chunk: int = 64
    prune_kappa: float = 1e-5
    prune_margin: float = 0.05
    memory_mb: float = 1024.0
    centre_offset: float = 2.0
    knn_margin: float = 0.12
    knn_pool: int = 64

    def __post_init__(self) -> None:
        if self.method not in SEARCH_METHODS:
            raise ValueError(f"search method must be one of {SEARCH_METHODS}, got {self.method!r}")


SEARCH_METHODS = ("polar", "grid")
MB = 2**20
# pairs refined per call: alternating often between the scan's BLAS threads and the
# refinement's numba threads costs ~25% (BLAS threads spin a while after each product)
REFINE_BATCH = 100_000
SCAN_CHUNK_MB = 128  # working set of one chunk of the polar scan (products + scores)


class MemoryBudgetError(ValueError):
    """``memory_mb`` is too small for the smallest chunk of the scan."""


# The brute-force reference (benchmark and tests only): a 1-degree rotation grid, every integer
# shift in the window, four candidates refined to convergence at full resolution.
DENSE_REFERENCE = SearchSettings(
    method="grid",
    n_angles=360,
    n_candidates=4,
    coarse_iters=0,
    refine_iters=60,
    pair_chunk=16,
    prune_kappa=0.0,
)


@dataclass
class KappaMaxResult:
    """kappa^max for a block of pairs.

    value : ``(n_i, n_j)`` kappa^max(U[i], V[j])
    params : ``(n_i, n_j, n_params)`` optimal tau with V[j] o tau ~ U[i]
    sqdist : ``(n_i, n_j)`` ||U[i]||^2 + ||V[j]||^2 - 2 <U[i], V[j] o tau> after smoothing and
        normalisation: the squared distance of a norm-preserving transform
    """

    value: Any
    params: Any
    sqdist: Any


def kappa_max(
    U: Any,
    V: Any | None = None,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 = SE2(),
    settings: SearchSettings = SearchSettings(),
    progress: Callable[[int], None] | None = None,
    sigma: float = 0.0,
    k: int | None = None,
) -> Any:
    """kappa^max between every image of ``U`` and every image of ``V``.

    Parameters
    ----------
    U : ``(n_i, H, W)``
    V : ``(n_j, H, W)`` or None for ``V = U``, in which case only pairs i < j are searched and
        the rest follows by symmetry (value equal, params inverted, diagonal = identity).
        Pass the block of later samples as ``V`` when sharding: the searched direction (V[j]
        warped onto U[i]) then matches the unsharded computation exactly.
    beta : RBF bandwidth in kappa(u, v) = exp(-beta ||u - v||^2)
    normalization : 'unit' scales every image to unit L2 norm before the search; 'none'.
    progress : called with the number of pairs finished after every chunk.
    sigma : Gaussian smoothing (px) applied to every image before normalisation and comparison.
        Smoothing commutes with rotations and translations, so kappa^max stays invariant, while
        band-limiting the images makes Keys interpolation nearly exact: without it, warping an
        image with sharp edges blurs it by a transform-dependent amount, which shows up as a
        ~1e-2 change of ||u - v o tau||^2 under a transform of the inputs (~1e-3 with sigma=1.5).
    k : None: all pairs. An integer (``V`` None, numpy images): the exact kNN mode, each
        sample's k nearest, itself included (:func:`ia_stages.kmax_knn.kappa_max_knn`).

    Returns
    -------
    KappaMaxResult, or a :class:`ia_stages.kmax_knn.KnnResult` with ``(n, k)`` arrays for ``k``
    """
    from .kmax_knn import check_images, kappa_max_knn

    if k is not None:
        if V is not None:
            raise ValueError("k: the kNN mode compares one set of images with itself (V=None)")
        return kappa_max_knn(U, k, beta, normalization, group, settings, progress, sigma)
    check_images(U, V)
    xp = array_module(U)
    symmetric = V is None
    Un = normalize(smooth(U, sigma), normalization)
    Vn = Un if symmetric else normalize(smooth(V, sigma), normalization)
    n_i, n_j = Un.shape[0], Vn.shape[0]
    if symmetric:
        # Always warp the later image onto the earlier one (i < j), as a block (bi < bj) of a
        # sharded run does, so that any blocking gives the same matrix. Sorted by j so that
        # one column's rotated copies are reused.
        ii, jj = np.triu_indices(n_i, k=1)
        order = np.argsort(jj, kind="stable")
        ii, jj = ii[order], jj[order]
    else:
        jj, ii = (a.ravel() for a in np.meshgrid(np.arange(n_j), np.arange(n_i), indexing="ij"))
    params = xp.zeros((n_i, n_j, group.n_params))
    sqdist = xp.zeros((n_i, n_j))
    if settings.method == "polar":
        chunks = _polar_chunks(Un, Vn, ii, jj, group, settings)
    else:
        chunks = _grid_chunks(Un, Vn, ii, jj, group, settings, sigma)
    half = _half_resolution_pair(Un, Vn, sigma, settings)
    search = _search_targets(Un, settings)
    compiled = pair_images(Un, Vn, half, search) if xp is np else None
    for i, j, starts in _batched(chunks, REFINE_BATCH):
        p, d2 = _refine_candidates(
            Un, Vn, i, j, starts, group, settings, beta, half, compiled, search
        )
        params[i, j] = p
        sqdist[i, j] = d2
        if progress is not None:
            progress(i.size)
    if symmetric:
        params[jj, ii] = group.inverse(params[ii, jj])
        sqdist[jj, ii] = sqdist[ii, jj]
    params[..., 0] = wrap_angle(params[..., 0])
    return KappaMaxResult(value=xp.exp(-beta * sqdist), params=params, sqdist=sqdist)


def _batched(chunks: Any, min_pairs: int) -> Any:
    """Concatenate consecutive (i, j, starts) chunks until each holds ``min_pairs`` pairs."""
    held: list = []
    count = 0
    for chunk in chunks:
        held.append(chunk)
        count += chunk[0].size
        if count >= min_pairs:
            yield _joined(held)
            held, count = [], 0
    if held:
        yield _joined(held)


def _joined(chunks: list) -> tuple[Any, Any, Any]:
    if len(chunks) == 1:
        return chunks[0]
    xp = array_module(chunks[0][2])
    i, j, starts = zip(*chunks, strict=True)
    return np.concatenate(i), np.concatenate(j), xp.concatenate(starts)


def _half_resolution_pair(
    Un: Any, Vn: Any, sigma: float, settings: SearchSettings
) -> tuple[Any, Any] | None:
    """The targets and moving images of the half-resolution stage (``half_sigma`` smoothing,
    2 x 2 block means; the targets floored at ``HALF_FLOOR``), or None when that stage is off
    or the image sizes are odd."""
    H, W = Un.shape[1:]
    if settings.coarse_iters <= 0 or H % 2 or W % 2:
        return None
    extra = float(np.sqrt(max(settings.half_sigma**2 - sigma**2, 0.0)))
    V2 = half_resolution(smooth(Vn, extra))
    U2 = V2 if Vn is Un else half_resolution(smooth(Un, extra))
    return _floored(U2, HALF_FLOOR), V2


def _search_targets(Un: Any, settings: SearchSettings) -> Any | None:
    """The targets that full-resolution starts are ranked and refined on before the winner's
    refinement on ``Un``: ``Un`` floored at ``FULL_FLOOR``, or None (``Un`` itself) when
    pruning is off."""
    return _floored(Un, FULL_FLOOR) if settings.prune_kappa > 0 else None


def _floored(images: Any, fraction: float) -> Any:
    """``images (n, h, w)`` with the pixels below ``fraction`` of their image's largest
    |value| set to 0: the Gaussian tails of smoothed images, which the compiled kernel would
    otherwise visit in every evaluation."""
    xp = array_module(images)
    top = xp.abs(images).reshape(images.shape[0], -1).max(1)[:, None, None]
    return xp.where(xp.abs(images) >= fraction * top, images, 0.0)


def _grid_chunks(Un, Vn, ii, jj, group, settings, sigma):
    """Yield (i, j, starts ``(m, c, n_params)``) from the rotation x shift grid scan."""
    extra = float(np.sqrt(max(settings.coarse_sigma**2 - sigma**2, 0.0)))
    scan = _CoarseScan(Un, Vn, group, settings, extra)
    fh, fw = scan.fshape
    # per pair: the complex product and the real correlation of every rotation, twice over
    per_pair = settings.n_angles * fh * fw * (8 + 8) * 2
    cache = settings.n_angles * fh * fw * 8 + 16 * fh * fw * (Un.shape[0] + Vn.shape[0])
    chunk = min(settings.pair_chunk, int((settings.memory_mb * MB - cache) // per_pair))
    if chunk < 1:
        need = (cache + per_pair) / MB
        raise MemoryBudgetError(
            f"memory_mb={settings.memory_mb:g} is too small for the grid scan of "
            f"{Un.shape[0]} x {Vn.shape[0]} images of {Un.shape[1]} x {Un.shape[2]} px "
            f"(needs {need:.0f} MB): raise it or lower block_size"
        )
    for start in range(0, ii.size, chunk):
        i = ii[start : start + chunk]
        j = jj[start : start + chunk]
        yield i, j, scan.candidates(i, j, settings.n_candidates)


class PolarScan:
    """The polar rotation scan of targets ``Un`` against moving images ``Vn``, set up once.

    With ``centre_offset > 0`` the rings of v are also centred at the 4 points that far from its
    centroid along the axes (the 4 diagonal points of a 3 x 3 grid as well cost 80% more scan
    for ~0.05% of digit pairs). :meth:`scores` scores any block of targets against any block
    of moving images; :meth:`starts` turns a block's scores into the starts of some of its
    pairs: the peaks over angle of the best score over centres, each with the centre that gave
    it. ``fixed`` is the memory held by the set-up (bytes), ``per_pair`` that of one pair's
    scores with headroom.
    """

    def __init__(self, Un: Any, Vn: Any, settings: SearchSettings) -> None:
        xp = array_module(Un)
        self.xp, self.shape, self.M = xp, Un.shape[1:], settings.n_angles
        self.m_u = centroids(Un)
        same = Vn is Un
        self.m_v = self.m_u if same else centroids(Vn)
        d = settings.centre_offset
        offs = [(0.0, 0.0)]
        if d > 0:
            offs += [(-d, 0.0), (0.0, -d), (0.0, d), (d, 0.0)]
        self.offs = xp.asarray(offs)
        self.n_o = len(offs)
        # image-major (K, n_j, n_o, 2R), so that the columns j >= j0 are one strided view
        self.B_v = scan_spectra(Vn, self.m_v[None] + self.offs[:, None], self.M)
        self.K, self.R2 = self.B_v.shape[0], self.B_v.shape[3]
        self.A_u = (
            self.B_v[:, :, 0] if same else scan_spectra(Un, self.m_u[None], self.M)[:, :, 0]
        )  # (K, n_i, 2R)
        self.synthesis = xp.asarray(angle_synthesis(self.M))
        self.per_pair = self.n_o * (2 * self.K + self.M) * 8 * 2  # products and scores, float64
        self.fixed = self.B_v.nbytes + Un.nbytes + (0 if same else self.A_u.nbytes + Vn.nbytes)

    def scores(self, r0: int, r1: int, j0: int, j1: int) -> Any:
        """``(r1 - r0, j1 - j0, n_o, M)`` float32 scores of targets r0:r1 against moving
        images j0:j1 (:func:`ia_stages.polar.block_scores`)."""
        B = self.B_v[:, j0:j1].reshape(self.K, -1, self.R2)
        scores = block_scores(self.A_u[:, r0:r1], B, self.synthesis)
        return scores.reshape(r1 - r0, j1 - j0, self.n_o, self.M)

    def starts(self, scores: Any, i: np.ndarray, j: np.ndarray, r0: int, j0: int, c: int) -> Any:
        """Starts ``(m, c, 3)`` of the pairs (i[k], j[k]) from :meth:`scores` ``(r0:, j0:)``."""
        xp = self.xp
        peaks = pair_peaks if xp is np else _pair_peaks_array
        theta, best_o = peaks(scores, i - r0, j - j0, c)
        ix, jx = xp.asarray(i), xp.asarray(j)
        centre = self.m_v[jx][:, None, :] + self.offs[xp.asarray(best_o)]
        b = centroid_translation(theta, self.m_u[ix], centre, self.shape)
        return xp.concatenate([theta[..., None], b], -1).astype(float)


def _polar_chunks(Un, Vn, ii, jj, group, settings):
    """Yield (i, j, starts) from the :class:`PolarScan`, a chunk of rows of U at a time. For
    ``V = U`` a chunk of rows only scores the columns right of its first row (the pairs i < j).
    """
    xp = array_module(Un)
    same = Vn is Un
    polar = PolarScan(Un, Vn, settings)
    n_j = Vn.shape[0]
    per_row = polar.per_pair * n_j
    room = settings.memory_mb * MB - polar.fixed
    if room < per_row:
        raise MemoryBudgetError(
            f"memory_mb={settings.memory_mb:g} is too small for the polar scan of "
            f"{Un.shape[0]} x {n_j} images of {Un.shape[1]} x {Un.shape[2]} px "
            f"(needs {(polar.fixed + per_row) / MB:.1f} MB): raise it or lower block_size"
        )
    # numpy: chunks are scanned on up to numba's number of threads at once, within the budget
    lanes = 1 if xp is not np else max(1, min(numba.get_num_threads(), int(room // per_row)))
    rows = int(room // (per_row * lanes))
    # chunks of ~SCAN_CHUNK_MB: fewer columns per row when V = U, and cache-sized products
    rows = min(rows, max(4, int(SCAN_CHUNK_MB * MB // per_row)))
    if same:  # a chunk also scores the ~rows^2 / 2 pairs j <= i of its rows: keep that small
        rows = min(rows, max(4, Un.shape[0] // 16))
    c = settings.n_candidates
    # the pairs of each chunk of rows, found once (a stable sort keeps their order)
    chunk_of = ii // rows
    by_chunk = np.argsort(chunk_of, kind="stable")
    bounds = np.searchsorted(chunk_of[by_chunk], np.arange(-(-Un.shape[0] // rows) + 1))

    def scan(r0: int) -> tuple[np.ndarray, np.ndarray, Any] | None:
        sel = by_chunk[bounds[r0 // rows] : bounds[r0 // rows + 1]]
        if sel.size == 0:
            return None
        i, j = ii[sel], jj[sel]
        j0 = r0 + 1 if same else 0
        scores = polar.scores(r0, min(r0 + rows, Un.shape[0]), j0, n_j)
        return i, j, polar.starts(scores, i, j, r0, j0, c)

    firsts = range(0, Un.shape[0], rows)
    chunks = map(scan, firsts) if xp is not np else _on_threads(scan, firsts, lanes)
    yield from (chunk for chunk in chunks if chunk is not None)


def _on_threads(task: Callable[[Any], Any], args: Any, workers: int) -> Any:
    """Yield task(a) for every a, in order, computed on ``workers`` threads with BLAS on one
    thread each, at most that many ahead of the consumer. BLAS's own worker threads would
    keep spinning for ~0.1 s after each product and slow the compiled refinement that follows
    by up to a third (n = 100 digits: 36 -> 26 us/pair without them)."""
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for a in args:
            pending.append(pool.submit(task, a))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _pair_peaks_array(scores: Any, i: np.ndarray, j: np.ndarray, c: int) -> tuple[Any, Any]:
    """:func:`ia_stages.scan_kernel.pair_peaks` in array code (cupy): per angle the best
    centre; the ``c`` peaks of that envelope, each with its centre."""
    xp = array_module(scores)
    M = scores.shape[-1]
    pair_scores = scores[xp.asarray(i), xp.asarray(j)]  # (m, n_o, M)
    theta, _ = peak_angles(pair_scores.max(axis=1), c)  # (m, c)
    k = xp.rint(theta * (M / (2 * np.pi))).astype(np.int64) % M
    return theta, xp.take_along_axis(xp.argmax(pair_scores, axis=1), k, 1)


def _refine_candidates(
    Un: Any,
    Vn: Any,
    i: np.ndarray,
    j: np.ndarray,
    starts: Any,
    group: SE2,
    settings: SearchSettings,
    beta: float,
    half: tuple[Any, Any] | None = None,
    compiled: PairImages | None = None,
    search: Any | None = None,
) -> tuple[Any, Any]:
    """Best refined transform per pair (i[k], j[k]) over its candidates ``starts (m, c, k)``.

    ``half``: the :func:`_half_resolution_pair` images; every candidate is then first refined
    on them (``coarse_iters`` steps), then ordered and pruned by its full-resolution cost there.
    Full-resolution ranking and refinement use the targets ``search`` (:func:`_search_targets`;
    None: ``Un``); where given, each pair's winner is then refined on ``Un`` (a pair nothing
    was refined for gets its reported start's cost on ``Un``).

    With ``compiled`` (:func:`ia_stages.lm_kernel.pair_images` of numpy ``Un``, ``Vn`` and
    ``half``) the compiled kernel refines; without it (cupy) the same Newton-LM runs in array
    code.

    Returns params ``(m, n_params)`` and sqdist ``(m,)``.
    """
    xp = array_module(Un)
    coarse = settings.coarse_iters if half is not None else 0
    if compiled is not None:
        return search_pairs(
            compiled, i, j, starts, settings.refine_iters, REFINE_TOL, beta,
            settings.prune_kappa, settings.prune_margin, coarse, _kappa_stop(settings),
            COARSE_D2_STOP, HALF_GAP,
        )  # fmt: skip
    T = Un if search is None else search
    m, c, k = starts.shape
    same = to_numpy(_same_starts(starts))
    ti, tj = np.repeat(i, c), np.repeat(j, c)
    p = starts.reshape(m * c, k).copy()
    # array code holds ~32 image-sized float64 arrays per candidate while refining
    batch = max(1, int(settings.memory_mb * MB // (32 * 8 * Un[0].size)))
    if coarse:
        U2, V2 = half
        p = p.reshape(m, c, k)
        p[..., 1:] /= 2.0
        stop = (_kappa_stop(settings), COARSE_D2_STOP)
        args = (group, coarse, REFINE_TOL, "correlation", "exact", beta, *stop)
        half_cost = xp.full((m, c), np.inf)
        lowest = xp.full(m, np.inf)
        # start by start: a later one stops where it cannot come within HALF_GAP of its pair's
        # lowest half-resolution cost so far (it would not be taken to full resolution); one
        # equal to an earlier start (the scan repeats its best peak when it finds fewer) would
        # converge where that one did, and is dropped
        for cc in range(c):
            bound = lowest + HALF_GAP if settings.prune_kappa > 0 else None
            todo = np.flatnonzero(~same[:, cc])
            for s in _slices(todo.size, batch):
                r = todo[s]
                p[r, cc], half_cost[r, cc] = refine_alignment(
                    U2[i[r]], V2[j[r]], p[r, cc], *args, None if bound is None else bound[r]
                )
            lowest = xp.minimum(lowest, half_cost[:, cc])
        p[..., 1:] *= 2.0
        p = p.reshape(m * c, k)
    # full-resolution cost of every start (the half-resolution one is biased by its smoothing)
    cost = xp.concatenate(
        [
            pair_cost(T[ti[s]], Vn[tj[s]], p[s], group, objective="correlation")
            for s in _slices(m * c, batch)
        ]
    )
    full = cost.reshape(m, c)
    p = p.reshape(m, c, k)
    cost = xp.where(xp.asarray(same), xp.inf, full)
    if coarse:
        # candidates that converged where an earlier one did are dropped, and those that the
        # (nearly always lower) half-resolution cost already rules out are not ranked
        half_cost = xp.where(_repeats(p), xp.inf, half_cost)
        skip = ~xp.isfinite(half_cost)
        if settings.prune_kappa > 0:
            lowest = half_cost.min(1, keepdims=True)
            skip |= ~_can_matter(half_cost, beta, settings) | (half_cost > lowest + HALF_GAP)
        cost = xp.where(skip, xp.inf, full)
    rows = xp.arange(m)
    order = xp.argsort(cost, axis=1)
    best = xp.full(m, np.inf)
    best_p = p[rows, order[:, 0]].copy()
    # refine in order of (coarse) cost; skip a start that cannot beat the pair's best so far
    for cand in order.T:
        todo = np.flatnonzero(to_numpy(_worth_refining(cost[rows, cand], best, beta, settings)))
        for s in _slices(todo.size, batch):
            r, cc = todo[s], to_numpy(cand)[todo[s]]
            ps, cs = refine_alignment(
                T[i[r]], Vn[j[r]], p[r, cc], group, settings.refine_iters, REFINE_TOL,
                "correlation", "exact", beta, _kappa_stop(settings), 0.0,
                best[r] if settings.prune_kappa > 0 else None,
            )  # fmt: skip
            better = to_numpy(cs < best[r])
            rb, bx = r[better], xp.asarray(better)
            best_p[rb] = ps[bx]
            best[rb] = cs[bx]
    # no start could matter: the best start's own cost, or where none was ranked, the full
    # cost where the half-resolution stage ended lowest
    left = xp.isinf(best)
    first = order[:, 0]
    if coarse:
        first = xp.where(xp.isfinite(cost[rows, first]), first, xp.argmin(half_cost, 1))
    best[left] = full[rows, first][left]
    best_p[left] = p[rows, first][left]
    if search is not None:
        done = np.flatnonzero(to_numpy(~left))
        for s in _slices(done.size, batch):
            r = done[s]
            best_p[r], best[r] = refine_alignment(
                Un[i[r]], Vn[j[r]], best_p[r], group, settings.refine_iters, REFINE_TOL,
                "correlation", "exact", beta, _kappa_stop(settings),
            )  # fmt: skip
        rest = np.flatnonzero(to_numpy(left))
        for s in _slices(rest.size, batch):
            r = rest[s]
            best[r] = pair_cost(Un[i[r]], Vn[j[r]], best_p[r], group, objective="correlation")
    return best_p, best


def _kappa_stop(settings: SearchSettings) -> float:
    """Refinements stop where the Newton model promises the kernel value less than this."""
    return KAPPA_STOP_FRACTION * settings.prune_kappa


def _same_starts(p: Any) -> Any:
    """``(m, c)`` mask of the candidates of ``p (m, c, k)`` equal to an earlier one."""
    xp = array_module(p)
    same = xp.zeros(p.shape[:2], dtype=bool)
    for c in range(1, p.shape[1]):
        same[:, c] = (p[:, c : c + 1] == p[:, :c]).all(-1).any(-1)
    return same


def _repeats(p: Any) -> Any:
    """Mask ``(m, c)`` of candidates ``p (m, c, k)`` within ``SAME_ANGLE`` radians and
    ``SAME_SHIFT`` pixels of an earlier candidate of their pair."""
    xp = array_module(p)
    turn = xp.abs(wrap_angle(p[:, :, None, 0] - p[:, None, :, 0]))
    shift = xp.abs(p[:, :, None, 1:] - p[:, None, :, 1:]).max(-1)
    close = (turn < SAME_ANGLE) & (shift < SAME_SHIFT)
    earlier = xp.tril(xp.ones(close.shape[1:], dtype=bool), -1)  # [c, e]: e < c
    return (close & earlier).any(-1)


def _slices(n: int, size: int) -> list[slice]:
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def _worth_refining(d0: Any, best: Any, beta: float, settings: SearchSettings) -> Any:
    """Mask of starts (start cost ``d0``) worth refining given the pair's ``best`` so far."""
    xp = array_module(d0)
    if settings.prune_kappa <= 0:
        return xp.isfinite(d0)  # all but dropped repeats
    return _can_matter(d0, beta, settings) & (d0 - settings.prune_margin <= best)


def _can_matter(cost: Any, beta: float, settings: SearchSettings) -> Any:
    """Mask of starts whose kernel value can reach ``prune_kappa`` if refinement lowers their
    ``cost`` by ``prune_margin``."""
    xp = array_module(cost)
    return xp.exp(-beta * (cost - settings.prune_margin)) >= settings.prune_kappa


class _CoarseScan:
    """Rotation-by-shift scan of the correlation objective on smoothed images.

    d2(theta, s) = ||u||^2 + ||v||^2 - 2 <u, v o (theta, A s)> for every integer shift s in the
    window at once, by FFT cross-correlation of u with each rotated copy of v.
    """

    def __init__(self, Un: Any, Vn: Any, group: SE2, settings: SearchSettings, extra_sigma: float):
        xp = array_module(Un)
        self.xp, self.fft, self.group = xp, fft_module(xp), group
        H, W = Un.shape[1:]
        self.max_shift = settings.max_shift if settings.max_shift is not None else max(H, W) // 3
        s = self.max_shift
        # linear (not circular) correlation for |shift| <= s needs H + s points
        self.fshape = (self.fft.next_fast_len(H + s), self.fft.next_fast_len(W + s))
        self.extra_sigma = extra_sigma
        self.U_s = smooth(Un, extra_sigma)
        self.V_s = smooth(Vn, extra_sigma)
        self.angles = np.arange(settings.n_angles) * (2 * np.pi / settings.n_angles)
        self.F_u = self.fft.rfft2(self.U_s, s=self.fshape)
        self.u_sq = (self.U_s**2).reshape(len(Un), -1).sum(1)
        self.v_sq = (self.V_s**2).reshape(len(Vn), -1).sum(1)
        self._rot_cache: dict[int, Any] = {}
        offs = np.arange(-s, s + 1)
        self.shifts = np.stack(np.meshgrid(offs, offs, indexing="ij"), -1).reshape(-1, 2)
        self.rows = offs % self.fshape[0]
        self.cols = offs % self.fshape[1]

    def _rotated(self, j: int) -> Any:
        """FFT of V_s[j] rotated by every scan angle (only the latest column is kept)."""
        if j not in self._rot_cache:
            xp, R = self.xp, self.angles.size
            p = xp.zeros((R, self.group.n_params))
            p[:, 0] = xp.asarray(self.angles)
            rot = _warp_rotations(self.V_s[j], p, self.group)
            self._rot_cache = {j: self.fft.rfft2(rot, s=self.fshape)}
        return self._rot_cache[j]

    def candidates(self, i: np.ndarray, j: np.ndarray, n_candidates: int) -> Any:
        """Starting transforms ``(m, n_candidates, n_params)`` at the best distinct rotations."""
        xp, fft = self.xp, self.fft
        m, R = i.size, self.angles.size
        best_d2 = xp.empty((m, R))
        best_shift = xp.empty((m, R), dtype=np.int64)
        window = np.ix_(self.rows, self.cols)
        for jv in np.unique(j):
            sel = np.flatnonzero(j == jv)
            F_w = self._rotated(int(jv))
            # cross[k, r, s] = sum_p u_k[p] w_r[p + s]
            cross = fft.irfft2(xp.conj(self.F_u[i[sel]])[:, None] * F_w[None], s=self.fshape)
            cross = cross[:, :, window[0], window[1]].reshape(sel.size, R, -1)
            d2 = (self.u_sq[i[sel]] + self.v_sq[jv])[:, None, None] - 2 * cross
            arg = xp.argmin(d2, axis=2)
            best_shift[sel] = arg
            best_d2[sel] = xp.take_along_axis(d2, arg[..., None], 2)[..., 0]
        ang = _distinct_minima(best_d2, n_candidates)  # (m, c) rotation indices
        shift = xp.asarray(self.shifts)[xp.take_along_axis(best_shift, ang, 1)]  # (m, c, 2)
        theta = xp.asarray(self.angles)[ang]
        out = xp.zeros((*ang.shape, self.group.n_params))
        out[..., 0] = theta
        # v o (theta, 0) shifted by s equals v o (theta, A(theta) s)
        A = self.group.matrix(out)
        out[..., 1:3] = xp.einsum("mcij,mcj->mci", A, shift.astype(float))
        return out


def _warp_rotations(image: Any, params: Any, group: SE2) -> Any:
    xp = array_module(image)
    return warp(xp.broadcast_to(image, (params.shape[0], *image.shape)), params, group)


def _distinct_minima(d2: Any, c: int) -> Any:
    """Indices ``(m, c)`` of the ``c`` smallest circular local minima along axis 1 of ``d2``.

    Rows with fewer local minima are padded with their best index.
    """
    xp = array_module(d2)
    left, right = xp.roll(d2, 1, axis=1), xp.roll(d2, -1, axis=1)
    is_min = (d2 <= left) & (d2 <= right)
    score = xp.where(is_min, d2, xp.inf)
    order = xp.argsort(score, axis=1)[:, :c]
    first = order[:, :1]
    valid = xp.isfinite(xp.take_along_axis(score, order, 1))
    return xp.where(valid, order, first)
