"""The compiled search of one pair over its starts (:func:`_search_pair`: ranking, pruning,
refinement at half and full resolution, part of the one source of
:mod:`ia_stages.kmax.refine_kernels`), its CPU drivers (:func:`_search_range` on one range of
pairs, :func:`_search` on every thread) and the compiled passes that lay out the target
pixels (:func:`_count_targets`, :func:`_fill_targets`). :mod:`ia_stages.kmax.refine` calls
them from Python.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from ia_stages.core.taps import _PAD
from ia_stages.core.threads import on_ranges
from ia_stages.kmax.refine_kernels import (
    _cost,
    _cost_derivs,
    _refine_from,
    _refine_one,
    _shared,
    _workspace,
)


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
    """Pair ``k`` of :func:`.search_pairs` on the tuples of :meth:`.Resolution.arrays`: ``full``
    ranks and refines at full resolution; with ``polish`` the winner is refined again on
    ``exact``, whose target pixels are those of ``full`` and ``tail``; ``m_taps``: the
    interpolation's tap coefficients (:func:`._cost`). Candidates ``n_plain`` on are of the
    moving image ``mirror_row`` rows after ``jj[k]`` (its mirror image): they are ranked,
    pruned and refined with the others, and ``out_m[k]`` says whether one of them won.
    Scratch, all overwritten: ``costs, half_costs, order (n_c,)``, ``g_c, p_c (n_c, 3)``,
    ``H_c (n_c, 3, 3)``, ``ws`` (:func:`._workspace`)."""
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
