"""Image warping by Keys cubic convolution (paper §2.1) and its derivatives.

(v o tau)[p] = sum_kl v[k, l] phi(tau(p)_0 - k) phi(tau(p)_1 - l), with phi the Keys kernel
(a = -0.5) and v = 0 outside the image. tau(p) = A (p - c) + c + b, c the image centre.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import array_module
from .groups import SE2
from .warp_kernel import warp_with_jacobian_se2

KEYS_A = -0.5
_PAD = 4  # zero border wide enough for the taps of clipped sampling points


def keys_kernel(t: Any, a: float = KEYS_A) -> Any:
    """Keys cubic-convolution kernel phi(t); support (-2, 2), phi(0) = 1, phi(k) = 0 for k != 0."""
    xp = array_module(t)
    u = xp.abs(t)
    near = ((a + 2) * u - (a + 3)) * u * u + 1
    far = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a
    return xp.where(u <= 1, near, xp.where(u < 2, far, 0.0))


def keys_kernel_derivative(t: Any, a: float = KEYS_A) -> Any:
    """phi'(t)."""
    xp = array_module(t)
    u = xp.abs(t)
    near = (3 * (a + 2) * u - 2 * (a + 3)) * u
    far = (3 * a * u - 10 * a) * u + 8 * a
    return xp.sign(t) * xp.where(u <= 1, near, xp.where(u < 2, far, 0.0))


def _near(u: Any, a: float) -> Any:
    return ((a + 2) * u - (a + 3)) * u * u + 1


def _far(u: Any, a: float) -> Any:
    return ((a * u - 5 * a) * u + 8 * a) * u - 4 * a


def _near_d(u: Any, a: float) -> Any:
    return (3 * (a + 2) * u - 2 * (a + 3)) * u


def _far_d(u: Any, a: float) -> Any:
    return (3 * a * u - 10 * a) * u + 8 * a


def _tap_weights(f: Any, a: float = KEYS_A) -> list[Any]:
    """phi(f + 1), phi(f), phi(f - 1), phi(f - 2) for fractional parts f in [0, 1)."""
    g = 1 - f
    return [_far(f + 1, a), _near(f, a), _near(g, a), _far(g + 1, a)]


def _tap_derivatives(f: Any, a: float = KEYS_A) -> list[Any]:
    """phi'(f + 1), phi'(f), phi'(f - 1), phi'(f - 2) for f in [0, 1)."""
    g = 1 - f
    return [_far_d(f + 1, a), _near_d(f, a), -_near_d(g, a), -_far_d(g + 1, a)]


def _tap_second(f: Any, a: float = KEYS_A) -> list[Any]:
    """phi''(f + 1), phi''(f), phi''(f - 1), phi''(f - 2) for f in [0, 1)."""
    g = 1 - f
    near_f, near_g = 6 * (a + 2) * f - 2 * (a + 3), 6 * (a + 2) * g - 2 * (a + 3)
    return [6 * a * (f + 1) - 10 * a, near_f, near_g, 6 * a * (g + 1) - 10 * a]


def centred_grid(shape: tuple[int, int], xp: Any = np) -> Any:
    """Pixel coordinates minus the centre, shape ``(2, H, W)``."""
    H, W = shape
    y = xp.arange(H, dtype=float) - (H - 1) / 2
    x = xp.arange(W, dtype=float) - (W - 1) / 2
    return xp.stack(xp.meshgrid(y, x, indexing="ij"))


def sampling_field(A: Any, b: Any, shape: tuple[int, int]) -> Any:
    """Sampling points tau(p) for every output pixel.

    Parameters
    ----------
    A : ``(n, 2, 2)``
    b : ``(n, 2)``
    shape : (H, W)

    Returns
    -------
    ``(n, 2, H, W)`` coordinates (row, column) in input-pixel units.
    """
    xp = array_module(A)
    g = centred_grid(shape, xp)
    H, W = shape
    c = xp.asarray([(H - 1) / 2, (W - 1) / 2])
    return xp.einsum("nij,jhw->nihw", A, g) + (c + b)[:, :, None, None]


def interpolate(
    images: Any, field: Any, with_gradient: bool = False, with_hessian: bool = False
) -> Any:
    """Sample ``images`` at ``field`` by Keys cubic convolution, zero outside the image.

    Parameters
    ----------
    images : ``(n, H, W)``
    field : ``(n, 2, H', W')`` sampling coordinates (row, column)
    with_gradient : also return the derivative of the output with respect to the field.
    with_hessian : also return the second derivatives (implies ``with_gradient``).

    Returns
    -------
    out : ``(n, H', W')``; and, if ``with_gradient``, grad : ``(n, 2, H', W')`` with
    grad[:, 0] = d out / d field_row and grad[:, 1] = d out / d field_col; and, if
    ``with_hessian``, hess : ``(n, 3, H', W')`` = (d2/drow2, d2/drow dcol, d2/dcol2).
    """
    xp = array_module(images, field)
    n, H, W = images.shape
    Hp, Wp = H + 2 * _PAD, W + 2 * _PAD
    flat = xp.pad(images, ((0, 0), (_PAD, _PAD), (_PAD, _PAD))).reshape(-1)
    # Points more than 2 px outside the image read only zeros; clipping them to 2.5 px outside
    # keeps every tap inside the zero border without changing the result.
    y = xp.clip(field[:, 0].reshape(n, -1), -2.5, H + 1.5)
    x = xp.clip(field[:, 1].reshape(n, -1), -2.5, W + 1.5)
    y0, x0 = xp.floor(y), xp.floor(x)
    fy, fx = y - y0, x - x0
    # flat index of the first tap (floor - 1) of every output pixel
    base = (y0.astype(np.int64) + (_PAD - 1)) * Wp + (x0.astype(np.int64) + (_PAD - 1))
    base += (xp.arange(n, dtype=np.int64) * (Hp * Wp))[:, None]
    with_gradient = with_gradient or with_hessian
    wy, wx = _tap_weights(fy), _tap_weights(fx)
    if with_gradient:
        dwy, dwx = _tap_derivatives(fy), _tap_derivatives(fx)
        gy, gx = xp.zeros_like(y), xp.zeros_like(y)
    if with_hessian:
        ddwy, ddwx = _tap_second(fy), _tap_second(fx)
        hyy, hxy, hxx = xp.zeros_like(y), xp.zeros_like(y), xp.zeros_like(y)
    out = xp.zeros_like(y)
    for a in range(4):
        row = xp.zeros_like(y)
        drow = xp.zeros_like(y) if with_gradient else None
        ddrow = xp.zeros_like(y) if with_hessian else None
        for c in range(4):
            v = xp.take(flat, base + (a * Wp + c))
            row += wx[c] * v
            if with_gradient:
                drow += dwx[c] * v
            if with_hessian:
                ddrow += ddwx[c] * v
        out += wy[a] * row
        if with_gradient:
            gy += dwy[a] * row
            gx += wy[a] * drow
        if with_hessian:
            hyy += ddwy[a] * row
            hxy += dwy[a] * drow
            hxx += wy[a] * ddrow
    shape_out = (n, *field.shape[2:])
    if not with_gradient:
        return out.reshape(shape_out)
    grad = xp.stack([gy, gx], 1).reshape((n, 2, *field.shape[2:]))
    if not with_hessian:
        return out.reshape(shape_out), grad
    hess = xp.stack([hyy, hxy, hxx], 1).reshape((n, 3, *field.shape[2:]))
    return out.reshape(shape_out), grad, hess


def warp(images: Any, params: Any, group: SE2 = SE2()) -> Any:
    """Apply per-image transforms: ``out[i] = images[i] o tau(params[i])``.

    Parameters
    ----------
    images : ``(n, H, W)`` (or ``(H, W)`` with params ``(n_params,)``)
    params : ``(n, n_params)`` group parameters (SE(2): theta [rad], b0, b1 [px])

    Returns
    -------
    ``(n, H, W)`` warped images (same leading shape as ``images``).
    """
    single = images.ndim == 2
    if single:
        images, params = images[None], params[None]
    field = sampling_field(group.matrix(params), group.translation(params), images.shape[1:])
    out = interpolate(images, field)
    return out[0] if single else out


def warp_with_jacobian(images: Any, params: Any, group: SE2 = SE2()) -> tuple[Any, Any]:
    """Warp and differentiate with respect to the group parameters.

    Returns
    -------
    out : ``(n, H, W)`` warped images
    jac : ``(n, n_params, H, W)``, jac[i, k] = d out[i] / d params[i, k]
    """
    xp = array_module(images)
    if xp is np and group.name == "se2" and images.ndim == 3:
        return warp_with_jacobian_se2(images, params)
    shape = images.shape[1:]
    field = sampling_field(group.matrix(params), group.translation(params), shape)
    out, grad = interpolate(images, field, with_gradient=True)
    dA, db = group.jacobian(params)  # (n, k, 2, 2), (n, k, 2)
    g = centred_grid(shape, xp)
    dfield = xp.einsum("nkij,jhw->nkihw", dA, g) + db[..., None, None]  # (n, k, 2, H, W)
    jac = xp.einsum("nkihw,nihw->nkhw", dfield, grad)
    return out, jac
