"""Invariance error of kappa^max on shapes rendered at an angle (never warped by our code).

Usage: python bench/invariance.py [--renderings 12] [--beta 2] [--size 48] [--height 24]
       [--supersample 8] [--psf 0 1] [--sigma 1 2] [--interpolation keys bspline]
       [--no-dense] [--no-spline] [--quick]

Pairs of different shapes (letters of DejaVu Sans, a polygon) are drawn from their vector
outlines by :mod:`ia_stages.data.render`, each at its own angle (evenly spread over the circle, the
second shape's angles offset and shuffled) and sub-pixel shift (U[-0.5, 0.5] px per axis), and
once upright and centred: the reference. For every rendering the relative error
|kappa^max - kappa^max_ref| / kappa^max_ref (and |Delta d2|) is reported, worst and median over
all renderings of all pairs, per camera ``psf`` (0: the pixels integrate the sharp outline;
> 0: a Gaussian optical blur first) and kernel smoothing ``sigma``, for

- ``polar <interp>``: kappa^max with its default search, every warp by ``interp`` ('keys',
  the paper's Keys cubic convolution, or 'bspline', cubic B-spline on spline coefficients:
  ``SearchSettings.interpolation``),
- ``dense <interp>``: the dense reference search (1-degree grid, every integer shift, 4
  starts), same objective: a difference to ``polar`` is the search's,
- ``scipy spline``: the objective with scipy's prefiltered cubic B-spline interpolation
  (``ndimage.map_coordinates``, none of our warp code) minimised by Nelder-Mead from the best
  optimum the searches found: a check of the 'bspline' objective,
- ``data``: no search at all, the floor set by the data: the norm of the difference between
  the smoothed rendering and the exact (quintic-spline) rotation and shift of the smoothed
  upright rendering, ||g * r_tau - (g * r) o tau|| (unit-norm images), worst and median; a
  kernel error below about 2 ||u - v o tau|| times this cannot be expected of any objective.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from scipy import ndimage, optimize

from ia_stages import SE2, kappa_max
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import sampling_field
from ia_stages.data.render import letter, polygon, regular_polygon, render
from ia_stages.kmax import DENSE_REFERENCE, SearchSettings

PAIRS = (("F", "G"), ("R", "K"), ("star", "a"))


def outline(name: str, height: float):
    """A letter, or ``'star'``: a five-pointed star polygon of the same size."""
    if name == "star":
        outer = regular_polygon(5, height / 2, phase=0.1)
        inner = regular_polygon(5, height / 5, phase=0.1 + np.pi / 5)
        return polygon(np.stack([outer, inner], 1).reshape(-1, 2))
    return letter(name, height)


def spline_warp(v: np.ndarray, p: np.ndarray, order: int) -> np.ndarray:
    """v o tau(p) by prefiltered B-spline interpolation of ``order``, zero outside."""
    g = SE2()
    f = sampling_field(g.matrix(p[None]), g.translation(p[None]), v.shape)[0]
    return ndimage.map_coordinates(v, f, order=order, mode="constant", prefilter=True)


def spline_d2(u: np.ndarray, v: np.ndarray, p0: np.ndarray) -> float:
    """min over tau near p0 of ||u||^2 + ||v||^2 - 2 <u, v o tau> (cubic B-spline)."""
    uu, vv = (u * u).sum(), (v * v).sum()

    def cost(p):
        return uu + vv - 2 * (u * spline_warp(v, p, 3)).sum()

    opts = {"xatol": 1e-7, "fatol": 1e-12, "maxiter": 4000}
    return float(optimize.minimize(cost, p0, method="Nelder-Mead", options=opts).fun)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--renderings", type=int, default=12, help="renderings per pair")
    ap.add_argument("--beta", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=48, help="canvas (px)")
    ap.add_argument("--height", type=float, default=24.0, help="shape height (px)")
    ap.add_argument("--supersample", type=int, default=8, help="sub-pixels of the psf blur")
    ap.add_argument("--psf", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--sigma", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--interpolation", nargs="+", default=["keys", "bspline"])
    ap.add_argument("--no-dense", action="store_true")
    ap.add_argument("--no-spline", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 renderings, one psf and sigma")
    args = ap.parse_args()
    if args.quick:
        args.renderings, args.psf, args.sigma, args.no_spline = 3, [1.0], [1.0], True
    shape = (args.size, args.size)
    rng = np.random.default_rng(args.seed)
    n = args.renderings
    transforms = []
    for _ in PAIRS:
        th_u = 2 * np.pi * np.arange(n) / n
        th_v = rng.permutation(th_u) + np.pi / n
        b = rng.uniform(-0.5, 0.5, (2, n, 2))
        transforms.append((np.column_stack([th_u, b[0]]), np.column_stack([th_v, b[1]])))
    print(
        f"{len(PAIRS)} pairs {PAIRS}, {n} renderings each + the upright one; "
        f"{args.size} px canvas, shapes {args.height:g} px, supersample {args.supersample}, "
        f"beta {args.beta:g}"
    )
    print(
        f"{'psf':>4} {'sigma':>5} {'objective/search':>17} {'max rel err':>12} {'median':>10} "
        f"{'max |dd2|':>10} {'median':>10} {'s':>6}"
    )
    for psf in args.psf:
        drawn = []
        for (a, b), (pu, pv) in zip(PAIRS, transforms, strict=True):
            oa, ob = outline(a, args.height), outline(b, args.height)
            kw = {"supersample": args.supersample, "psf": psf}
            drawn.append(
                (
                    np.concatenate([render(oa, shape, **kw), render(ob, shape, **kw)]),
                    render(oa, shape, pu, **kw),
                    render(ob, shape, pv, **kw),
                    pu,
                    pv,
                )
            )
        for sigma in args.sigma:
            searches = [
                (f"{kind} {interp}", replace(base, interpolation=interp))
                for kind, base in (("polar", SearchSettings()), ("dense", DENSE_REFERENCE))
                for interp in args.interpolation
                if not (kind == "dense" and args.no_dense)
            ]
            names = [n for n, _ in searches] + ([] if args.no_spline else ["scipy spline"])
            rows: dict[str, list] = {n: [] for n in names}
            floor = []
            secs = dict.fromkeys(rows, 0.0)
            for ref_pair, ru, rv, pu, pv in drawn:
                X = np.concatenate([ref_pair[None], np.stack([ru, rv], 1)])  # (1 + n, 2, H, W)
                d2 = {}
                opt = {}
                for name, settings in searches:
                    t0 = time.perf_counter()
                    res = [kappa_max(x, beta=args.beta, sigma=sigma, settings=settings) for x in X]
                    secs[name] += time.perf_counter() - t0
                    d2[name] = np.array([r.sqdist[0, 1] for r in res])
                    opt[name] = np.stack([r.params[0, 1] for r in res])
                if not args.no_spline:
                    t0 = time.perf_counter()
                    Xn = [normalize(smooth(x, sigma)) for x in X]
                    found = np.stack([d2[n] for n, _ in searches])  # (searches, 1 + n)
                    starts = np.stack([opt[n] for n, _ in searches])
                    best = starts[np.argmin(found, 0), np.arange(found.shape[1])]
                    d2["scipy spline"] = np.array(
                        [spline_d2(x[0], x[1], p) for x, p in zip(Xn, best, strict=True)]
                    )
                    secs["scipy spline"] += time.perf_counter() - t0
                for name, d in d2.items():
                    dd = d[1:] - d[0]
                    rows[name].append(np.column_stack([dd, np.expm1(-args.beta * dd)]))
                up = normalize(smooth(ref_pair, sigma))
                for k, (p_u, p_v) in enumerate(zip(pu, pv, strict=True)):
                    got = normalize(smooth(np.stack([ru[k], rv[k]]), sigma))
                    for img, ref, p in ((got[0], up[0], p_u), (got[1], up[1], p_v)):
                        floor.append(np.linalg.norm(img - spline_warp(ref, p, 5)))
            for name, r in rows.items():
                if not r:
                    continue
                r = np.concatenate(r)
                rel, dd = np.abs(r[:, 1]), np.abs(r[:, 0])
                print(
                    f"{psf:>4g} {sigma:>5g} {name:>17} {rel.max():>12.2e} {np.median(rel):>10.2e} "
                    f"{dd.max():>10.2e} {np.median(dd):>10.2e} {secs[name]:>6.0f}"
                )
            print(
                f"{psf:>4g} {sigma:>5g} {'data ||diff||':>17} {np.max(floor):>12.2e} "
                f"{np.median(floor):>10.2e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
