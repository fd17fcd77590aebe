"""kappa^max beyond SE(2): the bounded local refinement of the similarity and affine
parameters (and the mirror) after the global SE(2) search.

The objective is the one the SE(2) search minimises, written for a norm-preserving action:
d2(tau) = sum_p (u[p] - s (v o tau)[p])^2 over the image grid, with s = sqrt|det A| = e^log_scale.
Multiplying by s makes the warp an isometry of L2 (||s v o tau|| = ||v||), so that a change of
area does not bias the score, and makes the score symmetric: d2_{u,v}(tau) = d2_{v,u}(tau^-1)
(change of variables), up to the sampling of the grid. The refinement is Levenberg-Marquardt on
the Gauss-Newton model of this least-squares form, over (theta, b0, b1, log_scale[,
log_stretch_0, log_stretch_1]) (:class:`ia_stages.core.groups.AffineFamily`) from the SE(2)
optimum, every trial projected into the group's bounds (log_scale's range, the disk of the
log-stretch), first on 2 x 2 block means of the images, then at full resolution
(:func:`refine_in_stages`).

Like :mod:`ia_stages.kmax.refine`, the per-pair code is written once as scalar Python
(registered in :data:`ia_stages.kmax.refine_kernels.SHARED`) and compiled with numba for the
CPU here and for CUDA by :mod:`ia_stages.kmax.cuda` (:func:`ia_stages.kmax.cuda.group_refine_cuda`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from numba import njit

from ia_stages.core import groups
from ia_stages.core.backend import to_numpy
from ia_stages.core.smoothing import half_resolution
from ia_stages.core.taps import _PAD, _pd, _pw, taps
from ia_stages.core.threads import on_ranges
from ia_stages.core.warp import spline_coefficients
from ia_stages.kmax.refine import above_floor
from ia_stages.kmax.refine_kernels import _dot, _floor, _packed, _shared, _taps

N_Q = 6  # (theta, b0, b1, log_scale, log_stretch_0, log_stretch_1): the refinement's parameters
LAYOUT_BATCH = 4096  # images whose supports are found at once (bounds the temporaries)


# K and its derivatives: one scalar source with the group's own (array) form
stretch_entries = _shared()(groups.stretch_entries)


@_shared()
def _project(q, lims):
    """``q (6,)`` into the bounds ``lims`` = (log_scale low, high, log_stretch_max), in place:
    log_scale clipped, the log-stretch (q[4], q[5]) scaled back onto its disk."""
    q[3] = min(max(q[3], lims[0]), lims[1])
    n = math.sqrt(q[4] * q[4] + q[5] * q[5])
    if n > lims[2]:
        q[4] *= lims[2] / n
        q[5] *= lims[2] / n


@_shared(fastmath=True, error_model="numpy")
def _group_eval(u, v, Wp, H, W, q, g, M, m, bu, bv, su, uu):
    """d2 at ``q (6,)`` on one pair; ``g (6,)`` = J^T r and ``M (6, 6)`` = J^T J of the
    residual r = u - s v o tau (the Gauss-Newton model). ``u``: the target, flat ``(H W,)``;
    ``v``: the moving image's padded interpolation coefficients (as :func:`_cost` reads
    them); ``m``: the tap coefficients.

    Only the pixels where an image can reach its floor are visited (the group's ``floor``; 0:
    all): on each row, the columns from the first to the last of the target's span ``su``
    ``(2 H,)`` and of the pixels that tau sends into the moving coefficients' box ``bv``
    (:func:`support_boxes`: its rows, columns, and ranges of row + column and row - column,
    widened by the taps' reach), on the rows that the target's box
    ``bu`` and that mapped box cover. Elsewhere r = u is taken: d2 = ``uu`` (the target's
    squared norm) + the sum of r^2 - u^2 over the pixels visited."""
    c, s, e = math.cos(q[0]), math.sin(q[0]), math.exp(q[3])
    k00, k01, k11, p00, p01, p11, t00, t01, t11 = stretch_entries(q[4], q[5])
    # A = e R(theta) K and its derivatives in log_stretch_0 (d..) and log_stretch_1 (f..)
    a00, a01 = e * (c * k00 + s * k01), e * (c * k01 + s * k11)
    a10, a11 = e * (-s * k00 + c * k01), e * (-s * k01 + c * k11)
    d00, d01 = e * (c * p00 + s * p01), e * (c * p01 + s * p11)
    d10, d11 = e * (-s * p00 + c * p01), e * (-s * p01 + c * p11)
    f00, f01 = e * (c * t00 + s * t01), e * (c * t01 + s * t11)
    f10, f11 = e * (-s * t00 + c * t01), e * (-s * t01 + c * t11)
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    r_lo, r_hi = bu[0], bu[1]
    y_lo, y_hi, x_lo, x_hi = bv[0] - 2.0, bv[1] + 2.0, bv[2] - 2.0, bv[3] + 2.0
    det = a00 * a11 - a01 * a10
    moving = bv[1] >= bv[0] and det != 0.0
    if moving:
        for corner in range(4):
            yy = (y_lo if corner < 2 else y_hi) - cy - q[1]
            xx = (x_lo if corner % 2 == 0 else x_hi) - cx - q[2]
            ry = (a11 * yy - a01 * xx) / det + cy
            r_lo, r_hi = min(r_lo, math.floor(ry)), max(r_hi, math.ceil(ry))
    cost = uu
    g0 = g1 = g2 = g3 = g4 = g5 = 0.0
    m00 = m10 = m11 = m20 = m21 = m22 = m30 = m31 = m32 = m33 = 0.0
    m40 = m41 = m42 = m43 = m44 = m50 = m51 = m52 = m53 = m54 = m55 = 0.0
    for r in range(int(max(r_lo, 0)), int(min(r_hi, H - 1)) + 1):
        gy = r - cy
        c_lo, c_hi = su[2 * r], su[2 * r + 1]
        if moving:
            # the columns whose sample y = a00 gy + a01 gx + .. and x = a10 gy + a11 gx + ..
            # fall in the moving box: an interval of gx per axis
            g_lo, g_hi = -1e300, 1e300
            ty, tx = a00 * gy + cy + q[1], a10 * gy + cx + q[2]
            for axis in range(4):  # y, x, y + x, y - x: linear in gx
                if axis == 0:
                    slope, at, lo, hi = a01, ty, y_lo, y_hi
                elif axis == 1:
                    slope, at, lo, hi = a11, tx, x_lo, x_hi
                elif axis == 2:
                    slope, at, lo, hi = a01 + a11, ty + tx, bv[4] - 4.0, bv[5] + 4.0
                else:
                    slope, at, lo, hi = a01 - a11, ty - tx, bv[6] - 4.0, bv[7] + 4.0
                if slope != 0.0:
                    p1, p2 = (lo - at) / slope, (hi - at) / slope
                    g_lo, g_hi = max(g_lo, min(p1, p2)), min(g_hi, max(p1, p2))
                elif at < lo or at > hi:
                    g_hi = -1e300
            if g_lo <= g_hi:
                c_lo = min(c_lo, math.floor(max(g_lo + cx, -1.0)))
                c_hi = max(c_hi, math.ceil(min(g_hi + cx, W + 0.0)))
        for col in range(int(max(c_lo, 0)), int(min(c_hi, W - 1)) + 1):
            gx = col - cx
            ys = a00 * gy + a01 * gx
            xs = a10 * gy + a11 * gx
            y, x = ys + cy + q[1], xs + cx + q[2]
            ok = (y > -2.0) & (y < H + 1.0) & (x > -2.0) & (x < W + 1.0)
            y, x = min(max(y, -2.0), H + 1.0), min(max(x, -2.0), W + 1.0)
            y0, x0 = _floor(y), _floor(x)
            up = u[r * W + col]
            fy, fx = y - y0, x - x0
            wy, dy = _pw(fy, m), _pd(fy, m)
            wx, dx = _pw(fx, m), _pd(fx, m)
            o = (int(y0) + _PAD - 1) * Wp + int(x0) + _PAD - 1
            r0, r1 = _taps(v, o), _taps(v, o + Wp)
            r2, r3 = _taps(v, o + 2 * Wp), _taps(v, o + 3 * Wp)
            q0, q1, q2, q3 = _dot(wx, r0), _dot(wx, r1), _dot(wx, r2), _dot(wx, r3)
            val = wy[0] * q0 + wy[1] * q1 + wy[2] * q2 + wy[3] * q3
            vy = dy[0] * q0 + dy[1] * q1 + dy[2] * q2 + dy[3] * q3
            vx = wy[0] * _dot(dx, r0) + wy[1] * _dot(dx, r1) + wy[2] * _dot(dx, r2)
            vx += wy[3] * _dot(dx, r3)
            k = 1.0 if ok else 0.0
            f = k * e * val
            res = up - f
            cost += res * res - up * up
            vy, vx = k * e * vy, k * e * vx
            # d tau(p) / d (theta, log_scale, log_stretch_0, log_stretch_1); the translations'
            # are the identity; d A / d theta = [[a10, a11], [-a00, -a01]]
            j0 = vy * xs - vx * ys
            j3 = f + vy * ys + vx * xs
            j4 = vy * (d00 * gy + d01 * gx) + vx * (d10 * gy + d11 * gx)
            j5 = vy * (f00 * gy + f01 * gx) + vx * (f10 * gy + f11 * gx)
            g0 += j0 * res
            g1 += vy * res
            g2 += vx * res
            g3 += j3 * res
            g4 += j4 * res
            g5 += j5 * res
            m00 += j0 * j0
            m10 += vy * j0
            m11 += vy * vy
            m20 += vx * j0
            m21 += vx * vy
            m22 += vx * vx
            m30 += j3 * j0
            m31 += j3 * vy
            m32 += j3 * vx
            m33 += j3 * j3
            m40 += j4 * j0
            m41 += j4 * vy
            m42 += j4 * vx
            m43 += j4 * j3
            m44 += j4 * j4
            m50 += j5 * j0
            m51 += j5 * vy
            m52 += j5 * vx
            m53 += j5 * j3
            m54 += j5 * j4
            m55 += j5 * j5
    g[0], g[1], g[2], g[3], g[4], g[5] = g0, g1, g2, g3, g4, g5
    M[0, 0], M[1, 1], M[2, 2], M[3, 3], M[4, 4], M[5, 5] = m00, m11, m22, m33, m44, m55
    M[1, 0] = M[0, 1] = m10
    M[2, 0] = M[0, 2] = m20
    M[2, 1] = M[1, 2] = m21
    M[3, 0] = M[0, 3] = m30
    M[3, 1] = M[1, 3] = m31
    M[3, 2] = M[2, 3] = m32
    M[4, 0] = M[0, 4] = m40
    M[4, 1] = M[1, 4] = m41
    M[4, 2] = M[2, 4] = m42
    M[4, 3] = M[3, 4] = m43
    M[5, 0] = M[0, 5] = m50
    M[5, 1] = M[1, 5] = m51
    M[5, 2] = M[2, 5] = m52
    M[5, 3] = M[3, 5] = m53
    M[5, 4] = M[4, 5] = m54
    return cost


@_shared()
def _hold(D, rhs, a, n):
    """Take parameter ``a`` out of the damped system ``D x = rhs`` (its step 0)."""
    for b in range(n):
        D[a, b] = 0.0
        D[b, a] = 0.0
    D[a, a] = 1.0
    rhs[a] = 0.0


@_shared()
def _cholesky_solve(M, rhs, n, L, out):
    """Solve M x = rhs on the leading ``n x n`` block of the symmetric positive definite ``M``
    (``L``: scratch); returns False (x = 0) where M is not positive definite."""
    for a in range(n):
        for b in range(a + 1):
            acc = M[a, b]
            for k in range(b):
                acc -= L[a, k] * L[b, k]
            if a == b:
                if acc <= 0.0:
                    for z in range(n):
                        out[z] = 0.0
                    return False
                L[a, a] = math.sqrt(acc)
            else:
                L[a, b] = acc / L[b, b]
    for a in range(n):  # L y = rhs
        acc = rhs[a]
        for k in range(a):
            acc -= L[a, k] * out[k]
        out[a] = acc / L[a, a]
    for a in range(n - 1, -1, -1):  # L^T x = y
        acc = out[a]
        for k in range(a + 1, n):
            acc -= L[k, a] * out[k]
        out[a] = acc / L[a, a]
    return True


@_shared()
def _group_refine_pair(k, ii, jj, U, V, BU, BV, SU, UU, shape, q0, n_free, lims, iters, tol, lam0,
                       m_taps, ws, out_q, out_c):  # fmt: skip
    """Refine pair ``k`` (target ``U[ii[k]]``, moving ``V[jj[k]]``; their support boxes
    ``BU[ii[k]]``, ``BV[jj[k]]``, the target's row spans ``SU[ii[k]]`` and squared norm
    ``UU[ii[k]]``, as :func:`_group_eval` reads them) from
    ``q0[k] (6,)``: LM on the first ``n_free`` parameters,
    each trial projected into ``lims`` = (log_scale low, high, log_stretch_max)
    (:func:`_project`), a parameter on its bound that the step would push outward held there
    (the active set of the bounds: log_scale at an end of its range; the log-stretch on its
    disk's edge moves along the edge only); at most ``iters`` evaluations, stopping at a
    gain below ``tol``.
    ``ws (5, 6, 6)``: scratch.
    Writes ``out_q[k]``, ``out_c[k]`` (d2)."""
    H, W = shape[0], shape[1]
    Wp = W + 2 * _PAD
    u, v = U[ii[k]], V[jj[k]]
    bu, bv, su, uu = BU[ii[k]], BV[jj[k]], SU[ii[k]], UU[ii[k]]
    M, M_t, D, L = ws[0], ws[1], ws[2], ws[3]
    q, q_t, g, g_t, step = ws[4, 0], ws[4, 1], ws[4, 2], ws[4, 3], ws[4, 4]
    for a in range(N_Q):
        q[a] = q0[k, a]
    _project(q, lims)
    cost = _group_eval(u, v, Wp, H, W, q, g, M, m_taps, bu, bv, su, uu)
    lam = lam0
    rhs = ws[4, 5]
    for _ in range(iters):
        for a in range(n_free):
            for b in range(n_free):
                D[a, b] = M[a, b]
            D[a, a] += lam * max(M[a, a], 1e-12)
            rhs[a] = g[a]
        # a parameter on its bound that the model pushes outward stays there: it leaves the
        # step (projecting the full step instead stalls the other parameters)
        if n_free > 3 and ((q[3] >= lims[1] and g[3] > 0.0) or (q[3] <= lims[0] and g[3] < 0.0)):
            _hold(D, rhs, 3, n_free)
        # the log-stretch on its disk's edge, pushed outward: it moves along the edge, by the
        # arc x in the direction (n1, -n0) (the system in x: P^T D P, plus the edge's
        # curvature times the outward pull, so that the model is that of the cost on the arc)
        edge, n0, n1 = False, 0.0, 0.0
        t_n = math.sqrt(q[4] * q[4] + q[5] * q[5])
        if n_free == 6 and t_n >= lims[2] * (1.0 - 1e-12) and t_n > 0.0:
            n0, n1 = q[4] / t_n, q[5] / t_n
            if g[4] * n0 + g[5] * n1 > 0.0:
                edge = True
                for b in range(n_free):
                    if b < 4:
                        D[4, b] = n1 * D[4, b] - n0 * D[5, b]
                        D[b, 4] = D[4, b]
                D[4, 4] = n1 * n1 * M[4, 4] - 2.0 * n0 * n1 * M[4, 5] + n0 * n0 * M[5, 5]
                D[4, 4] += lam * (n1 * n1 * max(M[4, 4], 1e-12) + n0 * n0 * max(M[5, 5], 1e-12))
                D[4, 4] += (g[4] * n0 + g[5] * n1) / lims[2]
                rhs[4] = n1 * g[4] - n0 * g[5]
                _hold(D, rhs, 5, n_free)
        if not _cholesky_solve(D, rhs, n_free, L, step):
            lam = max(10.0 * lam, 1e-3)
            continue
        for a in range(N_Q):
            q_t[a] = q[a] + (step[a] if a < n_free else 0.0)
        if edge:
            turn = math.atan2(n1, n0) - step[4] / lims[2]
            q_t[4], q_t[5] = lims[2] * math.cos(turn), lims[2] * math.sin(turn)
        _project(q_t, lims)
        cost_t = _group_eval(u, v, Wp, H, W, q_t, g_t, M_t, m_taps, bu, bv, su, uu)
        if cost_t < cost:
            gain = cost - cost_t
            cost = cost_t
            for a in range(N_Q):
                q[a] = q_t[a]
                g[a] = g_t[a]
                for b in range(N_Q):
                    M[a, b] = M_t[a, b]
            lam /= 3.0
            if gain < tol:
                break
        else:
            lam = max(5.0 * lam, 0.3)
            if lam > 1e8:
                break
    for a in range(N_Q):
        out_q[k, a] = q[a]
    out_c[k] = cost


@njit(cache=True, nogil=True)
def _group_refine(lo, hi, ii, jj, U, V, BU, BV, SU, UU, shape, q0, n_free, lims, iters, tol,
                  lam0, m_taps, out_q, out_c):  # fmt: skip
    """:func:`_group_refine_pair` over the pairs ``lo..hi-1`` (one thread's range of
    :func:`ia_stages.core.threads.on_ranges`)."""
    for k in range(lo, hi):
        _group_refine_pair(k, ii, jj, U, V, BU, BV, SU, UU, shape, q0, n_free, lims, iters, tol,
                           lam0, m_taps, np.empty((5, N_Q, N_Q)), out_q, out_c)  # fmt: skip


def support_boxes(images: np.ndarray, floor: float) -> np.ndarray:
    """The octagon holding each image's pixels of at least ``floor`` times its largest
    |value|: ``(n, 8)`` float64, the least and largest row, column, row + column and
    row - column of those pixels; ``floor`` 0: the whole frame's; an all-zero image: an empty
    octagon (largest row < least).

    Example
    -------
    >>> X = np.zeros((2, 6, 6)); X[0, 1:3, 2:5] = 1.0; X[0, 5, 5] = 1e-4
    >>> support_boxes(X, 1e-3).tolist()[0]
    [1.0, 2.0, 2.0, 4.0, 3.0, 6.0, -3.0, 0.0]
    >>> support_boxes(X, 1e-3)[1, :2].tolist()
    [0.0, -1.0]
    """
    n, H, W = np.shape(images)
    out = np.tile(np.array([0.0, -1.0, 0.0, -1.0, 0.0, -1.0, 0.0, -1.0]), (n, 1))
    r, c = np.mgrid[0:H, 0:W]
    for a in range(0, n, LAYOUT_BATCH):
        keep = _above(images[a : a + LAYOUT_BATCH], floor)
        some = keep.reshape(len(keep), -1).any(1)
        part = out[a : a + LAYOUT_BATCH]
        for at, coord in enumerate((r, c, r + c, r - c)):
            big = np.abs(coord).max() + 1
            part[some, 2 * at] = np.where(keep, coord, big).reshape(len(keep), -1).min(1)[some]
            low = np.where(keep, coord, -big).reshape(len(keep), -1).max(1)
            part[some, 2 * at + 1] = low[some]
    return out


def _above(images: np.ndarray, floor: float) -> np.ndarray:
    """``(m, H, W)`` bool: the pixels of at least ``floor`` times their image's largest |value|
    (every pixel with ``floor`` 0), none in an all-zero image."""
    A = np.asarray(images, dtype=np.float64)
    return above_floor(A, floor) & A.reshape(len(A), -1).any(1)[:, None, None]


def moving_layout(
    V: np.ndarray, interpolation: str = "keys", packed: bool = True, floor: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Moving images ``V (n, H, W)`` as the kernels read them: the interpolation's
    coefficients, zero-padded by ``_PAD``, flattened, :func:`_packed` (CPU) or float32 (CUDA);
    and the coefficients' :func:`support_boxes` at ``floor``."""
    Q = spline_coefficients(np.asarray(V, dtype=np.float64), interpolation)
    padded = np.pad(Q, ((0, 0), (_PAD, _PAD), (_PAD, _PAD))).reshape(len(V), -1)
    return (_packed(padded) if packed else padded.astype(np.float32)), support_boxes(Q, floor)


def row_spans(images: np.ndarray, floor: float) -> np.ndarray:
    """Each row's first and last column of at least ``floor`` times its image's largest
    |value|: ``(n, 2 H)`` float64 (first, last of row 0, of row 1, ...); a row without such a
    pixel gets (W, -1); ``floor`` 0: (0, W - 1) on every row.

    Example
    -------
    >>> X = np.zeros((1, 2, 5)); X[0, 0, 1:4] = 1.0
    >>> row_spans(X, 1e-3).tolist()
    [[1.0, 3.0, 5.0, -1.0]]
    """
    n, H, W = np.shape(images)
    out = np.empty((n, H, 2))
    out[..., 0], out[..., 1] = 0.0, W - 1.0
    if floor > 0:
        for a in range(0, n, LAYOUT_BATCH):
            keep = _above(images[a : a + LAYOUT_BATCH], floor)
            some = keep.any(2)
            first = np.argmax(keep, 2)
            last = W - 1 - np.argmax(keep[..., ::-1], 2)
            out[a : a + LAYOUT_BATCH, :, 0] = np.where(some, first, W)
            out[a : a + LAYOUT_BATCH, :, 1] = np.where(some, last, -1)
    return out.reshape(n, 2 * H)


def target_layout(U: np.ndarray, floor: float) -> tuple[np.ndarray, ...]:
    """Targets ``U (n, H, W)`` as the kernels read them: flat ``(n, H W)`` float64, their
    :func:`support_boxes`, :func:`row_spans` and squared norms."""
    U = np.ascontiguousarray(np.asarray(U, dtype=np.float64))
    flat = U.reshape(len(U), -1)
    return flat, support_boxes(U, floor), row_spans(U, floor), (flat**2).sum(1)


def refine_pairs(
    U: np.ndarray,
    V: np.ndarray,
    ii: np.ndarray,
    jj: np.ndarray,
    q0: np.ndarray,
    group: Any,
    interpolation: str = "keys",
) -> tuple[np.ndarray, np.ndarray]:
    """Refine the alignments ``q0 (m, 6)`` of V[jj] onto U[ii] within ``group``'s bounds, in
    the group's stages (:func:`refine_in_stages`).

    Parameters
    ----------
    U : ``(n_i, H, W)`` targets (smoothed and normalised, as the search compares them)
    V : ``(n_j, H, W)`` moving images
    ii, jj : ``(m,)`` pair indices
    q0 : ``(m, 6)`` starts (theta, b0, b1, log_scale, log_stretch_0, log_stretch_1)
    group : an :class:`ia_stages.core.groups.AffineFamily`: which parameters are free (SE(2)'s
        and its extras), their bounds, and the evaluation budget and tolerance
    interpolation : 'keys' or 'bspline'

    Returns
    -------
    q ``(m, 6)`` and d2 ``(m,)`` = ||U[ii] - s V[jj] o tau||^2 on the grid (with
    ``group.floor`` > 0: on the pixels where either image can reach its floor,
    :func:`_group_eval`).

    Example
    -------
    >>> q, d2 = refine_pairs(U, U, np.array([0]), np.array([1]), np.zeros((1, 6)),
    ...                      make_group("affine"))  # doctest: +SKIP
    """

    def run(A: np.ndarray, B: np.ndarray, q: np.ndarray, g: Any) -> tuple[np.ndarray, np.ndarray]:
        return refine_stage(A, B, ii, jj, q, g, interpolation)

    return refine_in_stages(run, U, V, q0, group)


def refine_in_stages(run: Any, U: Any, V: Any, q0: np.ndarray, group: Any) -> tuple[Any, Any]:
    """The group's evaluation budget as stages: ``group.half_iters`` evaluations per pair on
    2 x 2 block means of the images (a quarter of the pixels; about the centre the linear part
    is the same and the translation halves, :func:`ia_stages.core.smoothing.half_resolution`),
    then ``group.iters`` at full resolution from there. Images of an odd size cannot be
    halved: all ``half_iters + iters`` evaluations run at full resolution.

    ``run(U, V, q, g)`` refines every pair from ``q (m, 6)`` with the group ``g`` in one
    stage (:func:`refine_stage`, or its CUDA build) and returns (q, d2).
    """
    H, W = U.shape[1:]
    if group.half_iters == 0:
        return run(U, V, q0, group)
    if H % 2 or W % 2:
        return run(U, V, q0, replace(group, iters=group.iters + group.half_iters, half_iters=0))
    q_half = np.array(q0, dtype=np.float64)
    q_half[:, 1:3] /= 2.0
    coarse = replace(group, iters=group.half_iters, half_iters=0)
    q_half, _ = run(half_resolution(U), half_resolution(V), q_half, coarse)
    q_full = np.array(to_numpy(q_half), dtype=np.float64)
    q_full[:, 1:3] *= 2.0
    return run(U, V, q_full, replace(group, half_iters=0))


def refine_stage(
    U: np.ndarray,
    V: np.ndarray,
    ii: np.ndarray,
    jj: np.ndarray,
    q0: np.ndarray,
    group: Any,
    interpolation: str = "keys",
) -> tuple[np.ndarray, np.ndarray]:
    """One stage of :func:`refine_pairs` on the CPU: at most ``group.iters`` evaluations per
    pair at the images' own resolution (``group.half_iters`` is not read)."""
    m = int(np.size(ii))
    out_q = np.empty((m, N_Q))
    out_c = np.empty(m)
    if m == 0:
        return out_q, out_c
    shape = np.array(np.shape(V)[1:], dtype=np.int64)
    flat, boxes_u, spans, uu = target_layout(U, group.floor)
    moving, boxes_v = moving_layout(V, interpolation, floor=group.floor)
    rest = (
        np.asarray(ii, np.int64), np.asarray(jj, np.int64), flat, moving, boxes_u, boxes_v, spans,
        uu, shape, np.ascontiguousarray(q0, dtype=np.float64), 3 + group.n_extra,
        group.bounds.limits(), int(group.iters), float(group.tol), float(group.lam0),
        taps(interpolation), out_q, out_c,
    )  # fmt: skip
    on_ranges(lambda lo, hi: _group_refine(lo, hi, *rest), m)
    return out_q, out_c
