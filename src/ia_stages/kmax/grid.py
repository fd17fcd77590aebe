"""Group-pooled kernels on a grid of SE(2) transforms: the ablation of kappa^max inside IA.

For unit-norm (smoothed) images u, v and a finite grid G of transforms tau (``n_angles``
rotations over the full circle times the integer shifts of a window, every ``shift_step``
pixels), let k(tau) = exp(-beta d2(tau)) with d2(tau) = ||u||^2 + ||v||^2 - 2 <u, v o tau>,
as in :func:`ia_stages.kmax.kappa_max`. Then

- kappa^avg(u, v) = mean over tau in G of k(tau): invariance by integration over the group,
  the view behind group convolutions. It is invariant only approximately: the grid is finite
  and the shift window does not cover the plane, so a transform of the inputs moves mass
  across the window's edge and between grid rotations.
- kappa^soft_T(u, v) = (mean over tau in G of k(tau)^(1/T))^T, a power mean (soft maximum)
  with temperature T: T = 1 gives kappa^avg, T -> 0 the grid maximum (kappa^max without
  refinement).

Both are computed by FFT cross-correlation of u with every rotated copy of v, in log space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, fft_module
from ia_stages.core.groups import SE2
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.warp import warp
from ia_stages.kmax import KappaMaxResult

POOLINGS = ("avg", "soft")


@dataclass(frozen=True)
class GridSettings:
    """The grid G of transforms a group-pooled kernel averages over.

    n_angles : rotations, evenly spaced over 360 degrees
    max_shift : largest |shift| per axis in pixels; None = a third of the image size
    shift_step : spacing of the integer shifts (px)
    row_chunk : images of ``U`` correlated at once (bounds memory)
    """

    n_angles: int = 24
    max_shift: int | None = None
    shift_step: int = 1
    row_chunk: int = 64


def group_kernel(
    U: Any,
    V: Any | None = None,
    beta: float = 1.0,
    pooling: str = "avg",
    temperature: float = 1.0,
    normalization: str = "unit",
    sigma: float = 2.0,
    grid: GridSettings = GridSettings(),
    group: SE2 = SE2(),
) -> KappaMaxResult:
    """kappa^avg or kappa^soft between every image of ``U`` and every image of ``V``.

    Parameters
    ----------
    U : ``(n_i, H, W)``
    V : ``(n_j, H, W)`` or None for ``V = U`` (the result is then symmetrised: entry (i, j)
        for i < j is copied to (j, i), params inverted)
    beta : RBF bandwidth
    pooling : 'avg' (mean of the kernel over the grid) or 'soft' (power mean, ``temperature``)
    temperature : T > 0 of the soft maximum (ignored for 'avg')
    normalization, sigma : as in :func:`ia_stages.kmax.kappa_max`
    grid : the transforms pooled over

    Returns
    -------
    KappaMaxResult with ``value`` ``(n_i, n_j)`` the pooled kernel, ``params``
    ``(n_i, n_j, 3)`` the best grid transform (V[j] o tau ~ U[i]), used to start invariant
    means, and ``sqdist`` ``(n_i, n_j)`` = -log(value) / beta, the squared distance the pooled
    kernel corresponds to.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    xp = array_module(U)
    fft = fft_module(xp)
    symmetric = V is None
    Un = smooth_normalize(U, sigma, normalization)
    Vn = Un if symmetric else smooth_normalize(V, sigma, normalization)
    n_i, n_j = Un.shape[0], Vn.shape[0]
    H, W = Un.shape[1:]
    s = grid.max_shift if grid.max_shift is not None else max(H, W) // 3
    offs = np.arange(-s, s + 1, grid.shift_step)
    fshape = (fft.next_fast_len(H + s), fft.next_fast_len(W + s))
    shifts = np.stack(np.meshgrid(offs, offs, indexing="ij"), -1).reshape(-1, 2)
    angles = np.arange(grid.n_angles) * (2 * np.pi / grid.n_angles)
    n_grid = angles.size * shifts.shape[0]
    t = 1.0 if pooling == "avg" else float(temperature)
    window = slice(0, 2 * s + 1, grid.shift_step)

    # float32 spectra: the FFTs dominate and d2's rounding (~1e-6) is far below the grid's
    # own approximation. u is rolled by -s in the padded frame so that shift -s..s of the
    # circular correlation lands on rows/columns 0..2s: one strided view, no gather.
    Upad = xp.zeros((n_i, *fshape), dtype=np.float32)
    Upad[:, :H, :W] = Un
    F_u = xp.conj(fft.rfft2(xp.roll(Upad, (-s, -s), axis=(1, 2))))
    u_sq = (Un**2).reshape(n_i, -1).sum(1).astype(np.float32)
    v_sq = (Vn**2).reshape(n_j, -1).sum(1).astype(np.float32)
    rot_params = xp.zeros((angles.size, group.n_params))
    rot_params[:, 0] = xp.asarray(angles)
    log_value = xp.empty((n_i, n_j))
    best = xp.zeros((n_i, n_j), dtype=np.int64)
    for j in range(n_j):
        rotated = warp(xp.broadcast_to(Vn[j], (angles.size, H, W)), rot_params, group)
        F_w = fft.rfft2(rotated.astype(np.float32), s=fshape)
        last = j + 1 if symmetric else n_i  # symmetric: rows i <= j; the rest is mirrored
        for start in range(0, last, grid.row_chunk):
            sl = slice(start, min(start + grid.row_chunk, last))
            # irfft2 = ifft over rows, then irfft over columns: keep only the window's rows
            rows = fft.ifft(F_u[sl][:, None] * F_w[None], axis=-2)[..., window, :]
            cross = fft.irfft(rows, n=fshape[1], axis=-1)[..., window]
            cross = cross.reshape(cross.shape[0], -1)
            d2 = xp.maximum((u_sq[sl] + v_sq[j])[:, None] - 2 * cross, np.float32(0))
            a = np.float32(-beta / t) * d2
            top = a.max(1)
            log_value[sl, j] = t * (top + xp.log(xp.exp(a - top[:, None]).sum(1)) - np.log(n_grid))
            best[sl, j] = xp.argmin(d2, axis=1)
    r, k = best // shifts.shape[0], best % shifts.shape[0]
    params = xp.zeros((n_i, n_j, group.n_params))
    params[..., 0] = xp.asarray(angles)[r]
    shift = xp.asarray(shifts, dtype=float)[k]
    params[..., 1:3] = xp.einsum("...ij,...j->...i", group.matrix(params), shift)
    if symmetric:
        iu, ju = np.triu_indices(n_i, k=1)
        log_value[ju, iu] = log_value[iu, ju]
        params[ju, iu] = group.inverse(params[iu, ju])
    return KappaMaxResult(
        value=xp.exp(log_value), params=params, sqdist=xp.maximum(-log_value / beta, 0.0)
    )
