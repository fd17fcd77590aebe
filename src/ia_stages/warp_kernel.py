"""Compiled (numba) Keys cubic-convolution taps, and the SE(2) warp with its Jacobian for numpy
arrays (:func:`ia_stages.warp.warp_with_jacobian` calls it). The taps are shared with the
kappa^max engine's compiled kernels (:mod:`ia_stages.kmax`); this module imports nothing of
the package, so ``warp`` and the engine import it without a circle."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_A = -0.5  # Keys parameter, as ia_stages.warp.KEYS_A
# zero border of the moving image: the taps of any point within 2 px of the image (floor - 1
# to floor + 2, the point clamped to [-2, H + 1]) stay inside
_PAD = 4


@njit(cache=True, inline="always")
def _weights(f):
    """Keys weights phi(f + 1), phi(f), phi(f - 1), phi(f - 2) for f in [0, 1)."""
    g = 1.0 - f
    f1 = f + 1.0
    g1 = g + 1.0
    return (
        ((_A * f1 - 5.0 * _A) * f1 + 8.0 * _A) * f1 - 4.0 * _A,
        ((_A + 2.0) * f - (_A + 3.0)) * f * f + 1.0,
        ((_A + 2.0) * g - (_A + 3.0)) * g * g + 1.0,
        ((_A * g1 - 5.0 * _A) * g1 + 8.0 * _A) * g1 - 4.0 * _A,
    )


@njit(cache=True, inline="always")
def _first(f):
    """phi' at f + 1, f, f - 1, f - 2 for f in [0, 1)."""
    g = 1.0 - f
    f1 = f + 1.0
    g1 = g + 1.0
    return (
        (3.0 * _A * f1 - 10.0 * _A) * f1 + 8.0 * _A,
        (3.0 * (_A + 2.0) * f - 2.0 * (_A + 3.0)) * f,
        -(3.0 * (_A + 2.0) * g - 2.0 * (_A + 3.0)) * g,
        -((3.0 * _A * g1 - 10.0 * _A) * g1 + 8.0 * _A),
    )


@njit(cache=True, inline="always")
def _second(f):
    """phi'' at f + 1, f, f - 1, f - 2 for f in [0, 1)."""
    g = 1.0 - f
    return (
        6.0 * _A * (f + 1.0) - 10.0 * _A,
        6.0 * (_A + 2.0) * f - 2.0 * (_A + 3.0),
        6.0 * (_A + 2.0) * g - 2.0 * (_A + 3.0),
        6.0 * _A * (g + 1.0) - 10.0 * _A,
    )


@njit(cache=True, inline="always")
def _dot4(w, v, r, i):
    """sum_b w[b] v[r, i + b]."""
    return w[0] * v[r, i] + w[1] * v[r, i + 1] + w[2] * v[r, i + 2] + w[3] * v[r, i + 3]


@njit(cache=True, parallel=True)
def _warp_jacobian(V, params, out, jac):
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
                wy = _weights(y - y0)
                wx = _weights(x - x0)
                dy = _first(y - y0)
                dx = _first(x - x0)
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


def warp_with_jacobian_se2(images: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Compiled :func:`ia_stages.warp.warp_with_jacobian` for SE(2) and numpy arrays.

    Returns out ``(n, H, W)`` and jac ``(n, 3, H, W)``.
    """
    images = np.asarray(images, dtype=np.float64)
    n, H, W = images.shape
    padded = np.pad(images, ((0, 0), (_PAD, _PAD), (_PAD, _PAD)))
    out = np.empty((n, H, W))
    jac = np.empty((n, 3, H, W))
    _warp_jacobian(padded, np.ascontiguousarray(params, dtype=np.float64), out, jac)
    return out, jac
