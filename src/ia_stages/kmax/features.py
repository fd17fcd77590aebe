"""Rotation- and translation-invariant image features, and each image's nearest in their space.

Two families of invariants, both from rings of angular Fourier coefficients F_r(m) (ring r,
angular frequency m). Rotating the image by theta multiplies F_r(m) by exp(-i m theta) on every
ring alike, so |F_r(m)| and the cross-ring products F_r(m) conj(F_{r+1}(m)) do not change (the
products keep the relative phase of neighbouring rings, which magnitudes alone lose):

- 'spectrum': rings of the amplitude spectrum |FFT2(u)|, which a translation does not change
  (for an object on a zero background that stays inside the frame);
- 'centroid': rings of the image itself about its intensity centroid
  (:func:`ia_stages.kmax.polar.polar_spectra`, the coarse scan's own rings), which a translation
  moves with the object. On noisy images the centroid weighs only what stands above the noise
  (``FeatureSettings.centroid_noise``): the |noise| of an empty background would otherwise
  pull every centroid toward the frame's middle, by a different amount in each image.

A mirror image (columns reversed) reads every ring backwards, which conjugates F_r(m): the
magnitudes and the products' real parts stay, their imaginary parts change sign. For a group
with mirror images (``mirror=True``) the features keep |Im| in their place, so that an image
and its mirror image have the same features.

Each family is scaled to unit norm per image, the two are stacked, and a PCA fitted on a random
subset of rows compresses them to ``n_dims``. The array code takes ``xp`` from its input, so
the same source runs on numpy and cupy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, fft_module
from ia_stages.core.noise import estimate_noise
from ia_stages.kmax.polar import centroids, polar_spectra
from ia_stages.kmax.selection import nearest_of_block
from ia_stages.settings.features import DEFAULT_FEATURES, FeatureSettings


def ring_invariants(F: Any, mirror: bool = False) -> Any:
    """Rotation invariants of ring coefficients.

    Parameters
    ----------
    F : ``(n, R, m)`` complex angular Fourier coefficients of R rings
    mirror : default False; True: also invariant to reading every ring backwards (the rings
        of the mirror image, whose coefficients are the conjugates)

    Returns
    -------
    ``(n, R m + 2 (R - 1) m)`` float32: |F_r(m)|, then the real and imaginary parts of
    F_r(m) conj(F_{r+1}(m)) / sqrt(|F_r(m)| |F_{r+1}(m)|) (degree one, as the magnitudes);
    with ``mirror`` the imaginary parts' absolute values

    Example
    -------
    >>> F = np.exp(1j * np.arange(6.0)).reshape(1, 2, 3)
    >>> turned = F * np.exp(-1j * np.arange(3) * 0.7)
    >>> bool(np.allclose(ring_invariants(F), ring_invariants(turned), atol=1e-6))
    True
    >>> bool(np.allclose(ring_invariants(F, True), ring_invariants(np.conj(F), True)))
    True
    """
    xp = array_module(F)
    mag = xp.abs(F)
    cross = F[:, :-1] * xp.conj(F[:, 1:])
    cross = cross / xp.sqrt(xp.abs(cross) + 1e-12)
    n = F.shape[0]
    imag = xp.abs(cross.imag) if mirror else cross.imag
    parts = [mag.reshape(n, -1), cross.real.reshape(n, -1), imag.reshape(n, -1)]
    return xp.concatenate(parts, 1).astype(np.float32)


def spectrum_rings(images: Any, n_angles: int) -> Any:
    """Rings of the centred amplitude spectrum |FFT2(u)| ``(n, R, n_angles)``, radii 1 .. R
    frequency samples (R = min(H, W) // 2 - 1), sampled bilinearly by one matrix product."""
    xp = array_module(images)
    n, H, W = images.shape
    amp = xp.abs(fft_module(xp).fftshift(fft_module(xp).fft2(images), axes=(1, 2)))
    interp, R = _polar_matrix(H, W, n_angles)
    rings = amp.reshape(n, H * W).astype(np.float32) @ xp.asarray(interp)
    return rings.reshape(n, R, n_angles)


def _polar_matrix(H: int, W: int, n_angles: int) -> tuple[np.ndarray, int]:
    """``(H W, R n_angles)`` bilinear sampling of the shifted spectrum on rings about the zero
    frequency (row H // 2, column W // 2)."""
    R = max(1, min(H, W) // 2 - 1)
    r = np.arange(1, R + 1, dtype=float)
    phi = 2 * np.pi * np.arange(n_angles) / n_angles
    y = H // 2 + r[:, None] * np.cos(phi)[None]
    x = W // 2 + r[:, None] * np.sin(phi)[None]
    out = np.zeros((H * W, R * n_angles), dtype=np.float32)
    y0, x0 = np.floor(y).astype(int), np.floor(x).astype(int)
    fy, fx = y - y0, x - x0
    col = np.arange(R * n_angles).reshape(R, n_angles)
    for dy, dx, w in ((0, 0, (1 - fy) * (1 - fx)), (1, 0, fy * (1 - fx)), (0, 1, (1 - fy) * fx),
                      (1, 1, fy * fx)):  # fmt: skip
        yy, xx = y0 + dy, x0 + dx
        ok = (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
        np.add.at(out, (yy[ok] * W + xx[ok], col[ok]), w[ok])
    return out, R


def raw_features(
    images: Any,
    settings: FeatureSettings = DEFAULT_FEATURES,
    floor: float = 0.0,
    mirror: bool = False,
) -> Any:
    """Invariant features ``(n, D)`` float32 of smoothed, normalised images ``(n, H, W)``,
    before the PCA; each family has unit norm per image. ``floor``: the 'centroid' family's
    centroid weighs max(|u| - floor, 0) (:func:`ia_stages.kmax.polar.centroids`);
    ``mirror``: invariant to mirror images too (:func:`ring_invariants`)."""
    xp = array_module(images)
    f = settings.n_freqs
    parts = []
    if settings.route in ("spectrum", "both"):
        rings = spectrum_rings(images, settings.n_angles)
        parts.append(ring_invariants(fft_module(xp).rfft(rings, axis=2)[..., :f], mirror))
    if settings.route in ("centroid", "both"):
        spec = polar_spectra(images, centroids(images, floor), settings.n_angles)  # (K, n, R)
        parts.append(ring_invariants(spec.transpose(1, 2, 0)[..., :f], mirror))
    parts = [p / xp.maximum(xp.linalg.norm(p, axis=1, keepdims=True), 1e-12) for p in parts]
    return xp.concatenate(parts, 1)


def invariant_features(
    images: Any,
    settings: FeatureSettings = DEFAULT_FEATURES,
    progress: Any = None,
    mirror: bool = False,
) -> Any:
    """Rotation- and translation-invariant features of every image, PCA-compressed.

    Parameters
    ----------
    images : ``(n, H, W)`` float images (numpy or cupy), smoothed and normalised as kappa^max
        compares them
    settings : :class:`FeatureSettings`
    progress : called with the number of images done after every batch
    mirror : default False; True: an image and its mirror image (columns reversed) have the
        same features (for a group with mirror images)

    Returns
    -------
    ``(n, n_dims)`` float32 (``n_dims`` 0: ``(n, D)`` raw invariants), same backend

    Example
    -------
    >>> from scipy.ndimage import rotate
    >>> rng = np.random.default_rng(0)
    >>> u = np.zeros((32, 32)); u[10:20, 12:16] = 1; u[10:13, 12:22] = 1
    >>> X = np.stack([u, rotate(u, 90, reshape=False, order=1), rng.random((32, 32))])
    >>> F = invariant_features(X, FeatureSettings(n_dims=0))
    >>> d = ((F[:, None] - F[None]) ** 2).sum(-1)
    >>> bool(d[0, 1] < d[0, 2])
    True
    """
    xp = array_module(images)
    n = images.shape[0]
    b = settings.batch
    rng = np.random.default_rng(settings.seed)
    rows = np.sort(rng.permutation(n)[: settings.pca_rows])
    basis = None
    sample = images[xp.asarray(rows)]
    floor = centroid_floor(sample, settings)
    if settings.n_dims:
        sample = raw_features(sample, settings, floor, mirror)
        mean = sample.mean(0)
        basis = _principal_axes(sample - mean, settings.n_dims, rng)
    width = basis.shape[1] if basis is not None else raw_features(images[:1], settings).shape[1]
    out = xp.empty((n, width), dtype=np.float32)
    for a in range(0, n, b):
        f = raw_features(images[a : a + b], settings, floor, mirror)
        out[a : a + b] = f if basis is None else (f - mean) @ basis
        if progress is not None:
            progress(min(b, n - a))
    return out


def centroid_floor(images: Any, settings: FeatureSettings = DEFAULT_FEATURES) -> float:
    """The weight floor of the 'centroid' family's centroids: ``settings.centroid_noise`` times
    the white-noise standard deviation of ``images`` ``(m, H, W)`` estimated from a frame
    ``settings.noise_border`` px wide (narrower where the images are too small for it; 0 where
    there is no frame to read, or the family is not used).

    Example
    -------
    >>> X = np.random.default_rng(0).normal(0, 0.1, (20, 16, 16))
    >>> round(centroid_floor(X) / 0.3, 1)
    1.0
    """
    border = min(int(settings.noise_border), (min(images.shape[1:]) - 1) // 2)
    if settings.route == "spectrum" or not settings.centroid_noise or border < 1:
        return 0.0
    return float(settings.centroid_noise) * estimate_noise(images, border)


def _principal_axes(A: Any, d: int, rng: np.random.Generator, power: int = 3) -> Any:
    """The ``(D, min(d, D))`` leading right singular vectors of centred rows ``A (m, D)``, by a
    randomised range finder with ``power`` subspace iterations (Halko et al. 2011), in array
    code: a full eigendecomposition of the D x D covariance costs far more."""
    xp = array_module(A)
    D = A.shape[1]
    d = min(d, D)
    width = min(D, d + 16)
    Q = xp.asarray(rng.standard_normal((D, width)).astype(np.float32))
    for _ in range(power):
        Q, _ = xp.linalg.qr(A.T @ (A @ Q))
    _, vecs = xp.linalg.eigh((A @ Q).T.astype(np.float64) @ (A @ Q).astype(np.float64))
    return (Q @ vecs[:, ::-1][:, :d].astype(np.float32)).astype(np.float32)


def feature_neighbours(
    F: Any, c: int, batch: int = 2048, progress: Any = None, rows: range | None = None
) -> Any:
    """Each row's ``c`` nearest other rows by Euclidean distance, nearest first.

    Exact, by blocked float32 matrix products: d2 = |a|^2 + |b|^2 - 2 a.b for ``batch`` rows
    against all at once, then each row's nearest by a compiled bounded heap (ties to the
    lower index; :func:`ia_stages.kmax.selection.nearest_of_block`, on a GPU its CUDA build).

    Parameters
    ----------
    F : ``(n, D)`` features (numpy or cupy)
    c : neighbours per row, the row itself not counted; 1 <= c < n
    batch : rows per block (memory: batch x n float32)
    progress : called with the number of rows done after every block
    rows : the rows whose neighbours (among all n) to find; None: all. A row's list does
        not depend on the other rows asked for (blocks of ``batch`` start at multiples of
        ``batch`` in either case), so row blocks of a sharded run give the rows of one call

    Returns
    -------
    ``(len(rows), c)`` int64 indices, same backend

    Example
    -------
    >>> feature_neighbours(np.array([[0.0], [1.0], [3.0]]), 1).ravel().tolist()
    [1, 0, 1]
    """
    xp = array_module(F)
    n = F.shape[0]
    if not 1 <= c < n:
        raise ValueError(f"features.n_candidates must be in [1, n - 1 = {n - 1}], got {c}")
    F = F.astype(np.float32)
    sq = (F**2).sum(1)
    if xp is np:
        nearest = nearest_of_block
    else:
        # lazy: numba.cuda is optional (arrays on a GPU only)
        from ia_stages.kmax.cuda import nearest_of_block_cuda as nearest
    rows = range(n) if rows is None else rows
    out = xp.empty((len(rows), c), dtype=np.int64)
    for a in range(rows.start - rows.start % batch, rows.stop, batch):
        lo, hi = max(a, rows.start), min(a + batch, rows.stop)
        product = F[lo:hi] @ F.T
        nearest(product, sq, lo, out[lo - rows.start : hi - rows.start])
        if progress is not None:
            progress(product.shape[0])
    return out
