"""The per-pair kappa^max search: Newton-Levenberg-Marquardt refinement of SE(2) alignments,
written once as scalar Python and compiled with numba for the CPU
(:mod:`ia_stages.kmax.refine_kernels`, :mod:`ia_stages.kmax.search_kernels`) and for CUDA
(:mod:`ia_stages.kmax.cuda`). This module is their Python side: the layout of a block of pairs
(:class:`Resolution`, :class:`PairImages`, :func:`pair_images`), the search's limits
(:class:`RefinePolicy`) and :func:`search_pairs`, which runs the compiled search.

The objective is d2(tau) = ||u||^2 + ||v||^2 - 2 <u, v o tau> (the correlation form of
:func:`ia_stages.kmax.align.pair_cost`), with Newton steps on its exact Hessian: J^T J is a poor
model of the correlation objective when u and v differ, and Gauss-Newton then needs ~15 steps per
pair where Newton needs ~5. One pass over the target's non-zero pixels computes the interpolated
warp (B-spline or Keys taps, :data:`ia_stages.core.taps.TAPS`, on the moving image's prefiltered
coefficients) with its first and second derivatives, the cost, gradient and Hessian, without storing
any image-sized array. On the CPU, one range of pairs runs per thread
(:func:`ia_stages.core.threads.on_ranges`) and the moving images (what the taps weigh) are read as
float32, two values per load (:func:`~ia_stages.kmax.refine_kernels._packed`): the loop is bound by
its gathered loads. The CUDA kernels read the same float32 values one by one. The sums stay float64;
the float32 rounding of the moving images (relative 6e-8 per value) moves d2 far below the search's
tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.smoothing import half_resolution, smooth
from ia_stages.core.taps import _PAD, taps
from ia_stages.core.threads import on_ranges
from ia_stages.core.warp import spline_coefficients
from ia_stages.kmax.align import _sumsq
from ia_stages.kmax.refine_kernels import _packed
from ia_stages.kmax.search_kernels import _count_targets, _fill_targets, _search
from ia_stages.settings.search import SearchSettings


def _target_pixels(U: np.ndarray) -> tuple[np.ndarray, ...]:
    """``off, gy, gx, t, uu`` of :class:`Resolution` for targets ``U (n_i, H, W)``: two
    compiled passes over the images on every thread (count, then fill), with no array of
    every pixel's index."""
    U = np.asarray(U, dtype=np.float64)
    n, H, W = U.shape
    flat = np.ascontiguousarray(U).reshape(n, H * W)
    counts = np.empty(n, dtype=np.int64)
    on_ranges(lambda lo, hi: _count_targets(lo, hi, flat, counts), n)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    # pixel coordinates about the centre are multiples of 1/2 below 2^23: float32 holds them
    # exactly (the kernels widen them to float64 as they read them: the same arithmetic)
    gy = np.empty(off[-1], dtype=np.float32)
    gx = np.empty(off[-1], dtype=np.float32)
    t = np.empty(off[-1])
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    on_ranges(lambda lo, hi: _fill_targets(lo, hi, flat, off, W, cy, cx, gy, gx, t), n)
    return off, gy, gx, t, sumsq_rows(U)


def above_floor(images: Any, fraction: float) -> Any:
    """``(n, h, w)`` bool (numpy or cupy, as ``images``): the pixels of at least ``fraction``
    of their image's largest |value| (every pixel of an all-zero image, and every pixel with
    ``fraction`` 0). The floor that the searches' targets and the group refinement's visited
    pixels are cut at.

    Example
    -------
    >>> above_floor(np.array([[[1.0, 0.001, -0.5]]]), 0.01).tolist()
    [[[True, False, True]]]
    """
    xp = array_module(images)
    size = xp.abs(images)
    return size >= fraction * size.reshape(images.shape[0], -1).max(1)[:, None, None]


def sumsq_rows(U: Any, rows: int = 4096) -> np.ndarray:
    """:func:`~ia_stages.kmax.align._sumsq` of ``U (n, H, W)`` (numpy, cupy, or anything
    sliced along its first axis into arrays), ``rows`` images at a time, on the host (each
    image's sum is its own: the same values, without a squared copy of all of them).

    Example
    -------
    >>> sumsq_rows(np.ones((3, 2, 2)), rows=2).tolist()
    [4.0, 4.0, 4.0]
    """
    parts = [to_numpy(_sumsq(U[s : s + rows])) for s in range(0, U.shape[0], rows)]
    return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True)
class Resolution:
    """One resolution of a block of pairs, laid out for the compiled kernels.

    off : ``(n_i + 1,)`` target i's pixels are ``off[i]:off[i + 1]`` of
    gy, gx, t : centred row / column coordinates (float32: halves, held exactly) and values
        of the targets' non-zero pixels
    V : ``(n_j, (H + 2 _PAD) (W + 2 _PAD))`` what the interpolation's taps weigh for the
        moving images (:func:`ia_stages.core.warp.spline_coefficients`: the images for 'keys',
        their B-spline coefficients for 'bspline'), zero-padded, flattened and
        :func:`._packed` (the CPU kernels), or float32 (``packed=False``: the CUDA kernels);
        the same float32 values either way
    uu, vv : squared norms of the targets and of the moving images (rounded to float32, as
        ``V`` stores them)
    shape : ``(H, W)`` of the unpadded images
    """

    off: np.ndarray
    gy: np.ndarray
    gx: np.ndarray
    t: np.ndarray
    V: np.ndarray
    uu: np.ndarray
    vv: np.ndarray
    shape: np.ndarray

    @classmethod
    def of(
        cls,
        U: np.ndarray,
        V: np.ndarray,
        packed: bool = True,
        interpolation: str = "keys",
        mirror: bool = False,
    ) -> Resolution:
        """Targets ``U (n_i, H, W)`` and moving images ``V (n_j, H, W)``, sampled by
        ``interpolation``: its prefilter (:func:`ia_stages.core.warp.spline_coefficients`) runs
        here, once per moving image, for the CPU and the CUDA kernels alike. ``mirror``: the
        moving images are V followed by its mirror images (columns reversed; ``2 n_j`` rows),
        whose prefiltered pixels are V's reversed (the prefilter is symmetric, and so is the
        zero padding)."""
        V = np.asarray(V, dtype=np.float64)
        n, H, W = V.shape
        rows = 2 * n if mirror else n
        width = (H + 2 * _PAD) * (W + 2 * _PAD)
        moving = np.empty((rows, width), np.int64 if packed else np.float32)
        vv = np.empty(rows)

        def lay_out(lo: int, hi: int) -> None:  # each image's layout is its own
            Q = spline_coefficients(V[lo:hi], interpolation)
            padded = np.pad(Q, ((0, 0), (_PAD, _PAD), (_PAD, _PAD)))
            sides = ((0, padded), (n, padded[..., ::-1])) if mirror else ((0, padded),)
            # the squared norms of the moving images as the kernels read them (float32): then
            # d2 = ||u - v' o tau||^2 for the rounded v', whose distance to v is ~6e-8 ||v||
            norms = _sumsq(V[lo:hi].astype(np.float32).astype(np.float64))
            for at, side in sides:
                flat = side.reshape(hi - lo, width)
                moving[at + lo : at + hi] = _packed(flat) if packed else flat
                vv[at + lo : at + hi] = norms

        on_ranges(lay_out, n)
        off, gy, gx, t, uu = _target_pixels(U)
        return cls(off, gy, gx, t, moving, uu, vv, np.array([H, W], dtype=np.int64))

    def with_targets(self, U: np.ndarray) -> Resolution:
        """The same moving images with targets ``U (n_i, H, W)``."""
        off, gy, gx, t, uu = _target_pixels(U)
        return replace(self, off=off, gy=gy, gx=gx, t=t, uu=uu)

    def with_moving(self, other: Resolution) -> Resolution:
        """These targets with ``other``'s moving images (the two sides are laid out
        independently, so a block of pairs can join targets made once with moving images made
        per block)."""
        return replace(self, V=other.V, vv=other.vv)

    def arrays(self) -> tuple:
        return (self.off, self.gy, self.gx, self.t, self.V, self.uu, self.vv, self.shape)

    def to(self, xp: Any) -> Resolution:
        """The same arrays as ``xp`` arrays (e.g. cupy: on the GPU), the coordinates as
        float64: the CUDA kernels (and their simulator, whose arithmetic follows numpy's
        promotion, not numba's) read float64 coordinates."""
        wide = replace(self, gy=self.gy.astype(np.float64), gx=self.gx.astype(np.float64))
        return Resolution(*(xp.asarray(a) for a in wide.arrays()))


@dataclass(frozen=True)
class RefinePolicy:
    """The per-pair search's limits and pruning (:class:`ia_stages.kmax.SearchSettings` gives
    them; see it for each one's meaning).

    iters, tol : Levenberg-Marquardt steps per resolution, and the gain below which a
        refinement stops
    prune_kappa, prune_margin : candidates are refined in order of their start cost, each only
        if exp(-beta (cost - margin)) >= prune_kappa and cost - margin <= the best cost found
        so far for the pair (prune_kappa 0 refines every candidate); with prune_kappa > 0 a
        later candidate's refinement also stops where it cannot beat that best
    kappa_stop : > 0: a refinement also stops where the Newton step (at a positive-definite
        Hessian) promises exp(-beta cost) a rise below this
    coarse_stop : the half-resolution stage also stops where the Newton step promises the cost
        a drop below this
    half_gap : with prune_kappa > 0, a start whose half-resolution cost exceeds the pair's
        lowest by more than this is not evaluated at full resolution, and a later start's
        half-resolution refinement stops where it cannot come within this of the lowest so far
    same_angle, same_shift : half-resolution optima this close (radians, px) are one
    abandon : a refinement with a bound stops where the Newton model puts its optimum above
        the bound even after ``abandon`` times the promised drop
    lam0, lam_reject : the initial damping, and the least damping after a rejected step
    """

    iters: int = 30
    tol: float = 1e-9
    prune_kappa: float = 0.0
    prune_margin: float = 0.05
    kappa_stop: float = 0.0
    coarse_stop: float = 0.0
    half_gap: float = np.inf
    same_angle: float = 1e-2
    same_shift: float = 5e-2
    abandon: float = 4.0
    lam0: float = 1e-3
    lam_reject: float = 0.3

    def lm(self) -> tuple[float, float, float]:
        """(lam0, lam_reject, abandon), as the compiled refinement takes them."""
        return float(self.lam0), float(self.lam_reject), float(self.abandon)


@dataclass(frozen=True)
class PairImages:
    """What :func:`search_pairs` reads, laid out once per kappa^max call: the full-resolution
    pairs, optionally their half-resolution versions, and optionally the full-resolution
    pairs with fewer target pixels (``search``) that rank and refine in their place, all
    sampled by ``interpolation`` ('keys' or 'bspline', :data:`ia_stages.core.taps.TAPS`).
    ``mirror``: the moving images are followed by their mirror images (:func:`pair_images`)."""

    full: Resolution
    half: Resolution | None
    search: Resolution | None = None
    tail: Resolution | None = None  # the target pixels of ``full`` that ``search`` lacks
    interpolation: str = "keys"
    mirror: bool = False

    def to(self, xp: Any) -> PairImages:
        """The same images as ``xp`` arrays (e.g. cupy: on the GPU)."""
        layouts = (self.full, self.half, self.search, self.tail)  # the fields' order
        moved = (None if r is None else r.to(xp) for r in layouts)
        return PairImages(*moved, self.interpolation, self.mirror)

    def with_moving(self, other: PairImages) -> PairImages:
        """These targets against ``other``'s moving images (both laid out with the same
        settings): a pair's result depends only on its own two images' layouts.

        Example
        -------
        >>> U = np.random.default_rng(0).random((3, 8, 8))
        >>> joined = pair_images(U, U[:1]).with_moving(pair_images(U[:1], U[1:]))
        >>> joined.full.off.size - 1, joined.full.V.shape[0]
        (3, 2)
        """
        if (self.half is None) != (other.half is None):
            raise ValueError("with_moving: one side has a half-resolution layout, the other not")
        full = self.full.with_moving(other.full)
        return PairImages(
            full,
            None if self.half is None else self.half.with_moving(other.half),
            None if self.search is None else self.search.with_moving(full),
            None if self.tail is None else self.tail.with_moving(full),
            self.interpolation,
            other.mirror,
        )

    def taps(self) -> tuple:
        """The interpolation's 16 tap coefficients, as the kernels take them."""
        return taps(self.interpolation)

    def resolutions(self) -> tuple[Resolution, Resolution, Resolution, Resolution]:
        """(exact, search, tail, half) as the kernels read them: ``full`` where one is
        absent (the kernels then do not read it)."""
        full = self.full
        return (
            full,
            self.search if self.search is not None else full,
            self.tail if self.tail is not None else full,
            self.half if self.half is not None else full,
        )


def pair_images(
    U: np.ndarray,
    V: np.ndarray,
    half: tuple[np.ndarray, np.ndarray] | None = None,
    search: np.ndarray | None = None,
    packed: bool = True,
    interpolation: str = "keys",
    mirror: bool = False,
) -> PairImages:
    """Lay out targets ``U (n_i, H, W)``, moving images ``V (n_j, H, W)``, optionally their
    half-resolution versions ``half = (U2, V2)`` (e.g. by
    :func:`ia_stages.core.smoothing.half_resolution`) and optionally targets ``search (n_i, H, W)``
    (e.g. ``U`` without its faintest pixels) for :func:`search_pairs`; ``packed=False``: for
    :func:`ia_stages.kmax.cuda.search_pairs_cuda` (after :meth:`PairImages.to`). The moving
    images are sampled by ``interpolation`` ('keys' or 'bspline'); with ``mirror`` they are V
    followed by its mirror images, at both resolutions (:meth:`Resolution.of`), as
    :func:`search_pairs` reads them for ``n_plain``."""
    full = Resolution.of(U, V, packed, interpolation, mirror)
    return PairImages(
        full,
        None if half is None else Resolution.of(*half, packed, interpolation, mirror),
        None if search is None else full.with_targets(search),
        None if search is None else full.with_targets(np.where(search == 0, U, 0.0)),
        interpolation,
        mirror,
    )


def mirror_candidates(images: PairImages, starts: Any, n_plain: int | None) -> tuple[int, int]:
    """``(n_plain, mirror_row)`` as the compiled search takes them: with ``n_plain`` None every
    candidate of ``starts (m, c, 3)`` is of V[jj] (c, 0); else the candidates from ``n_plain``
    on are of the mirror images, rows n_j on of a ``mirror`` layout (a ValueError otherwise).

    Example
    -------
    >>> X = np.random.default_rng(0).random((2, 8, 8))
    >>> mirror_candidates(pair_images(X, X, mirror=True), np.zeros((1, 4, 3)), 2)
    (2, 2)
    """
    n_c = starts.shape[1]
    if n_plain is None:
        return n_c, 0
    if not images.mirror:
        raise ValueError("n_plain: the layout holds no mirror images (pair_images(mirror=True))")
    if not 0 <= int(n_plain) <= n_c:
        raise ValueError(f"n_plain must be in 0..{n_c} (the candidates per pair), got {n_plain}")
    return int(n_plain), images.full.V.shape[0] // 2


def search_pairs(
    images: PairImages,
    ii: np.ndarray,
    jj: np.ndarray,
    starts: np.ndarray,
    beta: float,
    policy: RefinePolicy,
    coarse_iters: int = 0,
    n_plain: int | None = None,
    mirrored: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Best refined transform of each pair (U[ii[k]], V[jj[k]]) over its starting candidates.

    Parameters
    ----------
    images : the targets U and moving images V (:func:`pair_images`)
    ii, jj : ``(m,)`` pair indices
    starts : ``(m, c, 3)`` candidate SE(2) parameters per pair
    beta : the kernel's bandwidth, exp(-beta d2)
    policy : the refinement's limits and pruning (:class:`RefinePolicy`)
    coarse_iters : > 0 (with half-resolution images): every start is first refined with at
        most this many steps on the half-resolution pair (translations there are half as
        long), then ordered and pruned by the full-resolution cost where it ended
        (skipped where the half-resolution cost already rules them out)
    n_plain : None (default: every candidate is of V[jj]), or the number of candidates of
        V[jj]; the others (``starts[:, n_plain:]``) are of the mirror images, which ``images``
        then lays out after the moving images (``pair_images(..., mirror=True)``; see
        :func:`mirror_candidates`): the pair's candidates of both are ranked, pruned and
        refined together
    mirrored : optional ``(m,)`` bool array, filled with whether each pair's winner is of the
        mirror image

    With ``images.search``, starts are ranked and refined on its targets at full resolution,
    and each pair's winner is then refined again on all pixels of ``images.full`` (nearly
    always one evaluation that finds it converged); a pair that nothing was refined for gets
    its reported start's cost there.

    Returns
    -------
    params ``(m, 3)``, cost ``(m,)``: V[jj] o tau ~ U[ii] (the mirror image of V[jj] where
    ``mirrored``), cost the correlation-form d2 on ``images.full``.

    Example
    -------
    >>> X = np.random.default_rng(0).random((2, 12, 12))
    >>> starts = np.zeros((1, 2, 3)); both = pair_images(X, X, mirror=True)
    >>> flag = np.empty(1, bool)
    >>> _ = search_pairs(both, np.array([0]), np.array([0]), starts, 1.0, RefinePolicy(),
    ...                  n_plain=1, mirrored=flag)
    >>> flag.tolist()  # X[0] onto itself: the plain candidate wins
    [False]
    """
    plain, mirror_row = mirror_candidates(images, starts, n_plain)
    m = ii.size
    out_p = np.empty((m, 3))
    out_c = np.empty(m)
    out_m = np.empty(m, dtype=np.bool_) if mirrored is None else mirrored
    exact, search, tail, half = images.resolutions()
    _search(
        exact.arrays(), search.arrays(), tail.arrays(), half.arrays(), np.asarray(ii, np.int64),
        np.asarray(jj, np.int64),
        np.ascontiguousarray(starts, dtype=np.float64), plain, mirror_row, int(policy.iters),
        float(policy.tol), int(coarse_iters) if images.half is not None else 0, float(beta),
        float(policy.prune_kappa), float(policy.prune_margin), float(policy.kappa_stop),
        float(policy.coarse_stop), float(policy.half_gap), float(policy.same_angle),
        float(policy.same_shift), policy.lm(), images.search is not None, images.taps(), out_p,
        out_c, out_m,
    )  # fmt: skip
    return out_p, out_c


def _half_resolution_pair(
    Un: Any, Vn: Any, sigma: float, settings: SearchSettings
) -> tuple[Any, Any] | None:
    """The targets and moving images of the half-resolution stage (``half_sigma`` smoothing,
    2 x 2 block means; the targets floored at ``half_floor``), or None when that stage is off
    or the image sizes are odd."""
    H, W = Un.shape[1:]
    if settings.coarse_iters <= 0 or H % 2 or W % 2:
        return None
    extra = float(np.sqrt(max(settings.half_sigma**2 - sigma**2, 0.0)))
    V2 = half_resolution(smooth(Vn, extra))
    U2 = V2 if Vn is Un else half_resolution(smooth(Un, extra))
    return _floored(U2, settings.half_floor), V2


def _search_targets(Un: Any, settings: SearchSettings) -> Any | None:
    """The targets that full-resolution starts are ranked and refined on before the winner's
    refinement on ``Un``: ``Un`` floored at ``full_floor``, or None (``Un`` itself) when
    pruning is off."""
    return _floored(Un, settings.full_floor) if settings.prune_kappa > 0 else None


def _floored(images: Any, fraction: float) -> Any:
    """``images (n, h, w)`` with the pixels below ``fraction`` of their image's largest
    |value| set to 0: the Gaussian tails of smoothed images, which the compiled kernel would
    otherwise visit in every evaluation."""
    return array_module(images).where(above_floor(images, fraction), images, 0.0)


def _pair_layout(
    Un: Any, Vn: Any, sigma: float, settings: SearchSettings, mirror: bool = False
) -> PairImages:
    """The pairs as the compiled search reads them (:func:`ia_stages.kmax.refine.pair_images`):
    the half-resolution stage's images (when on) and the floored search targets (when
    pruning), laid out on the host and, for cupy images, copied to the GPU; with ``mirror``
    the moving images followed by their mirror images."""
    xp = array_module(Un)
    half = _half_resolution_pair(Un, Vn, sigma, settings)
    search = _search_targets(Un, settings)
    host = (
        to_numpy(Un),
        to_numpy(Vn),
        None if half is None else tuple(to_numpy(h) for h in half),
        None if search is None else to_numpy(search),
    )
    interp = settings.interpolation
    if xp is np:
        return pair_images(*host, interpolation=interp, mirror=mirror)
    return pair_images(*host, packed=False, interpolation=interp, mirror=mirror).to(xp)


def _policy(settings: SearchSettings) -> RefinePolicy:
    """The refinement's part of ``settings``, as the compiled kernels take it."""
    return RefinePolicy(
        iters=settings.refine_iters,
        tol=settings.refine_tol,
        prune_kappa=settings.prune_kappa,
        prune_margin=settings.prune_margin,
        kappa_stop=_kappa_stop(settings),
        coarse_stop=settings.coarse_d2_stop,
        half_gap=settings.half_gap,
        same_angle=settings.same_angle,
        same_shift=settings.same_shift,
        abandon=settings.abandon,
        lam0=settings.lam0,
        lam_reject=settings.lam_reject,
    )


def _kappa_stop(settings: SearchSettings) -> float:
    """Refinements stop where the Newton model promises the kernel value less than this."""
    return settings.kappa_stop_fraction * settings.prune_kappa
