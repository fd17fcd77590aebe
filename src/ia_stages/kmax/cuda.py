"""The per-pair search of :mod:`ia_stages.kmax.refine`, compiled for CUDA GPUs by numba-cuda.

Nothing here restates the algorithm. :data:`ia_stages.kmax.refine_kernels.SHARED` holds the
functions that the CPU kernels are compiled from (plain scalar Python); :func:`_device_functions`
makes each of them a CUDA device function from the same code object, with its global names bound to
the device versions of the others, and with the target-specific leaves replaced: :func:`_taps_f32`
reads four float32 pixels where the CPU's ``_taps`` unpacks two int64 words holding the same float32
values, and :func:`_floor_f64` stands for ``np.floor``. One thread refines one pair; its scratch is
its row of a workspace allocated per launch. The CPU kernels use fastmath (reassociated sums), these
do not; both read the same float32 pixels and sum in float64.

Arrays are anything with ``__cuda_array_interface__`` (cupy arrays), or numpy arrays under
numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, which the tests use). This module imports
numba.cuda; :mod:`ia_stages.kmax` imports it only for arrays on a GPU.
"""

from __future__ import annotations

import math
import types
from functools import cache
from typing import Any

import numpy as np

if not hasattr(np, "row_stack"):
    # numba-cuda 0.30 registers an overload of np.row_stack, which numpy 2.5 removed: without
    # it `numba.cuda` fails to import (seen on the H200 image, numpy 2.5.2 + numba-cuda 0.30.4)
    np.row_stack = np.vstack

from numba import cuda

from ia_stages.core import taps
from ia_stages.core.backend import array_module, to_numpy
from ia_stages.kmax import group_refine, refine, refine_kernels, rings, selection
from ia_stages.kmax.refine import PairImages, RefinePolicy

THREADS = 64  # threads per block: one pair each


def _taps_f32(v, b):
    """Pixels b to b + 3 of a flat float32 image, as float64 (the CUDA leaf of
    :func:`ia_stages.kmax.refine_kernels._taps`)."""
    return float(v[b]), float(v[b + 1]), float(v[b + 2]), float(v[b + 3])


def _floor_f64(x):
    """floor(x) as a float64 (the CUDA leaf of :func:`ia_stages.kmax.refine_kernels._floor`)."""
    return float(math.floor(x))


def _sources() -> dict:
    """Name -> CPU dispatcher of every function of the one source: the search, the tap
    polynomials' evaluation (:data:`ia_stages.core.taps.TAPS`, any interpolation) and the
    scan's peak picking."""
    tap_functions = {name: getattr(taps, name) for name in ("_pw", "_pd", "_pdd")}
    peaks = {
        name: getattr(rings, name)
        for name in ("_peaks_of_pair", "_joint_peaks_of_pair", "_lattice_pair_centre")
    }
    heap = {name: getattr(selection, name) for name in ("_nearest_of_row", "_sift_down")}
    return {**tap_functions, **refine_kernels.SHARED, **peaks, **heap}


@cache
def _device_functions() -> dict:
    """Name -> CUDA device function, compiled (lazily, at the first launch) from the same code
    as the CPU kernels."""
    device: dict = {}
    namespaces = []
    for name, dispatcher in _sources().items():
        f = dispatcher.py_func
        namespace = dict(f.__globals__)  # a copy: the CPU module's names stay the CPU's
        clone = types.FunctionType(f.__code__, namespace, name, f.__defaults__, f.__closure__)
        device[name] = cuda.jit(device=True)(clone)
        namespaces.append(namespace)
    device["_taps"] = cuda.jit(device=True)(_taps_f32)
    device["_floor"] = cuda.jit(device=True)(_floor_f64)
    for namespace in namespaces:  # calls between them resolve to the device versions
        namespace.update(device)
    return device


@cache
def _kernel() -> Any:
    search_pair = _device_functions()["_search_pair"]

    @cuda.jit
    def search_kernel(ii, jj, starts, n_plain, mirror_row, e0, e1, e2, e3, e4, e5, e6, e7, s0,
                      s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7, h0, h1, h2,
                      h3, h4, h5, h6, h7, iters, tol, coarse_iters, beta, prune_kappa, margin,
                      kappa_stop, coarse_stop, half_gap, same_angle, same_shift, lam0,
                      lam_reject, abandon, polish, m_taps, costs, half_costs, g_c, H_c, p_c,
                      order, ws, out_p, out_c, out_m):  # fmt: skip
        k = cuda.grid(1)
        if k < starts.shape[0]:
            search_pair(k, ii, jj, starts, n_plain, mirror_row, (e0, e1, e2, e3, e4, e5, e6, e7),
                        (s0, s1, s2, s3, s4, s5, s6, s7), (t0, t1, t2, t3, t4, t5, t6, t7),
                        (h0, h1, h2, h3, h4, h5, h6, h7), iters, tol, coarse_iters, beta,
                        prune_kappa, margin, kappa_stop, coarse_stop, half_gap, same_angle,
                        same_shift, (lam0, lam_reject, abandon), polish, m_taps, costs[k],
                        half_costs[k], g_c[k], H_c[k], p_c[k], order[k], ws[k], out_p,
                        out_c, out_m)  # fmt: skip

    return search_kernel


@cache
def _peaks_kernel() -> Any:
    peaks_of_pair = _device_functions()["_peaks_of_pair"]

    @cuda.jit
    def peaks_kernel(scores, ii, jj, n_peaks, env, top, at, theta, centre):
        k = cuda.grid(1)
        if k < ii.shape[0]:
            peaks_of_pair(scores, ii[k], jj[k], n_peaks, env[k], top[k], at[k], theta[k],
                          centre[k])  # fmt: skip

    return peaks_kernel


def pair_peaks_cuda(scores: Any, ii: Any, jj: Any, n_peaks: int) -> tuple[Any, Any]:
    """:func:`ia_stages.kmax.rings.pair_peaks` on the GPU, one thread per pair: the
    same arguments and results as device arrays (``scores`` float32 or float64)."""
    xp = array_module(scores)
    m, M = int(ii.shape[0]), scores.shape[3]
    theta = xp.empty((m, n_peaks))
    centre = xp.empty((m, n_peaks), dtype=np.int64)
    if m == 0:
        return theta, centre
    env = xp.empty((m, M))  # float64, as the CPU's
    top = xp.empty((m, n_peaks))
    at = xp.empty((m, n_peaks), dtype=np.int64)
    _peaks_kernel()[-(-m // THREADS), THREADS](
        xp.ascontiguousarray(scores), xp.asarray(ii, dtype=np.int64),
        xp.asarray(jj, dtype=np.int64), int(n_peaks), env, top, at, theta, centre,
    )  # fmt: skip
    return theta, centre


@cache
def _nearest_kernel() -> Any:
    nearest_of_row = _device_functions()["_nearest_of_row"]

    @cuda.jit
    def nearest_kernel(product, sq, lo, hd, hj, out):
        r = cuda.grid(1)
        if r < product.shape[0]:
            nearest_of_row(product, sq, lo, r, hd[r], hj[r], out[r])

    return nearest_kernel


def nearest_of_block_cuda(product: Any, sq: Any, lo: int, out: Any) -> None:
    """:func:`ia_stages.kmax.selection.nearest_of_block` on the GPU, one thread per row: the
    same arguments (device arrays), ``out (m, c)`` filled in place."""
    xp = array_module(product)
    m, c = int(product.shape[0]), int(out.shape[1])
    if m == 0:
        return
    _nearest_kernel()[-(-m // THREADS), THREADS](
        xp.ascontiguousarray(product), xp.ascontiguousarray(sq), int(lo),
        xp.empty((m, c), dtype=np.float32), xp.empty((m, c), dtype=np.int64), out,
    )  # fmt: skip


@cache
def _lattice_kernel() -> Any:
    pair_centre = _device_functions()["_lattice_pair_centre"]

    @cuda.jit
    def lattice_kernel(A, B, ia, jb, synthesis, g, out):
        t = cuda.grid(1)
        n_o = B.shape[2]
        if t < ia.shape[0] * n_o:
            p, o = t // n_o, t % n_o
            pair_centre(A, B, ia[p], jb[p], o, synthesis, g[t], out[p, o])

    return lattice_kernel


def lattice_pair_scores_cuda(A: Any, B: Any, ia: Any, jb: Any, synthesis: Any, out: Any) -> None:
    """:func:`ia_stages.kmax.rings.lattice_pair_scores` on the GPU, one thread per (pair,
    centre): the same arguments as device arrays, ``out (m, n_o, M)`` filled in place."""
    xp = array_module(A)
    m, n_o = int(ia.shape[0]), int(B.shape[2])
    if m == 0:
        return
    g = xp.empty((m * n_o, 2 * A.shape[0]))  # float64 sums, as the CPU's
    _lattice_kernel()[-(-m * n_o // THREADS), THREADS](
        A, B, xp.asarray(ia, dtype=np.int64), xp.asarray(jb, dtype=np.int64),
        xp.asarray(synthesis, dtype=np.float64), g, out,
    )  # fmt: skip


@cache
def _joint_peaks_kernel() -> Any:
    joint_peaks_of_pair = _device_functions()["_joint_peaks_of_pair"]

    @cuda.jit
    def joint_peaks_kernel(scores, ii, jj, n_peaks, nbr, top, at_o, at_a, theta, centre):
        k = cuda.grid(1)
        if k < ii.shape[0]:
            joint_peaks_of_pair(scores, ii[k], jj[k], n_peaks, nbr, top[k], at_o[k], at_a[k],
                                theta[k], centre[k])  # fmt: skip

    return joint_peaks_kernel


def pair_joint_peaks_cuda(
    scores: Any, ii: Any, jj: Any, n_peaks: int, neighbours: Any
) -> tuple[Any, Any]:
    """:func:`ia_stages.kmax.rings.pair_joint_peaks` on the GPU, one thread per pair:
    the same arguments and results as device arrays (``scores`` float32 or float64)."""
    xp = array_module(scores)
    m = int(ii.shape[0])
    theta = xp.empty((m, n_peaks))
    centre = xp.empty((m, n_peaks), dtype=np.int64)
    if m == 0:
        return theta, centre
    top = xp.empty((m, n_peaks))  # float64, as the CPU's
    at_o = xp.empty((m, n_peaks), dtype=np.int64)
    at_a = xp.empty((m, n_peaks), dtype=np.int64)
    _joint_peaks_kernel()[-(-m // THREADS), THREADS](
        xp.ascontiguousarray(scores), xp.asarray(ii, dtype=np.int64),
        xp.asarray(jj, dtype=np.int64), int(n_peaks),
        xp.ascontiguousarray(xp.asarray(neighbours, dtype=np.int64)), top, at_o, at_a, theta,
        centre,
    )  # fmt: skip
    return theta, centre


def search_pairs_cuda(
    images: PairImages,
    ii: Any,
    jj: Any,
    starts: Any,
    beta: float,
    policy: RefinePolicy,
    coarse_iters: int = 0,
    n_plain: int | None = None,
    mirrored: Any | None = None,
) -> tuple[Any, Any]:
    """:func:`ia_stages.kmax.refine.search_pairs` on the GPU: one thread per pair.

    Parameters
    ----------
    images : :func:`ia_stages.kmax.refine.pair_images` with ``packed=False``, its arrays on
        the device (:meth:`~ia_stages.kmax.refine.PairImages.to`)
    ii, jj : ``(m,)`` int64 pair indices, device arrays
    starts : ``(m, c, 3)`` float64 candidates, a device array
    beta, policy, coarse_iters, n_plain : as for :func:`~ia_stages.kmax.refine.search_pairs`
    mirrored : optional ``(m,)`` bool device array, filled with whether each pair's winner is
        of the mirror image

    Returns
    -------
    params ``(m, 3)`` and cost ``(m,)``, arrays of the kind of ``starts``.
    """
    xp = array_module(starts)
    m, n_c = starts.shape[0], starts.shape[1]
    out_p = xp.empty((m, 3))
    out_c = xp.empty(m)
    out_m = xp.empty(m, dtype=np.bool_) if mirrored is None else mirrored
    plain, mirror_row = refine.mirror_candidates(images, starts, n_plain)
    if m == 0:
        return out_p, out_c
    if images.full.V.dtype != np.float32:
        raise ValueError("search_pairs_cuda needs pair_images(..., packed=False)")
    scratch = (
        xp.empty((m, n_c)),
        xp.empty((m, n_c)),
        xp.empty((m, n_c, 3)),
        xp.empty((m, n_c, 3, 3)),
        xp.empty((m, n_c, 3)),
        xp.empty((m, n_c), dtype=np.int64),
        xp.empty((m, 7, 3, 3)),
    )
    arrays = [a for r in images.resolutions() for a in r.arrays()]
    coarse = int(coarse_iters) if images.half is not None else 0
    _kernel()[-(-m // THREADS), THREADS](
        xp.asarray(ii, dtype=np.int64), xp.asarray(jj, dtype=np.int64),
        xp.ascontiguousarray(xp.asarray(starts, dtype=np.float64)), plain, mirror_row, *arrays,
        int(policy.iters),
        float(policy.tol), coarse, float(beta), float(policy.prune_kappa),
        float(policy.prune_margin), float(policy.kappa_stop), float(policy.coarse_stop),
        float(policy.half_gap), float(policy.same_angle), float(policy.same_shift),
        *policy.lm(), images.search is not None, images.taps(), *scratch, out_p, out_c, out_m,
    )  # fmt: skip
    return out_p, out_c


@cache
def _group_kernel() -> Any:
    refine_pair = _device_functions()["_group_refine_pair"]

    @cuda.jit
    def group_kernel(ii, jj, U, V, BU, BV, SU, UU, shape, q0, n_free, lims, iters, tol, lam0,
                     m_taps, ws, out_q, out_c):  # fmt: skip
        k = cuda.grid(1)
        if k < ii.shape[0]:
            refine_pair(k, ii, jj, U, V, BU, BV, SU, UU, shape, q0, n_free, lims, iters, tol,
                        lam0, m_taps, ws[k], out_q, out_c)  # fmt: skip

    return group_kernel


def group_refine_cuda(
    U: Any, V: Any, ii: Any, jj: Any, q0: Any, group: Any, interpolation: str = "keys"
) -> tuple[Any, Any]:
    """:func:`ia_stages.kmax.group_refine.refine_stage` (one stage of the refinement; the
    stages: :func:`ia_stages.kmax.group_refine.refine_in_stages`) on the GPU, one thread per
    pair: the same arguments (``U``, ``ii``, ``jj``, ``q0`` host or device arrays; the moving
    images ``V`` are laid out on the host) and results as arrays of the kind of ``U``."""
    xp = array_module(U)
    m = int(ii.shape[0])
    out_q = xp.empty((m, group_refine.N_Q))
    out_c = xp.empty(m)
    if m == 0:
        return out_q, out_c
    n = group_refine.N_Q
    moving, boxes_v = group_refine.moving_layout(
        np.asarray(to_numpy(V)), interpolation, packed=False, floor=group.floor
    )
    flat, boxes_u, spans, uu = group_refine.target_layout(np.asarray(to_numpy(U)), group.floor)
    _group_kernel()[-(-m // THREADS), THREADS](
        xp.asarray(ii, dtype=np.int64), xp.asarray(jj, dtype=np.int64), xp.asarray(flat),
        xp.asarray(moving), xp.asarray(boxes_u), xp.asarray(boxes_v), xp.asarray(spans),
        xp.asarray(uu), xp.asarray(np.array(V.shape[1:], dtype=np.int64)),
        xp.ascontiguousarray(xp.asarray(q0, dtype=np.float64)), 3 + group.n_extra,
        group.bounds.limits(), int(group.iters), float(group.tol), float(group.lam0),
        taps.taps(interpolation), xp.empty((m, 5, n, n)), out_q, out_c,
    )  # fmt: skip
    return out_q, out_c
