"""Warp by Keys cubic convolution or cubic B-spline, SE(2) parameters and their derivatives."""

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from ia_stages.core.groups import SE2, wrap_angle
from ia_stages.core.warp import (
    _poly_taps,
    interpolate,
    keys_kernel,
    keys_kernel_derivative,
    sampling_field,
    spline_coefficients,
    tap_polynomials,
    warp,
    warp_with_jacobian,
)
from ia_stages.settings.search import INTERPOLATIONS

G = SE2()


def smooth_image(rng, size=40, sigma=2.0):
    """A smooth random image whose support stays well inside the canvas."""
    im = np.zeros((size, size))
    m = size // 4
    im[m:-m, m:-m] = rng.random((size - 2 * m, size - 2 * m))
    return gaussian_filter(im, sigma)


def test_keys_kernel_interpolates_and_sums_to_one():
    k = np.arange(-3, 4)
    assert np.allclose(keys_kernel(k.astype(float)), (k == 0).astype(float))
    t = np.linspace(0, 1, 11)
    total = sum(keys_kernel(t - d) for d in (-1, 0, 1, 2))
    assert np.allclose(total, 1.0)
    # reproduces linear functions exactly (a = -0.5 is third-order accurate)
    lin = sum((d) * keys_kernel(t - d) for d in (-1, 0, 1, 2))
    assert np.allclose(lin, t)


def test_keys_kernel_derivative_matches_finite_differences():
    t = np.linspace(-2.3, 2.3, 97) + 1e-3  # avoid the knots where phi' jumps
    eps = 1e-6
    fd = (keys_kernel(t + eps) - keys_kernel(t - eps)) / (2 * eps)
    assert np.allclose(keys_kernel_derivative(t), fd, atol=1e-6)


def test_identity_warp_is_identity():
    im = np.random.default_rng(0).random((5, 17, 23))
    assert np.array_equal(warp(im, G.identity(5)), im)


def test_integer_shift_moves_pixels():
    im = np.random.default_rng(1).random((12, 12))
    out = warp(im, np.array([0.0, 2.0, -1.0]))  # out[p] = im[p + b]
    assert np.allclose(out[:-2, 1:], im[2:, :-1])
    assert np.allclose(out[-2:], 0.0) and np.allclose(out[:, :1], 0.0)  # zero outside


def test_rotation_by_90_degrees_is_exact_on_the_grid():
    im = np.random.default_rng(2).random((9, 9))
    out = warp(im, np.array([np.pi / 2, 0.0, 0.0]))
    # tau(p) = A (p - c) + c with A = [[0, 1], [-1, 0]]: out[r, s] = im[s, 8 - r]
    assert np.allclose(out, np.rot90(im, k=1))


def test_composition_of_warps_matches_composed_parameters():
    rng = np.random.default_rng(3)
    im = smooth_image(rng, 48, 2.5)
    p1, p2 = np.array([0.7, 2.5, -1.5]), np.array([-2.1, 1.0, 3.0])
    twice = warp(warp(im, p1), p2)
    once = warp(im, G.compose(p1, p2))
    inner = slice(10, 38)
    assert np.abs(twice - once)[inner, inner].max() < 2e-3 * im.max()


def test_inverse_and_compose_are_consistent():
    rng = np.random.default_rng(4)
    p = G.sample(rng, 20, (-180, 180), (5, 5))
    q = G.sample(rng, 20, (-180, 180), (5, 5))
    assert np.allclose(G.compose(p, G.inverse(p)), 0.0, atol=1e-12)
    assert np.allclose(G.compose(G.inverse(p), p), 0.0, atol=1e-12)
    lhs = G.compose(G.compose(p, q), G.inverse(q))
    assert np.allclose(wrap_angle(lhs[:, 0] - p[:, 0]), 0, atol=1e-12)
    assert np.allclose(lhs[:, 1:], p[:, 1:], atol=1e-10)


def test_matrix_jacobian_matches_finite_differences():
    p = np.array([[0.4, 1.0, -2.0]])
    dA, db = G.jacobian(p)
    eps = 1e-7
    for k in range(3):
        dp = np.zeros(3)
        dp[k] = eps
        fdA = (G.matrix(p + dp) - G.matrix(p - dp)) / (2 * eps)
        fdb = (G.translation(p + dp) - G.translation(p - dp)) / (2 * eps)
        assert np.allclose(dA[:, k], fdA, atol=1e-7)
        assert np.allclose(db[:, k], fdb, atol=1e-7)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_warp_jacobian_matches_finite_differences(k):
    rng = np.random.default_rng(5)
    ims = np.stack([smooth_image(rng), smooth_image(rng)])
    p = np.array([[0.3, 1.3, -0.6], [-2.5, -0.4, 2.2]])
    _, jac = warp_with_jacobian(ims, p)
    eps = 1e-6
    dp = np.zeros_like(p)
    dp[:, k] = eps
    fd = (warp(ims, p + dp) - warp(ims, p - dp)) / (2 * eps)
    scale = np.abs(jac[:, k]).max()
    assert np.abs(jac[:, k] - fd).max() < 1e-5 * scale


def test_sample_respects_ranges():
    p = G.sample(np.random.default_rng(6), 500, (-65, 65), (10, 3))
    assert np.rad2deg(p[:, 0]).min() >= -65 and np.rad2deg(p[:, 0]).max() <= 65
    assert np.abs(p[:, 1]).max() <= 10 and np.abs(p[:, 2]).max() <= 3


def test_tap_polynomials_are_the_keys_kernel_and_the_cubic_b_spline():
    f = np.linspace(0.0, 0.999, 11)
    keys = np.array(_poly_taps(f, tap_polynomials("keys")))
    np.testing.assert_allclose(keys, [keys_kernel(f - d) for d in (-1, 0, 1, 2)], atol=1e-14)

    def b3(t):
        u = np.abs(t)
        return np.where(u < 1, 2 / 3 - u**2 + u**3 / 2, np.where(u < 2, (2 - u) ** 3 / 6, 0.0))

    spline = np.array(_poly_taps(f, tap_polynomials("bspline")))
    np.testing.assert_allclose(spline, [b3(f - d) for d in (-1, 0, 1, 2)], atol=1e-14)
    for name in INTERPOLATIONS:  # partition of unity, and derivatives by finite differences
        M = tap_polynomials(name)
        np.testing.assert_allclose(np.sum(_poly_taps(f, M), 0), 1.0, atol=1e-14)
        h = 1e-6
        fd = (np.array(_poly_taps(f + h, M)) - np.array(_poly_taps(f - h, M))) / (2 * h)
        np.testing.assert_allclose(_poly_taps(f, M, 1), fd, atol=1e-8)
        fd2 = (np.array(_poly_taps(f + h, M, 1)) - np.array(_poly_taps(f - h, M, 1))) / (2 * h)
        np.testing.assert_allclose(_poly_taps(f, M, 2), fd2, atol=1e-6)
    with pytest.raises(ValueError, match="interpolation"):
        tap_polynomials("linear")


def test_bspline_warp_is_scipys_cubic_spline_and_interpolates():
    from scipy import ndimage

    x = np.zeros((2, 24, 24))
    x[0, 8:15, 7:13] = 1.0
    x[1, 6:12, 9:18] = 1.0
    x = ndimage.gaussian_filter(x, (0, 1.5, 1.5))
    np.testing.assert_allclose(warp(x, np.zeros((2, 3)), interpolation="bspline"), x, atol=1e-5)
    p = np.array([[0.4, 0.3, -0.2], [-2.0, 1.1, 0.6]])
    field = sampling_field(SE2().matrix(p), SE2().translation(p), (24, 24))
    ref = [ndimage.map_coordinates(x[k], field[k], order=3, mode="constant") for k in range(2)]
    inside = ((field > 2) & (field < 21)).all(1)  # scipy's edge modes differ from zero padding
    got = warp(x, p, interpolation="bspline")
    np.testing.assert_allclose(got[inside], np.asarray(ref)[inside], atol=1e-5)
    # the compiled warp and Jacobian (numpy, SE(2)) equal the array code's
    out, jac = warp_with_jacobian(x, p, interpolation="bspline")
    field_out, grad = interpolate(x, field, with_gradient=True, interpolation="bspline")
    np.testing.assert_allclose(out, field_out, atol=1e-12)
    np.testing.assert_allclose(jac[:, 1:], grad, atol=1e-12)


def test_a_stacks_spline_coefficients_and_smoothing_are_each_images_own():
    """The B-spline prefilter and the Gaussian smoothing run a range of images per thread:
    every image's result equals that of the image alone, bit for bit (any leading shape)."""
    from ia_stages.core.smoothing import smooth

    rng = np.random.default_rng(4)
    stack = rng.random((11, 17, 19))
    coefficients = spline_coefficients(stack, "bspline")
    for k in (0, 5, 10):
        np.testing.assert_array_equal(coefficients[k], spline_coefficients(stack[k], "bspline"))
    jac = rng.random((6, 3, 17, 19))
    smoothed = smooth(jac, 1.5)
    for k in (0, 5):
        np.testing.assert_array_equal(smoothed[k], smooth(jac[k : k + 1], 1.5)[0])
    np.testing.assert_array_equal(smoothed, gaussian_filter(jac, (0, 0, 1.5, 1.5), mode="constant"))
