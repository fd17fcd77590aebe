"""Invariant mean (Algorithm 1): gradients, recovery of a base image, greedy smoothing."""

import numpy as np
import pytest

from ia_stages.core.groups import SE2
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp, warp_with_jacobian
from ia_stages.data.base_shapes import draw_base_shapes
from ia_stages.ia.invariant_mean import _direction, _objective, invariant_mean
from ia_stages.kmax import kappa_max
from ia_stages.settings.attention import MeanSettings

G = SE2()


@pytest.fixture(scope="module")
def seven():
    return normalize(draw_base_shapes(64)["seven"][None])[0]


def smoothed_objective(V, w, tau, mu, sigma):
    r = smooth(warp(V, tau) - mu, sigma)
    return float((w * (r * r).reshape(len(V), -1).sum(1)).sum())


@pytest.mark.parametrize("sigma", [0.0, 1.5])
def test_plain_gradient_matches_finite_differences(seven, sigma):
    """'none' preconditioner returns grad_tau f_sigma(tau; mu) with mu held fixed (eq. 2.7)."""
    rng = np.random.default_rng(0)
    V = warp(np.stack([seven] * 3), G.sample(rng, 3, (-30, 30), (3, 3)))
    w = np.array([0.5, 0.3, 0.2])
    tau = G.sample(rng, 3, (-10, 10), (1, 1))
    mu = smooth(seven, 1.0)
    warped, jac = warp_with_jacobian(V, tau)
    grad = _direction(w, warped - mu, jac, sigma, "none")
    eps = 1e-6
    for i in range(3):
        for k in range(3):
            d = np.zeros_like(tau)
            d[i, k] = eps
            fd = (
                smoothed_objective(V, w, tau + d, mu, sigma)
                - smoothed_objective(V, w, tau - d, mu, sigma)
            ) / (2 * eps)
            assert grad[i, k] == pytest.approx(fd, rel=1e-4, abs=1e-9)


def test_mean_of_transformed_copies_is_the_image_up_to_a_transform(seven):
    rng = np.random.default_rng(1)
    V = warp(np.stack([seven] * 6), G.sample(rng, 6, (-65, 65), (6, 6)))
    init = kappa_max(V[:1], V, beta=1.0, sigma=0.0).params[0]  # align every copy onto the first
    res = invariant_mean(V, np.ones(6), init)
    # the mean lies on the manifold of the base image: kappa^max distance ~ 0 (up to the blur
    # of interpolation, which the kernel's smoothing hides), far below another shape's distance
    d2 = kappa_max(np.stack([res.mean, seven]), beta=1.0, sigma=2.0).sqdist[0, 1]
    crab = draw_base_shapes(64)["crab"]
    other = kappa_max(np.stack([res.mean, crab]), beta=1.0, sigma=2.0).sqdist[0, 1]
    assert d2 < 5e-4 and other > 0.1
    # and every tau_i maps copy i onto the same pose, so the objective is tiny
    assert res.objective[-1] < 2e-3
    assert np.all(np.diff(res.objective) <= 1e-15)  # monotone: a step is kept only if it helps


def test_identity_start_with_greedy_smoothing_recovers_moderate_rotations(seven):
    """From the identity (the paper's start) the smoothed descent undoes +-25 degrees."""
    rng = np.random.default_rng(2)
    V = warp(np.stack([seven] * 5), G.sample(rng, 5, (-25, 25), (3, 3)))
    res = invariant_mean(V, np.ones(5), None, MeanSettings(steps=40))
    assert res.objective[-1] < 0.05 * res.objective[0]
    d2 = kappa_max(np.stack([res.mean, seven]), beta=1.0, sigma=2.0).sqdist[0, 1]
    assert d2 < 2e-3
    assert set(np.unique(res.sigma[~np.isnan(res.sigma)])) <= {3.0, 1.5, 0.0}


def test_weights_select_the_images_the_mean_is_made_of():
    d = draw_base_shapes(64)
    crab, pika = normalize(np.stack([d["crab"], d["pikachu"]]))
    V = np.stack([crab, crab, pika])
    res = invariant_mean(V, np.array([1.0, 1.0, 1e-9]), None, MeanSettings(steps=2))
    assert np.allclose(res.mean, crab, atol=1e-6)  # the pikachu is below the weight floor


def test_bad_weights_are_rejected(seven):
    with pytest.raises(ValueError, match="non-negative"):
        invariant_mean(np.stack([seven, seven]), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="non-negative"):
        invariant_mean(np.stack([seven, seven]), np.zeros(2))


def test_objective_helper_is_the_weighted_squared_distance():
    rng = np.random.default_rng(3)
    W = rng.random((4, 5, 5))
    mu = rng.random((5, 5))
    w = np.array([0.1, 0.2, 0.3, 0.4])
    expected = sum(w[i] * ((W[i] - mu) ** 2).sum() for i in range(4))
    assert _objective(w, W, mu) == pytest.approx(expected)


def test_max_images_keeps_the_heaviest_and_reports_the_rest():
    from ia_stages.ia.invariant_mean import invariant_mean
    from ia_stages.settings.attention import MeanSettings

    rng = np.random.default_rng(0)
    V = rng.random((6, 12, 12))
    w = np.array([0.5, 0.1, 0.3, 0.05, 0.02, 0.03])
    capped = invariant_mean(V, w, settings=MeanSettings(steps=0, max_images=2))
    # steps=0: mu is the weighted mean of the kept images at the identity
    expected = (0.5 * V[0] + 0.3 * V[2]) / 0.8
    np.testing.assert_allclose(capped.mean, expected, atol=1e-12)
    assert capped.dropped_weight == pytest.approx(0.2 / 1.0)
