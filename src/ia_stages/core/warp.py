"""Image warping by Keys cubic convolution (paper §2.1) or cubic B-spline interpolation, and
their derivatives.

(v o tau)[p] = sum_kl q[k, l] phi(tau(p)_0 - k) phi(tau(p)_1 - l), with phi the Keys kernel
(a = -0.5) and q = v ('keys'), or phi the cubic B-spline and q the spline coefficients of v
('bspline'); zero outside the image. tau(p) = A (p - c) + c + b, c the image centre.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, ndimage_module
from ia_stages.core.groups import SE2
from ia_stages.core.taps import TAPS as TAPS
from ia_stages.core.taps import tap_polynomials, warp_with_jacobian_se2
from ia_stages.core.threads import on_ranges

KEYS_A = -0.5
_PAD = 4  # zero border wide enough for the taps of clipped sampling points
_SPLINE_PAD = 12  # zero border of the spline prefilter


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


def spline_coefficients(images: Any, interpolation: str = "bspline") -> Any:
    """What the taps of ``interpolation`` weigh: the images themselves for 'keys', their cubic
    B-spline coefficients for 'bspline' (per image, over the last two axes, of the image
    extended by zeros; the coefficients outside the image are dropped, so interpolation is
    exact up to about the image's values at its border).

    Parameters
    ----------
    images : ``(..., H, W)``

    Returns
    -------
    ``(..., H, W)`` float64
    """
    tap_polynomials(interpolation)
    if interpolation == "keys":
        return images
    xp = array_module(images)
    if xp is np and images.ndim == 3 and images.shape[0] > 1:
        # each image's coefficients are its own: a stack is filtered a range of images per
        # thread (scipy's filters release Python's lock)
        images = np.asarray(images, dtype=float)
        out = np.empty(images.shape)

        def fill(lo: int, hi: int) -> None:
            out[lo:hi] = _bspline_coefficients(images[lo:hi], np)

        on_ranges(fill, images.shape[0])
        return out
    return _bspline_coefficients(images, xp)


def _bspline_coefficients(images: Any, xp: Any) -> Any:
    """:func:`spline_coefficients` for 'bspline', all of ``images`` at once."""
    nd = ndimage_module(xp)
    # zeros around the image, as the taps read outside it: the coefficients inside are then
    # those of the zero-extended image (the filter's pole decays as 0.27^k)
    P = _SPLINE_PAD
    pad = [(0, 0)] * (images.ndim - 2) + [(P, P), (P, P)]
    c = xp.pad(xp.asarray(images, dtype=float), pad)
    c = nd.spline_filter1d(c, 3, axis=-1, mode="mirror")
    c = nd.spline_filter1d(c, 3, axis=-2, mode="mirror")
    return xp.ascontiguousarray(c[..., P:-P, P:-P])


def _poly_taps(f: Any, M: np.ndarray, derivative: int = 0) -> list[Any]:
    """The 4 taps (or their first / second derivatives in f) of :func:`tap_polynomials` ``M``
    at fractional parts ``f``."""
    if derivative == 0:
        return [((m[3] * f + m[2]) * f + m[1]) * f + m[0] for m in M]
    if derivative == 1:
        return [(3 * m[3] * f + 2 * m[2]) * f + m[1] for m in M]
    return [6 * m[3] * f + 2 * m[2] for m in M]


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
    images: Any,
    field: Any,
    with_gradient: bool = False,
    with_hessian: bool = False,
    interpolation: str = "keys",
) -> Any:
    """Sample ``images`` at ``field`` by Keys cubic convolution (or cubic B-spline
    interpolation), zero outside the image.

    Parameters
    ----------
    images : ``(n, H, W)``
    field : ``(n, 2, H', W')`` sampling coordinates (row, column)
    with_gradient : also return the derivative of the output with respect to the field.
    with_hessian : also return the second derivatives (implies ``with_gradient``).
    interpolation : 'keys' or 'bspline' (:data:`TAPS`; the B-spline coefficients of
        ``images`` are computed here)

    Returns
    -------
    out : ``(n, H', W')``; and, if ``with_gradient``, grad : ``(n, 2, H', W')`` with
    grad[:, 0] = d out / d field_row and grad[:, 1] = d out / d field_col; and, if
    ``with_hessian``, hess : ``(n, 3, H', W')`` = (d2/drow2, d2/drow dcol, d2/dcol2).
    """
    xp = array_module(images, field)
    M = tap_polynomials(interpolation)
    images = spline_coefficients(images, interpolation)
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
    wy, wx = _poly_taps(fy, M), _poly_taps(fx, M)
    if with_gradient:
        dwy, dwx = _poly_taps(fy, M, 1), _poly_taps(fx, M, 1)
        gy, gx = xp.zeros_like(y), xp.zeros_like(y)
    if with_hessian:
        ddwy, ddwx = _poly_taps(fy, M, 2), _poly_taps(fx, M, 2)
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


def warp(images: Any, params: Any, group: SE2 = SE2(), interpolation: str = "keys") -> Any:
    """Apply per-image transforms: ``out[i] = images[i] o tau(params[i])``.

    With centred pixel coordinates c = ((H - 1) / 2, (W - 1) / 2) the output pixel p samples
    the image at tau(p) = A (p - c) + c + b, zero outside the image
    (:doc:`/user-guide/method`).

    Parameters
    ----------
    images : array_like of shape (n, H, W), or (H, W) with params (n_params,)
        images (numpy or cupy)
    params : array_like of shape (n, n_params)
        group parameters (SE(2): theta in radians, b0, b1 in px)
    group : SE2 or AffineFamily, default SE2()
        what the parameters mean (:func:`ia_stages.core.groups.make_group`)
    interpolation : {'keys', 'bspline'}, default 'keys'
        Keys cubic convolution (a = -0.5, the paper's) or the cubic B-spline on the image's
        spline coefficients (:func:`interpolate`)

    Returns
    -------
    ndarray of shape (n, H, W)
        warped images (same leading shape as ``images``)

    Examples
    --------
    A quarter turn of a pixel grid is exact:

    >>> import numpy as np
    >>> from ia_stages import warp
    >>> img = np.zeros((9, 9)); img[2, 4] = 1.0
    >>> out = warp(img, np.array([np.pi / 2, 0.0, 0.0]))
    >>> np.unravel_index(np.argmax(out), out.shape)
    (np.int64(4), np.int64(2))
    >>> bool(np.allclose(np.rot90(out, -1), img, atol=1e-12))
    True
    """
    single = images.ndim == 2
    if single:
        images, params = images[None], params[None]
    field = sampling_field(group.matrix(params), group.translation(params), images.shape[1:])
    out = interpolate(images, field, interpolation=interpolation)
    return out[0] if single else out


def warp_with_jacobian(
    images: Any, params: Any, group: SE2 = SE2(), interpolation: str = "keys"
) -> tuple[Any, Any]:
    """Warp and differentiate with respect to the group parameters (``interpolation`` as in
    :func:`interpolate`).

    Returns
    -------
    out : ``(n, H, W)`` warped images
    jac : ``(n, n_params, H, W)``, jac[i, k] = d out[i] / d params[i, k]
    """
    xp = array_module(images)
    if xp is np and isinstance(group, SE2) and images.ndim == 3:
        Q = spline_coefficients(images, interpolation)
        return warp_with_jacobian_se2(Q, params, interpolation)
    if xp is np and getattr(group, "n_extra", None) == 0 and images.ndim == 3:
        return _se2_with_mirror(images, params, group, interpolation)
    shape = images.shape[1:]
    field = sampling_field(group.matrix(params), group.translation(params), shape)
    out, grad = interpolate(images, field, with_gradient=True, interpolation=interpolation)
    dA, db = group.jacobian(params)  # (n, k, 2, 2), (n, k, 2)
    g = centred_grid(shape, xp)
    dfield = xp.einsum("nkij,jhw->nkihw", dA, g) + db[..., None, None]  # (n, k, 2, H, W)
    jac = xp.einsum("nkihw,nihw->nkhw", dfield, grad)
    return out, jac


def _se2_with_mirror(
    images: np.ndarray, params: np.ndarray, group: Any, interpolation: str
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`warp_with_jacobian` for SE(2) with mirror images by the compiled SE(2) kernel:
    v o tau is the mirror image v_F warped by the SE(2) part q (``group.split_mirror``), and
    the column shift's sign is flipped with it; the discrete mirror parameter's derivative
    is 0."""
    q, flipped = group.split_mirror(params)
    moving = np.where(flipped[:, None, None], images[..., ::-1], images)
    out, jac = warp_with_jacobian_se2(spline_coefficients(moving, interpolation), q, interpolation)
    jac[flipped, 2] *= -1.0
    full = np.zeros((*jac.shape[:1], group.n_params, *jac.shape[2:]))
    full[:, :3] = jac
    return out, full


def warp_norm_preserving(
    images: Any, params: Any, group: SE2 = SE2(), interpolation: str = "keys"
) -> Any:
    """:func:`warp` times sqrt|det A| (``group.scale``): the action of the group that keeps
    the L2 norm, under which kappa^max and the invariant mean compare images (1 for SE(2)).

    Example
    -------
    >>> from ia_stages.core.groups import make_group
    >>> g = make_group("similarity")
    >>> warp_norm_preserving(np.ones((1, 8, 8)), g.identity(1), g).shape
    (1, 8, 8)
    """
    out = warp(images, params, group, interpolation)
    if isinstance(group, SE2):
        return out
    s = group.scale(np.asarray(params))
    return out * array_module(out).asarray(s)[..., None, None]


def warp_norm_preserving_with_jacobian(
    images: Any, params: Any, group: SE2 = SE2(), interpolation: str = "keys"
) -> tuple[Any, Any]:
    """:func:`warp_with_jacobian` of :func:`warp_norm_preserving`: ``(n, H, W)`` and
    ``(n, n_params, H, W)``."""
    out, jac = warp_with_jacobian(images, params, group, interpolation)
    if isinstance(group, SE2) or group.n_extra == 0:
        return out, jac
    xp = array_module(out)
    s = xp.asarray(group.scale(np.asarray(params)))[:, None, None]
    jac = jac * s[:, None]
    out = out * s
    jac[:, 3] += out  # d(s v o tau) / d log_scale = s v o tau + s d(v o tau) / d log_scale
    return out, jac
