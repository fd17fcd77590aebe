"""GPU check for kappa^max: cupy against numpy on the same block, and the time for all pairs.

Usage (on a machine with a CUDA GPU and `pip install -e '.[gpu]'`):
    python bench/gpu_check.py [--block 64] [--n 10000] [--time-block 1024] [--full] [--sigma 1]

Prints the largest |kappa_cupy - kappa_numpy| over one block of MNIST digit pairs (40 px, as
bench/kmax.py pads them; numpy runs the compiled kernel, cupy the array code), then times one
--time-block x --time-block block on the GPU and the seconds that all pairs of --n digits would
take at that rate (the blocks are independent jobs, so the estimate is linear in the number of
pairs; it says "estimated" next to the figure). --full times all pairs of --n for real.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from kmax import BETA, digits  # bench/kmax.py, beside this script

from ia_stages.backend import BackendError, resolve_backend, to_numpy
from ia_stages.kmax import kappa_max


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

    rng = np.random.default_rng(0)
    images, _, _ = digits(max(args.block, args.time_block), rng)
    block = images[: args.block]
    ref = kappa_max(block, beta=BETA, sigma=args.sigma)
    got = kappa_max(cupy.asarray(block), beta=BETA, sigma=args.sigma)
    diff = np.abs(to_numpy(got.value) - ref.value).max()
    print(
        f"cupy vs numpy, {args.block} images: max |kappa difference| = {diff:.2e} "
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
