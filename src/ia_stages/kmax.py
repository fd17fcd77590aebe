"""The transformation-invariant kernel kappa^max (paper eq. 2.2) for all pairs of images.

kappa^max(u, v) = max over tau_u, tau_v of exp(-beta ||u o tau_u - v o tau_v||^2). For a group
acting by norm-preserving maps this equals max over one relative transform tau of
exp(-beta d2(tau)) with d2(tau) = ||u||^2 + ||v||^2 - 2 <u, v o tau>; we search that form.
Writing the distance through the correlation keeps the norm of v fixed, as it is for continuous
images: content moved off the canvas is not rewarded, and an all-zero image is at d2 = ||v||^2
from every v. ``params[i, j]`` is the tau with
``V[j] o tau ~ U[i]``, so ``params[j, i]`` is its inverse.

The search is global over the full circle of rotations: a coarse scan (``n_angles`` rotations
times every integer shift in a window, all shifts of one rotation at once by FFT
cross-correlation on lightly smoothed images), then Levenberg-Marquardt refinement of the best
``n_candidates`` distinct rotations, first on the smoothed and then on the raw objective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .align import pair_cost, refine_alignment
from .backend import array_module, fft_module, to_numpy
from .groups import SE2, wrap_angle
from .kernels import normalize, smooth
from .warp import warp


@dataclass(frozen=True)
class SearchSettings:
    """Settings of the global kappa^max search.

    n_angles : rotations in the coarse scan (evenly spaced over 360 degrees)
    max_shift : largest |shift| per axis in pixels; None = a third of the image size
    coarse_sigma : total Gaussian smoothing (px) of the images the scan and the first refinement
        see; on top of kappa^max's own ``sigma`` only sqrt(coarse_sigma^2 - sigma^2) is added,
        and nothing (no smoothed refinement either) when ``sigma >= coarse_sigma``
    n_candidates : distinct rotations refined per pair
    refine_iters : Levenberg-Marquardt iterations per smoothing level
    pair_chunk : pairs processed at once (bounds memory)
    prune_kappa : skip the refinement of a candidate whose kernel value cannot reach
        ``prune_kappa`` nor beat the pair's best candidate, assuming refinement lowers the
        squared distance by at most ``prune_margin`` from the scan's transform; the reported
        value then errs by less than ``prune_kappa``. 0 refines every candidate.
    prune_margin : that bound, in squared distance of unit-norm images
    """

    n_angles: int = 72
    max_shift: int | None = None
    coarse_sigma: float = 1.0
    n_candidates: int = 2
    refine_iters: int = 30
    pair_chunk: int = 64
    prune_kappa: float = 1e-5
    prune_margin: float = 0.1


# The brute-force reference (benchmark and tests only): a 1-degree rotation grid, every integer
# shift in the window, four candidates refined to convergence.
DENSE_REFERENCE = SearchSettings(
    n_angles=360, n_candidates=4, refine_iters=60, pair_chunk=16, prune_kappa=0.0
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
) -> KappaMaxResult:
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

    Returns
    -------
    KappaMaxResult
    """
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
    extra = float(np.sqrt(max(settings.coarse_sigma**2 - sigma**2, 0.0)))
    scan = _CoarseScan(Un, Vn, group, settings, extra)
    for start in range(0, ii.size, settings.pair_chunk):
        i = ii[start : start + settings.pair_chunk]
        j = jj[start : start + settings.pair_chunk]
        p, d2 = _search_pairs(scan, Un, Vn, i, j, group, settings, beta)
        params[i, j] = p
        sqdist[i, j] = d2
        if progress is not None:
            progress(i.size)
    if symmetric:
        params[jj, ii] = group.inverse(params[ii, jj])
        sqdist[jj, ii] = sqdist[ii, jj]
    params[..., 0] = wrap_angle(params[..., 0])
    return KappaMaxResult(value=xp.exp(-beta * sqdist), params=params, sqdist=sqdist)


def _search_pairs(
    scan: _CoarseScan,
    Un: Any,
    Vn: Any,
    i: np.ndarray,
    j: np.ndarray,
    group: SE2,
    settings: SearchSettings,
    beta: float,
) -> tuple[Any, Any]:
    """Global search for pairs (i[k], j[k]).

    Returns params ``(m, n_params)`` and sqdist ``(m,)``.
    """
    xp = array_module(Un)
    starts = scan.candidates(i, j, settings.n_candidates)  # (m, c, n_params)
    m, c, k = starts.shape
    ti, tj = np.repeat(i, c), np.repeat(j, c)
    p = starts.reshape(m * c, k)
    cost = pair_cost(Un[ti], Vn[tj], p, group, objective="correlation")
    sel = _worth_refining(cost.reshape(m, c), beta, settings).ravel()
    if bool(sel.any()):
        ps, si, sj = p[sel], ti[to_numpy(sel)], tj[to_numpy(sel)]
        it = settings.refine_iters
        if scan.extra_sigma > 0:
            ps, _ = refine_alignment(
                scan.U_s[si], scan.V_s[sj], ps, group, it, objective="correlation"
            )
        ps, cs = refine_alignment(Un[si], Vn[sj], ps, group, it, objective="correlation")
        better = cs < cost[sel]  # the smoothed stage may have moved away from a good start
        p[sel] = xp.where(better[:, None], ps, p[sel])
        cost[sel] = xp.where(better, cs, cost[sel])
    best = xp.argmin(cost.reshape(m, c), axis=1)
    rows = xp.arange(m)
    return p.reshape(m, c, k)[rows, best], cost.reshape(m, c)[rows, best]


def _worth_refining(d0: Any, beta: float, settings: SearchSettings) -> Any:
    """Mask ``(m, c)`` of candidates whose refined value could matter (see prune_kappa)."""
    xp = array_module(d0)
    if settings.prune_kappa <= 0:
        return xp.ones(d0.shape, dtype=bool)
    reachable = d0 - settings.prune_margin
    can_matter = xp.exp(-beta * reachable) >= settings.prune_kappa
    can_win = reachable <= d0.min(axis=1, keepdims=True)
    return can_matter & can_win


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
