"""Each row's nearest others from a block of inner products: the feature-space candidate
search's selection (:func:`ia_stages.kmax.features.feature_neighbours`).

A bounded max-heap per row keeps the c smallest squared distances in one pass over the row,
instead of a partial sort of all n. The per-row code is scalar Python compiled by numba for
the CPU here and for CUDA by :mod:`ia_stages.kmax.cuda` (one thread per row).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ia_stages.core.threads import on_ranges


@njit(cache=True, nogil=True)
def _nearest_of_row(product, sq, lo, r, hd, hj, out_row):
    """Row ``lo + r`` of the block ``product (m, n)`` = F[lo:lo+m] F^T: its ``out_row.size``
    nearest others by d2 = sq_i + sq_j - 2 product (float32, summed in that order), nearest
    first, ties to the lower index, by a bounded max-heap in the scratch ``hd, hj``. Scalar
    code shared with the CUDA build (:mod:`ia_stages.kmax.cuda`)."""
    n = product.shape[1]
    c = out_row.shape[0]
    i = lo + r
    size = 0
    for j in range(n):
        if j == i:
            continue
        d = np.float32(sq[i] + sq[j]) - np.float32(2.0) * product[r, j]
        if size < c:  # push, sift up
            k = size
            size += 1
            while k > 0:
                p = (k - 1) // 2
                if hd[p] > d or (hd[p] == d and hj[p] > j):
                    break
                hd[k], hj[k] = hd[p], hj[p]
                k = p
            hd[k], hj[k] = d, j
        elif d < hd[0] or (d == hd[0] and j < hj[0]):  # replace the farthest
            _sift_down(hd, hj, c, d, j)
    for t in range(c - 1, -1, -1):  # pop the farthest into the last place
        out_row[t] = hj[0]
        _sift_down(hd, hj, t, hd[t], hj[t])


@njit(cache=True, nogil=True)
def _sift_down(hd, hj, size, d, j):
    """Put (d, j) at the root of the max-heap ``hd, hj`` of ``size`` entries (ordered by d,
    then j) and sift it down. Scalar code shared with the CUDA build."""
    k = 0
    while True:
        a = 2 * k + 1
        if a >= size:
            break
        b = a + 1
        if b < size and (hd[b] > hd[a] or (hd[b] == hd[a] and hj[b] > hj[a])):
            a = b
        if hd[a] < d or (hd[a] == d and hj[a] < j):
            break
        hd[k], hj[k] = hd[a], hj[a]
        k = a
    hd[k], hj[k] = d, j


@njit(cache=True, nogil=True)
def _nearest_of_rows(r0, r1, product, sq, lo, out):
    c = out.shape[1]
    for r in range(r0, r1):
        _nearest_of_row(product, sq, lo, r, np.empty(c, dtype=np.float32),
                        np.empty(c, dtype=np.int64), out[r])  # fmt: skip


def nearest_of_block(product: np.ndarray, sq: np.ndarray, lo: int, out: np.ndarray) -> None:
    """Every row of ``product (m, n)`` (rows ``lo``.. of F F^T) into ``out (m, c)``: its c
    nearest others (:func:`_nearest_of_row`), one range of rows per thread
    (:func:`ia_stages.core.threads.on_ranges`);
    :func:`ia_stages.kmax.cuda.nearest_of_block_cuda` runs the same function one thread per
    row."""
    on_ranges(lambda r0, r1: _nearest_of_rows(r0, r1, product, sq, lo, out), product.shape[0])
