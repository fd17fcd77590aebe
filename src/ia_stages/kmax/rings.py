"""Compiled parts of the polar rotation scan, for numpy arrays: ring sampling and peak picking.

For every pair: the envelope over polar centres of the rotation scores, its ``c`` highest
circular local maxima refined by a parabola through their neighbours (as
:func:`ia_stages.kmax.polar.peak_angles`), and the centre that gave the envelope at each peak. One
pass over the pair's ``(n_centres, M)`` scores, no intermediate arrays (:func:`_peaks_of_pair`,
also compiled for CUDA by :mod:`ia_stages.kmax.cuda` for cupy scores); or, with
``peaks='joint'``, the ``c`` highest local maxima over angle and the lattice of centres
together (:func:`_joint_peaks_of_pair`, compiled for both in the same way). It runs serially and
without the GIL: kappa^max scans its chunks of pairs on several Python threads, each with its
BLAS products on that one thread (numba's threads would compete with BLAS's spinning workers).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ia_stages.core.taps import _PAD, _dot4, _pw, taps
from ia_stages.core.threads import on_ranges
from ia_stages.core.warp import spline_coefficients


@njit(cache=True, nogil=True)
def _peaks_of_pair(scores, i, j, n_peaks, env, top, at, theta, centre):
    """The peaks of pair (i, j) into ``theta, centre (n_peaks,)``; scratch ``env (M,)``,
    ``top, at (n_peaks,)``. Scalar code shared with the CUDA build (:mod:`.cuda`)."""
    n_o, M = scores.shape[2], scores.shape[3]
    for a in range(M):
        env[a] = scores[i, j, 0, a]
    for o in range(1, n_o):
        for a in range(M):
            env[a] = max(env[a], scores[i, j, o, a])
    # the n_peaks highest circular local maxima, in one pass (ties: the lower angle first)
    found = 0
    for a in range(M):
        e = env[a]
        if e < env[(a - 1) % M] or e < env[(a + 1) % M]:
            continue
        if found == n_peaks and e <= top[n_peaks - 1]:
            continue
        slot = min(found, n_peaks - 1)
        while slot > 0 and top[slot - 1] < e:
            top[slot], at[slot] = top[slot - 1], at[slot - 1]
            slot -= 1
        top[slot], at[slot] = e, a
        found = min(found + 1, n_peaks)
    for c in range(n_peaks):
        best = at[c] if c < found else at[0]  # fewer local maxima: repeat the best one
        lo, mid, hi = env[(best - 1) % M], env[best], env[(best + 1) % M]
        curv = lo - 2.0 * mid + hi
        frac = 0.5 * (lo - hi) / curv if curv < 0.0 else 0.0
        frac = min(max(frac, -0.5), 0.5)
        theta[c] = (best + frac) * (2.0 * math.pi / M)
        # the centre that gives the envelope at the sample nearest to the peak
        near = round(best + frac) % M
        arg = 0
        for o in range(1, n_o):
            if scores[i, j, o, near] > scores[i, j, arg, near]:
                arg = o
        centre[c] = arg


@njit(cache=True, nogil=True)
def _pair_peaks(scores, ii, jj, n_peaks, theta, centre):
    env = np.empty(scores.shape[3])
    top = np.empty(n_peaks)
    at = np.empty(n_peaks, dtype=np.int64)
    for k in range(ii.size):
        _peaks_of_pair(scores, ii[k], jj[k], n_peaks, env, top, at, theta[k], centre[k])


def pair_peaks(
    scores: np.ndarray, ii: np.ndarray, jj: np.ndarray, n_peaks: int
) -> tuple[np.ndarray, np.ndarray]:
    """Peak rotations of the pairs (ii[k], jj[k]) of a block of scores.

    Parameters
    ----------
    scores : ``(n_i, n_j, n_centres, M)`` rotation scores of every target against every
        moving image about each of its centres (:func:`ia_stages.kmax.polar.block_scores`)
    ii, jj : ``(m,)`` pairs, indices into the first and second axes
    n_peaks : peaks per pair

    Returns
    -------
    theta ``(m, n_peaks)`` radians, best first; centre ``(m, n_peaks)`` index of the centre
    with the highest score at the sample nearest to each peak.
    """
    m = ii.size
    theta = np.empty((m, n_peaks))
    centre = np.empty((m, n_peaks), dtype=np.int64)
    _pair_peaks(
        np.ascontiguousarray(scores, dtype=np.float32),
        np.asarray(ii, np.int64),
        np.asarray(jj, np.int64),
        int(n_peaks),
        theta,
        centre,
    )
    return theta, centre


@njit(cache=True, nogil=True)
def _polar_samples(lo, hi, padded, pad, H, W, centres, dy, dx, out, m_taps):
    n_c = centres.shape[0]
    R, M = dy.shape
    for k in range(lo, hi):
        v = padded[k]
        for o in range(n_c):
            for r in range(R):
                for a in range(M):
                    # clipped 2.5 px outside the image, a point's taps read only the zero border
                    y = min(max(centres[o, k, 0] + dy[r, a], -2.5), H + 1.5)
                    x = min(max(centres[o, k, 1] + dx[r, a], -2.5), W + 1.5)
                    y0, x0 = np.floor(y), np.floor(x)
                    wy, wx = _pw(y - y0, m_taps), _pw(x - x0, m_taps)
                    iy, ix = int(y0) + pad - 1, int(x0) + pad - 1
                    acc = 0.0
                    for b in range(4):
                        acc += wy[b] * _dot4(wx, v, iy + b, ix)
                    out[o, k, r, a] = acc


def polar_samples(
    images: np.ndarray,
    centres: np.ndarray,
    dy: np.ndarray,
    dx: np.ndarray,
    interpolation: str = "keys",
):
    """Samples of every image on rings about each of its centres, interpolated by
    ``interpolation`` ('keys' or 'bspline').

    Parameters
    ----------
    images : ``(n, H, W)``, zero outside
    centres : ``(n_c, n, 2)`` (row, column)
    dy, dx : ``(R, M)`` offsets of the samples from a centre

    Returns
    -------
    ``(n_c, n, R, M)`` float32: images[k] at centres[o, k] + (dy, dx), as
    :func:`ia_stages.core.warp.interpolate` samples.
    """
    n, H, W = images.shape
    pad = _PAD  # >= 4: the taps of a point clipped to 2.5 px outside stay inside
    Q = spline_coefficients(np.asarray(images, dtype=np.float64), interpolation)
    padded = np.pad(Q, ((0, 0), (pad, pad), (pad, pad)))
    out = np.empty((centres.shape[0], n, *dy.shape), dtype=np.float32)
    rest = (
        padded, pad, H, W, np.ascontiguousarray(centres, dtype=np.float64),
        np.ascontiguousarray(dy, dtype=np.float64), np.ascontiguousarray(dx, dtype=np.float64),
        out, taps(interpolation),
    )  # fmt: skip
    on_ranges(lambda lo, hi: _polar_samples(lo, hi, *rest), n)
    return out


@njit(cache=True, nogil=True)
def _joint_peaks_of_pair(scores, i, j, n_peaks, nbr, top, at_o, at_a, theta, centre):
    """The joint peaks of pair (i, j) into ``theta, centre (n_peaks,)``; scratch ``top, at_o,
    at_a (n_peaks,)``. Scalar code shared with the CUDA build (:mod:`.cuda`)."""
    n_o, M = scores.shape[2], scores.shape[3]
    # the n_peaks highest local maxima over angle (circular) and centre, in one pass (ties:
    # the lower centre, then the lower angle first)
    found = 0
    for o in range(n_o):
        for a in range(M):
            e = scores[i, j, o, a]
            if e < scores[i, j, o, (a - 1) % M] or e < scores[i, j, o, (a + 1) % M]:
                continue
            if found == n_peaks and e <= top[n_peaks - 1]:
                continue
            peak = True
            for q in range(nbr.shape[1]):
                if nbr[o, q] >= 0 and scores[i, j, nbr[o, q], a] > e:
                    peak = False
                    break
            if not peak:
                continue
            slot = min(found, n_peaks - 1)
            while slot > 0 and top[slot - 1] < e:
                top[slot], at_o[slot], at_a[slot] = top[slot - 1], at_o[slot - 1], at_a[slot - 1]
                slot -= 1
            top[slot], at_o[slot], at_a[slot] = e, o, a
            found = min(found + 1, n_peaks)
    for c in range(n_peaks):
        s = c if c < found else 0  # fewer maxima: repeat the best one
        o, a = at_o[s], at_a[s]
        # the parabola in float64 on every target (float32 scores)
        lo = float(scores[i, j, o, (a - 1) % M])
        mid = float(scores[i, j, o, a])
        hi = float(scores[i, j, o, (a + 1) % M])
        curv = lo - 2.0 * mid + hi
        frac = 0.5 * (lo - hi) / curv if curv < 0.0 else 0.0
        frac = min(max(frac, -0.5), 0.5)
        theta[c] = (a + frac) * (2.0 * math.pi / M)
        centre[c] = o


@njit(cache=True, nogil=True)
def _pair_joint_peaks(scores, ii, jj, n_peaks, nbr, theta, centre):
    top = np.empty(n_peaks)
    at_o = np.empty(n_peaks, dtype=np.int64)
    at_a = np.empty(n_peaks, dtype=np.int64)
    for k in range(ii.size):
        _joint_peaks_of_pair(
            scores, ii[k], jj[k], n_peaks, nbr, top, at_o, at_a, theta[k], centre[k]
        )


def pair_joint_peaks(
    scores: np.ndarray, ii: np.ndarray, jj: np.ndarray, n_peaks: int, neighbours: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Peak (rotation, centre) pairs of the pairs (ii[k], jj[k]) of a block of scores: the
    ``n_peaks`` highest local maxima over both the angle (circular) and the lattice of
    centres, each angle refined by a parabola along its centre's scores.

    Parameters
    ----------
    scores : ``(n_i, n_j, n_centres, M)`` as for :func:`pair_peaks`
    ii, jj : ``(m,)`` pairs
    n_peaks : peaks per pair
    neighbours : ``(n_centres, q)`` indices of each centre's lattice neighbours (-1: none);
        a maximum is at least its two angle neighbours and its centre neighbours at its angle

    Returns
    -------
    theta ``(m, n_peaks)`` radians and centre ``(m, n_peaks)``, best first (ties: lower
    centre, then lower angle); rows with fewer maxima repeat their best one.
    """
    m = ii.size
    theta = np.empty((m, n_peaks))
    centre = np.empty((m, n_peaks), dtype=np.int64)
    _pair_joint_peaks(
        np.ascontiguousarray(scores, dtype=np.float32),
        np.asarray(ii, np.int64),
        np.asarray(jj, np.int64),
        int(n_peaks),
        np.ascontiguousarray(neighbours, dtype=np.int64),
        theta,
        centre,
    )
    return theta, centre


@njit(cache=True, nogil=True, fastmath=True)
def _lattice_pair_centre(A, B, i, j, o, synthesis, g, out_po):
    """Rotation scores ``out_po (M,)`` of fixed image i's centroid rings ``A[:, i]`` against
    moving image j's rings about lattice centre o ``B[:, j, o]``; scratch ``g (2K,)``.
    Scalar code shared with the CUDA build (:mod:`.cuda`)."""
    K, R = A.shape[0], A.shape[2] // 2
    M = synthesis.shape[1]
    for k in range(K):
        re = 0.0
        im = 0.0
        for f in range(R):
            ur, ui = A[k, i, f], A[k, i, R + f]
            vr, vi = B[k, j, o, f], B[k, j, o, R + f]
            re += ur * vr + ui * vi
            im += ui * vr - ur * vi
        g[2 * k] = re
        g[2 * k + 1] = im
    for t in range(M):
        acc = 0.0
        for q in range(2 * K):
            acc += g[q] * synthesis[q, t]
        out_po[t] = acc


@njit(cache=True, nogil=True, fastmath=True)
def _lattice_pairs(lo, hi, A, B, ia, jb, synthesis, out):
    K, n_o = A.shape[0], B.shape[2]
    for p in range(lo, hi):
        g = np.empty(2 * K)
        for o in range(n_o):
            _lattice_pair_centre(A, B, ia[p], jb[p], o, synthesis, g, out[p, o])


def lattice_pair_scores(
    A: np.ndarray,
    B: np.ndarray,
    ia: np.ndarray,
    jb: np.ndarray,
    synthesis: np.ndarray,
    out: np.ndarray,
) -> None:
    """Rotation scores of chosen pairs against a lattice of centres, into ``out``.

    For pair p: the ring spectra ``A[:, ia[p]]`` of its fixed image about its centroid
    ``(K, 2R)`` (K angular frequencies; R rings' real parts, then their imaginary parts)
    against those of its moving image about every lattice centre ``B[:, jb[p]]``
    ``(K, n_o, 2R)``: G_k = sum over rings of u_k conj(v_k), then the scores over ``M`` angles
    ``[Re G_0, Im G_0, Re G_1, ...] @ synthesis`` (:func:`ia_stages.kmax.polar.
    angle_synthesis`). ``out``: ``(m, n_o, M)`` float32. One range of pairs per thread
    (:func:`ia_stages.core.threads.on_ranges`; fastmath: the sums reassociated, as the
    refinement's CPU kernels); :func:`ia_stages.kmax.cuda.lattice_pair_scores_cuda` runs the
    same :func:`_lattice_pair_centre` one thread per (pair, centre).
    """
    on_ranges(lambda lo, hi: _lattice_pairs(lo, hi, A, B, ia, jb, synthesis, out), ia.size)
