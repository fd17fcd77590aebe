"""Validation of image arrays and of settings, as ``sklearn.utils.check_array`` does, with
one-line messages that name the culprit.

One function, :func:`check_images`, serves the estimator and :func:`ia_stages.kmax.kappa_max`.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.utils import check_array

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
        ragged lists, NaN or infinite values, colour images ``(n, H, W, 3)``, wrong number of
        dimensions, a shape that does not match ``image_shape``, fewer than ``min_samples``
        samples, non-numeric (complex, object, string) data.
    """
    xp = array_module(X)
    if xp is np:
        try:
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
    else:
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


def _as_images(X: Any, name: str, image_shape: tuple[int, int] | None, like: str | None) -> Any:
    """``X`` reshaped/checked to ``(n, H, W)``."""
    if X.ndim == 4 and X.shape[-1] in (3, 4):
        raise ValueError(
            f"{name} has shape {X.shape}: colour images (n, H, W, {X.shape[-1]}) are not "
            f"supported; convert them to grayscale (n, H, W) first, e.g. X.mean(-1)"
        )
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


def check_number(
    value: Any,
    name: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    allow_none: bool = False,
) -> Any:
    """Return ``value`` if it is a finite real (an int with ``integer``) in range, else raise a
    one-line ``ValueError`` naming ``name``.

    ``low``/``high`` bound it (inclusive; ``low_open`` makes ``low`` exclusive).
    """
    if value is None and allow_none:
        return value
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a real number"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high:g}, got {value!r}")
    return value


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise a one-line ``ValueError``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


MIN_IMAGE_SIDE = 8
"""Smallest side (px) of the user's images the pipeline reads (``ia-stages cluster``, the
``images`` datasets): below it the rotation search has too few pixels to tell images apart."""

SIDES_PER_SIGMA = 4.0
"""kappa^max refuses images whose longer side is below this many times its smoothing
``sigma``: smoothing then leaves a blur without shape (3 x 3 px images at sigma 2 give
kappa^max = 1 for every pair). A single pixel is refused at any sigma."""


BACKGROUNDS = ("none", "median")
"""``background`` settings: 'none' leaves images as they are; 'median' subtracts each image's
median, so that a grey or offset background does not dominate kappa^max."""

BACKGROUND_WARN_FRACTION = 0.1
"""A background (median of the image borders) above this fraction of the largest absolute
value is warned about, unless ``background='median'`` removes it."""


def check_image_content(
    X: Any, name: str = "X", names: Sequence[str] | None = None, sigma: float = 2.0
) -> None:
    """Raise a one-line ``ValueError`` if ``X`` ``(n, H, W)`` holds images kappa^max cannot use.

    Refused: single-pixel images, images whose longer side is below :data:`SIDES_PER_SIGMA`
    times the smoothing ``sigma`` (px, default 2 as kappa^max's), and all-zero or constant
    images (after unit normalisation they carry no shape: kappa^max with them is the same for
    every partner). ``names`` (one per image, e.g. file names) are added to the message.

    Example
    -------
    >>> import numpy as np
    >>> check_image_content(np.ones((2, 8, 8)))
    Traceback (most recent call last):
    ...
    ValueError: X: image 0 is constant (every pixel 1); remove it, it has no shape to compare
    """
    xp = array_module(X)
    h, w = X.shape[1:3]
    need = int(np.ceil(SIDES_PER_SIGMA * sigma))
    if h * w < 2 or max(h, w) < need:
        raise ValueError(
            f"{name}: images of {h} x {w} px (n_features = {h * w}) are too small for the "
            f"kappa^max search (a side of at least {max(need, 2)} px at smoothing "
            f"sigma={sigma:g}); upsample or pad them"
        )
    flat = X.reshape(X.shape[0], -1)
    flat_ = xp.asarray(flat.max(1) == flat.min(1))
    if bool(flat_.any()):
        k = int(xp.argmax(flat_))
        value = float(flat[k, 0])
        label = f"image {k}" + (f" ({names[k]})" if names is not None else "")
        what = "all zero" if value == 0 else f"constant (every pixel {value:g})"
        raise ValueError(f"{name}: {label} is {what}; remove it, it has no shape to compare")


def subtract_background(X: Any, background: str = "none", name: str = "X") -> Any:
    """``X`` ``(n, H, W)`` with its background removed (``'median'``) or, with ``'none'``, as it is,
    warning when the images' border median is far from zero.

    kappa^max compares unit-norm images: a constant offset (a grey background) adds the same
    value to every image and hides their differences. ``'median'`` subtracts each image's
    median, the background's value when the object covers less than half the image.

    Example
    -------
    >>> import numpy as np
    >>> X = np.full((1, 8, 8), 0.5); X[0, 3:5, 3:5] = 1.0
    >>> float(subtract_background(X, "median")[0, 0, 0])
    0.0
    """
    check_choice(background, "background", BACKGROUNDS)
    xp = array_module(X)
    if background == "median":
        return X - xp.median(X.reshape(X.shape[0], -1), axis=1).reshape(-1, 1, 1)
    border = xp.concatenate(
        [X[:, 0, :], X[:, -1, :], X[:, :, 0], X[:, :, -1]], axis=1
    )  # (n, 2H + 2W)
    level = float(xp.median(xp.abs(xp.median(border, axis=1))))
    top = float(xp.abs(X).max())
    if top > 0 and level > BACKGROUND_WARN_FRACTION * top:
        import warnings

        warnings.warn(
            f"{name}: the images' background is not zero (border median {level:.3g}, "
            f"largest value {top:.3g}); kappa^max compares the background too. Pass "
            f"background='median' to subtract it",
            UserWarning,
            stacklevel=4,  # the caller of kappa_max (or of the estimator's fit)
        )
    return X
