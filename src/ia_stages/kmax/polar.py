"""Rotation scan of all pairs at once in polar-Fourier coordinates about each image's centroid.

Rotating an image about its centroid shifts its polar samples u(r, phi) along phi, so the
correlation of u with every rotation of v about the centroids is, per ring r, a circular
correlation over phi: C(theta) = sum_r r sum_k u_hat_k(r) conj(v_hat_k(r)) e^{i k theta}. For a
block of pairs that is one complex matrix product per angular frequency k (all rings summed),
then an inverse FFT over k for each pair; :func:`block_scores` does both as real matrix
products, which BLAS and cuBLAS run fastest. The scan fixes the translation by matching centroids;
the refinement that follows frees it.

Polar convention: u_pol(r, phi) = u(m + r (cos phi, sin phi)) in (row, column) coordinates, m the
centroid. With the SE(2) convention of ``core.groups``, u = v o tau with tau a rotation by
theta about the centroids gives u_pol(r, phi) = v_pol(r, phi - theta).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, fft_module
from ia_stages.core.threads import on_ranges, threads_here
from ia_stages.core.warp import interpolate
from ia_stages.kmax.rings import polar_samples

RING_BATCH = 128  # images sampled at once by the array code (cupy)


def centroids(images: Any, floor: float = 0.0) -> Any:
    """Intensity centroids ``(n, 2)`` (row, column) of ``(n, H, W)`` images.

    Weights are |image|, or with ``floor`` > 0 max(|image| - floor, 0): pixels within
    ``floor`` of zero (the noise of an empty background) then do not pull the centroid toward
    the frame's middle. Any such pointwise weight moves with the image under a rotation or a
    shift. An image with no pixel above ``floor`` keeps its |image| centroid; an all-zero
    image gets the image centre.

    Example
    -------
    >>> u = np.zeros((1, 5, 5)); u[0, 1, 3] = 1.0; u[0, 3, 1] = 0.1
    >>> centroids(u).round(2).tolist(), centroids(u, floor=0.2).round(2).tolist()
    ([[1.18, 2.82]], [[1.0, 3.0]])
    """
    xp = array_module(images)
    n, H, W = images.shape
    w = xp.abs(images)
    if floor > 0:
        above = xp.maximum(w - floor, 0.0)
        some = above.reshape(n, -1).sum(1) > 0
        w = xp.where(some[:, None, None], above, w)
    mass = w.reshape(n, -1).sum(1)
    rows = xp.arange(H, dtype=float)
    cols = xp.arange(W, dtype=float)
    safe = xp.where(mass > 0, mass, 1.0)
    r = (w.sum(2) * rows).sum(1) / safe
    c = (w.sum(1) * cols).sum(1) / safe
    centre = xp.asarray([(H - 1) / 2, (W - 1) / 2])
    out = xp.stack([r, c], 1)
    return xp.where((mass > 0)[:, None], out, centre)


def _ring_spectra(
    images: Any, centres: Any, n_angles: int, n_radii: int | None, interpolation: str = "keys"
) -> Any:
    """``(n_c, n, R, K)`` complex64: sqrt(r) * rfft over phi of the rings about every centre
    ``(n_c, n, 2)`` (see :func:`polar_spectra`)."""
    xp = array_module(images)
    n, H, W = images.shape
    n_c = centres.shape[0]
    if n_radii is None:
        n_radii = int(np.ceil(np.hypot(H, W) / 2))
    r = xp.arange(n_radii, dtype=float) + 0.5
    phi = xp.arange(n_angles, dtype=float) * (2 * np.pi / n_angles)
    dy = r[:, None] * xp.cos(phi)[None]  # (R, M)
    dx = r[:, None] * xp.sin(phi)[None]
    if xp is np:
        out = polar_samples(images, centres, dy, dx, interpolation)  # (n_c, n, R, M)
    else:
        out = xp.empty((n_c, n, n_radii, n_angles), dtype=np.float32)
        for a in range(0, n, RING_BATCH):  # the array code holds ~20 copies of its field
            sel = slice(a, a + RING_BATCH)
            cen = centres[:, sel]
            field = xp.stack([cen[..., 0, None, None] + dy, cen[..., 1, None, None] + dx])
            m = cen.shape[1]
            field = field.transpose(2, 0, 1, 3, 4).reshape(m, 2, n_c * n_radii, n_angles)
            w = interpolate(images[sel], field, interpolation=interpolation)
            w = w.reshape(m, n_c, n_radii, n_angles)
            out[:, sel] = w.transpose(1, 0, 2, 3)
    # every ring's transform is its own: numpy rings on every thread (pocketfft's workers)
    workers = {"workers": threads_here()} if xp is np else {}
    spec = fft_module(xp).rfft(out, axis=3, **workers)
    spec *= xp.sqrt(r)[:, None].astype(np.float32)
    return spec


def polar_spectra(
    images: Any,
    centres: Any,
    n_angles: int,
    n_radii: int | None = None,
    interpolation: str = "keys",
) -> Any:
    """Angular Fourier coefficients of every ring, weighted for the polar area element.

    Rings are sampled by ``interpolation`` ('keys' or 'bspline', zero outside the image), as
    every warp here is: compiled for numpy arrays, :func:`ia_stages.core.warp.interpolate` for
    cupy.

    Parameters
    ----------
    images : ``(n, H, W)``
    centres : ``(n, 2)`` polar origins (row, column), or ``(n_c, n, 2)``: several per image
    n_angles : samples per ring (the scan's rotation grid is 2 pi / n_angles)
    n_radii : rings at radii 0.5, 1.5, ...; None = half the image diagonal

    Returns
    -------
    ``(n_angles // 2 + 1, n, n_radii)`` complex64 (``(K, n_c * n, R)``, centre-major, for
    several centres): sqrt(r) * rfft over phi of u_pol(r, .), so that sum over rings of
    a * conj(b) is the area-weighted correlation.
    """
    xp = array_module(images)
    centres = centres if centres.ndim == 3 else centres[None]
    spec = _ring_spectra(images, centres, n_angles, n_radii, interpolation)
    n_c, n, R, K = spec.shape
    return xp.ascontiguousarray(spec.transpose(3, 0, 1, 2).reshape(K, n_c * n, R))


def scan_spectra(
    images: Any,
    centres: Any,
    n_angles: int,
    n_radii: int | None = None,
    interpolation: str = "keys",
) -> Any:
    """The spectra :func:`block_scores` takes, laid out image-major in one pass.

    Returns ``(K, n, n_c, 2 R)`` float64 for ``centres (n_c, n, 2)``: [..., :R] the real,
    [..., R:] the imaginary parts of :func:`polar_spectra`'s coefficients, so that
    ``out.reshape(K, n * n_c, 2 R)`` and any slice of images are views. float64, so that
    :func:`block_scores` sums in float64: its float32 result is then the same whatever the
    block shapes, and a sharded kappa^max equals an unsharded one.
    """
    xp = array_module(images)
    n, H, W = images.shape
    R = int(np.ceil(np.hypot(H, W) / 2)) if n_radii is None else n_radii
    out = xp.empty((n_angles // 2 + 1, n, centres.shape[0], 2 * R))

    def fill(lo: int, hi: int) -> None:
        spec = _ring_spectra(images[lo:hi], centres[:, lo:hi], n_angles, R, interpolation)
        out[:, lo:hi, :, :R] = spec.real.transpose(3, 1, 0, 2)
        out[:, lo:hi, :, R:] = spec.imag.transpose(3, 1, 0, 2)

    if xp is np:  # each image's spectra are its own: a range of images per thread
        on_ranges(fill, n)
    else:
        fill(0, n)
    return out


def rotation_products(spec_u: Any, spec_v: Any) -> Any:
    """Angular cross-spectra ``(n_i, n_j, K)`` of every u with every v (summed over rings).

    Parameters
    ----------
    spec_u : ``(K, n_i, R)`` from :func:`polar_spectra`
    spec_v : ``(K, n_j, R)``
    """
    xp = array_module(spec_u)
    G = xp.matmul(spec_u, xp.conj(spec_v).transpose(0, 2, 1))  # (K, n_i, n_j)
    return G.transpose(1, 2, 0)


def rotation_scores(spec_u: Any, spec_v: Any, n_angles: int) -> Any:
    """Correlation of every u with every rotation of every v about the centroids.

    Parameters
    ----------
    spec_u : ``(K, n_i, R)`` from :func:`polar_spectra`
    spec_v : ``(K, n_j, R)``

    Returns
    -------
    ``(n_i, n_j, n_angles)`` float32; entry [i, j, m] is proportional to
    <u_i, v_j rotated by theta_m = 2 pi m / n_angles about the centroids>.
    """
    return scores_from_products(rotation_products(spec_u, spec_v), n_angles)


def scores_from_products(products: Any, n_angles: int) -> Any:
    """Inverse FFT over the last axis: cross-spectra ``(..., K)`` to scores ``(..., n_angles)``."""
    xp = array_module(products)
    return fft_module(xp).irfft(products, n=n_angles, axis=-1)


def split_spectra(spec: Any) -> Any:
    """Real and imaginary parts side by side: ``(K, n, R)`` complex to ``(K, n, 2 R)`` float64
    (so that :func:`block_scores` sums in float64: its float32 result is then the same
    whatever the block shapes, and a sharded kappa^max equals an unsharded one)."""
    xp = array_module(spec)
    return xp.ascontiguousarray(xp.concatenate([spec.real, spec.imag], -1), dtype=np.float64)


def angle_synthesis(n_angles: int) -> np.ndarray:
    """``(2 K, n_angles)`` float64 matrix E with scores = [Re G_0, Im G_0, Re G_1, ...] @ E.

    Row 2k holds w_k cos(k theta_m), row 2k + 1 holds -w_k sin(k theta_m), with the weights of
    numpy's ``irfft(G, n=n_angles)``: w_k = 1 / M at k = 0 (and k = M / 2 for even M), 2 / M
    otherwise. Multiplying by E is that inverse FFT, done as one matrix product for all pairs.
    """
    M = n_angles
    k = np.arange(M // 2 + 1)
    w = np.where((k == 0) | (2 * k == M), 1.0 / M, 2.0 / M)
    phase = np.outer(k, np.arange(M)) * (2 * np.pi / M)
    E = np.empty((2 * k.size, M))
    E[0::2] = w[:, None] * np.cos(phase)
    E[1::2] = -w[:, None] * np.sin(phase)
    return E


def block_scores(real_u: Any, real_v: Any, synthesis: Any) -> Any:
    """Rotation scores of every u against every v, by two real matrix products.

    Parameters
    ----------
    real_u : ``(K, n_i, 2 R)`` :func:`split_spectra` of the targets (float64; kappa^max
        takes them from :func:`scan_spectra`, which lays them out image-major)
    real_v : ``(K, n_j, 2 R)`` of the moving images
    synthesis : ``(2 K, M)`` :func:`angle_synthesis` (array of the same backend)

    Returns
    -------
    ``(n_i, n_j, M)`` float32, equal to :func:`rotation_scores`: per angular frequency k,
    Re G = [u_re, u_im] . [v_re, v_im] and Im G = [u_im, -u_re] . [v_re, v_im], stacked so that
    one batched product gives both; then one product with ``synthesis`` over (k, part).
    """
    xp = array_module(real_u)
    K, n_i, R2 = real_u.shape
    n_j = real_v.shape[1]
    R = R2 // 2
    turned = xp.concatenate([real_u[..., R:], -real_u[..., :R]], -1)
    both = xp.concatenate([real_u, turned], 1)  # (K, 2 n_i, 2R): rows give Re, then Im
    G = xp.matmul(both, real_v.transpose(0, 2, 1))  # (K, 2 n_i, n_j)
    G = G.reshape(2 * K, n_i * n_j)  # row 2k + part, as the rows of synthesis
    scores = G.T @ synthesis
    return scores.astype(np.float32).reshape(n_i, n_j, -1)


def peak_angles(scores: Any, n_peaks: int) -> tuple[Any, Any]:
    """The ``n_peaks`` highest circular local maxima along the last axis, sub-sample refined.

    Parameters
    ----------
    scores : ``(..., M)`` correlation over M evenly spaced angles

    Returns
    -------
    angles ``(..., n_peaks)`` in radians and their scores (rows with fewer maxima repeat
    their best one).
    """
    xp = array_module(scores)
    M = scores.shape[-1]
    left, right = xp.roll(scores, 1, axis=-1), xp.roll(scores, -1, axis=-1)
    is_max = (scores >= left) & (scores >= right)
    key = xp.where(is_max, scores, -xp.inf)
    order = xp.argsort(-key, axis=-1)[..., :n_peaks]
    valid = xp.isfinite(xp.take_along_axis(key, order, -1))
    order = xp.where(valid, order, order[..., :1])
    c = xp.take_along_axis(scores, order, -1)
    lo = xp.take_along_axis(left, order, -1)
    hi = xp.take_along_axis(right, order, -1)
    curv = lo - 2 * c + hi
    frac = xp.where(curv < 0, 0.5 * (lo - hi) / xp.where(curv < 0, curv, -1.0), 0.0)
    frac = xp.clip(frac, -0.5, 0.5)
    return (order + frac) * (2 * np.pi / M), c - 0.25 * (lo - hi) * frac


def centroid_translation(theta: Any, m_u: Any, m_v: Any, shape: tuple[int, int]) -> Any:
    """Translation b of tau = (theta, b) that maps the centroid of u onto that of v.

    tau(p) = A (p - c) + c + b with tau(m_u) = m_v, so b = (m_v - c) - A (m_u - c).
    Shapes: theta ``(m, k)``, m_u ``(m, 2)``, m_v ``(m, 2)`` or ``(m, k, 2)``;
    returns ``(m, k, 2)``.
    """
    xp = array_module(theta)
    H, W = shape
    c = xp.asarray([(H - 1) / 2, (W - 1) / 2])
    du = (m_u - c)[:, None, :]
    cos, sin = xp.cos(theta), xp.sin(theta)
    Au0 = cos * du[..., 0] + sin * du[..., 1]
    Au1 = -sin * du[..., 0] + cos * du[..., 1]
    m_v = m_v if m_v.ndim == 3 else m_v[:, None, :]
    return (m_v - c) - xp.stack([Au0, Au1], -1)
