"""The per-pair kappa^max search: Newton-Levenberg-Marquardt refinement of SE(2) alignments,
written once as scalar Python and compiled with numba for the CPU (here) and for CUDA
(:mod:`ia_stages.kmax.cuda`).

The objective is d2(tau) = ||u||^2 + ||v||^2 - 2 <u, v o tau> (the correlation form of
:func:`ia_stages.kmax.align.pair_cost`), with Newton steps on its exact Hessian: J^T J is a
poor model of the correlation objective when u and v differ, and Gauss-Newton then needs ~15
steps per pair where Newton needs ~5. One pass over the target's non-zero pixels computes the
interpolated warp (B-spline or Keys taps, :data:`ia_stages.core.taps.TAPS`, on the moving
image's prefiltered coefficients) with its first and second derivatives, the cost, gradient and
Hessian, without storing any image-sized array. On the CPU, one range of pairs runs per thread
(:func:`ia_stages.core.threads.on_ranges`) and the moving images (what the taps weigh) are
read as float32, two values per load (:func:`_packed`): the loop is bound by its gathered
loads. The CUDA kernels read the same float32 values one by one. The sums stay float64; the
float32 rounding of the moving images (relative 6e-8 per value) moves d2 far below the
search's tolerances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.taps import _PAD, _pd, _pdd, _pw, taps
from ia_stages.core.threads import on_ranges
from ia_stages.core.warp import spline_coefficients
from ia_stages.kmax.align import _sumsq

# The one source of the per-pair search: the functions decorated with ``_shared`` below are
# plain scalar Python (``math`` functions, loops, indexing; no allocation: scratch comes in as
# arguments), compiled here with numba for the CPU and, by :mod:`ia_stages.kmax.cuda`, the very
# same code as CUDA device functions. Only the leaves :func:`_taps` (how four neighbouring
# pixels of the moving image are read) and :func:`_floor` differ per target.
SHARED: dict = {}


def _shared(**options):
    """``njit(cache=True, **options)``, recording the function as part of the one source."""

    def compile_for_cpu(f):
        dispatcher = njit(cache=True, **options)(f)
        SHARED[f.__name__] = dispatcher
        return dispatcher

    return compile_for_cpu


@intrinsic
def _low_f32(typingctx, word):
    """The float32 whose bits are the low half of the int64 ``word``."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return types.float32(types.int64), codegen


@intrinsic
def _high_f32(typingctx, word):
    """The float32 whose bits are the high half of the int64 ``word``."""

    def codegen(context, builder, signature, args):
        high = builder.lshr(args[0], ir.Constant(ir.IntType(64), 32))
        return builder.bitcast(builder.trunc(high, ir.IntType(32)), ir.FloatType())

    return types.float32(types.int64), codegen


@njit(cache=True, inline="always")
def _taps(v, b):
    """Pixels b to b + 3 of a flat packed image (:func:`_packed`), as float64: two loads."""
    w0, w1 = v[b], v[b + 2]
    return (
        np.float64(_low_f32(w0)),
        np.float64(_high_f32(w0)),
        np.float64(_low_f32(w1)),
        np.float64(_high_f32(w1)),
    )


@njit(cache=True, inline="always")
def _floor(x):
    """floor(x) as a float64 (CPU leaf: ``math.floor`` would return an int64, whose
    conversions cost the vectorised loops; numba-cuda lacks ``np.floor``)."""
    return np.floor(x)


@_shared(inline="always")
def _dot(w, r):
    """w . r of two 4-tuples."""
    return w[0] * r[0] + w[1] * r[1] + w[2] * r[2] + w[3] * r[3]


def _packed(V: np.ndarray) -> np.ndarray:
    """Flat images ``V (n, L)`` as int64 words whose low and high halves hold the float32 bits
    of pixels k and k + 1 (0 past the end): the kernels below gather two taps per load, where
    gathered loads, not arithmetic, bound them (1.25-1.35x faster than float64 pixels; the
    sums stay float64, the taps carry float32's ~6e-8 relative rounding)."""
    bits = np.asarray(V, dtype=np.float32).view(np.uint32).astype(np.uint64)
    words = bits.copy()
    words[..., :-1] |= bits[..., 1:] << np.uint64(32)
    return words.view(np.int64)


@_shared(inline="always")
def _position(gy, gx, c, s, cy, cx, b0, b1, H, W):
    """tau(p) of centred pixel coordinates (gy, gx), clamped so that its taps stay inside the
    padded image; ``ok`` is False where the point has no tap inside the image (value 0)."""
    y = c * gy + s * gx + cy + b0
    x = -s * gy + c * gx + cx + b1
    ok = (y > -2.0) & (y < H + 1.0) & (x > -2.0) & (x < W + 1.0)
    return min(max(y, -2.0), H + 1.0), min(max(x, -2.0), W + 1.0), ok


# The two evaluation loops below are written for the compiler to vectorise them over pixels
# (gathers for the 16 taps, no branches, reductions reassociated by fastmath): 2-3x faster
# than a loop over the image that skips zero pixels and out-of-range points.
@_shared(fastmath=True, error_model="numpy")
def _cost(gy, gx, t, v, Wp, H, W, uu, vv, th, b0, b1, m):
    """d2 = uu + vv - 2 sum_p t[p] (v o tau)[p] at tau = (th, b0, b1).

    ``gy, gx, t``: centred coordinates and values of the target's non-zero pixels
    (:class:`Resolution`); ``v``: the moving image zero-padded by ``_PAD``, flattened and
    :func:`_packed`, row length ``Wp``; ``H, W``: the unpadded image shape; ``m``: the
    interpolation's 16 tap coefficients (:func:`ia_stages.core.taps.taps`), ``v`` holding
    what its taps weigh (:func:`ia_stages.core.warp.spline_coefficients`).
    """
    c, s = math.cos(th), math.sin(th)
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    cross = 0.0
    for n in range(t.size):
        y, x, ok = _position(gy[n], gx[n], c, s, cy, cx, b0, b1, H, W)
        y0, x0 = _floor(y), _floor(x)
        wy, wx = _pw(y - y0, m), _pw(x - x0, m)
        b = (int(y0) + _PAD - 1) * Wp + int(x0) + _PAD - 1
        val = wy[0] * _dot(wx, _taps(v, b)) + wy[1] * _dot(wx, _taps(v, b + Wp))
        val += wy[2] * _dot(wx, _taps(v, b + 2 * Wp)) + wy[3] * _dot(wx, _taps(v, b + 3 * Wp))
        cross += t[n] * val if ok else 0.0
    return max(uu + vv - 2.0 * cross, 0.0)


@_shared(fastmath=True, error_model="numpy")
def _cost_derivs(gy, gx, t, v, Wp, H, W, uu, vv, th, b0, b1, g, Hm, m):
    """:func:`_cost`, and its gradient / 2 in ``g (3,)`` and exact Hessian / 2 in ``Hm (3, 3)``
    (d2 = const - 2 sum_p t[p] w[p]: both only need the target's non-zero pixels)."""
    c, s = math.cos(th), math.sin(th)
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    cross = 0.0
    g0 = g1 = g2 = 0.0
    h00 = h01 = h02 = h11 = h12 = h22 = 0.0
    for n in range(t.size):
        y, x, ok = _position(gy[n], gx[n], c, s, cy, cx, b0, b1, H, W)
        y0, x0 = _floor(y), _floor(x)
        fy, fx = y - y0, x - x0
        wy, dy, ddy = _pw(fy, m), _pd(fy, m), _pdd(fy, m)
        wx, dx, ddx = _pw(fx, m), _pd(fx, m), _pdd(fx, m)
        b = (int(y0) + _PAD - 1) * Wp + int(x0) + _PAD - 1
        # rows of taps, interpolated along x with the weights and their derivatives
        r0, r1, r2, r3 = _taps(v, b), _taps(v, b + Wp), _taps(v, b + 2 * Wp), _taps(v, b + 3 * Wp)
        q0, q1, q2, q3 = _dot(wx, r0), _dot(wx, r1), _dot(wx, r2), _dot(wx, r3)
        e0, e1, e2, e3 = _dot(dx, r0), _dot(dx, r1), _dot(dx, r2), _dot(dx, r3)
        f0, f1, f2, f3 = _dot(ddx, r0), _dot(ddx, r1), _dot(ddx, r2), _dot(ddx, r3)
        tn = t[n] if ok else 0.0
        val = wy[0] * q0 + wy[1] * q1 + wy[2] * q2 + wy[3] * q3
        vy = dy[0] * q0 + dy[1] * q1 + dy[2] * q2 + dy[3] * q3
        vx = wy[0] * e0 + wy[1] * e1 + wy[2] * e2 + wy[3] * e3
        vyy = ddy[0] * q0 + ddy[1] * q1 + ddy[2] * q2 + ddy[3] * q3
        vxx = wy[0] * f0 + wy[1] * f1 + wy[2] * f2 + wy[3] * f3
        vxy = dy[0] * e0 + dy[1] * e1 + dy[2] * e2 + dy[3] * e3
        yt = -s * gy[n] + c * gx[n]  # d y / d theta
        xt = -c * gy[n] - s * gx[n]  # = d2 y / d theta2
        xtt = -yt
        cross += tn * val
        jt = vy * yt + vx * xt
        g0 -= tn * jt
        g1 -= tn * vy
        g2 -= tn * vx
        h00 -= tn * (yt * yt * vyy + 2.0 * yt * xt * vxy + xt * xt * vxx + vy * xt + vx * xtt)
        h01 -= tn * (yt * vyy + xt * vxy)
        h02 -= tn * (yt * vxy + xt * vxx)
        h11 -= tn * vyy
        h12 -= tn * vxy
        h22 -= tn * vxx
    g[0], g[1], g[2] = g0, g1, g2
    Hm[0, 0], Hm[0, 1], Hm[0, 2] = h00, h01, h02
    Hm[1, 0], Hm[1, 1], Hm[1, 2] = h01, h11, h12
    Hm[2, 0], Hm[2, 1], Hm[2, 2] = h02, h12, h22
    return max(uu + vv - 2.0 * cross, 0.0)


@_shared()
def _solve3(M, r, out):
    """Solve M x = r for the symmetric 3 x 3 ``M`` (positive definite where the refinement
    calls it): scaled to a unit diagonal, then by its adjugate; x = 0 where M is singular."""
    d0 = 1.0 / math.sqrt(max(abs(M[0, 0]), 1e-300))
    d1 = 1.0 / math.sqrt(max(abs(M[1, 1]), 1e-300))
    d2 = 1.0 / math.sqrt(max(abs(M[2, 2]), 1e-300))
    a00, a11, a22 = M[0, 0] * d0 * d0, M[1, 1] * d1 * d1, M[2, 2] * d2 * d2
    a01, a02, a12 = M[0, 1] * d0 * d1, M[0, 2] * d0 * d2, M[1, 2] * d1 * d2
    r0, r1, r2 = r[0] * d0, r[1] * d1, r[2] * d2
    c00 = a11 * a22 - a12 * a12
    c01 = a02 * a12 - a01 * a22
    c02 = a01 * a12 - a02 * a11
    det = a00 * c00 + a01 * c01 + a02 * c02
    if det == 0.0:
        out[0] = out[1] = out[2] = 0.0
        return
    c11 = a00 * a22 - a02 * a02
    c12 = a01 * a02 - a00 * a12
    c22 = a00 * a11 - a01 * a01
    out[0] = d0 * (c00 * r0 + c01 * r1 + c02 * r2) / det
    out[1] = d1 * (c01 * r0 + c11 * r1 + c12 * r2) / det
    out[2] = d2 * (c02 * r0 + c12 * r1 + c22 * r2) / det


@_shared(inline="always")
def _positive_definite(Hm):
    """Sylvester's criterion for the symmetric 3 x 3 ``Hm``."""
    h00, h01, h02, h11, h12, h22 = Hm[0, 0], Hm[0, 1], Hm[0, 2], Hm[1, 1], Hm[1, 2], Hm[2, 2]
    det2 = h00 * h11 - h01 * h01
    det3 = (
        h00 * (h11 * h22 - h12 * h12)
        - h01 * (h01 * h22 - h12 * h02)
        + h02 * (h01 * h12 - h11 * h02)
    )
    return h00 > 0.0 and det2 > 0.0 and det3 > 0.0


@_shared()
def _converged(g, Hm, cost, beta, kappa_stop, d2_stop, bound, abandon, ws):
    """True when the Hessian is positive definite and the full Newton step promises the
    kernel value exp(-beta cost) a rise below ``kappa_stop``, or the cost a drop below
    ``d2_stop`` (the start is at its local optimum), or cannot bring the cost below ``bound``
    even ``abandon`` times over. (``g``, ``Hm``: half the gradient and Hessian; the Newton
    step lowers the cost by g^T H^-1 g. ``ws``: :func:`_workspace`.)"""
    if kappa_stop <= 0.0 and d2_stop <= 0.0 and bound == math.inf:
        return False
    if not _positive_definite(Hm):
        return False
    newton = ws[6, 0]
    _solve3(Hm, g, newton)
    drop = g[0] * newton[0] + g[1] * newton[1] + g[2] * newton[2]
    return (
        beta * math.exp(-beta * cost) * drop < kappa_stop
        or drop < d2_stop
        or cost - abandon * drop > bound
    )


@_shared()
def _min_eig3(A):
    """Smallest eigenvalue of the symmetric 3 x 3 matrix ``A`` (closed form)."""
    p1 = A[0, 1] ** 2 + A[0, 2] ** 2 + A[1, 2] ** 2
    q = (A[0, 0] + A[1, 1] + A[2, 2]) / 3.0
    p2 = (A[0, 0] - q) ** 2 + (A[1, 1] - q) ** 2 + (A[2, 2] - q) ** 2 + 2.0 * p1
    if p2 <= 0.0:
        return q
    p = math.sqrt(p2 / 6.0)
    b00, b11, b22 = (A[0, 0] - q) / p, (A[1, 1] - q) / p, (A[2, 2] - q) / p
    b01, b02, b12 = A[0, 1] / p, A[0, 2] / p, A[1, 2] / p
    r = 0.5 * (b00 * (b11 * b22 - b12 * b12) - b01 * (b01 * b22 - b12 * b02)
               + b02 * (b01 * b12 - b11 * b02))  # fmt: skip
    phi = math.acos(min(max(r, -1.0), 1.0)) / 3.0
    return q + 2.0 * p * math.cos(phi + 2.0 * math.pi / 3.0)


@_shared()
def _lift_damping(Hm, lam, S):
    """``lam``, raised where needed so that H + lam diag|H| is positive definite: to twice
    the most negative eigenvalue of H scaled to a unit diagonal (``S (3, 3)``: scratch). An
    indefinite Newton model gives no descent step; this finds the damping that does without
    spending evaluations of the objective on rejected steps."""
    if _positive_definite(Hm):
        return lam  # scaling keeps it so: the lift would be negative
    for a in range(3):
        for b in range(3):
            S[a, b] = Hm[a, b] / math.sqrt(max(abs(Hm[a, a]), 1e-12) * max(abs(Hm[b, b]), 1e-12))
    return max(lam, -2.0 * _min_eig3(S))


@njit(cache=True)
def _workspace():
    """Scratch for the refinements of one pair (:func:`_refine_from`; :func:`_search` makes one
    per pair): the 3 x 3 algebra of every step then allocates nothing."""
    return np.empty((7, 3, 3))


@_shared(inline="always")
def _refine_one(gy, gx, t, v, Wp, H, W, uu, vv, p, iters, tol, beta, kappa_stop, d2_stop, bound,
                lm, ws, m):  # fmt: skip
    """Newton-LM from ``p (3,)`` (updated in place) on one pair (:func:`_cost` arguments),
    for at most ``iters`` steps (tried or taken), until a gain below ``tol`` or
    :func:`_converged`; returns the cost at the final ``p``. ``lm``: (lam0, lam_reject,
    abandon) as in :class:`RefinePolicy`; ``ws``: :func:`_workspace`; ``m``: the tap
    coefficients (:func:`_cost`)."""
    g = ws[0, 0]
    Hm = ws[1]
    cost = _cost_derivs(gy, gx, t, v, Wp, H, W, uu, vv, p[0], p[1], p[2], g, Hm, m)
    return _refine_from(gy, gx, t, v, Wp, H, W, uu, vv, p, cost, g, Hm, iters, tol, beta,
                        kappa_stop, d2_stop, bound, lm, ws, m)  # fmt: skip


@_shared(inline="always")
def _refine_from(gy, gx, t, v, Wp, H, W, uu, vv, p, cost, g, Hm, iters, tol, beta, kappa_stop,
                 d2_stop, bound, lm, ws, m):  # fmt: skip
    """:func:`_refine_one` from ``p`` whose cost, gradient / 2 ``g`` and Hessian / 2 ``Hm``
    are known (``p``, ``g``, ``Hm`` are updated in place; they may be ``ws[0, 0]`` and
    ``ws[1]``), also stopping where the start cannot beat ``bound`` (:func:`_converged`)."""
    g_t, step, rhs = ws[0, 1], ws[0, 2], ws[6, 2]
    H_t, M, S = ws[2], ws[3], ws[5]
    lam0, lam_reject, abandon = lm
    lam = lam0
    for _ in range(iters):
        # an indefinite Newton model gives no descent step: damp until it is definite
        lam = _lift_damping(Hm, lam, S)
        for a in range(3):
            for b in range(3):
                M[a, b] = Hm[a, b]
            M[a, a] += lam * max(abs(Hm[a, a]), 1e-12)
            rhs[a] = -g[a]
        _solve3(M, rhs, step)
        if _converged(g, Hm, cost, beta, kappa_stop, d2_stop, bound, abandon, ws):
            break
        t0, t1, t2 = p[0] + step[0], p[1] + step[1], p[2] + step[2]
        cost_t = _cost_derivs(gy, gx, t, v, Wp, H, W, uu, vv, t0, t1, t2, g_t, H_t, m)
        if cost_t < cost:
            gain = cost - cost_t
            p[0], p[1], p[2] = t0, t1, t2
            cost = cost_t
            for a in range(3):
                g[a] = g_t[a]
                for b in range(3):
                    Hm[a, b] = H_t[a, b]
            lam /= 3.0
            if gain < tol:
                break
        else:
            lam = max(5.0 * lam, lam_reject)
            if lam > 1e8:
                break
    return cost


@_shared()
def _repeats(p, lo, c, same_angle, same_shift):
    """True when candidate ``c`` of ``p (n_c, 3)`` lies within ``same_angle`` radians and
    ``same_shift`` pixels of an earlier candidate from ``lo`` on (those of the same moving
    image)."""
    for e in range(lo, c):
        turn = abs((p[c, 0] - p[e, 0] + math.pi) % (2.0 * math.pi) - math.pi)
        if (
            turn < same_angle
            and abs(p[c, 1] - p[e, 1]) < same_shift
            and abs(p[c, 2] - p[e, 2]) < same_shift
        ):
            return True
    return False


@_shared()
def _same_start(p, lo, c):
    """True when row ``c`` of ``p (n_c, 3)`` equals an earlier row from ``lo`` on."""
    for e in range(lo, c):
        if p[c, 0] == p[e, 0] and p[c, 1] == p[e, 1] and p[c, 2] == p[e, 2]:
            return True
    return False


@_shared()
def _argsort_small(x, order):
    """``order`` = the stable argsort of the short ``x`` (insertion sort: what
    ``np.argsort`` does below 16 elements)."""
    n = x.shape[0]
    for r in range(n):
        order[r] = r
    for r in range(1, n):
        o = order[r]
        v = x[o]
        e = r
        while e > 0 and v < x[order[e - 1]]:
            order[e] = order[e - 1]
            e -= 1
        order[e] = o


@_shared(inline="always")
def _side_start(c, n_plain):
    """The first candidate of candidate ``c``'s side: 0 for the moving image's own starts,
    ``n_plain`` for its mirror image's (a start repeats only starts of its own side)."""
    return 0 if c < n_plain else n_plain


@_shared(inline="always")
def _moving_row(j, c, n_plain, mirror_row):
    """The row of the moving images that candidate ``c`` of a pair with moving image ``j``
    warps: ``j``, or for a mirror-image candidate (``c >= n_plain``) ``j + mirror_row``."""
    return j if c < n_plain else j + mirror_row


@_shared()
def _search_pair(k, ii, jj, starts, n_plain, mirror_row, exact, full, tail, half, iters, tol,
                 coarse_iters, beta, prune_kappa, margin, kappa_stop, coarse_stop, half_gap,
                 same_angle, same_shift, lm, polish, m_taps, costs, half_costs, g_c, H_c, p_c,
                 order, ws, out_p, out_c, out_m):  # fmt: skip
    """Pair ``k`` of :func:`search_pairs` on the tuples of :meth:`Resolution.arrays`: ``full``
    ranks and refines at full resolution; with ``polish`` the winner is refined again on
    ``exact``, whose target pixels are those of ``full`` and ``tail``; ``m_taps``: the
    interpolation's tap coefficients (:func:`_cost`). Candidates ``n_plain`` on are of the
    moving image ``mirror_row`` rows after ``jj[k]`` (its mirror image): they are ranked,
    pruned and refined with the others, and ``out_m[k]`` says whether one of them won.
    Scratch, all overwritten: ``costs, half_costs, order (n_c,)``, ``g_c, p_c (n_c, 3)``,
    ``H_c (n_c, 3, 3)``, ``ws`` (:func:`_workspace`)."""
    off, gy, gx, t, V, uu, vv, shape = full
    offe, gye, gxe, te, uue = exact[0], exact[1], exact[2], exact[3], exact[5]
    offt, gyt, gxt, tt = tail[0], tail[1], tail[2], tail[3]
    off2, gy2, gx2, t2, V2, uu2, vv2, shape2 = half
    H, W, Wp = shape[0], shape[1], shape[1] + 2 * _PAD
    H2, W2, Wp2 = shape2[0], shape2[1], shape2[1] + 2 * _PAD
    n_c = starts.shape[1]
    i = ii[k]
    a, b = off[i], off[i + 1]
    a2, b2 = off2[i], off2[i + 1]
    q, p, p_best = ws[4, 0], ws[4, 1], ws[4, 2]
    for c in range(n_c):
        costs[c] = math.inf
        half_costs[c] = math.inf
        for d in range(3):
            p_c[c, d] = starts[k, c, d]
    if coarse_iters > 0:
        lowest = math.inf
        for c in range(n_c):
            side = _side_start(c, n_plain)
            if _same_start(starts[k], side, c):  # (the scan repeats its best peak when it
                continue  # finds fewer): it would converge where the earlier one did
            j = _moving_row(jj[k], c, n_plain, mirror_row)
            # the start refined on the half-resolution pair (translations halve there); a
            # later one stops where it cannot come within half_gap of the lowest so far
            q[0], q[1], q[2] = p_c[c, 0], 0.5 * p_c[c, 1], 0.5 * p_c[c, 2]
            hc = _refine_one(gy2[a2:b2], gx2[a2:b2], t2[a2:b2], V2[j], Wp2, H2, W2, uu2[i],
                             vv2[j], q, coarse_iters, tol, beta, kappa_stop, coarse_stop,
                             lowest + half_gap if prune_kappa > 0.0 else math.inf, lm,
                             ws, m_taps)  # fmt: skip
            p_c[c, 0], p_c[c, 1], p_c[c, 2] = q[0], 2.0 * q[1], 2.0 * q[2]
            lowest = min(lowest, hc)
            # else it converged where an earlier one did: dropped
            if not _repeats(p_c, side, c, same_angle, same_shift):
                half_costs[c] = hc
        lowest = math.inf
        for c in range(n_c):
            lowest = min(lowest, half_costs[c])
    for c in range(n_c):
        if coarse_iters > 0:
            hc = half_costs[c]
            # the smoother half-resolution pair has the lower cost (nearly always): a start it
            # already rules out, or ranks far behind the pair's best, is not evaluated at full
            # resolution
            if hc == math.inf or (
                prune_kappa > 0.0
                and (math.exp(-beta * (hc - margin)) < prune_kappa or hc > lowest + half_gap)
            ):
                continue
        elif _same_start(starts[k], _side_start(c, n_plain), c):
            continue
        j = _moving_row(jj[k], c, n_plain, mirror_row)
        # full-resolution cost (the half-resolution one is biased by its extra smoothing), with
        # the derivatives that a refinement from here starts with
        costs[c] = _cost_derivs(gy[a:b], gx[a:b], t[a:b], V[j], Wp, H, W, uu[i], vv[j],
                                p_c[c, 0], p_c[c, 1], p_c[c, 2], g_c[c], H_c[c],
                                m_taps)  # fmt: skip
    _argsort_small(costs, order)
    # refine in order of cost; skip a start that cannot beat the best so far
    best = math.inf
    c_best = order[0]
    for d in range(3):
        p_best[d] = p_c[c_best, d]
    for r in range(n_c):
        c = order[r]
        if costs[c] == math.inf:
            break
        reach = costs[c] - margin
        if prune_kappa > 0.0 and (
            math.exp(-beta * reach) < prune_kappa or (best < math.inf and reach > best)
        ):
            continue
        for d in range(3):
            p[d] = p_c[c, d]
        j = _moving_row(jj[k], c, n_plain, mirror_row)
        cost = _refine_from(gy[a:b], gx[a:b], t[a:b], V[j], Wp, H, W, uu[i], vv[j], p, costs[c],
                            g_c[c], H_c[c], iters, tol, beta, kappa_stop, 0.0,
                            best if prune_kappa > 0.0 else math.inf, lm, ws,
                            m_taps)  # fmt: skip
        if cost < best:
            best = cost
            for d in range(3):
                p_best[d] = p[d]
            c_best = c
    refined = best < math.inf
    if not refined:  # no start can matter: report the best start's own cost
        if costs[order[0]] < math.inf:
            c_best = order[0]
        else:  # the first of the lowest half-resolution costs
            c_best = 0
            for c in range(1, n_c):
                if half_costs[c] < half_costs[c_best]:
                    c_best = c
        for d in range(3):
            p_best[d] = p_c[c_best, d]
        best = costs[c_best]
    j = _moving_row(jj[k], c_best, n_plain, mirror_row)
    if polish and best < math.inf:
        # on all pixels: the cost (gradient, Hessian) on ``full``'s plus that on the tail's;
        # the winner is then refined on all of them
        at, bt = offt[i], offt[i + 1]
        rest = best + uue[i] - uu[i]
        if refined:
            g, Hm = ws[0, 0], ws[1]
            cost = _cost_derivs(gyt[at:bt], gxt[at:bt], tt[at:bt], V[j], Wp, H, W, rest, 0.0,
                                p_best[0], p_best[1], p_best[2], g, Hm, m_taps)  # fmt: skip
            for a_ in range(3):
                g[a_] += g_c[c_best, a_]
                for b_ in range(3):
                    Hm[a_, b_] += H_c[c_best, a_, b_]
            ae, be = offe[i], offe[i + 1]
            best = _refine_from(gye[ae:be], gxe[ae:be], te[ae:be], V[j], Wp, H, W, uue[i],
                                vv[j], p_best, cost, g, Hm, iters, tol, beta, kappa_stop, 0.0,
                                math.inf, lm, ws, m_taps)  # fmt: skip
        else:
            best = _cost(gyt[at:bt], gxt[at:bt], tt[at:bt], V[j], Wp, H, W, rest, 0.0,
                         p_best[0], p_best[1], p_best[2], m_taps)  # fmt: skip
    elif best == math.inf:  # the half-resolution stage ranked it best, and it was not
        # evaluated at full resolution
        ae, be = offe[i], offe[i + 1]
        best = _cost(gye[ae:be], gxe[ae:be], te[ae:be], V[j], Wp, H, W, uue[i], vv[j],
                     p_best[0], p_best[1], p_best[2], m_taps)  # fmt: skip
    for d in range(3):
        out_p[k, d] = p_best[d]
    out_c[k] = best
    out_m[k] = c_best >= n_plain


@njit(cache=True, nogil=True)
def _search_range(lo, hi, exact, full, tail, half, ii, jj, starts, n_plain, mirror_row, iters,
                  tol, coarse_iters, beta, prune_kappa, margin, kappa_stop, coarse_stop,
                  half_gap, same_angle, same_shift, lm, polish, m_taps, out_p, out_c,
                  out_m):  # fmt: skip
    """:func:`_search_pair` for the pairs ``lo .. hi - 1`` one after the other, with one
    scratch; without Python's lock, so that threads search ranges side by side."""
    n_c = starts.shape[1]
    scratch = (np.empty(n_c), np.empty(n_c), np.empty((n_c, 3)), np.empty((n_c, 3, 3)),
               np.empty((n_c, 3)), np.empty(n_c, np.int64))  # fmt: skip
    ws = _workspace()
    for k in range(lo, hi):
        _search_pair(k, ii, jj, starts, n_plain, mirror_row, exact, full, tail, half, iters,
                     tol, coarse_iters, beta, prune_kappa, margin, kappa_stop, coarse_stop,
                     half_gap, same_angle, same_shift, lm, polish, m_taps, scratch[0],
                     scratch[1], scratch[2], scratch[3], scratch[4], scratch[5], ws, out_p,
                     out_c, out_m)  # fmt: skip


def _search(exact, full, tail, half, ii, *rest: Any) -> None:
    """The CPU driver of :func:`_search_pair`: the pairs ``ii`` (and the rest of
    :func:`_search_range`'s arguments after its range) in one range per thread
    (:func:`ia_stages.core.threads.on_ranges`)."""
    on_ranges(lambda lo, hi: _search_range(lo, hi, exact, full, tail, half, ii, *rest),
              ii.shape[0])  # fmt: skip


@njit(cache=True, nogil=True)
def _count_targets(lo, hi, U, counts):
    """Non-zero pixels of the flat images ``U[lo:hi]`` into ``counts`` (NaN counts, -0 not:
    as ``np.flatnonzero``)."""
    for k in range(lo, hi):
        c = 0
        for p in range(U.shape[1]):
            if U[k, p] != 0.0:
                c += 1
        counts[k] = c


@njit(cache=True, nogil=True)
def _fill_targets(lo, hi, U, off, W, cy, cx, gy, gx, t):
    """Image k's non-zero pixels, row-major, into ``off[k]:off[k + 1]`` of ``gy, gx, t``."""
    for k in range(lo, hi):
        o = off[k]
        for p in range(U.shape[1]):
            v = U[k, p]
            if v != 0.0:
                gy[o] = np.float32(p // W - cy)
                gx[o] = np.float32(p % W - cx)
                t[o] = v
                o += 1


def _target_pixels(U: np.ndarray) -> tuple[np.ndarray, ...]:
    """``off, gy, gx, t, uu`` of :class:`Resolution` for targets ``U (n_i, H, W)``: two
    compiled passes over the images on every thread (count, then fill), with no array of
    every pixel's index."""
    U = np.asarray(U, dtype=np.float64)
    n, H, W = U.shape
    flat = np.ascontiguousarray(U).reshape(n, H * W)
    counts = np.empty(n, dtype=np.int64)
    on_ranges(lambda lo, hi: _count_targets(lo, hi, flat, counts), n)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    # pixel coordinates about the centre are multiples of 1/2 below 2^23: float32 holds them
    # exactly (the kernels widen them to float64 as they read them: the same arithmetic)
    gy = np.empty(off[-1], dtype=np.float32)
    gx = np.empty(off[-1], dtype=np.float32)
    t = np.empty(off[-1])
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    on_ranges(lambda lo, hi: _fill_targets(lo, hi, flat, off, W, cy, cx, gy, gx, t), n)
    return off, gy, gx, t, sumsq_rows(U)


def above_floor(images: Any, fraction: float) -> Any:
    """``(n, h, w)`` bool (numpy or cupy, as ``images``): the pixels of at least ``fraction``
    of their image's largest |value| (every pixel of an all-zero image, and every pixel with
    ``fraction`` 0). The floor that the searches' targets and the group refinement's visited
    pixels are cut at.

    Example
    -------
    >>> above_floor(np.array([[[1.0, 0.001, -0.5]]]), 0.01).tolist()
    [[[True, False, True]]]
    """
    xp = array_module(images)
    size = xp.abs(images)
    return size >= fraction * size.reshape(images.shape[0], -1).max(1)[:, None, None]


def sumsq_rows(U: Any, rows: int = 4096) -> np.ndarray:
    """:func:`~ia_stages.kmax.align._sumsq` of ``U (n, H, W)`` (numpy, cupy, or anything
    sliced along its first axis into arrays), ``rows`` images at a time, on the host (each
    image's sum is its own: the same values, without a squared copy of all of them).

    Example
    -------
    >>> sumsq_rows(np.ones((3, 2, 2)), rows=2).tolist()
    [4.0, 4.0, 4.0]
    """
    parts = [to_numpy(_sumsq(U[s : s + rows])) for s in range(0, U.shape[0], rows)]
    return np.concatenate(parts) if parts else np.zeros(0)


@dataclass(frozen=True)
class Resolution:
    """One resolution of a block of pairs, laid out for the compiled kernels.

    off : ``(n_i + 1,)`` target i's pixels are ``off[i]:off[i + 1]`` of
    gy, gx, t : centred row / column coordinates (float32: halves, held exactly) and values
        of the targets' non-zero pixels
    V : ``(n_j, (H + 2 _PAD) (W + 2 _PAD))`` what the interpolation's taps weigh for the
        moving images (:func:`ia_stages.core.warp.spline_coefficients`: the images for 'keys',
        their B-spline coefficients for 'bspline'), zero-padded, flattened and
        :func:`_packed` (the CPU kernels), or float32 (``packed=False``: the CUDA kernels);
        the same float32 values either way
    uu, vv : squared norms of the targets and of the moving images (rounded to float32, as
        ``V`` stores them)
    shape : ``(H, W)`` of the unpadded images
    """

    off: np.ndarray
    gy: np.ndarray
    gx: np.ndarray
    t: np.ndarray
    V: np.ndarray
    uu: np.ndarray
    vv: np.ndarray
    shape: np.ndarray

    @classmethod
    def of(
        cls,
        U: np.ndarray,
        V: np.ndarray,
        packed: bool = True,
        interpolation: str = "keys",
        mirror: bool = False,
    ) -> Resolution:
        """Targets ``U (n_i, H, W)`` and moving images ``V (n_j, H, W)``, sampled by
        ``interpolation``: its prefilter (:func:`ia_stages.core.warp.spline_coefficients`) runs
        here, once per moving image, for the CPU and the CUDA kernels alike. ``mirror``: the
        moving images are V followed by its mirror images (columns reversed; ``2 n_j`` rows),
        whose prefiltered pixels are V's reversed (the prefilter is symmetric, and so is the
        zero padding)."""
        V = np.asarray(V, dtype=np.float64)
        n, H, W = V.shape
        rows = 2 * n if mirror else n
        width = (H + 2 * _PAD) * (W + 2 * _PAD)
        moving = np.empty((rows, width), np.int64 if packed else np.float32)
        vv = np.empty(rows)

        def lay_out(lo: int, hi: int) -> None:  # each image's layout is its own
            Q = spline_coefficients(V[lo:hi], interpolation)
            padded = np.pad(Q, ((0, 0), (_PAD, _PAD), (_PAD, _PAD)))
            sides = ((0, padded), (n, padded[..., ::-1])) if mirror else ((0, padded),)
            # the squared norms of the moving images as the kernels read them (float32): then
            # d2 = ||u - v' o tau||^2 for the rounded v', whose distance to v is ~6e-8 ||v||
            norms = _sumsq(V[lo:hi].astype(np.float32).astype(np.float64))
            for at, side in sides:
                flat = side.reshape(hi - lo, width)
                moving[at + lo : at + hi] = _packed(flat) if packed else flat
                vv[at + lo : at + hi] = norms

        on_ranges(lay_out, n)
        off, gy, gx, t, uu = _target_pixels(U)
        return cls(off, gy, gx, t, moving, uu, vv, np.array([H, W], dtype=np.int64))

    def with_targets(self, U: np.ndarray) -> Resolution:
        """The same moving images with targets ``U (n_i, H, W)``."""
        off, gy, gx, t, uu = _target_pixels(U)
        return replace(self, off=off, gy=gy, gx=gx, t=t, uu=uu)

    def with_moving(self, other: Resolution) -> Resolution:
        """These targets with ``other``'s moving images (the two sides are laid out
        independently, so a block of pairs can join targets made once with moving images made
        per block)."""
        return replace(self, V=other.V, vv=other.vv)

    def arrays(self) -> tuple:
        return (self.off, self.gy, self.gx, self.t, self.V, self.uu, self.vv, self.shape)

    def to(self, xp: Any) -> Resolution:
        """The same arrays as ``xp`` arrays (e.g. cupy: on the GPU), the coordinates as
        float64: the CUDA kernels (and their simulator, whose arithmetic follows numpy's
        promotion, not numba's) read float64 coordinates."""
        wide = replace(self, gy=self.gy.astype(np.float64), gx=self.gx.astype(np.float64))
        return Resolution(*(xp.asarray(a) for a in wide.arrays()))


@dataclass(frozen=True)
class RefinePolicy:
    """The per-pair search's limits and pruning (:class:`ia_stages.kmax.SearchSettings` gives
    them; see it for each one's meaning).

    iters, tol : Levenberg-Marquardt steps per resolution, and the gain below which a
        refinement stops
    prune_kappa, prune_margin : candidates are refined in order of their start cost, each only
        if exp(-beta (cost - margin)) >= prune_kappa and cost - margin <= the best cost found
        so far for the pair (prune_kappa 0 refines every candidate); with prune_kappa > 0 a
        later candidate's refinement also stops where it cannot beat that best
    kappa_stop : > 0: a refinement also stops where the Newton step (at a positive-definite
        Hessian) promises exp(-beta cost) a rise below this
    coarse_stop : the half-resolution stage also stops where the Newton step promises the cost
        a drop below this
    half_gap : with prune_kappa > 0, a start whose half-resolution cost exceeds the pair's
        lowest by more than this is not evaluated at full resolution, and a later start's
        half-resolution refinement stops where it cannot come within this of the lowest so far
    same_angle, same_shift : half-resolution optima this close (radians, px) are one
    abandon : a refinement with a bound stops where the Newton model puts its optimum above
        the bound even after ``abandon`` times the promised drop
    lam0, lam_reject : the initial damping, and the least damping after a rejected step
    """

    iters: int = 30
    tol: float = 1e-9
    prune_kappa: float = 0.0
    prune_margin: float = 0.05
    kappa_stop: float = 0.0
    coarse_stop: float = 0.0
    half_gap: float = np.inf
    same_angle: float = 1e-2
    same_shift: float = 5e-2
    abandon: float = 4.0
    lam0: float = 1e-3
    lam_reject: float = 0.3

    def lm(self) -> tuple[float, float, float]:
        """(lam0, lam_reject, abandon), as the compiled refinement takes them."""
        return float(self.lam0), float(self.lam_reject), float(self.abandon)


@dataclass(frozen=True)
class PairImages:
    """What :func:`search_pairs` reads, laid out once per kappa^max call: the full-resolution
    pairs, optionally their half-resolution versions, and optionally the full-resolution
    pairs with fewer target pixels (``search``) that rank and refine in their place, all
    sampled by ``interpolation`` ('keys' or 'bspline', :data:`ia_stages.core.taps.TAPS`).
    ``mirror``: the moving images are followed by their mirror images (:func:`pair_images`)."""

    full: Resolution
    half: Resolution | None
    search: Resolution | None = None
    tail: Resolution | None = None  # the target pixels of ``full`` that ``search`` lacks
    interpolation: str = "keys"
    mirror: bool = False

    def to(self, xp: Any) -> PairImages:
        """The same images as ``xp`` arrays (e.g. cupy: on the GPU)."""
        layouts = (self.full, self.half, self.search, self.tail)  # the fields' order
        moved = (None if r is None else r.to(xp) for r in layouts)
        return PairImages(*moved, self.interpolation, self.mirror)

    def with_moving(self, other: PairImages) -> PairImages:
        """These targets against ``other``'s moving images (both laid out with the same
        settings): a pair's result depends only on its own two images' layouts.

        Example
        -------
        >>> U = np.random.default_rng(0).random((3, 8, 8))
        >>> joined = pair_images(U, U[:1]).with_moving(pair_images(U[:1], U[1:]))
        >>> joined.full.off.size - 1, joined.full.V.shape[0]
        (3, 2)
        """
        if (self.half is None) != (other.half is None):
            raise ValueError("with_moving: one side has a half-resolution layout, the other not")
        full = self.full.with_moving(other.full)
        return PairImages(
            full,
            None if self.half is None else self.half.with_moving(other.half),
            None if self.search is None else self.search.with_moving(full),
            None if self.tail is None else self.tail.with_moving(full),
            self.interpolation,
            other.mirror,
        )

    def taps(self) -> tuple:
        """The interpolation's 16 tap coefficients, as the kernels take them."""
        return taps(self.interpolation)

    def resolutions(self) -> tuple[Resolution, Resolution, Resolution, Resolution]:
        """(exact, search, tail, half) as the kernels read them: ``full`` where one is
        absent (the kernels then do not read it)."""
        full = self.full
        return (
            full,
            self.search if self.search is not None else full,
            self.tail if self.tail is not None else full,
            self.half if self.half is not None else full,
        )


def pair_images(
    U: np.ndarray,
    V: np.ndarray,
    half: tuple[np.ndarray, np.ndarray] | None = None,
    search: np.ndarray | None = None,
    packed: bool = True,
    interpolation: str = "keys",
    mirror: bool = False,
) -> PairImages:
    """Lay out targets ``U (n_i, H, W)``, moving images ``V (n_j, H, W)``, optionally their
    half-resolution versions ``half = (U2, V2)`` (e.g. by
    :func:`ia_stages.core.smoothing.half_resolution`) and optionally targets ``search (n_i, H, W)``
    (e.g. ``U`` without its faintest pixels) for :func:`search_pairs`; ``packed=False``: for
    :func:`ia_stages.kmax.cuda.search_pairs_cuda` (after :meth:`PairImages.to`). The moving
    images are sampled by ``interpolation`` ('keys' or 'bspline'); with ``mirror`` they are V
    followed by its mirror images, at both resolutions (:meth:`Resolution.of`), as
    :func:`search_pairs` reads them for ``n_plain``."""
    full = Resolution.of(U, V, packed, interpolation, mirror)
    return PairImages(
        full,
        None if half is None else Resolution.of(*half, packed, interpolation, mirror),
        None if search is None else full.with_targets(search),
        None if search is None else full.with_targets(np.where(search == 0, U, 0.0)),
        interpolation,
        mirror,
    )


def mirror_candidates(images: PairImages, starts: Any, n_plain: int | None) -> tuple[int, int]:
    """``(n_plain, mirror_row)`` as the compiled search takes them: with ``n_plain`` None every
    candidate of ``starts (m, c, 3)`` is of V[jj] (c, 0); else the candidates from ``n_plain``
    on are of the mirror images, rows n_j on of a ``mirror`` layout (a ValueError otherwise).

    Example
    -------
    >>> X = np.random.default_rng(0).random((2, 8, 8))
    >>> mirror_candidates(pair_images(X, X, mirror=True), np.zeros((1, 4, 3)), 2)
    (2, 2)
    """
    n_c = starts.shape[1]
    if n_plain is None:
        return n_c, 0
    if not images.mirror:
        raise ValueError("n_plain: the layout holds no mirror images (pair_images(mirror=True))")
    if not 0 <= int(n_plain) <= n_c:
        raise ValueError(f"n_plain must be in 0..{n_c} (the candidates per pair), got {n_plain}")
    return int(n_plain), images.full.V.shape[0] // 2


def search_pairs(
    images: PairImages,
    ii: np.ndarray,
    jj: np.ndarray,
    starts: np.ndarray,
    beta: float,
    policy: RefinePolicy,
    coarse_iters: int = 0,
    n_plain: int | None = None,
    mirrored: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Best refined transform of each pair (U[ii[k]], V[jj[k]]) over its starting candidates.

    Parameters
    ----------
    images : the targets U and moving images V (:func:`pair_images`)
    ii, jj : ``(m,)`` pair indices
    starts : ``(m, c, 3)`` candidate SE(2) parameters per pair
    beta : the kernel's bandwidth, exp(-beta d2)
    policy : the refinement's limits and pruning (:class:`RefinePolicy`)
    coarse_iters : > 0 (with half-resolution images): every start is first refined with at
        most this many steps on the half-resolution pair (translations there are half as
        long), then ordered and pruned by the full-resolution cost where it ended
        (skipped where the half-resolution cost already rules them out)
    n_plain : None (default: every candidate is of V[jj]), or the number of candidates of
        V[jj]; the others (``starts[:, n_plain:]``) are of the mirror images, which ``images``
        then lays out after the moving images (``pair_images(..., mirror=True)``; see
        :func:`mirror_candidates`): the pair's candidates of both are ranked, pruned and
        refined together
    mirrored : optional ``(m,)`` bool array, filled with whether each pair's winner is of the
        mirror image

    With ``images.search``, starts are ranked and refined on its targets at full resolution,
    and each pair's winner is then refined again on all pixels of ``images.full`` (nearly
    always one evaluation that finds it converged); a pair that nothing was refined for gets
    its reported start's cost there.

    Returns
    -------
    params ``(m, 3)``, cost ``(m,)``: V[jj] o tau ~ U[ii] (the mirror image of V[jj] where
    ``mirrored``), cost the correlation-form d2 on ``images.full``.

    Example
    -------
    >>> X = np.random.default_rng(0).random((2, 12, 12))
    >>> starts = np.zeros((1, 2, 3)); both = pair_images(X, X, mirror=True)
    >>> flag = np.empty(1, bool)
    >>> _ = search_pairs(both, np.array([0]), np.array([0]), starts, 1.0, RefinePolicy(),
    ...                  n_plain=1, mirrored=flag)
    >>> flag.tolist()  # X[0] onto itself: the plain candidate wins
    [False]
    """
    plain, mirror_row = mirror_candidates(images, starts, n_plain)
    m = ii.size
    out_p = np.empty((m, 3))
    out_c = np.empty(m)
    out_m = np.empty(m, dtype=np.bool_) if mirrored is None else mirrored
    exact, search, tail, half = images.resolutions()
    _search(
        exact.arrays(), search.arrays(), tail.arrays(), half.arrays(), np.asarray(ii, np.int64),
        np.asarray(jj, np.int64),
        np.ascontiguousarray(starts, dtype=np.float64), plain, mirror_row, int(policy.iters),
        float(policy.tol), int(coarse_iters) if images.half is not None else 0, float(beta),
        float(policy.prune_kappa), float(policy.prune_margin), float(policy.kappa_stop),
        float(policy.coarse_stop), float(policy.half_gap), float(policy.same_angle),
        float(policy.same_shift), policy.lm(), images.search is not None, images.taps(), out_p,
        out_c, out_m,
    )  # fmt: skip
    return out_p, out_c
