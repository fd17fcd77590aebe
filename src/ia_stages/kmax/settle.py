"""The settling check of the kappa^max search: is a pair's optimum the global one?

The polar scan looks for rotations about a few centres near each image's centroid; a pair whose
best alignment lies a few pixels from the centroid-matched translation can then end in a local
optimum. After the search, every pair is checked against an exhaustive coarse scan: the
correlation of the half-resolution pair (``settle_sigma`` smoothing, 2 x 2 block means,
unit norm) at ``settle_angles`` rotations x every half-resolution shift within ``settle_shift``
px, as float32 matrix products per moving image (numpy or cupy: the same array code on
either). A pair is *unsettled* where that scan's best lies ``settle_margin`` (in d2) above the
best it scores near the pair's optimum (within one step of rotation and of shift) and the
kernel value it promises could beat the pair's by more than ``prune_kappa``; the refinement
(:mod:`ia_stages.kmax.refine`, on CPU threads or the GPU) then runs again from both the pair's
optimum and the scan's best, and the better is kept.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2
from ia_stages.core.smoothing import half_resolution, smooth
from ia_stages.kmax.refine import PairImages
from ia_stages.kmax.refinement import _refine_candidates
from ia_stages.settings.search import SearchSettings

TILE = 64  # targets (and moving images) per tile of the scan (memory only)
DENSE = 8  # a tile's pairs are scored by one product when they fill 1 / DENSE of it or more


def settle_bytes(shape: tuple[int, ...], settings: SearchSettings) -> int:
    """Bytes the settling check holds per target image of ``shape = (H, W)``: its
    half-resolution copies at every shift of the scan, float32 (0 where the check is off).

    Example
    -------
    >>> settle_bytes((40, 40), SearchSettings(settle_shift=6))
    78400
    >>> settle_bytes((40, 40), SearchSettings(settle_shift=0))
    0
    """
    h, w = (int(x) for x in shape[-2:])
    if settings.settle_shift < 2 or h % 2 or w % 2:
        return 0
    side = 2 * (settings.settle_shift // 2) + 1
    return side * side * (h // 2) * (w // 2) * 4


class SettleCheck:
    """The exhaustive coarse scan of half-resolution pairs, set up once for targets ``Un`` and
    moving images ``Vn`` (smoothed, normalised, ``(n, H, W)`` with H, W even).

    Parameters
    ----------
    Un, Vn : ndarray
        the targets and moving images (``Vn is Un`` for the pairs of one set)
    sigma : float
        kappa^max's smoothing, already in ``Un``, ``Vn``
    settings : SearchSettings
        ``settle_sigma``, ``settle_angles``, ``settle_shift``, ``settle_starts``

    Examples
    --------
    >>> import numpy as np
    >>> X = np.zeros((2, 16, 16)); X[:, 4:12, 6:10] = 1.0
    >>> X = X / np.linalg.norm(X.reshape(2, -1), axis=1)[:, None, None]
    >>> check = SettleCheck(X, X, 0.0, SearchSettings(settle_shift=6))
    >>> score, away, near, start = check.scan(np.array([0]), np.array([1]), np.zeros((1, 3)))
    >>> bool(score.max() <= near[0] + 1e-6), start.shape  # the identity is the best
    (True, (1, 6, 3))
    """

    def __init__(self, Un: Any, Vn: Any, sigma: float, settings: SearchSettings) -> None:
        xp = array_module(Un)
        self.xp = xp
        self.extra = extra = float(np.sqrt(max(settings.settle_sigma**2 - sigma**2, 0.0)))
        V2 = half_resolution(smooth(Vn, extra))
        U2 = V2 if Vn is Un else half_resolution(smooth(Un, extra))
        self.V2 = V2
        self.R = settings.settle_angles
        self.c = settings.settle_starts
        self.angles = np.arange(self.R) * (2 * np.pi / self.R)
        self.S = S = settings.settle_shift // 2  # half-resolution px
        offs = np.arange(-S, S + 1)
        self.shifts = np.stack(np.meshgrid(offs, offs, indexing="ij"), -1).reshape(-1, 2)
        self.taps, self.weights = _bilinear_rotation(xp, U2.shape[1:], self.angles)
        self._cache: dict[int, Any] = {}
        # <u, v o (theta, A s)> = <u, r(. + s)> = <u(. - s), r>, r = v o (theta, 0): the targets
        # shifted back by every shift (zero outside), once, against each rotated moving image
        n, h, w = U2.shape
        big = xp.zeros((n, h + 2 * S, w + 2 * S), np.float32)
        big[:, S : S + h, S : S + w] = U2
        parts = [big[:, S - a : S - a + h, S - b : S - b + w] for a, b in self.shifts]
        self.u_shift = xp.stack(parts, 1).reshape(n, len(self.shifts), h * w)

    def with_moving(self, Vn: Any) -> SettleCheck:
        """The same check of the same targets against other moving images ``Vn``.

        Example
        -------
        >>> import numpy as np
        >>> X = np.random.default_rng(0).random((3, 16, 16))
        >>> check = SettleCheck(X, X, 0.0, SearchSettings(settle_shift=6)).with_moving(X[:1])
        >>> check.V2.shape, check.u_shift.shape[0]
        ((1, 8, 8), 3)
        """
        other = copy.copy(self)
        other.V2 = half_resolution(smooth(Vn, self.extra))
        other._cache = {}
        return other

    def _rotated(self, j0: int) -> Any:
        """``(cols * R, h * w)`` float32: the moving images j0 : j0 + TILE rotated by every
        angle of the scan about the image centre (bilinear, zero outside), one row per
        copy; kept for the next tiles of the same columns."""
        if j0 not in self._cache:
            block = self.V2[j0 : j0 + TILE].reshape(-1, self.V2[0].size).astype(np.float32)
            rot = (block[:, self.taps] * self.weights).sum(-1)  # (cols, R, P)
            self._cache = {j0: rot.reshape(-1, rot.shape[2])}
        return self._cache[j0]

    def scan(self, i: np.ndarray, j: np.ndarray, params: Any) -> tuple[Any, Any, Any, Any]:
        """For the pairs (U[i[k]], V[j[k]]) with optima ``params (m, 3)``, the scan's starts
        ``(m, c, 3)`` (c = ``settle_starts``, at full resolution: the c best rotations, each at
        its best shift, of those away from the optimum) with their correlations ``(m, c)``, whether
        each lies further than one step of rotation or shift from ``params`` ``(m, c)``, and
        the scan's best within one step of ``params`` ``(m,)`` (-inf where the optimum lies
        outside the window): ``score, away, near, start``. Pairs are scored by tiles of
        ``TILE`` targets x ``TILE`` moving images, one float32 matrix product per tile where
        the pairs fill 1 / ``DENSE`` of it or more, one per pair otherwise."""
        xp, R, S = self.xp, self.R, self.S
        m, side = i.size, 2 * S + 1
        if m == 0:
            empty = xp.zeros((0, self.c))
            return empty, empty.astype(bool), xp.zeros(0), xp.zeros((0, self.c, 3))
        n_s = side * side
        P = self.u_shift.shape[2]
        per_rot = xp.empty((m, R), dtype=np.float32)
        arg_s = xp.empty((m, R), dtype=np.int64)
        near = xp.empty(m)
        g = SE2()
        A = g.matrix(params)  # v o (theta, b) = (v o (theta, 0)) shifted by s = A^T b
        s = xp.einsum("mji,mj->mi", A, params[:, 1:3]) / 2.0  # half-resolution px
        r0 = xp.rint(params[:, 0] / (2 * np.pi / R)).astype(np.int64)
        s0 = xp.rint(s).astype(np.int64)
        step = xp.arange(-1, 2)
        rr = (r0[:, None] + step) % R  # (m, 3)
        yy = s0[:, :1] + step + S  # (m, 3) indices into the shift window
        xx = s0[:, 1:] + step + S
        ok = ((yy >= 0) & (yy < side))[:, :, None] & ((xx >= 0) & (xx < side))[:, None, :]
        yx = (yy[:, :, None] * side + xx[:, None, :]).reshape(m, 9).clip(0, n_s - 1)
        # tiles column-major, so that each tile's rotated moving images are made once
        tile = (j // TILE) * (i.max() // TILE + 1) + i // TILE
        order = np.argsort(tile, kind="stable")
        keys, first = np.unique(tile[order], return_index=True)
        bounds = np.append(first, m)
        for a in range(keys.size):
            sel = order[bounds[a] : bounds[a + 1]]
            i0, j0 = (i[sel[0]] // TILE) * TILE, (j[sel[0]] // TILE) * TILE
            k = xp.asarray(sel)
            n_rows = min(TILE, self.u_shift.shape[0] - i0)
            n_cols = min(TILE, self.V2.shape[0] - j0)
            if sel.size * DENSE >= n_rows * n_cols:  # one product for all the tile's pairs
                T = self.u_shift[i0 : i0 + TILE]
                rows = T.shape[0]
                rot = self._rotated(j0)  # (cols * R, P)
                cols = rot.shape[0] // R
                # (cols, R, rows, n_s): the shifts last, so that reductions over them are
                # contiguous
                corr = (rot @ T.reshape(-1, P).T).reshape(cols, R, rows, n_s)
                pair = corr[xp.asarray(j[sel] - j0), :, xp.asarray(i[sel] - i0)]  # (p, R, n_s)
            else:  # a few pairs (the kNN modes' lists): one small product per pair
                cols, which = np.unique(j[sel], return_inverse=True)
                V = self.V2[xp.asarray(cols)].reshape(cols.size, -1).astype(np.float32)
                rot = (V[:, self.taps] * self.weights).sum(-1)[xp.asarray(which)]  # (p, R, P)
                T = self.u_shift[xp.asarray(i[sel])]  # (p, n_s, P)
                pair = xp.matmul(rot, T.transpose(0, 2, 1))  # (p, R, n_s)
            arg = xp.argmax(pair, 2)
            arg_s[k] = arg
            per_rot[k] = xp.take_along_axis(pair, arg[..., None], 2)[..., 0]
            idx = xp.arange(sel.size)[:, None, None]
            block = pair[idx, rr[k][:, :, None], yx[k][:, None, :]]  # (p, 3, 9)
            inside = ok[k].reshape(-1, 1, 9)
            near[k] = xp.where(inside, block, -xp.inf).reshape(sel.size, -1).max(1)
        # a rotation's best is away from the optimum where it lies more than one step from
        # it in rotation or in shift; the starts are the c best of those
        at_all = xp.asarray(self.shifts)[arg_s]  # (m, R, 2)
        turn = xp.abs(xp.arange(R)[None, :] - r0[:, None]) % R
        away_r = (xp.minimum(turn, R - turn) > 1) | (xp.abs(at_all - s0[:, None]).max(2) > 1)
        key = xp.where(away_r, per_rot, -xp.inf)
        ang = xp.argsort(-key, axis=1)[:, : self.c]  # (m, c)
        away = xp.isfinite(xp.take_along_axis(key, ang, 1))
        score = xp.take_along_axis(per_rot, ang, 1).astype(np.float64)
        at = xp.take_along_axis(at_all, ang[..., None], 1)  # (m, c, 2)
        start = xp.zeros((m, self.c, 3))
        start[..., 0] = xp.asarray(self.angles)[ang]
        start[..., 1:3] = xp.einsum("mcij,mcj->mci", g.matrix(start), 2.0 * at)
        return score, away, near, start


def _bilinear_rotation(xp: Any, shape: tuple[int, int], angles: np.ndarray) -> tuple[Any, Any]:
    """Taps ``(R, h * w, 4)`` (flat pixel indices) and weights ``(R, h * w, 4)`` of v o (theta,
    0) for every angle: bilinear interpolation at A (p - c) + c, c the image centre, zero
    outside (weight 0)."""
    h, w = shape
    g = SE2()
    p = np.zeros((angles.size, 3))
    p[:, 0] = angles
    A = g.matrix(p)  # (R, 2, 2)
    c = np.array([(h - 1) / 2, (w - 1) / 2])
    grid = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"), -1).reshape(-1, 2)
    q = np.einsum("rij,pj->rpi", A, grid - c) + c  # (R, P, 2)
    lo = np.floor(q).astype(np.int64)
    f = q - lo
    taps, weights = [], []
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        y, x = lo[..., 0] + dy, lo[..., 1] + dx
        wt = (f[..., 0] if dy else 1 - f[..., 0]) * (f[..., 1] if dx else 1 - f[..., 1])
        inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
        taps.append(np.where(inside, y * w + x, 0))
        weights.append(np.where(inside, wt, 0.0))
    return xp.asarray(np.stack(taps, -1)), xp.asarray(np.stack(weights, -1), dtype=np.float32)


def unsettled(
    score: Any, away: Any, near: Any, sqdist: Any, beta: float, settings: SearchSettings
) -> Any:
    """``(m, c)`` bool: the check's starts that may beat their pair's optimum: away from it,
    scored no more than ``settle_margin`` (in d2) below the scan's best near it, and
    promising, with that margin, a kernel value above the pair's by more than
    ``prune_kappa``.

    Example
    -------
    >>> import numpy as np
    >>> score = np.array([[0.84, 0.90, 0.70]]); away = np.array([[True, True, False]])
    >>> s = SearchSettings(settle_shift=6)
    >>> unsettled(score, away, np.array([0.85]), np.array([0.3]), 2.0, s).tolist()
    [[True, True, False]]
    """
    xp = array_module(score)
    # d2 = ||u||^2 + ||v||^2 - 2 <u, v o tau>: the d2 a start may gain, with the scan's slack
    gain = 2.0 * (score - near[:, None]) + settings.settle_margin
    d2 = sqdist[:, None]
    promised = xp.exp(-beta * xp.maximum(d2 - gain, 0.0)) - xp.exp(-beta * d2)
    return away & (gain > 0) & (promised > settings.prune_kappa)


def settle_check(Un: Any, Vn: Any, sigma: float, settings: SearchSettings) -> SettleCheck | None:
    """The settling check of targets ``Un`` against moving images ``Vn``
    (:class:`ia_stages.kmax.settle.SettleCheck`), or None where it is off
    (``settle_shift`` 0) or the image sizes are odd."""
    H, W = Un.shape[1:]
    if settings.settle_shift < 2 or H % 2 or W % 2:
        return None
    return SettleCheck(Un, Vn, sigma, settings)


def settle(
    check: SettleCheck,
    images: PairImages,
    i: np.ndarray,
    j: np.ndarray,
    params: Any,
    sqdist: Any,
    settings: SearchSettings,
    beta: float,
) -> tuple[Any, Any]:
    """The pairs' optima ``params (m, 3)``, ``sqdist (m,)`` after the settling check: each
    pair with starts that may beat its optimum (:func:`ia_stages.kmax.settle.unsettled`) is
    refined again from its optimum and those starts, the better kept."""
    score, away, near, start = check.scan(i, j, params)
    redo = unsettled(score, away, near, sqdist, beta, settings)  # (m, c)
    rows = np.flatnonzero(to_numpy(redo.any(1)))
    if rows.size == 0:
        return params, sqdist
    xp = array_module(params)
    k = xp.asarray(rows)
    found = params[k][:, None]
    # the optimum first (the bound the others must beat), then the starts that may beat it,
    # as many columns as the pair with most has (the others repeat the optimum)
    order = xp.argsort(~redo[k], axis=1, kind="stable")
    chosen = xp.take_along_axis(redo[k], order, 1)
    width = int(chosen.sum(1).max())
    chosen = chosen[:, :width, None]
    picked = xp.take_along_axis(start[k], order[..., None], 1)[:, :width]
    starts = xp.concatenate([found, xp.where(chosen, picked, found)], 1)
    p, d2 = _refine_candidates(images, i[rows], j[rows], starts, settings, beta)
    params, sqdist, _ = _kept_better(params, sqdist, k, p, d2)
    return params, sqdist


def settle_mirrored(
    check: SettleCheck,
    images: PairImages,
    i: np.ndarray,
    j: np.ndarray,
    params: Any,
    sqdist: Any,
    won: Any,
    n_j: int,
    settings: SearchSettings,
    beta: float,
) -> tuple[Any, Any, Any]:
    """:func:`settle` of a search with mirror images (``check`` of the moving images followed
    by their mirror images, ``won`` where a pair's optimum is of the mirror image): the side
    of the optimum is checked about it, the other side everywhere, against the optimum's
    neighbourhood; the pairs with starts that may beat it are refined again on both sides
    together. Returns params, sqdist and won."""
    xp = array_module(params)
    side = to_numpy(won).astype(np.int64)
    sc_a, aw_a, near, st_a = check.scan(i, j + n_j * side, params)
    sc_b, _, _, st_b = check.scan(i, j + n_j * (1 - side), params)
    redo_a = unsettled(sc_a, aw_a, near, sqdist, beta, settings)
    redo_b = unsettled(sc_b, xp.ones_like(aw_a), near, sqdist, beta, settings)
    rows = np.flatnonzero(to_numpy(redo_a.any(1) | redo_b.any(1)))
    if rows.size == 0:
        return params, sqdist, won
    k = xp.asarray(rows)
    found = params[k][:, None]
    own = xp.concatenate([found, xp.where(redo_a[k][..., None], st_a[k], found)], 1)
    first = st_b[k][:, :1]  # the other side's best, so that its starts are real ones
    other = xp.concatenate([first, xp.where(redo_b[k][..., None], st_b[k], first)], 1)
    flip = xp.asarray(side[rows].astype(bool))[:, None, None]
    starts = xp.concatenate([xp.where(flip, other, own), xp.where(flip, own, other)], 1)
    won_again = xp.empty(rows.size, dtype=bool)
    p, d2 = _refine_candidates(images, i[rows], j[rows], starts, settings, beta,
                               own.shape[1], won_again)  # fmt: skip
    return _kept_better(params, sqdist, k, p, d2, won, won_again)


def _kept_better(
    params: Any, sqdist: Any, k: Any, p: Any, d2: Any, won: Any = None, won_again: Any = None
) -> tuple[Any, Any, Any]:
    """Copies of ``params``, ``sqdist`` (and ``won``) with rows ``k`` replaced by the settling
    refinement's ``p``, ``d2`` (and ``won_again``) where it found a lower d2."""
    better = d2 < sqdist[k]
    params, sqdist = params.copy(), sqdist.copy()
    params[k[better]] = p[better]
    sqdist[k[better]] = d2[better]
    if won is not None:
        won = won.copy()
        won[k[better]] = won_again[better]
    return params, sqdist, won
