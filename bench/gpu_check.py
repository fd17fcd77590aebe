"""GPU check for kappa^max: the CUDA kernel against the CPU kernel, and the time for all pairs.

Usage (on a machine with a CUDA GPU and `pip install -e '.[gpu]'`):
    python bench/gpu_check.py [--block 64] [--n 10000] [--time-block 1024] [--full] [--sigma 1]

Both kernels are compiled from one source (ia_stages.kmax.refine; numba for the CPU, numba-cuda
for the GPU). On one block of MNIST digit pairs (40 px, as bench/kmax.py pads them) it prints
the largest |kappa_CUDA - kappa_CPU| (1) of the per-pair search alone, both started from the
same candidates, and (2) of the whole kappa_max (cupy scan + CUDA search against the numpy
scan + CPU search). Then it times one --time-block x --time-block block on the GPU and gives
the seconds that all pairs of --n digits would take at that rate (the blocks are independent
jobs, so the estimate is linear in the number of pairs; it says "estimated" next to the
figure). --full times all pairs of --n for real.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from kmax import BETA, digits  # bench/kmax.py, beside this script

from ia_stages.core.backend import BackendError, resolve_backend, to_numpy
from ia_stages.core.groups import SE2
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.kmax import SearchSettings, kappa_max
from ia_stages.kmax.refine import search_pairs
from ia_stages.kmax.search import _pair_layout, _polar_chunks, _policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--time-block", type=int, default=1024)
    ap.add_argument("--full", action="store_true", help="time all pairs of --n digits")
    ap.add_argument(
        "--sigma", type=float, default=1.0, help="kernel smoothing (px); 1 = the pipeline's digits"
    )
    args = ap.parse_args()
    try:
        resolve_backend("cupy")
    except BackendError as err:
        sys.exit(f"gpu_check: {err}")
    import cupy

    from ia_stages.kmax.cuda import search_pairs_cuda

    rng = np.random.default_rng(0)
    images, _, _ = digits(max(args.block, args.time_block), rng)
    block = images[: args.block]
    # (1) the per-pair search alone: CPU and CUDA kernels from the same starts
    s = SearchSettings()
    Un = normalize(smooth(block, args.sigma))
    ii, jj = np.triu_indices(len(block), 1)
    chunks = list(_polar_chunks(Un, Un, ii, jj, SE2(), s))
    i = np.concatenate([c[0] for c in chunks])
    j = np.concatenate([c[1] for c in chunks])
    starts = np.concatenate([c[2] for c in chunks])
    _, d_cpu = search_pairs(
        _pair_layout(Un, Un, args.sigma, s), i, j, starts, BETA, _policy(s), s.coarse_iters
    )
    U_gpu = cupy.asarray(Un)
    _, d_gpu = search_pairs_cuda(
        _pair_layout(U_gpu, U_gpu, args.sigma, s), cupy.asarray(i), cupy.asarray(j),
        cupy.asarray(starts), BETA, _policy(s), s.coarse_iters,
    )  # fmt: skip
    diff = np.abs(np.exp(-BETA * to_numpy(d_gpu)) - np.exp(-BETA * d_cpu)).max()
    print(
        f"CUDA vs CPU search, {i.size} pairs from the same starts: max |kappa difference| = "
        f"{diff:.2e} ({'ok' if diff <= 1e-5 else 'ABOVE 1e-5'})"
    )
    # (2) the whole kappa_max
    ref = kappa_max(block, beta=BETA, sigma=args.sigma)
    got = kappa_max(cupy.asarray(block), beta=BETA, sigma=args.sigma)
    diff = np.abs(to_numpy(got.value) - ref.value).max()
    print(
        f"kappa_max, cupy vs numpy, {args.block} images: max |kappa difference| = {diff:.2e} "
        f"({'ok' if diff <= 1e-5 else 'ABOVE 1e-5'})"
    )

    gpu = cupy.asarray(images[: args.time_block])
    kappa_max(gpu[:8], beta=BETA, sigma=args.sigma)  # warm-up: kernels compile on first use
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    kappa_max(gpu, beta=BETA, sigma=args.sigma)
    cupy.cuda.Device().synchronize()
    seconds = time.perf_counter() - t
    pairs = args.time_block * (args.time_block - 1) / 2
    per_pair = seconds / pairs
    total = per_pair * args.n * (args.n - 1) / 2
    print(
        f"{args.time_block} images ({pairs:.0f} pairs): {seconds:.1f} s, "
        f"{1e6 * per_pair:.1f} us/pair on {cupy.cuda.runtime.getDeviceProperties(0)['name']}"
    )
    print(f"all pairs of n = {args.n}: estimated {total:.0f} s on one GPU")
    if args.full:
        gpu = cupy.asarray(digits(args.n, rng)[0])
        t = time.perf_counter()
        kappa_max(gpu, beta=BETA, sigma=args.sigma)
        cupy.cuda.Device().synchronize()
        print(f"all pairs of n = {args.n}: measured {time.perf_counter() - t:.0f} s on one GPU")


if __name__ == "__main__":
    main()
