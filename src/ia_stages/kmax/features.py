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

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, fft_module
from ia_stages.core.noise import estimate_noise
from ia_stages.kmax.polar import centroids, polar_spectra
from ia_stages.kmax.selection import nearest_of_block

FEATURE_ROUTES = ("spectrum", "centroid", "both")


@dataclass(frozen=True)
class FeatureSettings:
    """Settings of the invariant features and of the candidate search in their space.

    route : 'spectrum', 'centroid' or 'both' (see the module docstring)
    n_angles : samples per ring
    n_freqs : angular frequencies kept per ring (0 .. n_freqs - 1)
    n_dims : PCA dimensions kept; 0 keeps the raw invariants
    pca_rows : rows the PCA is fitted on (a random subset, seeded)
    n_candidates : c, nearest in feature space per image (itself not counted); must be >= the
        list length k. None (the default) sizes it to n (:meth:`sized`): recall at fixed c
        falls with n, as more look-alikes compete for the same c places
    min_candidates : c for n up to (min_candidates / candidates_per_root_n)^2 images, when
        ``n_candidates`` is None
    candidates_per_root_n : beyond that, c = candidates_per_root_n * sqrt(n) (48 at 5,000
        images, 96 at 20,000, 215 at 100,000 with the defaults; ``bench/scale.py``)
    n_refine : r; of each image's c candidates, the r of lowest coarse d2 in the polar scan
        about the centroids (a few hundred flops per pair) are refined exactly; 0 refines all
        c. Must be 0 or in [k, c]
    n_expand : x; after the candidates are refined, each image's x best neighbours of its
        neighbours (not yet in its list, ranked by the triangle bound) are refined too and the
        lists merged again; 0: no such pass
    screen : True: the candidate pairs (and the expansion's) are first refined with the
        default search (``SearchSettings()``, the ``memory_mb`` of the exact one), a fraction
        of the exact preset's cost per pair; only each image's k nearest by it, and the
        expansion's pairs that would enter them, are refined again with the exact preset, and
        each pair keeps the better of its two optima. A pair the screen left out of both its
        images' lists has k pairs below it on either side, so it cannot enter the lists.
        False: every candidate pair with the exact preset
    exact_width : with ``screen``: the second pass refines with the exact preset only what
        reaches the first ``exact_width`` places of a list (the image itself included): those
        listed pairs, and the expansion's pairs whose screened d2 would enter them; the later
        places keep the screen's optimum (an achieved value of the same objective, never below
        the exact one). None (the default): every place of the k. IA's kNN path sets it to the
        attention's k (:meth:`ia_stages.ia.settings.IASettings.knn_features`): the read-out
        graph's further places are 0/1 links, which need who is near, not the exact d2
    centroid_noise : the 'centroid' family's rings are taken about the centroid of
        max(|u| - centroid_noise * s, 0), s the white-noise standard deviation of the images
        (smoothed and normalised) estimated from their borders
        (:func:`ia_stages.core.noise.estimate_noise`, on the PCA's rows); on clean images s
        is 0 and this is the centroid of |u|. 0: always the centroid of |u| (the scan's)
    noise_border : width (px) of the frame whose pixels estimate s (narrower where the
        images are too small for it)
    batch : images whose features are computed at once, and rows per block of the candidate
        search (bounds memory)
    seed : seed of the PCA's subset
    """

    route: str = "both"
    n_angles: int = 32
    n_freqs: int = 12
    n_dims: int = 128
    pca_rows: int = 20_000
    n_candidates: int | None = None
    min_candidates: int = 48
    candidates_per_root_n: float = 0.68
    n_refine: int = 0
    n_expand: int = 32
    screen: bool = True
    exact_width: int | None = None
    centroid_noise: float = 3.0
    noise_border: int = 3
    batch: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        if self.route not in FEATURE_ROUTES:
            raise ValueError(f"features.route must be one of {FEATURE_ROUTES}, got {self.route!r}")
        for name in ("n_angles", "n_freqs", "pca_rows", "min_candidates", "batch", "noise_border"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"features.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_candidates is not None and int(self.n_candidates) < 1:
            raise ValueError(f"features.n_candidates must be >= 1, got {self.n_candidates}")
        if not self.candidates_per_root_n >= 0:
            raise ValueError(
                f"features.candidates_per_root_n must be >= 0, got {self.candidates_per_root_n}"
            )
        if self.n_freqs > self.n_angles // 2 + 1:
            raise ValueError(
                f"features.n_freqs must be <= n_angles // 2 + 1 = {self.n_angles // 2 + 1}, "
                f"got {self.n_freqs}"
            )
        top = self.n_candidates if self.n_candidates is not None else np.inf
        if not (self.n_refine == 0 or 1 <= self.n_refine <= top):
            raise ValueError(
                f"features.n_refine must be 0 or in [1, n_candidates = {self.n_candidates}], "
                f"got {self.n_refine}"
            )
        if self.n_expand < 0:
            raise ValueError(f"features.n_expand must be >= 0, got {self.n_expand}")
        if self.exact_width is not None and int(self.exact_width) < 2:
            raise ValueError(f"features.exact_width must be >= 2 or null, got {self.exact_width}")
        if self.n_dims < 0:
            raise ValueError(f"features.n_dims must be >= 0, got {self.n_dims}")
        if not self.centroid_noise >= 0:
            raise ValueError(f"features.centroid_noise must be >= 0, got {self.centroid_noise}")

    def sized(self, n: int, k: int = 1) -> FeatureSettings:
        """These settings with c set for ``n`` images when ``n_candidates`` is None.

        c = max(min_candidates, round(candidates_per_root_n * sqrt(n))), at least ``k`` (the
        list length) and at most n - 1 (every other image). A c given explicitly is kept
        as it is (and checked against k and n where the images are).

        Example
        -------
        >>> FeatureSettings().sized(20_000).n_candidates
        96
        >>> FeatureSettings().sized(30, k=5).n_candidates
        29
        """
        if self.n_candidates is not None:
            return self
        c = max(self.min_candidates, round(self.candidates_per_root_n * np.sqrt(n)))
        return replace(self, n_candidates=int(min(max(c, k), n - 1)))

    def exact_places(self, k: int) -> int:
        """How many places of a k-long list the second pass refines exactly:
        ``exact_width``, or k when None, at most k.

        Example
        -------
        >>> FeatureSettings().exact_places(21), FeatureSettings(exact_width=10).exact_places(21)
        (21, 10)
        """
        return int(k) if self.exact_width is None else min(int(self.exact_width), int(k))


DEFAULT_FEATURES = FeatureSettings()


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
