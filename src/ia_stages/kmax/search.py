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
   products (:func:`ia_stages.kmax.polar.block_scores`), peaks picked by a compiled kernel
   (:mod:`ia_stages.kmax.rings`); cost per pair ~ n_angles * rings.
   ``method='grid'``: ``n_angles`` rotations times every integer shift in a window, all shifts of
   one rotation at once by FFT cross-correlation; cost per pair ~ n_angles * H * W * log.
2. a local refinement of each candidate (sub-degree, sub-pixel) on the interpolated objective
   (cubic B-spline by default, or Keys: ``SearchSettings.interpolation``): Newton steps with
   Levenberg-Marquardt damping, one compiled search per pair (:mod:`ia_stages.kmax.refine`),
   written once and run over ranges of pairs on CPU threads for numpy arrays, or one
   GPU thread per pair (:mod:`ia_stages.kmax.cuda`) for cupy.

Memory: the scan works on chunks of rows whose size follows ``memory_mb``, so no n^2 x rotations
array is ever held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from ia_stages.core.backend import array_module, fft_module
from ia_stages.core.groups import SE2, wrap_angle
from ia_stages.core.smoothing import smooth, smooth_normalize
from ia_stages.core.threads import on_threads
from ia_stages.core.validation import check_images
from ia_stages.core.warp import warp
from ia_stages.kmax.polar import (
    angle_synthesis,
    block_scores,
    centroid_translation,
    centroids,
    scan_spectra,
)
from ia_stages.kmax.refine import _pair_layout
from ia_stages.kmax.refinement import _refine_candidates
from ia_stages.kmax.rings import pair_joint_peaks, pair_peaks
from ia_stages.kmax.settle import settle, settle_bytes, settle_check, settle_mirrored
from ia_stages.settings.search import SearchSettings

FLOATS = (np.float64, np.float32)  # kept as given; other dtypes become float64


MB = 2**20
# pairs refined per call: alternating often between the scan's BLAS threads and the
# refinement's threads is slow (BLAS threads spin a while after each product)
REFINE_BATCH = 100_000
SCAN_CHUNK_MB = 128  # working set of one chunk of the polar scan (products + scores)


class MemoryBudgetError(ValueError):
    """``memory_mb`` is too small for the smallest chunk of the scan.

    A :class:`ValueError`, so that the command line and the pipeline report it in one line.

    Examples
    --------
    >>> from ia_stages.kmax import MemoryBudgetError
    >>> issubclass(MemoryBudgetError, ValueError)
    True
    """


@dataclass
class KappaMaxResult:
    """kappa^max for a block of pairs, as :func:`ia_stages.kappa_max` returns it.

    Arrays are numpy or cupy, as the images were.

    Attributes
    ----------
    value : ndarray of shape (n_i, n_j)
        kappa^max(U[i], V[j]) = exp(-beta * sqdist)
    params : ndarray of shape (n_i, n_j, n_params)
        the optimal pose tau with ``V[j] o tau ~ U[i]`` (theta in radians, b_0, b_1 in px, then
        the group's further parameters)
    sqdist : ndarray of shape (n_i, n_j)
        ``||U[i]||^2 + ||V[j]||^2 - 2 <U[i], V[j] o tau>`` after smoothing and normalisation:
        the squared distance of a norm-preserving transform

    Examples
    --------
    >>> import numpy as np
    >>> from ia_stages import kappa_max
    >>> X = np.zeros((2, 16, 16)); X[:, 4:12, 6:10] = 1.0
    >>> km = kappa_max(X, beta=2.0)
    >>> km.value.shape, km.params.shape
    ((2, 2), (2, 2, 3))
    """

    value: Any
    params: Any
    sqdist: Any


def kappa_max_all_pairs(
    U: Any,
    V: Any | None = None,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 = SE2(),
    settings: SearchSettings = SearchSettings(),
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
) -> KappaMaxResult:
    """kappa^max between every image of ``U`` and every image of ``V``: the all-pairs search.

    The public entry is :func:`ia_stages.kmax.kappa_max`, which documents the parameters and
    calls this for ``k=None``.
    """
    U, V, Un, Vn = _checked_and_normalized(U, V, normalization, sigma)
    xp = array_module(U)
    symmetric = V is None
    n_i, n_j = Un.shape[0], Vn.shape[0]
    block = _images_per_block(Un, Vn, settings)
    if block < max(n_i, n_j):
        return _all_pairs_in_blocks(U, V, block, beta, normalization, group, settings, progress,
                                    sigma)  # fmt: skip
    ii, jj = _pair_order(n_i, n_j, symmetric)
    params, sqdist, _ = search_listed(Un, Vn, ii, jj, beta, group, settings, progress, sigma,
                                      upper=symmetric)  # fmt: skip
    if symmetric:
        params[jj, ii] = group.inverse(params[ii, jj])
        sqdist[jj, ii] = sqdist[ii, jj]
    params[..., 0] = wrap_angle(params[..., 0])
    return KappaMaxResult(value=xp.exp(-beta * sqdist), params=params, sqdist=sqdist)


def _pair_order(n_i: int, n_j: int, upper: bool) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (ii, jj) a search of ``n_i`` targets against ``n_j`` moving images lists, sorted
    by jj so that one column's rotated copies are reused: with ``upper`` (V = U) only i < j —
    the later image is always warped onto the earlier one, as a block (bi < bj) of a sharded
    run does, so that any blocking gives the same matrix — else every pair."""
    if upper:
        ii, jj = np.triu_indices(n_i, k=1)
        order = np.argsort(jj, kind="stable")
        return ii[order], jj[order]
    jj, ii = (a.ravel() for a in np.meshgrid(np.arange(n_j), np.arange(n_i), indexing="ij"))
    return ii, jj


def search_listed(
    Un: Any,
    Vn: Any,
    ii: np.ndarray,
    jj: np.ndarray,
    beta: float,
    group: SE2,
    settings: SearchSettings,
    progress: Callable[[int], None] | None,
    sigma: float,
    upper: bool = False,
    mirror: bool = False,
) -> tuple[Any, Any, Any]:
    """The search of the listed pairs (V[jj[k]] onto U[ii[k]]) of smoothed, normalised images
    ``Un``, ``Vn``: the coarse scan, then the refinement of its candidates.

    ``upper``: every listed pair has ii < jj (with the polar scan, a chunk of rows then scores
    only the columns right of its first row). ``mirror``: each pair's candidates also include
    the scan's of the mirror image of V[jj] (columns reversed), ranked, pruned and refined
    together with the others (:func:`ia_stages.kmax.refine.search_pairs`), so that a mirror
    image that cannot win costs its scan and its half-resolution stage only. Returns params
    ``(n_i, n_j, n_params)`` (of the mirror image of V[j] where it won), sqdist ``(n_i, n_j)``,
    0 where no pair is listed, and flipped ``(n_i, n_j)`` bool, where the mirror image won.
    """
    xp = array_module(Un)
    params = xp.zeros((Un.shape[0], Vn.shape[0], group.n_params))
    sqdist = xp.zeros((Un.shape[0], Vn.shape[0]))
    flipped = xp.zeros((Un.shape[0], Vn.shape[0]), dtype=bool)
    if settings.method == "polar":
        chunks = _polar_chunks(Un, Vn, ii, jj, group, settings, upper, mirror)
    else:
        chunks = _grid_chunks(Un, Vn, ii, jj, group, settings, sigma, mirror)
    images = _pair_layout(Un, Vn, sigma, settings, mirror)
    n_plain = settings.n_candidates if mirror else None
    check = settle_check(Un, xp.concatenate([Vn, Vn[..., ::-1]]) if mirror else Vn, sigma,
                         settings)  # fmt: skip
    for i, j, starts in _batched(chunks, REFINE_BATCH):
        won = xp.empty(i.size, dtype=bool)
        p, d2 = _refine_candidates(images, i, j, starts, settings, beta, n_plain, won)
        if check is not None and mirror:
            p, d2, won = settle_mirrored(check, images, i, j, p, d2, won, Vn.shape[0],
                                         settings, beta)  # fmt: skip
        elif check is not None:
            p, d2 = settle(check, images, i, j, p, d2, settings, beta)
        params[i, j] = p
        sqdist[i, j] = d2
        flipped[i, j] = won
        if progress is not None:
            progress(i.size)
    return params, sqdist, flipped


def kappa_max_with_mirrors(
    U: Any,
    V: Any | None = None,
    beta: float = 1.0,
    normalization: str = "unit",
    settings: SearchSettings = SearchSettings(),
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
) -> tuple[Any, Any, Any]:
    """SE(2) kappa^max of every image U[i] against every V[j] and its mirror image (columns
    reversed) in one search: each pair's candidates from both scans are ranked, pruned and
    refined together, and the better of the two is kept. ``V`` None: the pairs i < j of U
    (U[j] against U[i] follows, as a mirror is an isometry). By blocks as
    :func:`kappa_max_all_pairs` would take them.

    Returns params ``(n_i, n_j, 3)`` (the SE(2) transform of V[j], or of its mirror image
    where ``flipped``, onto U[i]), sqdist ``(n_i, n_j)`` (+inf for j <= i when ``V`` is None)
    and flipped ``(n_i, n_j)`` bool.

    Example
    -------
    >>> params, sqdist, flipped = kappa_max_with_mirrors(X, beta=2.0)  # doctest: +SKIP
    """
    U, V, Un, Vn = _checked_and_normalized(U, V, normalization, sigma)
    xp = array_module(U)
    symmetric = V is None
    n_i, n_j = Un.shape[0], Vn.shape[0]
    params = xp.zeros((n_i, n_j, 3))
    sqdist = xp.full((n_i, n_j), xp.inf)
    flipped = xp.zeros((n_i, n_j), dtype=bool)
    block = _images_per_block(Un, Vn, settings, mirror=True)
    for r, c, diagonal in _blocks(n_i, n_j, block, symmetric):
        Ub = Un[r]
        ii, jj = _pair_order(Ub.shape[0], c.stop - c.start, diagonal)
        p, d2, f = search_listed(Ub, Ub if diagonal else Vn[c], ii, jj, beta, SE2(), settings,
                                 progress, sigma, upper=diagonal, mirror=True)  # fmt: skip
        params[r.start + ii, c.start + jj] = p[ii, jj]
        sqdist[r.start + ii, c.start + jj] = d2[ii, jj]
        flipped[r.start + ii, c.start + jj] = f[ii, jj]
    params[..., 0] = wrap_angle(params[..., 0])
    return params, sqdist, flipped


def _images_per_block(Un: Any, Vn: Any, settings: SearchSettings, mirror: bool = False) -> int:
    """Most images of U (and of V) per block such that the polar scan's set-up for a block of
    each (with ``mirror``, of V's mirror images too), with one row of scores, takes at most
    half of ``memory_mb`` (the set-up holds every image's spectra, so a large set is searched
    block by block); no limit for the grid scan."""
    if settings.method != "polar":
        return max(Un.shape[0], Vn.shape[0])
    probe = PolarScan(Un[:1], Vn[:1], settings, mirror)  # a block of U and one of V: both held
    per_image = probe.fixed + probe.per_pair + settle_bytes(Un.shape[1:], settings)
    return max(1, int(settings.memory_mb * MB / 2 // per_image))


def _checked_and_normalized(
    U: Any, V: Any | None, normalization: str, sigma: float
) -> tuple[Any, Any | None, Any, Any]:
    """``U``, ``V`` checked (one-line errors naming them) and their smoothed, normalised
    images ``Un``, ``Vn`` (``Vn`` is ``Un`` for ``V`` None: the pairs of one set)."""
    U = check_images(U, "U", dtype=FLOATS)
    V = None if V is None else check_images(V, "V", image_shape=U.shape[1:], dtype=FLOATS, like="U")
    Un = smooth_normalize(U, sigma, normalization)
    return U, V, Un, Un if V is None else smooth_normalize(V, sigma, normalization)


def _blocks(n_i: int, n_j: int, block: int, symmetric: bool) -> Any:
    """Yield (rows, columns, diagonal) of the blocks of ``block`` images a search by blocks
    takes: every block, or for one set (``symmetric``) those of the upper triangle, rows before
    columns; ``diagonal``: a block of one set against itself."""
    for a, r0 in enumerate(range(0, n_i, block)):
        for b, c0 in enumerate(range(0, n_j, block)):
            if symmetric and b < a:
                continue
            yield (
                slice(r0, min(r0 + block, n_i)),
                slice(c0, min(c0 + block, n_j)),
                symmetric and a == b,
            )


def _all_pairs_in_blocks(
    U: Any,
    V: Any | None,
    block: int,
    beta: float,
    normalization: str,
    group: SE2,
    settings: SearchSettings,
    progress: Callable[[int], None] | None,
    sigma: float,
) -> KappaMaxResult:
    """:func:`kappa_max_all_pairs` by blocks of ``block`` images: with ``V`` None the blocks
    (a, b) with a <= b of the upper triangle (later images warped onto earlier ones, as
    unblocked), mirrored below the diagonal; the same matrix as one call."""
    xp = array_module(U)
    W = U if V is None else V
    n_i, n_j = U.shape[0], W.shape[0]
    params = xp.zeros((n_i, n_j, group.n_params))
    sqdist = xp.zeros((n_i, n_j))
    for r, c, diagonal in _blocks(n_i, n_j, block, V is None):
        res = kappa_max_all_pairs(U[r], None if diagonal else W[c], beta, normalization, group,
                                  settings, progress, sigma)  # fmt: skip
        params[r, c], sqdist[r, c] = res.params, res.sqdist
        if V is None and not diagonal:
            inverse = group.inverse(res.params.reshape(-1, group.n_params))
            params[c, r] = inverse.reshape(res.params.shape).transpose(1, 0, 2)
            sqdist[c, r] = res.sqdist.T
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


def _grid_chunks(Un, Vn, ii, jj, group, settings, sigma, mirror=False):
    """Yield (i, j, starts ``(m, c, n_params)``) from the rotation x shift grid scan; with
    ``mirror``, those of V[j] followed by those of its mirror image (``(m, 2 c, n_params)``)."""
    xp = array_module(Un)
    extra = float(np.sqrt(max(settings.coarse_sigma**2 - sigma**2, 0.0)))
    n_j = Vn.shape[0]
    if mirror:
        Vn = xp.concatenate([Vn, Vn[..., ::-1]])
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
        starts = scan.candidates(i, j, settings.n_candidates)
        if mirror:
            starts = xp.concatenate([starts, scan.candidates(i, j + n_j, settings.n_candidates)], 1)
        yield i, j, starts


class PolarScan:
    """The polar rotation scan of targets ``Un`` against moving images ``Vn``, set up once.

    With ``centre_offset > 0`` the rings of v are also centred at the other points of the
    lattice :func:`centre_offsets` (``centre_rings``) about its centroid. :meth:`scores` scores
    any block of targets against any block of moving images; :meth:`starts` turns a block's
    scores into the starts of some of its pairs by the ``peaks`` rule: 'envelope', the peaks
    over angle of the best score over centres, each with the centre that gave it; 'joint', the
    highest local maxima over angle and centre together. ``fixed`` is the memory held by the
    set-up (bytes), ``per_pair`` that of one pair's scores with headroom.
    """

    def __init__(self, Un: Any, Vn: Any, settings: SearchSettings, mirror: bool = False) -> None:
        xp = array_module(Un)
        self.xp, self.shape, self.M = xp, Un.shape[1:], settings.n_angles
        self.mirror = mirror
        self.joint = settings.peaks == "joint"
        self.m_u = centroids(Un)
        same = Vn is Un
        self.m_v = self.m_u if same else centroids(Vn)
        lattice = centre_offsets(settings.centre_offset, settings.centre_rings)
        self.neighbours = lattice_neighbours(lattice)
        self.offs = xp.asarray(lattice)
        self.n_o = len(lattice)
        interp = settings.interpolation
        # image-major (K, n_j, n_o, 2R), so that the columns j >= j0 are one strided view
        self.B_v = scan_spectra(
            Vn, self.m_v[None] + self.offs[:, None], self.M, interpolation=interp
        )
        self.K, self.R2 = self.B_v.shape[0], self.B_v.shape[3]
        self.A_u = (  # (K, n_i, 2R)
            self.B_v[:, :, 0]
            if same
            else scan_spectra(Un, self.m_u[None], self.M, interpolation=interp)[:, :, 0]
        )
        if mirror:  # moving images n_j .. 2 n_j - 1: the mirror images of Vn
            self.B_v, self.m_v = _with_mirror_spectra(self.B_v, self.m_v, lattice, Un.shape[2])
            if same:
                self.A_u = self.B_v[:, : Un.shape[0], 0]
        self.synthesis = xp.asarray(angle_synthesis(self.M))
        self.per_pair = self.n_o * (2 * self.K + self.M) * 8 * 2  # products and scores, float64
        self.fixed = self.B_v.nbytes + Un.nbytes + (0 if same else self.A_u.nbytes + Vn.nbytes)

    def scores(self, r0: int, r1: int, j0: int, j1: int) -> Any:
        """``(r1 - r0, j1 - j0, n_o, M)`` float32 scores of targets r0:r1 against moving
        images j0:j1 (:func:`ia_stages.kmax.polar.block_scores`)."""
        B = self.B_v[:, j0:j1].reshape(self.K, -1, self.R2)
        scores = block_scores(self.A_u[:, r0:r1], B, self.synthesis)
        return scores.reshape(r1 - r0, j1 - j0, self.n_o, self.M)

    def starts(self, scores: Any, i: np.ndarray, j: np.ndarray, r0: int, j0: int, c: int) -> Any:
        """Starts ``(m, c, 3)`` of the pairs (i[k], j[k]) from :meth:`scores` ``(r0:, j0:)``."""
        xp = self.xp
        if self.joint:
            peaks = pair_joint_peaks if xp is np else _pair_joint_peaks_gpu
            theta, best_o = peaks(scores, i - r0, j - j0, c, self.neighbours)
        else:
            peaks = pair_peaks if xp is np else _pair_peaks_gpu
            theta, best_o = peaks(scores, i - r0, j - j0, c)
        ix, jx = xp.asarray(i), xp.asarray(j)
        centre = self.m_v[jx][:, None, :] + self.offs[xp.asarray(best_o)]
        b = centroid_translation(theta, self.m_u[ix], centre, self.shape)
        return xp.concatenate([theta[..., None], b], -1).astype(float)


def _with_mirror_spectra(B_v: Any, m_v: Any, lattice: np.ndarray, width: int) -> tuple[Any, Any]:
    """The scan spectra ``B_v (K, n_j, n_o, 2 R)`` and centroids ``m_v (n_j, 2)`` of moving
    images followed by those of their mirror images (columns reversed), without sampling a
    ring again: about the mirrored point (row, width - 1 - column) the mirror image's ring is
    the image's ring read backwards, v_F(r, phi) = v(r, -phi), whose angular spectrum is the
    conjugate; a centre offset (dy, dx) of the ``lattice`` (symmetric in dx) becomes (dy, -dx).
    """
    xp = array_module(B_v)
    R = B_v.shape[3] // 2
    B_f = B_v[:, :, mirrored_lattice(lattice)].copy()
    B_f[..., R:] *= -1.0
    return xp.concatenate([B_v, B_f], 1), xp.concatenate([m_v, mirrored_centroids(m_v, width)])


def mirrored_lattice(lattice: np.ndarray) -> np.ndarray:
    """``(n_o,)`` the index of each centre offset (dy, dx) of ``lattice``
    (:func:`centre_offsets`, symmetric in dx) mirrored, (dy, -dx).

    Example
    -------
    >>> mirrored_lattice(centre_offsets(1.0, 1)).tolist()
    [0, 1, 3, 2, 4]
    """
    return np.array([int(np.flatnonzero((lattice == (dy, -dx)).all(1))[0]) for dy, dx in lattice])


def mirrored_centroids(m: Any, width: int) -> Any:
    """Centroids ``(n, 2)`` (row, column) of the mirror images (columns reversed) of images
    ``width`` px wide whose centroids are ``m (n, 2)``.

    Example
    -------
    >>> mirrored_centroids(np.array([[3.0, 1.0]]), 8).tolist()
    [[3.0, 6.0]]
    """
    xp = array_module(m)
    return xp.stack([m[:, 0], (width - 1) - m[:, 1]], 1)


def _polar_chunks(Un, Vn, ii, jj, group, settings, upper=False, mirror=False):
    """Yield (i, j, starts) from the :class:`PolarScan`, a chunk of rows of U at a time. With
    ``upper`` (only pairs i < j listed, as for ``V = U``) a chunk of rows only scores the
    columns right of its first row. With ``mirror``, each pair's starts are those of V[j]
    followed by those of its mirror image (``(m, 2 c, 3)``).
    """
    xp = array_module(Un)
    polar = PolarScan(Un, Vn, settings, mirror)
    n_j = Vn.shape[0]
    per_row = polar.per_pair * n_j * (2 if mirror else 1)
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
    if upper:  # a chunk also scores the ~rows^2 / 2 pairs j <= i of its rows: keep that small
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
        j0 = r0 + 1 if upper else 0
        r1 = min(r0 + rows, Un.shape[0])
        starts = polar.starts(polar.scores(r0, r1, j0, n_j), i, j, r0, j0, c)
        if mirror:
            scores = polar.scores(r0, r1, n_j + j0, 2 * n_j)
            starts = xp.concatenate([starts, polar.starts(scores, i, j + n_j, r0, n_j + j0, c)], 1)
        return i, j, starts

    firsts = range(0, Un.shape[0], rows)
    chunks = map(scan, firsts) if xp is not np else on_threads(scan, firsts, lanes)
    yield from (chunk for chunk in chunks if chunk is not None)


def centre_offsets(spacing: float, rings: int) -> np.ndarray:
    """``(n_o, 2)`` offsets (row, column) of the polar scan's centres from a centroid: the
    points of the square lattice of ``spacing`` px within ``rings * spacing`` of it, nearest
    first (the centroid alone for ``spacing <= 0``)."""
    if spacing <= 0 or rings < 1:
        return np.zeros((1, 2))
    k = np.arange(-rings, rings + 1)
    grid = np.stack(np.meshgrid(k, k, indexing="ij"), -1).reshape(-1, 2)
    grid = grid[(grid**2).sum(1) <= rings**2]
    # nearest first, ties in row-major order: rings = 1 gives (0, 0), (-1, 0), (0, -1), (0, 1),
    # (1, 0)
    order = np.lexsort((grid[:, 1], grid[:, 0], (grid**2).sum(1)))
    return grid[order] * float(spacing)


def lattice_neighbours(lattice: np.ndarray) -> np.ndarray:
    """``(n_o, 8)`` indices of the (up to 8) points of ``lattice`` (:func:`centre_offsets`)
    adjacent to each, diagonals included; -1 pads."""
    lattice = np.asarray(lattice, dtype=float)
    n_o = len(lattice)
    out = np.full((n_o, 8), -1, dtype=np.int64)
    if n_o == 1:
        return out
    step = np.abs(lattice[1]).max()  # nearest first: lattice[1] is one spacing away
    for o in range(n_o):
        gap = np.abs(lattice - lattice[o]).max(1)
        near = np.flatnonzero((gap > 0) & (gap <= step * (1 + 1e-9)))
        out[o, : near.size] = near
    return out


def _pair_peaks_gpu(scores: Any, i: np.ndarray, j: np.ndarray, c: int) -> tuple[Any, Any]:
    """:func:`ia_stages.kmax.rings.pair_peaks` for cupy scores, by the CUDA build of
    the same code."""
    from ia_stages.kmax.cuda import pair_peaks_cuda

    xp = array_module(scores)
    return pair_peaks_cuda(scores, xp.asarray(i), xp.asarray(j), c)


def _pair_joint_peaks_gpu(
    scores: Any, i: np.ndarray, j: np.ndarray, c: int, neighbours: np.ndarray
) -> tuple[Any, Any]:
    """:func:`ia_stages.kmax.rings.pair_joint_peaks` for cupy scores, by the CUDA build
    of the same code."""
    from ia_stages.kmax.cuda import pair_joint_peaks_cuda

    xp = array_module(scores)
    return pair_joint_peaks_cuda(scores, xp.asarray(i), xp.asarray(j), c, xp.asarray(neighbours))


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
        self.interpolation = settings.interpolation
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
            rot = _warp_rotations(self.V_s[j], p, self.group, self.interpolation)
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


def _warp_rotations(image: Any, params: Any, group: SE2, interpolation: str = "keys") -> Any:
    xp = array_module(image)
    batch = xp.broadcast_to(image, (params.shape[0], *image.shape))
    return warp(batch, params, group, interpolation)


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
