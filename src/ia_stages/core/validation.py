"""Validation of image arrays and of settings, as ``sklearn.utils.check_array`` does, with
one-line messages that name the culprit.

One function, :func:`check_images`, serves the estimator and :func:`ia_stages.kmax.kappa_max`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module


def check_images(
    X: Any,
    name: str = "X",
    *,
    image_shape: tuple[int, int] | None = None,
    min_samples: int = 1,
    dtype: Any = np.float64,
    like: str | None = None,
) -> Any:
    """Return ``X`` as finite images ``(n, H, W)``, or raise a one-line ``ValueError``.

    Accepts numpy arrays of any real dtype (uint8 included), nested lists and cupy arrays
    (validated on the device, not copied to the host).

    Parameters
    ----------
    X : ``(n, H, W)`` images; with ``image_shape`` also ``(n, H * W)`` flattened images
    name : how messages name ``X``
    image_shape : ``(H, W)``: reshape flattened rows ``(n, H * W)`` to ``(n, H, W)`` and require
        3-D input to have that shape; one of H, W may be -1 (inferred, as in ``numpy.reshape``)
    min_samples : fewer samples than this is an error
    like : name of the array ``image_shape`` comes from, for messages (default: the
        ``image_shape`` setting)
    dtype : dtype of the result; a tuple keeps a floating input whose dtype it lists and
        converts anything else to its first entry (as ``check_array`` does)

    Returns
    -------
    ``(n, H, W)`` array of ``dtype`` (a numpy array for numpy or list input, else cupy).

    Raises
    ------
    ValueError
        ragged lists, NaN or infinite values, wrong number of
        dimensions, a shape that does not match ``image_shape``, fewer than ``min_samples``
        samples, non-numeric (complex, object, string) data.
    """
    xp = array_module(X)
    real_array = getattr(X, "dtype", None) is not None and X.dtype.kind in "biuf"
    if xp is np and not (isinstance(X, np.ndarray) and real_array and X.size > 0):
        try:
            # lazy: scikit-learn takes seconds to load; a pipeline job loads none
            from sklearn.utils import check_array  # sklearn.utils loads scipy.stats: slow

            X = check_array(
                X,
                dtype=dtype,
                allow_nd=True,
                ensure_2d=False,
                ensure_min_samples=0,
                ensure_all_finite=True,
                input_name=name,
            )
        except ValueError as err:
            ragged = isinstance(X, Sequence) and _ragged_message(X, name)
            msg = _one_line(err)
            msg = msg if f" {name} " in f" {msg} " else f"{name}: {msg}"
            raise ValueError(ragged or msg) from None
    else:  # real numpy or cupy arrays: what check_array does to them, without loading sklearn
        want = dtype[0] if isinstance(dtype, tuple) else dtype
        keep = dtype if isinstance(dtype, tuple) else (dtype,)
        if X.dtype not in keep:
            X = X.astype(want)
        if not bool(xp.isfinite(X).all()):
            what = "NaN" if bool(xp.isnan(X).any()) else "infinity"
            raise ValueError(f"Input {name} contains {what}.")
    X = _as_images(X, name, image_shape, like)
    n = X.shape[0]
    if n < min_samples:
        raise ValueError(
            f"{name} has {n} sample{'s' if n != 1 else ''} (n_samples={n}); "
            f"at least {min_samples} are needed"
        )
    return X


LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601-2 luminance weights of R, G, B: Pillow's ``convert("L")``."""


def rgb_to_gray(X: Any) -> Any:
    """Colour images ``(..., H, W, 3|4)`` to grayscale ``(..., H, W)``: the ITU-R 601-2
    luminance of R, G, B (:data:`LUMA`, as Pillow's ``L``); an alpha channel is dropped.

    Example
    -------
    >>> rgb_to_gray(np.ones((2, 4, 4, 3))).shape
    (2, 4, 4)
    """
    xp = array_module(X)
    return X[..., :3] @ xp.asarray(LUMA, dtype=X.dtype if X.dtype.kind == "f" else float)


def _as_images(X: Any, name: str, image_shape: tuple[int, int] | None, like: str | None) -> Any:
    """``X`` reshaped/checked to ``(n, H, W)``; colour images ``(n, H, W, 3|4)`` converted
    to grayscale with a warning (as the ``cluster`` command's reader does)."""
    if X.ndim == 4 and X.shape[-1] in (3, 4):
        warnings.warn(
            f"{name}: {X.shape[0]} RGB image(s) of shape {X.shape[1:]} converted to "
            "grayscale (luminance 0.299 R + 0.587 G + 0.114 B)",
            UserWarning,
            stacklevel=4,
        )
        X = rgb_to_gray(X)
    if X.ndim == 2:
        if image_shape is None:
            raise ValueError(
                f"{name} has shape {X.shape}: expected images (n, H, W); for flattened "
                f"images (n, H * W) pass image_shape=(H, W)"
            )
        h, w = _image_shape(image_shape, X.shape[1], name)
        return X.reshape(X.shape[0], h, w)
    if X.ndim == 1:
        raise ValueError(
            f"{name} has shape {X.shape}: expected images (n, H, W); Reshape your data, e.g. "
            f"X[None] for a single image (H, W) or image_shape for one flattened image"
        )
    if X.ndim != 3:
        raise ValueError(f"{name} has shape {X.shape}: expected images (n, H, W)")
    if image_shape is not None:
        try:
            expected = _image_shape(image_shape, X.shape[1] * X.shape[2], name)
        except ValueError:
            expected = None
        if X.shape[1:] != expected:
            source = f"as in {like}" if like else "(image_shape)"
            raise ValueError(
                f"{name} has images of {X.shape[1:]}, expected {tuple(image_shape)} {source}"
            )
    return X


def _image_shape(image_shape: Any, n_features: int, name: str) -> tuple[int, int]:
    """``image_shape`` (one entry may be -1) resolved for rows of ``n_features`` values."""
    try:
        h, w = (int(s) for s in image_shape)
    except (TypeError, ValueError):
        raise ValueError(f"image_shape must be a pair (H, W), got {image_shape!r}") from None
    if h == -1 and w > 0 and n_features % w == 0:
        h = n_features // w
    elif w == -1 and h > 0 and n_features % h == 0:
        w = n_features // h
    if h < 1 or w < 1 or h * w != n_features:
        raise ValueError(
            f"image_shape={tuple(image_shape)} does not fit {name}'s {n_features} features "
            f"per sample"
        )
    return h, w


def _ragged_message(X: Sequence, name: str) -> str | None:
    """One line naming the first two differing shapes of a ragged nested list, or None."""
    first = None
    for k, item in enumerate(X):
        try:
            shape = np.asarray(item, dtype=float).shape
        except (TypeError, ValueError):
            return f"{name}[{k}] is a ragged list: its rows differ in length"
        if first is None:
            first = shape
        elif shape != first:
            return (
                f"{name} is a ragged list: {name}[0] has shape {first} but {name}[{k}] has "
                f"shape {shape}; crop or pad the images to one shape"
            )
    return None


def _one_line(err: Exception) -> str:
    """The first line of ``err``'s message (check_array appends the array to some)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def min_side(sigma: float) -> int:
    """Smallest image side that smoothing by ``sigma`` px leaves a shape in: the Gaussian's
    core (+- sigma), 2 sigma + 1 px (1 px without smoothing)."""
    return int(np.ceil(2.0 * float(sigma))) + 1


def constant_images(X: Any) -> Any:
    """Indices of the images of ``X`` ``(n, H, W)`` whose pixels are all equal: they have no
    shape for kappa^max (or the invariant features) to compare.

    Example
    -------
    >>> import numpy as np
    >>> X = np.zeros((3, 4, 4)); X[1, 0, 0] = 1.0
    >>> constant_images(X).tolist()
    [0, 2]
    """
    xp = array_module(X)
    flat = X.reshape(X.shape[0], -1)
    return xp.flatnonzero(flat.max(1) == flat.min(1))


def check_image_content(
    X: Any, name: str = "X", sigma: float = 0.0, constant: str = "warn"
) -> None:
    """Refuse images that kappa^max cannot compare, and warn about a non-zero background.

    kappa^max compares shapes after scaling every image to unit norm. A constant image (all
    zero, or one grey level) has no shape: it gets kappa = 1 with every other constant image of
    its sign and clusters with them. Smoothing by ``sigma`` turns an image whose side is
    shorter than the Gaussian's core (:func:`min_side`) into nearly the Gaussian itself, the
    same for every image: those are refused.

    Parameters
    ----------
    X : ``(n, H, W)`` finite images (as :func:`check_images` returns them), numpy or cupy
    name : how messages name ``X``
    sigma : the smoothing (px) the images will get
    constant : 'warn' (default): constant images are warned about, and refused only when every
        image is constant; 'error': any constant image is refused (the pipeline's check of a
        user's files, where a blank image is a mistake)

    Raises
    ------
    ValueError
        one line naming the first constant image (``X[i]``) or the size.

    Warns
    -----
    UserWarning
        a constant image (``constant='warn'``); most images' border median far from zero (a
        grey or shifted background): kappa^max then matches backgrounds as much as shapes.
        ``background='median'`` (the estimator's parameter, the ``background`` key of an
        ``images`` dataset) subtracts it.

    Example
    -------
    >>> import numpy as np
    >>> X = np.zeros((3, 16, 16)); X[:, 4:12, 6:10] = 1.0
    >>> check_image_content(X, sigma=2.0)
    >>> check_image_content(np.zeros((2, 16, 16)))
    Traceback (most recent call last):
    ...
    ValueError: every image of X is constant (X[0]: every pixel 0): no shape to compare
    """
    H, W = int(X.shape[-2]), int(X.shape[-1])
    if H * W == 1:
        raise ValueError(
            f"{name} has images of 1 x 1 px (1 feature(s) per sample): a single pixel has no "
            "shape for kappa^max to compare"
        )
    side = min_side(sigma)
    if min(H, W) < side:
        raise ValueError(
            f"{name}: images of {H} x {W} px are too small for smoothing by sigma = {sigma:g} px "
            f"(at least {side} px a side; lower sigma or use larger images)"
        )
    xp = array_module(X)
    flat = X.reshape(X.shape[0], -1)
    lo, hi = flat.min(1), flat.max(1)
    flat_ones = constant_images(X)
    if int(flat_ones.size):
        i = int(flat_ones[0])
        what = f"{name}[{i}] is constant (every pixel {float(lo[i]):g})"
        if int(flat_ones.size) == X.shape[0]:
            raise ValueError(
                f"every image of {name} is constant ({name}[0]: every pixel {float(lo[0]):g}): "
                "no shape to compare"
            )
        if constant == "error":
            raise ValueError(f"{what}: it has no shape for kappa^max to compare")
        others = int(flat_ones.size) - 1
        warnings.warn(
            f"{what}{f', and {others} more' if others else ''}: a constant image has no shape; "
            "it gets kappa = 1 with every constant image of its sign and clusters with them",
            UserWarning,
            stacklevel=3,
        )
    border = border_median(X)
    off = xp.abs(border) > 0.1 * (hi - lo)
    if float(off.mean()) > 0.5:
        level = float(xp.median(border))
        warnings.warn(
            f"{name}: the background is not zero (median border pixel {level:.3g} "
            "in most images), so kappa^max compares backgrounds as well as shapes; subtract it "
            "with background='median'",
            UserWarning,
            stacklevel=3,
        )


def border_median(X: Any) -> Any:
    """Median of each image's one-pixel border, ``(n,)``: the background level.

    Example
    -------
    >>> import numpy as np
    >>> border_median(np.full((2, 8, 8), 0.5)).tolist()
    [0.5, 0.5]
    """
    xp = array_module(X)
    edge = xp.concatenate([X[:, 0, :], X[:, -1, :], X[:, 1:-1, 0], X[:, 1:-1, -1]], axis=1)
    return xp.median(edge, axis=1)
