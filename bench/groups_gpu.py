"""The group refinement on a CUDA GPU against the CPU build: same pairs, same starts.

Usage: python bench/groups_gpu.py [--n 60] [--size 48]

Letters rendered under affine maps; starts = the SE(2) kappa^max optimum of every pair i < j.
Prints the largest |d2_cuda - d2_cpu| and |q_cuda - q_cpu| (the CUDA kernels do not reorder
sums, the CPU's fastmath does: agreement to ~1e-9 is expected) and the seconds per pair of
each build in the same run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ia_stages.core.groups import make_group
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.data.render import letter, render
from ia_stages.kmax import kappa_max
from ia_stages.kmax.group_refine import refine_pairs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--size", type=int, default=48)
    args = ap.parse_args()
    import cupy as cp

    from ia_stages.kmax.cuda import group_refine_cuda

    rng = np.random.default_rng(0)
    g = make_group("affine")
    n = args.n
    p = np.zeros((n, 6))
    p[:, 0] = rng.uniform(-np.pi, np.pi, n)
    p[:, 3:] = rng.uniform(-0.1, 0.1, (n, 3))
    shapes = [letter("FGRKabdeps"[k % 10], args.size / 2) for k in range(n)]
    X = render(shapes, (args.size, args.size), params=p[:, :3], psf=1.0, linear=g.matrix(p))
    se = kappa_max(X, beta=2.0)
    U = normalize(smooth(X, 2.0))
    ii, jj = np.triu_indices(n, 1)
    q0 = np.zeros((ii.size, 6))
    q0[:, :3] = se.params[ii, jj]
    refine_pairs(U, U, ii[:4], jj[:4], q0[:4], g)  # compile
    group_refine_cuda(cp.asarray(U), U, ii[:4], jj[:4], q0[:4], g)
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    qc, dc = refine_pairs(U, U, ii, jj, q0, g)
    cpu = time.perf_counter() - t
    t = time.perf_counter()
    qg, dg = group_refine_cuda(cp.asarray(U), U, ii, jj, q0, g)
    cp.cuda.Device().synchronize()
    gpu = time.perf_counter() - t
    qg, dg = cp.asnumpy(qg), cp.asnumpy(dg)
    print(f"pairs {ii.size}: max |d2 cuda - cpu| {np.abs(dg - dc).max():.2e} (d2 mean "
          f"{dc.mean():.4f}), max |q cuda - cpu| {np.abs(qg - qc).max():.2e}, moved from start "
          f"{np.abs(qc - q0).max():.2e}")  # fmt: skip
    print(f"cpu {1e6 * cpu / ii.size:.1f} us/pair wall, cuda {1e6 * gpu / ii.size:.1f} us/pair "
          f"wall (incl. layout and transfer), ratio {cpu / gpu:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
