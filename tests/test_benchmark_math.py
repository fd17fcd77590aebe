"""The benchmark's methods and theory checks against what they should do, on tiny arrays."""

from __future__ import annotations

import numpy as np
import pytest

from ia_stages.benchmark import metrics as M
from ia_stages.benchmark.baselines import kmeans_pixels, kmedoids, ti_kmeans
from ia_stages.benchmark.theory import (
    invariance_error,
    random_transforms,
    restart_inits,
    restart_spread,
)
from ia_stages.core.smoothing import normalize
from ia_stages.data import datasets
from ia_stages.kmax import SearchSettings, kappa_max
from ia_stages.kmax.grid import GridSettings, group_kernel
from ia_stages.readout.graph import spectral_affinity
from ia_stages.settings.attention import MeanSettings

SEARCH = SearchSettings(n_angles=24, refine_iters=10)
GRID = GridSettings(n_angles=24, max_shift=6)
MEAN = MeanSettings(steps=6)


@pytest.fixture(scope="module")
def rotated_shapes():
    """Three base shapes, four copies each, rotated anywhere on the circle (32 px)."""
    rng = np.random.default_rng(3)
    d = datasets.shapes3(n_per_class=4, size=32, rotation_deg=(-180, 180), shift_px=(2, 2), rng=rng)
    km = kappa_max(d.data, beta=30.0, settings=SEARCH, sigma=1.0)
    return d.data, d.label, km


def test_ti_kmeans_recovers_rotated_shapes_where_pixel_kmeans_does_not(rotated_shapes):
    X, y, km = rotated_shapes
    pixel = M.accuracy(y, kmeans_pixels(X, 3, seed=0))
    res = ti_kmeans(
        X, 3, np.random.default_rng(0), 30.0, "unit", 1.0, SEARCH, MEAN, 5, n_init=3, kmax0=km
    )
    assert M.accuracy(y, res.labels) == 1.0
    assert pixel < 0.9
    assert res.prototypes.shape == (3, 32, 32)
    assert res.objective[-1] <= res.objective[0] + 1e-9  # assignments never got worse


def test_ti_kmeans_first_assignment_from_stored_kmax_equals_a_fresh_search(rotated_shapes):
    X, _y, km = rotated_shapes
    kw = {
        "beta": 30.0,
        "normalization": "unit",
        "sigma": 1.0,
        "search": SEARCH,
        "mean_settings": MEAN,
    }
    a = ti_kmeans(X, 3, np.random.default_rng(5), iterations=1, kmax0=km, **kw)
    b = ti_kmeans(X, 3, np.random.default_rng(5), iterations=1, **kw)
    # the same quantity; the stored matrix searched V[j] onto V[i] for i < j, the fresh search
    # the other way for half the pairs, so they agree up to the coarse search's accuracy
    np.testing.assert_allclose(a.objective[0], b.objective[0], rtol=0.1)


def test_kmedoids_medoids_minimise_within_cluster_cost():
    rng = np.random.default_rng(0)
    P = np.concatenate([rng.normal(c, 0.5, (15, 2)) for c in ((0, 0), (5, 0), (0, 5))])
    D = np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1))
    res = kmedoids(D, 3, np.random.default_rng(1))
    for k, m in enumerate(res.medoids):
        members = np.flatnonzero(res.labels == k)
        assert m in members
        costs = D[np.ix_(members, members)].sum(1)
        assert costs[list(members).index(m)] == pytest.approx(costs.min())
    assert np.array_equal(res.labels, np.argmin(D[:, res.medoids], axis=1))
    assert res.cost == pytest.approx(D[np.arange(len(P)), res.medoids[res.labels]].sum())
    assert M.accuracy(np.repeat(np.arange(3), 15), res.labels) == 1.0


def test_spectral_on_kmax_separates_rotated_shapes(rotated_shapes):
    _X, y, km = rotated_shapes
    assert M.accuracy(y, spectral_affinity(km.value, 3, seed=0)) == 1.0


def test_soft_max_interpolates_between_average_and_grid_maximum(rotated_shapes):
    X, _, km = rotated_shapes
    kw = {"beta": 30.0, "sigma": 1.0, "grid": GRID}
    avg = group_kernel(X, pooling="avg", **kw)
    soft1 = group_kernel(X, pooling="soft", temperature=1.0, **kw)
    cold = group_kernel(X, pooling="soft", temperature=1e-4, **kw)
    warm = group_kernel(X, pooling="soft", temperature=0.1, **kw)
    np.testing.assert_allclose(soft1.value, avg.value, rtol=1e-10)
    # power means grow as T falls: avg <= soft_T <= grid max; kappa^max refines beyond the grid
    assert np.all(avg.value <= warm.value * (1 + 1e-9))
    assert np.all(warm.value <= cold.value * (1 + 1e-9))
    assert np.all(km.sqdist <= cold.sqdist + 5e-3)
    np.testing.assert_allclose(cold.value, cold.value.T, rtol=1e-12)
    assert np.all(avg.sqdist >= km.sqdist - 1e-9)


def test_grid_kernel_of_given_V_matches_the_symmetric_upper_triangle(rotated_shapes):
    X = rotated_shapes[0][:5]
    sym = group_kernel(X, beta=30.0, pooling="avg", sigma=1.0, grid=GRID)
    part = group_kernel(X[:2], X[2:], beta=30.0, pooling="avg", sigma=1.0, grid=GRID)
    np.testing.assert_allclose(part.value, sym.value[:2, 2:], rtol=1e-12)


def test_kmax_is_invariant_and_kavg_only_approximately(rotated_shapes):
    X = rotated_shapes[0][[0, 4, 8]]
    taus = random_transforms(np.random.default_rng(7), 3, max_shift=2.0)

    def kmax(F):
        return kappa_max(F, beta=30.0, settings=SEARCH, sigma=1.0)

    def kavg(F):
        return group_kernel(F, beta=30.0, pooling="avg", sigma=1.0, grid=GRID)

    e_max = invariance_error(X, kmax, taus).max_abs_sqdist
    e_avg = invariance_error(X, kavg, taus).max_abs_sqdist
    assert e_max < 0.02
    assert e_avg > 0.02 and e_avg > 2 * e_max


def test_invariant_mean_restarts_of_one_class_land_on_one_manifold(rotated_shapes):
    X, y, km = rotated_shapes
    V = X[y == 0]
    W = np.ones(len(V)) / len(V)
    sub = km.params[np.ix_(np.flatnonzero(y == 0), np.flatnonzero(y == 0))]
    inits = restart_inits(sub, W, 0, 3, np.random.default_rng(0))
    assert inits.shape == (3, len(V), 3)
    assert not np.allclose(inits[0], inits[1])

    def dist(F):
        return kappa_max(F, beta=1.0, settings=SEARCH, sigma=1.0)

    res = restart_spread(V, W, inits, dist, MEAN)
    assert res.means.shape == (3, 32, 32)
    # another class's invariant mean, for scale: restarts agree far better than classes do
    other = restart_spread(X[y == 1], W, inits[:1], dist, MEAN).means[0]
    between = np.sqrt(dist(np.stack([res.means[0], other])).sqdist[0, 1])
    assert res.max_distance < 0.1 and res.max_distance < 0.25 * between


def test_group_kernel_equals_its_definition_on_a_small_grid():
    """kappa^avg / kappa^soft against explicit warps: every rotation of v, every shift k in the
    window, d2 = |u|^2 + |v|^2 - 2 sum_x u(x) v_r(x + k) (zero outside the image)."""
    from ia_stages.core.warp import warp

    rng = np.random.default_rng(2)
    X = rng.random((2, 12, 12)) * (rng.random((2, 12, 12)) > 0.6)
    grid = GridSettings(n_angles=4, max_shift=3)
    beta, T = 4.0, 0.3
    u, v = normalize(X)
    rots = warp(np.stack([v] * 4), np.array([[a * np.pi / 2, 0.0, 0.0] for a in range(4)]))
    pad = np.pad(rots, ((0, 0), (3, 3), (3, 3)))
    d2 = []
    for r in range(4):
        for dy in range(-3, 4):
            for dx in range(-3, 4):
                w = pad[r, 3 + dy : 15 + dy, 3 + dx : 15 + dx]  # w(x) = v_r(x + k)
                d2.append((u**2).sum() + (v**2).sum() - 2 * (u * w).sum())
    k = np.exp(-beta * np.maximum(np.array(d2), 0.0))
    avg = group_kernel(X[:1], X[1:], beta=beta, sigma=0.0, pooling="avg", grid=grid)
    soft = group_kernel(
        X[:1], X[1:], beta=beta, sigma=0.0, pooling="soft", temperature=T, grid=grid
    )
    np.testing.assert_allclose(avg.value[0, 0], k.mean(), rtol=1e-5)  # float32 FFTs
    np.testing.assert_allclose(soft.value[0, 0], np.mean(k ** (1 / T)) ** T, rtol=1e-5)
