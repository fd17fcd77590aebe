"""The one scalar source of the per-pair search: the functions that numba compiles for the
CPU here and :mod:`ia_stages.kmax.cuda` compiles, from the same code, as CUDA device functions.

They are the leaves that read the moving image's pixels (:func:`_taps`, :func:`_floor`), the
warp of one pixel (:func:`_position`), the cost and its exact derivatives (:func:`_cost`,
:func:`_cost_derivs`) and the Newton-Levenberg-Marquardt refinement from one start
(:func:`_refine_one`, :func:`_refine_from`). The search over a pair's starts and its CPU
drivers are :mod:`ia_stages.kmax.search_kernels`; what calls them from Python is
:mod:`ia_stages.kmax.refine`.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ia_stages.core.taps import _PAD, _pd, _pdd, _pw

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
    (:class:`.Resolution`); ``v``: the moving image zero-padded by ``_PAD``, flattened and
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
    """Scratch for the refinements of one pair (:func:`_refine_from`; :func:`._search` makes one
    per pair): the 3 x 3 algebra of every step then allocates nothing."""
    return np.empty((7, 3, 3))


@_shared(inline="always")
def _refine_one(gy, gx, t, v, Wp, H, W, uu, vv, p, iters, tol, beta, kappa_stop, d2_stop, bound,
                lm, ws, m):  # fmt: skip
    """Newton-LM from ``p (3,)`` (updated in place) on one pair (:func:`_cost` arguments),
    for at most ``iters`` steps (tried or taken), until a gain below ``tol`` or
    :func:`_converged`; returns the cost at the final ``p``. ``lm``: (lam0, lam_reject,
    abandon) as in :class:`.RefinePolicy`; ``ws``: :func:`_workspace`; ``m``: the tap
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
