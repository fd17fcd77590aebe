"""An image's background: its level (the border median) and, in noisy images, where it is.

kappa^max compares whole frames. Two things in the background distort it:

- a grey or shifted level, which it matches as much as the shapes: ``background='median'``
  subtracts each image's border median;
- white noise over the whole frame (particles, cells, plankton under a microscope). The
  noise of the empty background adds a random term to every pair's distance and, as it covers
  every pixel, makes every pair's search visit every pixel. ``background='mask'`` subtracts the
  median, then keeps only each image's support: the pixels within ``dilation`` px of where the
  image smoothed by ``sigma`` px stands more than ``threshold`` noise standard deviations
  (of the smoothed noise) from zero, the noise read from the image's own frame
  (:func:`ia_stages.core.noise.image_noise`). Every other pixel is set to 0, as in a clean
  image. Smoothing and thresholding commute with rotations and shifts, so the support moves
  with the object; an image without noise (a zero frame) is left as it is, and one without a
  pixel above the noise is left whole, with a warning.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, ndimage_module
from ia_stages.core.noise import image_noise
from ia_stages.core.smoothing import smooth
from ia_stages.core.validation import border_median
from ia_stages.settings.images import MaskSettings
from ia_stages.settings.tree import check_setting


def support_mask(X: Any, settings: MaskSettings = MaskSettings()) -> Any:
    """Each image's support: where it differs from its noisy background.

    Parameters
    ----------
    X : ``(n, H, W)`` images (numpy or cupy) on a zero background level
    settings : :class:`MaskSettings`

    Returns
    -------
    ``(n, H, W)`` bool: |X smoothed by ``sigma``| above ``threshold`` times the smoothed
    noise's standard deviation (the image's frame noise / (2 sqrt(pi) sigma)), grown by
    ``dilation`` px; every pixel of an image whose frame holds no noise

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(0.0, 0.3, (1, 40, 40)); X[0, 15:25, 15:25] += 1.0
    >>> m = support_mask(X)
    >>> bool(m[0, 15:25, 15:25].all()), bool(m[0, :8].any())
    (True, False)
    """
    xp = array_module(X)
    noise = image_noise(X, settings.border)
    level = settings.threshold * noise / (2.0 * np.sqrt(np.pi) * settings.sigma)
    keep = xp.abs(smooth(X, settings.sigma)) > level[:, None, None]
    if settings.dilation:
        square = xp.ones((1, 3, 3), dtype=bool)  # each image grown alone, a px per iteration
        keep = ndimage_module(xp).binary_dilation(keep, square, iterations=settings.dilation)
    keep[noise == 0] = True
    return keep


def subtract_background(
    X: Any,
    background: str = "none",
    mask: MaskSettings = MaskSettings(),
    names: list[str] | None = None,
) -> Any:
    """Images with their background removed.

    Parameters
    ----------
    X : ``(n, H, W)`` images (numpy or cupy)
    background : 'none' returns ``X`` unchanged; 'median' subtracts each image's
        :func:`border_median`; 'mask' does so, then sets every pixel outside the image's
        :func:`support_mask` to 0
    mask : :class:`MaskSettings` of 'mask'
    names : how an error names the images (default: 'image i')

    Returns
    -------
    ``(n, H, W)`` images

    Warns
    -----
    UserWarning
        'mask' finds no pixel above the noise in an image (no object to keep): such an image is
        left whole (its level subtracted); one line: how many, the first one's name

    Example
    -------
    >>> X = np.full((1, 8, 8), 0.5); X[0, 3:5, 3:5] = 1.0
    >>> float(subtract_background(X, "median")[0, 0, 0])
    0.0
    """
    check_setting("background", background)
    if background == "none":
        return X
    X = X - border_median(X)[:, None, None]
    if background == "median":
        return X
    keep = support_mask(X, mask)
    xp = array_module(X)
    empty = xp.flatnonzero(~keep.reshape(keep.shape[0], -1).any(1))
    if int(empty.size):
        first = int(empty[0])
        name = f"image {first}" if names is None else f"{names[first]} (image {first})"
        warnings.warn(
            f"background='mask': {int(empty.size)} image(s) have no pixel above the noise at "
            f"mask.threshold {mask.threshold:g} (the first: {name}); they are kept whole",
            UserWarning,
            stacklevel=2,
        )
        keep[empty] = True
    return xp.where(keep, X, 0.0)
