"""kappa^max over the similarity and affine groups (and mirrors): the refinement's objective,
symmetry, invariance on rendered shapes, and its CUDA build against the CPU build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest

from ia_stages.core.groups import make_group
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp
from ia_stages.data.render import letter, render
from ia_stages.kmax import kappa_max
from ia_stages.kmax.group_refine import refine_pairs
from ia_stages.settings import Settings

SHAPE = (32, 32)


def _renders():
    """'R' upright, 'R' under an affine map within the bounds, and 'F' (other shape)."""
    g = make_group("affine")
    p = np.array([[0.0, 0, 0, 0, 0, 0], [0.7, 0.6, -0.4, np.log(1.08), 0.08, 0.1]])
    R = render(letter("R", 16), SHAPE, params=p[:, :3], psf=1.0, linear=g.matrix(p))
    F = render(letter("F", 16), SHAPE, psf=1.0)
    return np.concatenate([R, F])


def test_refinement_objective_is_the_norm_preserving_distance():
    X = _renders()
    U = normalize(smooth(X, 2.0))
    g = make_group("affine", iters=0, half_iters=0)
    q = np.array([[0.3, 0.5, -0.2, np.log(1.1), -0.1, 0.2]])
    _, d2 = refine_pairs(U, U, np.array([0]), np.array([2]), q, g, "bspline")
    s = np.exp(q[0, 3])
    direct = np.sum((U[0] - s * warp(U[2:3], q, g, "bspline")[0]) ** 2)
    assert np.isclose(d2[0], direct, rtol=1e-5)


def test_the_floor_leaves_out_only_what_neither_image_reaches():
    """The refinement summed over the pixels where either image reaches the floor gives the
    all-pixel refinement's optimum and d2 (to the floor's share of the images), on letters
    rendered from their outlines under affine maps, from starts at any angle and shifted; a
    bad floor is one line naming the key."""
    g = make_group("affine")
    rng = np.random.default_rng(0)
    p = np.column_stack([rng.uniform(-np.pi, np.pi, 8), rng.uniform(-4, 4, (8, 2)),
                         rng.uniform(-0.15, 0.15, (8, 3))])  # fmt: skip
    X = np.concatenate([
        render(letter(c, 14), SHAPE, params=p[k : k + 1, :3], psf=1.0, linear=g.matrix(p[k]))
        for k, c in enumerate("RFPGRFPG")
    ])  # fmt: skip
    U = normalize(smooth(X, 1.0))
    ii, jj = np.triu_indices(len(U), 1)
    q0 = np.zeros((ii.size, 6))
    q0[:, 0] = rng.uniform(-np.pi, np.pi, ii.size)
    q0[:, 1:3] = rng.uniform(-3, 3, (ii.size, 2))
    q_all, d_all = refine_pairs(U, U, ii, jj, q0, make_group("affine", floor=0.0), "bspline")
    for floor in (1e-3, 1e-2):
        q_f, d_f = refine_pairs(U, U, ii, jj, q0, make_group("affine", floor=floor), "bspline")
        assert np.abs(d_f - d_all).max() < floor**2
        assert np.abs(q_f - q_all).max() < 1e-3
        # the reported d2 is the all-pixel objective at the optimum found
        every = make_group("affine", iters=0, half_iters=0, floor=0.0)
        _, direct = refine_pairs(U, U, ii, jj, q_f, every, "bspline")
        assert np.abs(d_f - direct).max() < floor**2
    with pytest.raises(ValueError, match=r"^group\.floor must be >= 0 and < 1"):
        make_group("affine", floor=1.0)


def test_a_map_beyond_the_bounds_is_refined_to_the_bounded_optimum():
    """Letters rendered from outlines under stretches and scalings beyond the group's bounds:
    within the default budget the refinement ends on the log-stretch's disk edge at a bounded
    local optimum -- SLSQP (scipy) on the same objective within the same bounds, started from
    the result, lowers d2 by no more than its own tolerance."""
    from scipy.optimize import minimize

    kw = {"shear": 0.1, "scale": (0.9, 1.1), "anisotropy": 1.2}
    g = make_group("affine", **kw)
    p = np.array([[0.0] * 6, [0.4, 0.8, -0.6, 0.2, 0.0, 0.3], [-0.5, -0.5, 0.7, -0.05, 0.15, -0.25],
                  [0.0] * 6, [1.0, 0.3, 0.2, 0.18, -0.2, 0.2]])  # fmt: skip
    X = np.concatenate([
        render(letter(c, 16), SHAPE, params=p[k : k + 1, :3], psf=1.0, linear=g.matrix(p[k]))
        for k, c in enumerate("RRRFF")
    ])  # fmt: skip
    U = normalize(smooth(X, 1.0))
    ii, jj = np.array([1, 2, 4]), np.array([0, 0, 3])
    q0 = np.zeros((3, 6))
    q0[:, :3] = p[ii, :3]
    q, d2 = refine_pairs(U, U, ii, jj, q0, g, "bspline")
    lo, hi, t_max = g.bounds.limits()
    np.testing.assert_allclose(np.hypot(q[:, 4], q[:, 5]), t_max)
    evaluate = make_group("affine", iters=0, half_iters=0, **kw)
    box = [(None, None)] * 3 + [(lo, hi), (-t_max, t_max), (-t_max, t_max)]
    disk = {"type": "ineq", "fun": lambda x: t_max**2 - x[4] ** 2 - x[5] ** 2}
    for k in range(3):

        def d2_at(x, k=k):
            pair = (ii[k : k + 1], jj[k : k + 1])
            return refine_pairs(U, U, *pair, x[None], evaluate, "bspline")[1][0]

        best = minimize(d2_at, q[k], method="SLSQP", bounds=box, constraints=[disk])
        assert np.isclose(d2_at(q[k]), d2[k], rtol=1e-9)
        assert best.fun > d2[k] - 1e-6


def test_affine_kappa_max_is_invariant_to_exact_rotations_of_either_image():
    """Rotations by multiples of 90 degrees are exact on the pixel grid: turning every second
    letter (rendered from its outline under an affine map within the bounds) changes the
    affine kappa^max of no pair beyond the search's accuracy. Bounds on a shear parameter
    failed this (by 1e-2): rotating the moving image changes a map's shear, not its singular
    values, which are what the bounds now hold."""
    from ia_stages.kmax import EXACT_SEARCH

    g = make_group("affine")
    rng = np.random.default_rng(3)
    lo, hi, t_max = g.bounds.limits()
    n = 6
    t = rng.uniform(-0.7, 0.7, (n, 2)) * t_max
    p = np.column_stack([rng.uniform(-np.pi, np.pi, n), rng.uniform(-0.5, 0.5, (n, 2)),
                         rng.uniform(lo, hi, n), t])  # fmt: skip
    X = np.concatenate([
        render(letter(c, 16), SHAPE, params=p[k : k + 1, :3], psf=1.0, linear=g.matrix(p[k]))
        for k, c in enumerate("FGRKPL")
    ])  # fmt: skip
    base = kappa_max(X, beta=2.0, group=g, settings=EXACT_SEARCH).value
    iu = np.triu_indices(n, 1)
    for turns in (1, 2, 3):
        Y = X.copy()
        Y[1::2] = np.rot90(X[1::2], turns, axes=(1, 2))
        got = kappa_max(Y, beta=2.0, group=g, settings=EXACT_SEARCH).value
        assert np.abs(got / base - 1.0)[iu].max() < 1e-6


def test_half_resolution_evaluations_first_find_the_affine_copy_for_fewer_full_ones():
    """half_iters: the first evaluations on 2 x 2 block means (translation halved about the
    centre: a wrong conversion would start the full-resolution stage off the copy); then 2
    full-resolution evaluations find the affine copy, within the bounds."""
    X = _renders()
    se2 = kappa_max(X[:2], beta=2.0)
    plain = kappa_max(X[:2], beta=2.0, group=make_group("affine", iters=2))
    g = make_group("affine", iters=2, half_iters=6)
    half = kappa_max(X[:2], beta=2.0, group=g)
    assert half.sqdist[0, 1] < 0.25 * se2.sqdist[0, 1]
    assert half.sqdist[0, 1] <= 1.01 * plain.sqdist[0, 1]
    np.testing.assert_array_equal(g.clip(half.params[0, 1]), half.params[0, 1])
    assert g.settings()["half_iters"] == 6
    with pytest.raises(ValueError, match=r"^group\.half_iters must be >= 0"):
        make_group("affine", half_iters=-1)


def test_images_of_an_odd_size_spend_the_half_resolution_budget_at_full_resolution():
    """Block means need even sizes: on 13 x 13 images the staged budget (6 on block means, 2
    at full resolution) is 8 evaluations at full resolution, and on 12 x 12 it is not."""
    rng = np.random.default_rng(3)
    for size, same in ((13, True), (12, False)):
        U = normalize(smooth(rng.random((3, size, size)) ** 4, 1.0))
        ii, jj = np.array([0, 1]), np.array([1, 2])
        q0 = np.zeros((2, 6))
        staged = refine_pairs(U, U, ii, jj, q0, make_group("affine", iters=2, half_iters=6))
        flat = refine_pairs(U, U, ii, jj, q0, make_group("affine", iters=8, half_iters=0))
        assert np.array_equal(staged[1], flat[1]) is same


@pytest.mark.slow
def test_affine_kappa_finds_the_affine_copy_and_is_symmetric():
    X = _renders()
    se2 = kappa_max(X, beta=2.0)
    out = {}
    for name in ("similarity", "affine"):
        g = make_group(name)
        res = kappa_max(X, beta=2.0, group=g)
        # the extra freedom can only lower d2 (it starts at the SE(2) optimum)
        assert np.all(res.sqdist <= se2.sqdist + 1e-6)
        # kappa(u, v) = kappa(v, u), searched in both directions separately
        ab = kappa_max(X[:1], X[1:2], beta=2.0, group=g)
        ba = kappa_max(X[1:2], X[:1], beta=2.0, group=g)
        assert abs(ab.value[0, 0] - ba.value[0, 0]) < 2e-3 * ab.value[0, 0]
        # the found maps invert each other
        back = g.compose(ab.params[0, 0], ba.params[0, 0])
        np.testing.assert_allclose(g.matrix(back), np.eye(2), atol=0.02)
        out[name] = res
    # the affine copy of 'R' is far closer under the affine group than under SE(2)
    assert out["affine"].sqdist[0, 1] < 0.25 * se2.sqdist[0, 1]
    # and still far from the other letter
    assert out["affine"].sqdist[0, 2] > 5 * out["affine"].sqdist[0, 1]


@pytest.mark.slow
def test_mirror_images_are_found_inside_kappa_max():
    R = render(letter("R", 16), SHAPE, psf=1.0)
    mirrored = R[:, :, ::-1]
    X = np.concatenate([R, mirrored])
    plain = kappa_max(X, beta=2.0, group=make_group("similarity"))
    g = make_group("similarity", mirror=True)
    res = kappa_max(X, beta=2.0, group=g)
    assert res.sqdist[0, 1] < 1e-3 < plain.sqdist[0, 1]
    assert res.params[0, 1, -1] == 1.0  # the mirror flag
    # the found map, applied by the warp, reproduces the target
    U = normalize(smooth(X, 2.0))
    w = warp(U[1:2], res.params[0, 1][None], g)[0] * g.scale(res.params[0, 1])
    assert np.sum((U[0] - w) ** 2) < 2e-3


def _letters_and_mirrors(n: int) -> np.ndarray:
    """``n`` renders of 'R' and 'F' at random angles and shifts, every third one mirrored."""
    rng = np.random.default_rng(5)
    p = np.column_stack([rng.uniform(0, 2 * np.pi, n), rng.uniform(-1, 1, (n, 2))])
    X = np.concatenate([render(letter("RF"[k % 2], 14), SHAPE, params=p[k : k + 1], psf=1.0)
                        for k in range(n)])  # fmt: skip
    X[::3] = X[::3, :, ::-1]
    return X


def test_the_joint_mirror_search_keeps_the_better_of_the_plain_and_the_mirror_search():
    """kappa_max_with_mirrors searches each pair i < j (by blocks of the upper triangle when
    the memory budget asks for blocks; with the polar or the grid scan) against U[j] and its
    mirror image at once: its d2 is the lower of the separate searches' (U against U, U
    against its mirror images) up to the refinement's tolerance, the winner's side is the
    flag, and j <= i stays +inf."""
    from dataclasses import replace

    from ia_stages.core.smoothing import smooth_normalize
    from ia_stages.kmax.search import _images_per_block, kappa_max_all_pairs, kappa_max_with_mirrors
    from ia_stages.settings.search import SearchSettings

    X = _letters_and_mirrors(10)
    plain = kappa_max_all_pairs(X, beta=2.0, sigma=2.0)
    mirror = kappa_max_all_pairs(X, X[..., ::-1], beta=2.0, sigma=2.0)
    upper = np.triu(np.ones((10, 10), dtype=bool), k=1)
    small = replace(SearchSettings(), memory_mb=1.0)
    assert _images_per_block(smooth_normalize(X, 2.0, "unit"), X, small, mirror=True) < 10
    lower = np.minimum(plain.sqdist, mirror.sqdist)
    wins = mirror.sqdist < plain.sqdist
    # the grid scan's starts of both sides, against its own searches apart
    grid = replace(SearchSettings(), method="grid", n_angles=36)
    on_grid = [kappa_max_all_pairs(X[:6], W, beta=2.0, sigma=2.0, settings=grid).sqdist
               for W in (None, X[:6, :, ::-1])]  # fmt: skip
    _, grid_d2, _ = kappa_max_with_mirrors(X[:6], beta=2.0, settings=grid, sigma=2.0)
    six = upper[:6, :6]
    np.testing.assert_allclose(grid_d2[six], np.minimum(*on_grid)[six], rtol=1e-6, atol=1e-8)
    for settings in (SearchSettings(), small):
        params, sqdist, flipped = kappa_max_with_mirrors(X, beta=2.0, settings=settings, sigma=2.0)
        np.testing.assert_allclose(sqdist[upper], lower[upper], rtol=1e-6, atol=1e-8)
        clear = upper & (np.abs(plain.sqdist - mirror.sqdist) > 1e-3)  # not a near tie
        assert clear.sum() > 30 and wins[clear].any() and (~wins[clear]).any()
        np.testing.assert_array_equal(flipped[clear], wins[clear])
        side = np.where(wins[..., None], mirror.params, plain.params)
        np.testing.assert_allclose(params[clear], side[clear], atol=1e-4)
        assert np.all(np.isinf(sqdist[~upper])) and not flipped[~upper].any()
    # a rectangular search: every pair, against V and its mirror images
    params, sqdist, flipped = kappa_max_with_mirrors(X[:4], X[4:], beta=2.0, sigma=2.0)
    np.testing.assert_allclose(sqdist, lower[:4, 4:], rtol=1e-6, atol=1e-8)


def test_se2_with_mirrors_keeps_the_searches_optima():
    """SE(2) with mirrors has nothing to refine beyond the searches: where the mirror does not
    win, d2 is the SE(2) kappa^max's; where it wins (the mirrored renders), d2 is lower."""
    X = _letters_and_mirrors(9)
    plain = kappa_max(X, beta=2.0)
    res = kappa_max(X, beta=2.0, group=make_group("se2", mirror=True))
    flag = res.params[..., -1] == 1.0
    np.testing.assert_array_equal(res.sqdist[~flag], plain.sqdist[~flag])
    assert flag.any() and np.all(res.sqdist[flag] < plain.sqdist[flag])
    same = np.array([k % 3 == 0 for k in range(9)])
    letter_of = np.arange(9) % 2
    # an R and a mirrored R: the mirror wins
    i, j = np.flatnonzero(same & (letter_of == 0))[0], np.flatnonzero(~same & (letter_of == 0))[0]
    assert flag[i, j] and res.sqdist[i, j] < 0.25 * plain.sqdist[i, j]


def test_candidate_mode_lists_under_the_group_are_the_exact_modes_on_a_small_set():
    """The candidate kNN mode takes a group: its SE(2) lists (on 12 renders, c is sized to
    n - 1, so every pair) are refined over the group and re-ranked as the exact mode's are."""
    from ia_stages.kmax import EXACT_SEARCH
    from ia_stages.settings.features import FeatureSettings

    g = make_group("affine")
    rng = np.random.default_rng(0)
    p = np.column_stack([rng.uniform(0, 2 * np.pi, 6), rng.uniform(-1, 1, (6, 2))])
    X = np.concatenate([render(letter(ch, 16), SHAPE, params=p, psf=1.0) for ch in "RF"]).astype(
        float
    )
    exact = kappa_max(X, beta=2.0, group=g, k=4, settings=EXACT_SEARCH)
    cand = kappa_max(X, beta=2.0, group=g, k=4, mode="candidates", settings=EXACT_SEARCH)
    np.testing.assert_allclose(cand.sqdist, exact.sqdist, atol=1e-9)
    assert np.array_equal(cand.indices, exact.indices)
    se2 = kappa_max(X, beta=2.0, k=4, mode="candidates")
    assert np.all(cand.sqdist[:, 1:].sum(1) <= se2.sqdist[:, 1:].sum(1) + 1e-9)
    few = FeatureSettings(n_candidates=4, n_expand=0)  # the candidates bound the pairs refined
    small = kappa_max(X, beta=2.0, group=g, k=4, mode="candidates", features=few)
    assert small.pairs_refined <= 4 * len(X) < exact.pairs_scanned
    with pytest.raises(ValueError, match="mode must be one of"):
        kappa_max(X, beta=2.0, group=g, k=4, mode="nearest")


def test_bad_group_requests_name_the_key():
    from ia_stages.kmax.knn import kappa_max_knn
    from ia_stages.kmax.pair_refinement import refine_pairs as refine_candidates

    X = _renders()
    with pytest.raises(ValueError, match=r"^group: the kNN scan searches SE\(2\)"):
        kappa_max_knn(X, 2, group=make_group("affine", mirror=True))
    with pytest.raises(ValueError, match=r"^group: the candidate mode searches SE\(2\)"):
        refine_candidates(X, np.arange(3), np.array([[1], [2], [0]]), 2,
                          group=make_group("similarity"))  # fmt: skip


@pytest.mark.parametrize("pool", [64, 2])
def test_the_exact_knn_mode_searches_mirror_images(pool):
    """``mode='exact'`` (the all-pairs kNN reference) with a group holding mirror images: its
    lists, d2 and params (mirror flag last) are the dense joint search's nearest, also where
    small pools make it scan a second time; over similarity with mirrors they are refined
    further."""
    from ia_stages.kmax import SearchSettings
    from ia_stages.kmax.neighbours import knn_from_dense

    X = _letters_and_mirrors(24)
    g = make_group("se2", mirror=True)
    dense = kappa_max(X, beta=2.0, group=g)
    ref = knn_from_dense(dense.sqdist, 5)
    knn = kappa_max(X, beta=2.0, group=g, k=5, settings=SearchSettings(knn_pool=pool))
    assert (knn.second_scan > 0) == (pool == 2)
    np.testing.assert_array_equal(knn.indices, ref.indices)
    np.testing.assert_allclose(knn.sqdist, ref.sqdist, atol=1e-9)
    listed = np.take_along_axis(dense.params, knn.indices[..., None], 1)
    np.testing.assert_allclose(knn.params, listed, atol=1e-9)
    assert knn.params[..., -1].any()
    sim = kappa_max(X, beta=2.0, group=make_group("similarity", mirror=True), k=5)
    assert sim.params.shape == (24, 5, 5) and np.all(sim.sqdist <= knn.sqdist + 1e-9)


@pytest.mark.parametrize("width", [32, 31])
def test_mirror_invariant_features_are_equal_for_an_image_and_its_mirror_image(width):
    """With ``mirror=True`` the invariant features (both families: amplitude-spectrum rings
    and rings about the centroid) of an image and of its mirror image are equal, on an even
    and an odd frame; the plain features tell them apart."""
    from ia_stages.core.smoothing import smooth_normalize
    from ia_stages.kmax.features import invariant_features
    from ia_stages.settings.features import FeatureSettings

    X = smooth_normalize(_letters_and_mirrors(6)[:, :, :width], 2.0, "unit")
    fs = FeatureSettings(n_dims=0)
    both = np.concatenate([X, X[..., ::-1]])
    F = invariant_features(both, fs, mirror=True)
    np.testing.assert_allclose(F[:6], F[6:], atol=1e-6)
    plain = invariant_features(both, fs)
    assert np.abs(plain[:6] - plain[6:]).max(1).min() > 1e-2


def test_the_candidate_mode_searches_mirror_images():
    """``mode='candidates'`` with a group holding mirror images (c well below n): every
    listed pair's d2 and flag are the all-pairs joint search's, the lists hold only the
    image's own letter, each as near as the all-pairs lists' farthest, and a pair is flipped
    exactly where one of its two renders was mirrored; the params, applied by the warp,
    reproduce the target. The same group over similarity refines those lists further."""
    from ia_stages.core.smoothing import smooth_normalize
    from ia_stages.kmax import EXACT_SEARCH
    from ia_stages.kmax.neighbours import knn_from_dense
    from ia_stages.settings.features import FeatureSettings

    rng = np.random.default_rng(2)
    n = 36
    p = np.column_stack([rng.uniform(0, 2 * np.pi, n), rng.uniform(-1, 1, (n, 2))])
    text = "RFPG"
    X = np.concatenate([render(letter(text[k % 4], 14), SHAPE, params=p[k : k + 1], psf=1.0)
                        for k in range(n)])  # fmt: skip
    side = rng.random(n) < 0.5
    X[side] = X[side, :, ::-1]
    g = make_group("se2", mirror=True)
    fs = FeatureSettings(n_candidates=10, n_expand=4)
    res = kappa_max(X, beta=2.0, group=g, k=6, mode="candidates", features=fs)
    dense = kappa_max(X, beta=2.0, group=g, settings=EXACT_SEARCH)
    ref = knn_from_dense(dense.sqdist, 6)
    nb = res.indices[:, 1:]
    rows = np.arange(n)[:, None]
    np.testing.assert_allclose(res.sqdist[:, 1:], dense.sqdist[rows, nb], atol=1e-6)
    assert res.pairs_refined < 0.5 * n * (n - 1) / 2
    assert np.all(nb % 4 == rows % 4)
    assert np.all(res.sqdist[:, -1] <= ref.sqdist[:, -1] + 1e-6)
    flipped = res.params[:, 1:, -1] == 1
    np.testing.assert_array_equal(flipped, side[:, None] != side[nb])
    assert flipped.any() and (~flipped).any()
    U = smooth_normalize(X, 2.0, "unit")
    for i, c in [(0, 1), (5, 3), (17, 5)]:
        j = nb[i, c - 1]
        w = warp(U[j : j + 1], res.params[i, c][None], g)[0]
        assert abs(np.sum((U[i] - w) ** 2) - res.sqdist[i, c]) < 1e-3
    sim = kappa_max(X, beta=2.0, group=make_group("similarity", mirror=True), k=6,
                    mode="candidates", features=fs)  # fmt: skip
    assert sim.params.shape == (n, 6, 5) and np.all(sim.sqdist <= res.sqdist + 1e-9)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


SIMULATED = textwrap.dedent(
    """
    import json
    import numpy as np
    from numba import config
    from ia_stages.core.groups import make_group
    from ia_stages.core.smoothing import normalize, smooth
    from ia_stages.kmax.cuda import group_refine_cuda
    from ia_stages.kmax.group_refine import refine_in_stages, refine_pairs

    assert config.ENABLE_CUDASIM
    X = np.zeros((3, 12, 12))
    X[0, 2:9, 4:7] = 1.0
    X[0, 2:4, 4:10] = 1.0
    X[1, 3:10, 2:8] = 1.0
    X[2] = X[0].T[::-1]
    U = normalize(smooth(X, 1.0))
    ii, jj = np.array([0, 1]), np.array([2, 0])
    q0 = np.array([[0.1, 0.2, -0.3, 0.05, 0.02, 0.01], [-0.2, 0.0, 0.4, 0.0, 0.0, 0.0]])
    g = make_group("affine", iters=4, half_iters=3)  # both stages: block means, then full
    qc, cc = refine_pairs(U, U, ii, jj, q0, g)
    run = lambda A, B, q, s: group_refine_cuda(A, B, ii, jj, q, s)
    qg, cg = (np.asarray(a) for a in refine_in_stages(run, U, U, q0, g))
    print(json.dumps({"cost": float(np.abs(cc - cg).max()),
                      "params": float(np.abs(qc - qg).max()),
                      "moved": float(np.abs(qc - q0).max())}))
    """
)


@pytest.mark.slow
def test_group_refinement_cuda_build_in_the_simulator_equals_the_cpu_build():
    proc = _run(SIMULATED, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["moved"] > 1e-2  # the refinement did something
    assert r["cost"] < 1e-9 and r["params"] < 1e-7, r


PTX = textwrap.dedent(
    """
    import types
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types as nt
    from ia_stages.kmax.cuda import _group_kernel

    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    f64, i64 = nt.float64, nt.int64

    def a(dtype, ndim):
        return nt.Array(dtype, ndim, "C")

    sig = (a(i64, 1), a(i64, 1), a(f64, 2), a(nt.float32, 2), a(f64, 2), a(f64, 2),
           a(f64, 2), a(f64, 1), a(i64, 1), a(f64, 2), i64,
           nt.UniTuple(f64, 3), i64, f64, f64, nt.UniTuple(f64, 16), a(f64, 4), a(f64, 2),
           a(f64, 1))
    ptx, _ = cuda.compile_ptx(_group_kernel().py_func, sig, cc=(9, 0))
    print(len(ptx), ".entry" in ptx)
    """
)


def _nvvm_available() -> bool:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvvm")
        load_nvidia_dynamic_lib("nvrtc")
    except Exception:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _nvvm_available(), reason="NVVM / NVRTC not installed (pip: nvidia-nvvm)")
def test_group_refinement_compiles_to_ptx_for_a_real_gpu():
    proc = _run(PTX)
    assert proc.returncode == 0, proc.stderr[-3000:]
    length, has_entry = proc.stdout.split()[-2:]
    assert int(length) > 5_000 and has_entry == "True"


@pytest.mark.slow
def test_invariant_mean_under_the_affine_group_aligns_affine_copies():
    """Affinely rendered copies of one letter: started from kappa^max's alignments onto the
    first, the affine group's invariant mean fits them far better than SE(2)'s, keeps its
    parameters within the bounds, and its class average sits close to every copy."""

    from ia_stages.ia.class_averages import class_averages
    from ia_stages.ia.invariant_mean import invariant_mean
    from ia_stages.settings.attention import MeanSettings

    rng = np.random.default_rng(3)
    g = make_group("affine")
    n = 6
    p = np.zeros((n, 6))
    p[:, 0] = rng.uniform(-np.pi, np.pi, n)
    p[:, 1:3] = rng.uniform(-1, 1, (n, 2))
    p[1:, 3] = rng.uniform(-0.1, 0.1, n - 1)
    p[1:, 4] = rng.uniform(-0.1, 0.1, n - 1)
    p[1:, 5] = rng.uniform(-0.12, 0.12, n - 1)
    X = render(letter("R", 16), SHAPE, params=p[:, :3], psf=1.0, linear=g.matrix(p))
    U = normalize(smooth(X, 2.0))
    settings = MeanSettings(steps=30)
    finals = {}
    for name in ("se2", "affine"):
        group = make_group(name)
        km = kappa_max(X, beta=2.0, group=group)
        res = invariant_mean(U, np.ones(n), km.params[0], settings, group)
        assert res.objective[-1] <= res.objective[0]
        finals[name] = res.objective[-1]
        if name == "affine":
            clipped = group.clip(res.params)
            np.testing.assert_allclose(res.params, clipped)
            tree = {"beta": 2.0, "sigma": 2.0, "mean": settings, "group": group}
            ia = Settings.from_dict(tree)  # the estimator's tree with this group
            ca = class_averages(X, np.zeros(n, int), km, ia)
            assert ca.distance.max() < 0.15
    assert finals["affine"] < 0.3 * finals["se2"]


@pytest.mark.slow
def test_estimator_takes_the_group():
    from ia_stages import InvariantAttentionClustering

    g = make_group("similarity")
    rng = np.random.default_rng(5)
    p = np.zeros((12, 6))
    p[:, 0] = rng.uniform(-np.pi, np.pi, 12)
    p[:, 3] = rng.uniform(-0.1, 0.1, 12)
    shapes = [letter(c, 16) for c in "RRRRRRFFFFFF"]
    X = render(shapes, SHAPE, params=p[:, :3], psf=1.0, linear=make_group("affine").matrix(p))
    est = InvariantAttentionClustering(2, group=g, random_state=0).fit(X)
    assert est.poses_.shape == (12, 4)  # (theta, b0, b1, log_scale)
    assert est.kmax_.params.shape[-1] == 4
    with pytest.raises(ValueError, match="'group' parameter of InvariantAttentionClustering"):
        InvariantAttentionClustering(2, group="projective").fit(X)
    with pytest.raises(ValueError, match=r"^group\.name must be one of"):
        InvariantAttentionClustering(2, group={"name": "projective"}).fit(X)


def test_the_mirror_images_scan_spectra_are_the_conjugate_rings_about_mirrored_centres():
    """The polar scan's set-up with mirrors takes the mirror images' ring spectra from the
    images' own (conjugated, about the mirrored centre lattice) instead of sampling them:
    the same spectra and centroids as a scan of the images and their mirror images, on an
    odd, non-square frame and on the exact search's 49-centre lattice."""
    from ia_stages.core.smoothing import smooth_normalize
    from ia_stages.kmax.search import PolarScan
    from ia_stages.settings.search import EXACT_SEARCH, SearchSettings

    X = smooth_normalize(_letters_and_mirrors(6)[:, 1:, 2:], 2.0, "unit")
    for settings in (SearchSettings(), EXACT_SEARCH):
        joint = PolarScan(X, X, settings, mirror=True)
        sampled = PolarScan(X, np.concatenate([X, X[..., ::-1]]), settings)
        assert joint.B_v.shape == sampled.B_v.shape and joint.n_o == sampled.n_o
        scale = np.abs(sampled.B_v).max()
        assert np.abs(joint.B_v - sampled.B_v).max() < 1e-6 * scale
        np.testing.assert_allclose(joint.m_v, sampled.m_v, atol=1e-12)
        np.testing.assert_allclose(joint.A_u, sampled.A_u, atol=1e-6 * scale)


def test_the_mirror_images_layout_is_the_images_layout_reversed():
    """The compiled search's layout with mirrors (moving images, then their mirror images, at
    full and half resolution) takes the mirror images' prefiltered pixels from the images' own,
    reversed: the same pixels (to float32 rounding) and norms as laying out the mirrored
    images themselves."""
    from ia_stages.core.smoothing import smooth_normalize
    from ia_stages.kmax.refine import _pair_layout
    from ia_stages.settings.search import EXACT_SEARCH

    Un = smooth_normalize(_letters_and_mirrors(5), 1.0, "unit")
    V = Un[1:]
    for interpolation in ("bspline", "keys"):
        settings = replace(EXACT_SEARCH, interpolation=interpolation)
        joint = _pair_layout(Un, V, 1.0, settings, mirror=True)
        laid = _pair_layout(Un, np.concatenate([V, V[..., ::-1]]), 1.0, settings)
        for a, b in zip(joint.resolutions(), laid.resolutions(), strict=True):
            low_a = a.V.view(np.float32)[:, 0::2]  # each int64 word: pixel k in its low half
            low_b = b.V.view(np.float32)[:, 0::2]
            assert low_a.shape == low_b.shape == (8, low_a.shape[1])
            np.testing.assert_allclose(low_a, low_b, rtol=0, atol=1e-6 * np.abs(low_b).max())
            np.testing.assert_allclose(a.vv, b.vv, rtol=1e-12)
            np.testing.assert_array_equal(a.off, b.off)


def test_mirror_candidates_need_a_layout_with_mirror_images():
    """Candidates of mirror images read rows n_j on of the moving layout: asked of a layout
    made without them, or with n_plain out of range, the search stops with one line instead
    of warping the wrong images."""
    from ia_stages.kmax.refine import RefinePolicy, pair_images, search_pairs

    X = _letters_and_mirrors(3)
    ii, jj, starts = np.array([0]), np.array([1]), np.zeros((1, 4, 3))
    with pytest.raises(ValueError, match="no mirror images"):
        search_pairs(pair_images(X, X), ii, jj, starts, 1.0, RefinePolicy(), n_plain=2)
    with pytest.raises(ValueError, match=r"n_plain must be in 0\.\.4"):
        search_pairs(pair_images(X, X, mirror=True), ii, jj, starts, 1.0, RefinePolicy(),
                     n_plain=5)  # fmt: skip
    won = np.empty(1, bool)
    _, d2 = search_pairs(pair_images(X, X, mirror=True), ii, jj, starts, 1.0, RefinePolicy(),
                         n_plain=2, mirrored=won)  # fmt: skip
    assert np.isfinite(d2).all()
