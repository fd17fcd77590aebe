"""The noise level of an image set, and the smoothing sigma it calls for.

Images of isolated objects (particles, cells, digits) have a background frame that holds only
noise: the robust spread of the frame's pixels (1.4826 x their median absolute deviation)
estimates the white-noise standard deviation. Gaussian smoothing by sigma px lowers white
noise's standard deviation by 2 sqrt(pi) sigma (the L2 norm of the 2-D Gaussian kernel), and
leaves the smooth signal nearly as it is, so the sigma that brings the noise left down to a
fraction ``residual`` of the signal's standard deviation is
sigma = noise / (2 sqrt(pi) residual signal), and never below ``min_sigma``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.backend import array_module
from ia_stages.settings.images import NoiseSettings


def noise_sigma(X: Any, settings: NoiseSettings) -> float:
    """The smoothing sigma (px) that ``settings`` choose for the images ``X`` ``(n, H, W)``
    (``sigma='auto'``): :func:`choose_sigma`, at most ``max_sigma`` and at most what the image
    size allows (:func:`~ia_stages.core.validation.min_side`), never below ``min_sigma``.

    Example
    -------
    >>> noise_sigma(np.zeros((2, 16, 16)), NoiseSettings())
    1.0
    """
    side = min(X.shape[1:])
    border = min(settings.border, max(1, (side - 1) // 2))  # the frame must fit the image
    chosen = choose_sigma(X, border, settings.residual, settings.min_sigma)
    fits = (side - 1) / 2.0  # the largest sigma min_side allows
    return max(settings.min_sigma, min(chosen, settings.max_sigma, fits))


def estimate_noise(X: Any, border: int = 3) -> float:
    """Standard deviation of white noise in ``(n, H, W)`` images, from their borders.

    Parameters
    ----------
    X : ``(n, H, W)`` images (numpy or cupy), objects away from the frame
    border : width (px) of the frame read, >= 1 and < min(H, W) / 2

    Returns
    -------
    float: 1.4826 x the median absolute deviation of the frame's pixels from their median

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(0, 0.5, (50, 32, 32))
    >>> round(estimate_noise(X), 1)
    0.5
    """
    xp = array_module(X)
    frame = frame_pixels(X, border).ravel()
    med = xp.median(frame)
    return float(1.4826 * xp.median(xp.abs(frame - med)))


def image_noise(X: Any, border: int = 3) -> Any:
    """Each image's own white-noise standard deviation, from its frame: :func:`estimate_noise`
    per image.

    Parameters
    ----------
    X, border : as :func:`estimate_noise`

    Returns
    -------
    ``(n,)`` 1.4826 x the median absolute deviation of each image's frame pixels

    Example
    -------
    >>> rng = np.random.default_rng(2)
    >>> X = rng.normal(0, 1, (2, 64, 64)) * np.array([0.5, 2.0])[:, None, None]
    >>> np.round(image_noise(X), 1).tolist()
    [0.5, 2.0]
    """
    xp = array_module(X)
    frame = frame_pixels(X, border)
    med = xp.median(frame, axis=1, keepdims=True)
    return 1.4826 * xp.median(xp.abs(frame - med), axis=1)


def frame_pixels(X: Any, border: int) -> Any:
    """``(n, m)`` the pixels of each image's frame ``border`` px wide (the m pixels within
    ``border`` of an edge); a one-line ``ValueError`` when the frame does not fit."""
    xp = array_module(X)
    H, W = X.shape[1:]
    if not 1 <= border < min(H, W) / 2:
        raise ValueError(f"noise_border must be in [1, {min(H, W) / 2:g}), got {border}")
    mask = np.ones((H, W), dtype=bool)
    mask[border:-border, border:-border] = False
    return X[:, xp.asarray(mask)]


def snr(X: Any, border: int = 3) -> float:
    """Signal-to-noise power ratio: (mean pixel variance - noise^2) / noise^2 (inf for clean
    images)."""
    noise = estimate_noise(X, border)
    total = float(array_module(X).var(X, axis=(1, 2)).mean())
    if noise == 0:
        return float("inf")
    return max(total - noise**2, 0.0) / noise**2


def choose_sigma(X: Any, border: int = 3, residual: float = 0.1, min_sigma: float = 1.0) -> float:
    """The smoothing sigma (px) for kappa^max on these images, from their noise level.

    Parameters
    ----------
    X : ``(n, H, W)`` images
    border : frame width read by :func:`estimate_noise` (default 3)
    residual : noise left after smoothing, as a fraction of the signal's standard deviation
        (default 0.1)
    min_sigma : the sigma of clean images (default 1.0)

    Returns
    -------
    max(min_sigma, noise / (2 sqrt(pi) residual signal))

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> X = np.zeros((20, 32, 32)); X[:, 10:22, 12:20] = 1.0
    >>> choose_sigma(X)
    1.0
    >>> bool(choose_sigma(X + rng.normal(0, 0.5, X.shape)) > 1.5)
    True
    """
    if residual <= 0:
        raise ValueError(f"noise_residual must be > 0, got {residual}")
    noise = estimate_noise(X, border)
    total = float(array_module(X).var(X, axis=(1, 2)).mean())
    signal = max(total - noise**2, 1e-12) ** 0.5
    return max(min_sigma, noise / (2 * np.sqrt(np.pi) * residual * signal))
