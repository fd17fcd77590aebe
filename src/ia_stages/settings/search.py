"""The kappa^max search's settings (:mod:`ia_stages.kmax.search` runs it) and its named values."""

from __future__ import annotations

from ia_stages.settings.spec import choice, integer, number, settings_part

SEARCH_METHODS = ("polar", "grid")
PEAK_RULES = ("envelope", "joint")
INTERPOLATIONS = ("bspline", "keys")
CANDIDATES_FROM = 2000  # images from which mode='auto' takes the candidates route


@settings_part("search")
class SearchSettings:
    """Settings of the global kappa^max search: a coarse scan proposes starting transforms per
    pair, a local Newton / Levenberg-Marquardt refinement finishes them
    (:func:`ia_stages.kmax.kappa_max`). The refinement's tolerances change results; their
    defaults are the tuned ones.

    Examples
    --------
    >>> SearchSettings(n_candidates=8).n_candidates
    8
    """

    method: str = choice(
        "polar",
        SEARCH_METHODS,
        "coarse scan: 'polar' = rotations about the image centroids for all pairs by matrix "
        "products; 'grid' = rotations x every integer shift by FFT (exhaustive in its window)",
    )
    n_angles: int = integer(36, "rotations of the coarse scan (evenly over 360 degrees)",
                            low=4, high=3600)  # fmt: skip
    max_shift: int | None = integer(
        None, "'grid' only: largest |shift| per axis (px); None = a third of the image",
        low=0, nullable=True,
    )  # fmt: skip
    coarse_sigma: float = number(
        1.0,
        "'grid' only: total Gaussian smoothing (px) of the images its scan sees (kappa^max's "
        "own sigma included)",
        low=0.0, high=10.0,
    )  # fmt: skip
    n_candidates: int = integer(3, "distinct rotations refined per pair", low=1, high=16)
    coarse_iters: int = integer(
        10,
        "Newton steps per candidate on 2 x 2 block means of the pair before candidates are "
        "ordered, pruned and refined at full resolution (0: order by the scan's starts)",
        low=0, high=500,
    )  # fmt: skip
    half_sigma: float = number(
        1.0,
        "total smoothing (px, kappa^max's own sigma included) of the images before the "
        "half-resolution stage's block means",
        low=0.0, high=10.0,
    )  # fmt: skip
    refine_iters: int = integer(30, "Levenberg-Marquardt iterations per smoothing level",
                                low=0, high=500)  # fmt: skip
    pair_chunk: int = integer(64, "pairs processed at once (memory only)", low=1, runtime=True)
    prune_kappa: float = number(
        1e-5,
        "a candidate whose kernel value cannot reach this nor beat the pair's best is not "
        "refined (the reported value then errs by less than this); 0 refines every candidate",
        low=0.0, high=1.0,
    )  # fmt: skip
    prune_margin: float = number(
        0.05, "the most refinement is taken to lower a candidate's squared distance", low=0.0
    )
    memory_mb: float = number(
        2048.0,
        "working memory (MB) of the scan and of the kNN modes' refinement layout; chunk sizes "
        "follow from it, results do not",
        low=0.0, low_open=True,
    )  # fmt: skip
    centre_offset: float = number(
        2.0,
        "'polar' only: > 0 also scans rotations about the points of a square lattice of this "
        "spacing (px) about each centroid (see centre_rings)",
        low=0.0,
    )  # fmt: skip
    refine_tol: float = number(
        1e-9, "a refinement stops once a step lowers the squared distance by less", low=0.0,
        high=1.0,
    )  # fmt: skip
    kappa_stop_fraction: float = number(
        0.1,
        "a refinement also stops where the Newton model promises the kernel value a rise "
        "below this fraction of prune_kappa",
        low=0.0,
    )  # fmt: skip
    coarse_d2_stop: float = number(
        1e-3,
        "the half-resolution stage also stops where the Newton model promises the squared "
        "distance a drop below this",
        low=0.0, high=1.0,
    )  # fmt: skip
    half_floor: float = number(
        1e-2,
        "the half-resolution targets drop their pixels below this fraction of their image's "
        "largest |value|",
        low=0.0, high=1.0,
    )  # fmt: skip
    half_gap: float = number(
        0.1,
        "with pruning on, starts whose half-resolution cost exceeds the pair's lowest by more "
        "than this are not evaluated at full resolution",
        low=0.0,
    )  # fmt: skip
    full_floor: float = number(
        1e-2,
        "with pruning on, full-resolution starts are ranked and refined on the targets' pixels "
        "of at least this fraction of their image's largest |value| (each pair's winner is then "
        "refined on all pixels)",
        low=0.0, high=1.0,
    )  # fmt: skip
    same_angle: float = number(
        1e-2, "half-resolution optima this close in angle (radians) and shift are one",
        low=0.0,
    )  # fmt: skip
    same_shift: float = number(
        5e-2, "half-resolution optima this close in shift (px) and angle are one", low=0.0
    )
    abandon: float = number(
        4.0,
        "a refinement that cannot beat its pair's best stops where the Newton model puts its "
        "optimum above that best even after this many times its promised drop",
        low=1.0,
    )  # fmt: skip
    lam0: float = number(
        1e-3, "initial Levenberg-Marquardt damping, relative to the Hessian's diagonal",
        low=0.0, low_open=True, high=1e6,
    )  # fmt: skip
    lam_reject: float = number(
        0.3, "least damping after a rejected step (it also rises 5x)", low=0.0, high=1e6
    )
    interpolation: str = choice(
        "bspline",
        INTERPOLATIONS,
        "how every warp of the search samples an image: 'bspline' = cubic B-spline on the "
        "image's spline coefficients (flat passband: kappa^max hardly depends on the angle an "
        "image was taken at); 'keys' = Keys cubic convolution (the paper's)",
    )
    centre_rings: int = integer(
        2,
        "'polar' only: the scan's centres are the lattice points within centre_rings x "
        "centre_offset of each centroid (1: the centroid and its 4 axis neighbours; 2: 13 "
        "points; 3: 29; 4: 49; the scan costs in proportion, a small part of the search)",
        low=1, high=8,
    )  # fmt: skip
    peaks: str = choice(
        "envelope",
        PEAK_RULES,
        "'polar' only: starts at the peaks over angle of the best centre ('envelope') or at the "
        "highest local maxima over angle and centre together ('joint')",
    )
    knn_margin: float = number(
        0.12,
        "kNN modes only: every pair whose coarse scan d2 lies within this (times the pair's "
        "mean squared norm) of a sample's k-th refined d2 is refined",
        low=0.0,
    )  # fmt: skip
    settle_shift: int = integer(
        0,
        "after the search (all pairs, the kNN routes' pairs), each pair is checked by an "
        "exhaustive scan of the "
        "half-resolution pair over settle_angles rotations x every shift within this (px, in "
        "steps of 2); where its starts may beat the pair's optimum (settle_margin), the "
        "refinement runs again from them (even image sizes); "
        "0: no check (the default: the check costs about 2.5x the search; 6 is the measured "
        "setting)",
        low=0, high=64,
    )  # fmt: skip
    settle_angles: int = integer(24, "rotations of the settling check's scan (evenly over "
                                 "360 degrees)", low=4, high=720)  # fmt: skip
    settle_starts: int = integer(6, "starts the settling check proposes per pair: its best "
                                 "rotations away from the pair's optimum", low=1,
                                 high=16)  # fmt: skip
    settle_sigma: float = number(
        1.0,
        "total Gaussian smoothing (px, kappa^max's own sigma included) of the images the "
        "settling check's scan sees, before their 2 x 2 block means",
        low=0.0, high=10.0,
    )  # fmt: skip
    settle_margin: float = number(
        0.1,
        "the settling check refines again from each of its starts away from the pair's "
        "optimum that it scores at most this much (d2) below the optimum's neighbourhood and "
        "that, by as much, promises the kernel value more than prune_kappa",
        low=0.0,
    )  # fmt: skip
    candidates_from: int = integer(
        CANDIDATES_FROM,
        "kappa_max(X, k=...) with mode='auto': the candidates route from this many images (or "
        "where the exact kNN scan does not fit memory_mb), the exact kNN scan below",
        low=2,
    )
    knn_pool: int = integer(
        64, "kNN modes only: scan candidates kept per sample (more within knn_margin cost a "
        "second scan)", low=1,
    )  # fmt: skip


# The brute-force reference (benchmark and tests only): a 1-degree rotation grid, every integer
# shift in the window, four candidates refined to convergence at full resolution.
DENSE_REFERENCE = SearchSettings(
    method="grid",
    n_angles=360,
    n_candidates=4,
    coarse_iters=0,
    refine_iters=60,
    pair_chunk=16,
    prune_kappa=0.0,
)

# The search that reaches the global optimum on (nearly) every pair, far ones included (beta = 2
# on rotated digits): rotations about a lattice of 49 centres up to 6 px from the centroids,
# starts at the 8 highest maxima over angle and centre, full-resolution ranking on the target
# pixels above 1e-3 of their largest (bench/kmax.py --exact measures it).
EXACT_SEARCH = SearchSettings(
    centre_offset=1.5, centre_rings=4, n_candidates=8, peaks="joint", full_floor=1e-3
)
