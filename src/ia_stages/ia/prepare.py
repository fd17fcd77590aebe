"""Images made ready for a run, once, at its entry: the background removed (and masked), the
smoothing 'auto' chosen from their noise, images without a shape warned about."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ia_stages.core.background import subtract_background
from ia_stages.core.noise import noise_sigma
from ia_stages.core.validation import check_image_content
from ia_stages.settings.tree import Settings


def resolve_sigma(s: Settings, X: Any) -> Settings:
    """``s`` with ``sigma='auto'`` replaced by the sigma its ``noise`` settings choose for the
    images ``X`` (:func:`ia_stages.core.noise.noise_sigma`); a number is kept.

    Example
    -------
    >>> import numpy as np
    >>> resolve_sigma(Settings.from_dict({"sigma": "auto"}), np.zeros((2, 16, 16))).sigma
    1.0
    """
    if s.sigma != "auto":
        return s
    return replace(s, sigma=float(noise_sigma(X, s.noise)))


def prepare(X: Any, s: Settings, name: str = "X", names: list[str] | None = None) -> tuple:
    """``(images, settings)`` ready for a run: the tree's ``background`` removed from ``X``
    ``(n, H, W)`` (:func:`ia_stages.core.background.subtract_background` with its ``mask``),
    ``sigma='auto'`` resolved on what is left, and a warning for constant images or a
    non-zero background (:func:`ia_stages.core.validation.check_image_content`).

    Example
    -------
    >>> import numpy as np
    >>> X = np.zeros((2, 9, 9)); X[:, 4, 4] = 1.0
    >>> Y, s = prepare(X, Settings())
    >>> s.sigma
    1.0
    """
    X = subtract_background(X, s.background, s.mask, names)
    s = resolve_sigma(s, X)
    check_image_content(X, name, s.sigma)
    return X, s
