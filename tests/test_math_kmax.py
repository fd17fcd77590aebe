"""kappa^max (eq. 2.2): invariance, recovery of known transforms, symmetry, global optimality."""

import numpy as np
import pytest

from ia_stages.core.groups import SE2, wrap_angle
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp
from ia_stages.data.base_shapes import draw_base_shapes
from ia_stages.kmax import kappa_max
from ia_stages.kmax.align import refine_alignment

G = SE2()
SIZE = 72


@pytest.fixture(scope="module")
def shapes():
    d = draw_base_shapes(SIZE)
    return np.stack([d["crab"], d["seven"], d["pikachu"]])


def angle_error_deg(a, b):
    return float(np.rad2deg(np.abs(wrap_angle(a - b))))


@pytest.mark.parametrize("pair", [(0, 1), (1, 2), (2, 0)])
def test_kmax_is_invariant_to_transforms_of_either_input(shapes, pair):
    """kappa^max(u o s, v o s') = kappa^max(u, v), rotations anywhere in (-180, 180]."""
    u, v = shapes[list(pair)]
    kw = dict(beta=1.0, sigma=2.0)
    ref = kappa_max(np.stack([u, v]), **kw).value[0, 1]
    rng = np.random.default_rng(sum(pair))
    rotations = [(180.0, -179.0), (90.0, -90.0)] + [
        tuple(rng.uniform(-180, 180, 2)) for _ in range(2)
    ]
    for r_u, r_v in rotations:
        s = np.array(
            [[np.deg2rad(r_u), *rng.uniform(-4, 4, 2)], [np.deg2rad(r_v), *rng.uniform(-4, 4, 2)]]
        )
        moved = kappa_max(warp(np.stack([u, v]), s), **kw).value[0, 1]
        assert abs(moved - ref) / ref <= 1e-3, (r_u, r_v, moved, ref)


@pytest.mark.parametrize("theta_deg", [-179.0, -120.0, 33.0, 90.0, 180.0])
def test_rotated_and_shifted_copy_is_recovered(shapes, theta_deg):
    u = shapes[2]
    sigma = np.array([np.deg2rad(theta_deg), 3.7, -5.2])
    v = warp(u, sigma)
    res = kappa_max(np.stack([u, v]), beta=1.0, sigma=0.0)
    tau = res.params[0, 1]  # v o tau ~ u, so tau = sigma^-1
    expected = G.inverse(sigma)
    assert angle_error_deg(tau[0], expected[0]) < 1.0
    assert np.abs(tau[1:] - expected[1:]).max() < 0.5
    assert res.value[0, 1] > 0.99


def test_symmetry_and_diagonal(shapes):
    rng = np.random.default_rng(7)
    imgs = warp(shapes[[0, 1, 2, 0]], G.sample(rng, 4, (-180, 180), (3, 3)))
    res = kappa_max(imgs, beta=2.0, sigma=0.0)
    assert np.allclose(res.value, res.value.T)
    assert np.allclose(np.diag(res.value), 1.0)
    inv = G.inverse(res.params)
    assert np.allclose(wrap_angle(res.params.transpose(1, 0, 2)[..., 0] - inv[..., 0]), 0)
    assert np.allclose(res.params.transpose(1, 0, 2)[..., 1:], inv[..., 1:])
    # same class (0 and 3) is far more similar than different classes
    assert res.value[0, 3] > 0.95 > res.value[0, 1]


def test_rectangular_block_equals_square_result(shapes):
    rng = np.random.default_rng(8)
    imgs = warp(shapes[[0, 1, 2, 1, 0]], G.sample(rng, 5, (-180, 180), (3, 3)))
    full = kappa_max(imgs, beta=1.0, sigma=0.0)
    block = kappa_max(imgs[:2], imgs[2:], beta=1.0, sigma=0.0)
    assert np.allclose(block.value, full.value[:2, 2:], rtol=1e-6, atol=1e-9)


@pytest.mark.slow  # 9,720 warps by the numpy reference warp
def test_kmax_reaches_the_optimum_of_a_dense_grid_search(shapes):
    """No transform on a 3-degree x 1-pixel grid beats the search's kappa (global optimum)."""
    u, v = normalize(shapes[[0, 1]])
    res = kappa_max(np.stack([u, v]), beta=1.0, sigma=0.0)
    best = np.inf
    for theta in np.deg2rad(np.arange(0, 360, 3)):
        for b0 in range(-4, 5):
            for b1 in range(-4, 5):
                r = warp(v, np.array([theta, b0, b1])) - u
                best = min(best, float((r * r).sum()))
    assert res.sqdist[0, 1] <= best + 1e-9


def test_local_descent_from_identity_fails_where_the_global_search_succeeds(shapes):
    """The paper's local descent cannot undo a 90 degree rotation; kappa^max does."""
    u = normalize(shapes[1][None])[0]
    v = warp(u, np.array([np.pi / 2, 0.0, 0.0]))
    _, cost = refine_alignment(u[None], v[None], np.zeros((1, 3)), iters=50)
    res = kappa_max(np.stack([u, v]), beta=1.0, sigma=0.0)
    assert res.sqdist[0, 1] < 1e-3 < cost[0]


def test_all_zero_image_has_a_defined_kernel(shapes):
    imgs = np.stack([np.zeros((SIZE, SIZE)), shapes[0]])
    res = kappa_max(imgs, beta=2.0, sigma=0.0)
    assert np.all(np.isfinite(res.value))
    # a zero image is at squared distance ||v||^2 = 1 from every unit-norm image (v as the
    # compiled search reads it, rounded to float32)
    assert res.value[0, 1] == pytest.approx(np.exp(-2.0), rel=1e-7)


def test_smoothing_reduces_the_invariance_error(shapes):
    u, v = shapes[[0, 2]]
    s = np.array([[2.0, 1.5, -2.0], [-1.1, -3.0, 0.5]])
    err = {}
    for sigma in (0.0, 2.0):
        a = kappa_max(np.stack([u, v]), beta=1.0, sigma=sigma).sqdist[0, 1]
        b = kappa_max(warp(np.stack([u, v]), s), beta=1.0, sigma=sigma).sqdist[0, 1]
        err[sigma] = abs(a - b)
    assert err[2.0] < err[0.0]
    assert smooth(u, 0.0) is u
