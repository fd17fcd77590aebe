"""The interpolations' tap polynomials (:data:`TAPS`, the one table), their compiled (numba)
evaluation, and the SE(2) warp with its Jacobian for numpy arrays
(:func:`ia_stages.core.warp.warp_with_jacobian` calls it). The taps are shared with the kappa^max
engine's compiled kernels (:mod:`ia_stages.kmax`, CPU and CUDA); this module imports nothing of
the package, so ``warp`` and the engine import it without a circle."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ia_stages.settings.tree import check_setting

# Both interpolations weigh the 4 x 4 pixels around a point by taps at floor - 1 .. floor + 2,
# each tap a cubic polynomial in the fractional part f: TAPS[name][k] are the coefficients of
# f^0 .. f^3 of tap k. 'keys': phi the Keys kernel (a = -0.5, ia_stages.core.warp.KEYS_A) on the
# pixels themselves. 'bspline': the cubic B-spline on the image's spline coefficients
# (:func:`ia_stages.core.warp.spline_coefficients`), which interpolates the pixels with a flatter
# passband. This table is the one definition of both: the array code
# (:func:`ia_stages.core.warp.interpolate`), the compiled warp below, the kappa^max engine's ring
# sampling and its per-pair search (CPU and CUDA) all evaluate it.
TAPS = {
    "keys": np.array(
        [
            [0.0, -0.5, 1.0, -0.5],
            [1.0, 0.0, -2.5, 1.5],
            [0.0, 0.5, 2.0, -1.5],
            [0.0, 0.0, -0.5, 0.5],
        ]
    ),
    "bspline": np.array(
        [
            [1 / 6, -0.5, 0.5, -1 / 6],
            [2 / 3, 0.0, -1.0, 0.5],
            [1 / 6, 0.5, 0.5, -0.5],
            [0.0, 0.0, 0.0, 1 / 6],
        ]
    ),
}
# zero border of the moving image: the taps of any point within 2 px of the image (floor - 1
# to floor + 2, the point clamped to [-2, H + 1]) stay inside
_PAD = 4


def tap_polynomials(interpolation: str) -> np.ndarray:
    """``(4, 4)`` coefficients of f^0..f^3 of the taps at floor - 1 .. floor + 2 (:data:`TAPS`)."""
    if interpolation not in TAPS:
        check_setting("search.interpolation", interpolation)
    return TAPS[interpolation]


def taps(interpolation: str) -> tuple:
    """The 16-tuple (row-major :func:`tap_polynomials`) that the compiled kernels take."""
    return tuple(float(x) for x in tap_polynomials(interpolation).ravel())


@njit(cache=True, inline="always")
def _pw(f, m):
    """The 4 taps at fractional part f in [0, 1) of the interpolation whose tap polynomials
    are the 16-tuple ``m`` (:func:`taps`)."""
    f2 = f * f
    f3 = f2 * f
    return (
        m[0] + m[1] * f + m[2] * f2 + m[3] * f3,
        m[4] + m[5] * f + m[6] * f2 + m[7] * f3,
        m[8] + m[9] * f + m[10] * f2 + m[11] * f3,
        m[12] + m[13] * f + m[14] * f2 + m[15] * f3,
    )


@njit(cache=True, inline="always")
def _pd(f, m):
    """d/df of :func:`_pw`."""
    f2 = f * f
    return (
        m[1] + 2.0 * m[2] * f + 3.0 * m[3] * f2,
        m[5] + 2.0 * m[6] * f + 3.0 * m[7] * f2,
        m[9] + 2.0 * m[10] * f + 3.0 * m[11] * f2,
        m[13] + 2.0 * m[14] * f + 3.0 * m[15] * f2,
    )


@njit(cache=True, inline="always")
def _pdd(f, m):
    """d2/df2 of :func:`_pw`."""
    return (
        2.0 * m[2] + 6.0 * m[3] * f,
        2.0 * m[6] + 6.0 * m[7] * f,
        2.0 * m[10] + 6.0 * m[11] * f,
        2.0 * m[14] + 6.0 * m[15] * f,
    )


@njit(cache=True, inline="always")
def _dot4(w, v, r, i):
    """sum_b w[b] v[r, i + b]."""
    return w[0] * v[r, i] + w[1] * v[r, i + 1] + w[2] * v[r, i + 2] + w[3] * v[r, i + 3]


@njit(cache=True, parallel=True)
def _warp_jacobian(V, params, out, jac, m_taps):
    n, H, W = out.shape
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    for m in prange(n):
        v = V[m]
        th, b0, b1 = params[m, 0], params[m, 1], params[m, 2]
        c, s = np.cos(th), np.sin(th)
        for h in range(H):
            gy = h - cy
            for k in range(W):
                gx = k - cx
                y = c * gy + s * gx + cy + b0
                x = -s * gy + c * gx + cx + b1
                if y <= -2.0 or y >= H + 1.0 or x <= -2.0 or x >= W + 1.0:
                    out[m, h, k] = 0.0
                    jac[m, 0, h, k] = 0.0
                    jac[m, 1, h, k] = 0.0
                    jac[m, 2, h, k] = 0.0
                    continue
                y0 = np.floor(y)
                x0 = np.floor(x)
                wy = _pw(y - y0, m_taps)
                wx = _pw(x - x0, m_taps)
                dy = _pd(y - y0, m_taps)
                dx = _pd(x - x0, m_taps)
                iy = int(y0) + _PAD - 1
                ix = int(x0) + _PAD - 1
                val = 0.0
                vy = 0.0
                vx = 0.0
                for a in range(4):
                    q = _dot4(wx, v, iy + a, ix)
                    val += wy[a] * q
                    vy += dy[a] * q
                    vx += wy[a] * _dot4(dx, v, iy + a, ix)
                out[m, h, k] = val
                jac[m, 0, h, k] = vy * (-s * gy + c * gx) + vx * (-c * gy - s * gx)
                jac[m, 1, h, k] = vy
                jac[m, 2, h, k] = vx


def warp_with_jacobian_se2(
    coefficients: np.ndarray, params: np.ndarray, interpolation: str = "keys"
) -> tuple[np.ndarray, np.ndarray]:
    """Compiled :func:`ia_stages.core.warp.warp_with_jacobian` for SE(2) and numpy arrays.

    Parameters
    ----------
    coefficients : ``(n, H, W)`` what the taps of ``interpolation`` weigh
        (:func:`ia_stages.core.warp.spline_coefficients` of the images: the images for 'keys')
    params : ``(n, 3)`` SE(2) parameters
    interpolation : 'keys' or 'bspline' (:data:`TAPS`)

    Returns
    -------
    out ``(n, H, W)`` and jac ``(n, 3, H, W)``.
    """
    m_taps = taps(interpolation)
    coefficients = np.asarray(coefficients, dtype=np.float64)
    n, H, W = coefficients.shape
    padded = np.pad(coefficients, ((0, 0), (_PAD, _PAD), (_PAD, _PAD)))
    out = np.empty((n, H, W))
    jac = np.empty((n, 3, H, W))
    _warp_jacobian(padded, np.ascontiguousarray(params, dtype=np.float64), out, jac, m_taps)
    return out, jac
