"""Gaussian smoothing g_sigma, image normalisation and the RBF kernel."""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, ndimage_module
from ia_stages.core.threads import on_ranges
from ia_stages.settings.tree import check_setting


def smooth(images: Any, sigma: float) -> Any:
    """Gaussian smoothing g_sigma * v over the last two axes, zero outside the image.

    ``sigma`` is the standard deviation in pixels; ``sigma == 0`` returns the input unchanged.
    Works on any ``(..., H, W)`` array.
    """
    if sigma <= 0:
        return images
    xp = array_module(images)
    nd = ndimage_module(xp)
    sig = (0.0,) * (images.ndim - 2) + (sigma, sigma)
    if xp is not np or images.ndim < 3 or images.shape[0] < 2:
        return nd.gaussian_filter(images, sig, mode="constant", cval=0.0, truncate=4.0)
    # every image is smoothed alone: a stack is filtered a range of images per thread
    # (scipy's filters release Python's lock)
    out = np.empty(images.shape, dtype=images.dtype)

    def fill(lo: int, hi: int) -> None:
        part = images[lo:hi]
        nd.gaussian_filter(part, sig, output=out[lo:hi], mode="constant", cval=0.0, truncate=4.0)

    on_ranges(fill, images.shape[0])
    return out


def normalize(images: Any, mode: str = "unit", inplace: bool = False) -> Any:
    """Scale each sample (leading axis) to unit L2 norm (``'unit'``) or leave it (``'none'``).

    An all-zero sample stays all-zero under ``'unit'`` (its kernel value with any other sample
    is then exp(-beta * ||other||^2) = exp(-beta)). ``inplace``: scale ``images`` itself (a
    floating array the caller owns) instead of a copy; the values are the same.
    """
    if mode == "none":
        return images
    check_setting("normalization", mode)
    xp = array_module(images)
    shape = (-1,) + (1,) * (images.ndim - 1)
    # Scale each sample by a power of two (exact in floating point) so that its largest value
    # is in [0.5, 1) before squaring: values near 1e300 would overflow the sum of squares. The
    # result equals images / ||images|| bit for bit, as power-of-two scaling is exact.
    peak = xp.abs(images.reshape(images.shape[0], -1)).max(1)
    _, exponent = xp.frexp(xp.where(peak > 0, peak, 1.0))
    out = images if inplace else None
    images = xp.ldexp(images, -exponent.reshape(shape), out=out)
    norms = xp.sqrt((images.reshape(images.shape[0], -1) ** 2).sum(1))
    norms = xp.where(norms > 0, norms, 1.0)
    return xp.divide(images, norms.reshape(shape), out=out)


def smooth_normalize(images: Any, sigma: float, mode: str = "unit") -> Any:
    """:func:`normalize` of :func:`smooth`: the images as kappa^max compares them, made with
    one new array (the smoothed copy is scaled in place; with ``sigma`` 0 a copy is scaled).

    Example
    -------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).random((3, 8, 8))
    >>> bool(np.array_equal(smooth_normalize(X, 1.0), normalize(smooth(X, 1.0))))
    True
    """
    smoothed = smooth(images, sigma)
    return normalize(smoothed, mode, inplace=smoothed is not images)


def half_resolution(images: Any) -> Any:
    """2 x 2 block means of ``(n, H, W)`` images (H, W even), at unit norm: ``(n, H/2, W/2)``.

    Pixel (h, k) of the result covers pixels 2h..2h+1, 2k..2k+1, so a full-resolution
    coordinate is x = 2 x' + 1/2 and the centres (H - 1) / 2 and (H/2 - 1) / 2 correspond: an
    SE(2) transform about the centre keeps its angle and halves its translation there.
    """
    n, H, W = images.shape
    if H % 2 or W % 2:
        raise ValueError(f"half_resolution needs even image sizes, got {H} x {W}")
    return normalize(images.reshape(n, H // 2, 2, W // 2, 2).mean(axis=(2, 4)))


def sq_distances(X: Any, Y: Any) -> Any:
    """Pairwise squared Euclidean distances between flattened samples, ``(n, m)``."""
    xp = array_module(X, Y)
    x = X.reshape(X.shape[0], -1)
    y = Y.reshape(Y.shape[0], -1)
    d2 = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2 * x @ y.T
    return xp.maximum(d2, 0.0)


def rbf_kernel(X: Any, Y: Any, beta: float) -> Any:
    """kappa(x, y) = exp(-beta ||x - y||^2) for all pairs of samples, ``(n, m)``."""
    xp = array_module(X, Y)
    return xp.exp(-beta * sq_distances(X, Y))
