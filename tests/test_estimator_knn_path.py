"""The estimator's kNN path (``path.mode``): above ``dense_max`` images every kappa^max is each
image's nearest refined on candidates, and no n x n array is computed."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import issparse
from sklearn.metrics import adjusted_rand_score

from ia_stages import InvariantAttentionClustering
from ia_stages.data.render import letter, render
from ia_stages.kmax import EXACT_SEARCH, KappaMaxResult, KnnResult
from ia_stages.readout.graph import KnnDistances
from ia_stages.settings import knn_width
from ia_stages.settings.spec import to_dict

N_PER = 10


@pytest.fixture(scope="module")
def letters():
    """Three letters drawn from their outlines at random angles and shifts (not our warp)."""
    rng = np.random.default_rng(5)
    images, labels = [], []
    for c, text in enumerate("FRL"):
        params = np.column_stack([rng.uniform(0, 2 * np.pi, N_PER), rng.uniform(-2, 2, (N_PER, 2))])
        images.append(render(letter(text, 16.0), (32, 32), params, psf=1.0))
        labels += [c] * N_PER
    return np.concatenate(images), np.array(labels)


def _fit(X, **tree):
    config = {"search": to_dict(EXACT_SEARCH), **tree}
    return InvariantAttentionClustering(3, config=config, random_state=0).fit(X)


@pytest.mark.slow
def test_auto_takes_the_knn_path_above_dense_max_and_equals_dense_with_every_candidate(letters):
    """With every other image a candidate (c = n - 1), every place refined exactly and the
    sample everyone, the kNN path's lists are the dense kappa^max's nearest, and the clusters
    are the same."""
    X, y = letters
    n = X.shape[0]
    dense = _fit(X)  # 30 images <= dense_max: dense
    assert isinstance(dense.kmax_, KappaMaxResult)
    every_place = {"exact_width": n}
    options = {"dense_max": n - 1, "sample": n, "search": "ia", "sample_search": "exact"}
    knn = _fit(X, path={**options, "features": every_place})
    assert isinstance(knn.result_.kmax[0], KnnDistances)
    lists = knn.kmax_
    assert isinstance(lists, KnnResult) and lists.indices.shape == (n, knn_width(knn.settings_))
    sq = dense.kmax_.sqdist
    expect = np.sort(sq, axis=1)[:, : lists.k]
    # the kNN path's pairs keep the better of the screen's and the exact preset's optima
    assert (lists.sqdist <= expect + 1e-12).all()
    np.testing.assert_allclose(lists.sqdist, expect, atol=1e-6)
    np.testing.assert_allclose(np.take_along_axis(sq, lists.indices, 1), lists.sqdist, atol=1e-6)
    assert adjusted_rand_score(dense.labels_, knn.labels_) == 1.0
    assert adjusted_rand_score(y, knn.labels_) == 1.0
    A = knn.affinity_matrix_
    assert issparse(A) and A.shape == (n, n) and A.nnz == lists.indices.size
    rows = np.repeat(np.arange(n), lists.k)
    np.testing.assert_allclose(
        A[rows, lists.indices.ravel()],
        dense.affinity_matrix_[rows, lists.indices.ravel()],
        rtol=1e-5,
    )


@pytest.mark.slow
def test_the_knn_path_refines_candidate_pairs_only(letters):
    """c = 6 candidates per image: at most n c pairs refined (plus the expansion's n x), never
    all n (n - 1) / 2, and the clusters are still the letters."""
    X, y = letters
    n = X.shape[0]
    est = _fit(X, path={"mode": "candidates", "sample": 12, "features": {
        "n_candidates": 6, "n_expand": 2}})  # fmt: skip
    assert est.kmax_.pairs_refined <= n * (6 + 2) < n * (n - 1) // 2
    kd = est.result_.kmax[0]
    assert kd.sample.size == 12 and kd.sample_sqdist.shape == (12, 12)
    assert adjusted_rand_score(y, est.labels_) == 1.0
    assert est.cluster_means_.shape == (3, 32, 32)


def test_the_screened_sample_keeps_near_pairs_and_the_clusters(letters):
    """The sample's pairs by the screen (the default) against the exact preset: the pairs of
    one letter (near: the searches converge to the same optimum) agree, and the read-outs
    those distances choose are the same letters."""
    X, y = letters
    n = X.shape[0]
    options = {"dense_max": n - 1, "sample": n, "features": {"exact_width": n}}
    exact = _fit(X, path={**options, "sample_search": "exact"})
    screen = _fit(X, path=options)
    assert screen.settings_.path.sample_search == "screen"
    sq_e = exact.result_.kmax[0].sample_sqdist
    sq_s = screen.result_.kmax[0].sample_sqdist
    same = (y[:, None] == y[None]) & ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(sq_s[same], sq_e[same], atol=1e-6)
    assert not np.array_equal(sq_s, sq_e)  # the searches differ, on far pairs
    assert adjusted_rand_score(y, screen.labels_) == 1.0
    assert adjusted_rand_score(exact.labels_, screen.labels_) == 1.0


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"path": {"mode": "sparse"}}, r"^path\.mode must be one of"),
        ({"path": {"mode": "candidates"}, "attention": {"kind": "dense"}},
         r"^path\.mode 'candidates'.*attention"),
        ({"path": {"mode": "candidates"}, "readout": {"kind": "linkage"}},
         r"^path\.mode 'candidates'.*readout"),
        ({"path": {"dense_max": 1}}, r"^path\.dense_max must be >= 2"),
        ({"path": {"dense_max": 5, "k": 40}}, r"path\.k must be in 2\.\.n-1"),
        ({"path": {"sample": 1}}, r"^path\.sample must be >= 2"),
        ({"path": {"sample_search": "fast"}}, r"^path\.sample_search must be"),
        ({"path": {"pool": 1}}, "path has no key 'pool'"),
        ({"path": {"later_candidates": "x"}}, r"^path\.later_candidates must be one"),
        ({"path": {"features": {"n_dims": -1}}}, r"^path\.features\.n_dims must be"),
    ],
)  # fmt: skip
def test_bad_knn_path_settings_give_one_line_naming_the_setting(letters, params, needle):
    with pytest.raises(ValueError, match=needle) as err:
        InvariantAttentionClustering(3, config=params).fit(letters[0])
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_the_knn_path_takes_the_similarity_group(letters):
    """The candidate lists are refined over the group (4 parameters per pair), the means and
    poses use it, and the letters are found."""
    X, y = letters
    est = InvariantAttentionClustering(
        3, group="similarity", random_state=0,
        config={"path": {"mode": "candidates", "sample": 12, "features": {"n_candidates": 8}}},
    )  # fmt: skip
    est.fit(X)
    assert est.kmax_.params.shape[2] == 4 and est.poses_.shape == (X.shape[0], 4)
    assert adjusted_rand_score(y, est.labels_) == 1.0


@pytest.mark.slow
def test_the_knn_path_takes_mirror_images(letters):
    """With a group holding mirror images, the kNN path's lists pair each letter with its
    mirrored renders (flagged in the lists' params and the poses), and the letters are found;
    without mirrors the mirrored renders split off."""
    from ia_stages.core.groups import make_group

    X, y = letters
    X = X.copy()
    X[::3] = X[::3, :, ::-1]
    options = {"path": {"mode": "candidates", "sample": 12, "features": {"n_candidates": 8}}}
    est = InvariantAttentionClustering(
        3, group=make_group("se2", mirror=True), random_state=0, config=options
    ).fit(X)  # fmt: skip
    assert est.kmax_.params.shape[2] == 4 and est.poses_.shape == (X.shape[0], 4)
    side = np.arange(X.shape[0]) % 3 == 0
    same = y[est.kmax_.indices[:, 1:]] == y[:, None]
    flipped = est.kmax_.params[:, 1:, -1] == 1
    assert same.mean() > 0.95
    np.testing.assert_array_equal(
        flipped[same], (side[:, None] != side[est.kmax_.indices[:, 1:]])[same]
    )
    assert adjusted_rand_score(y, est.labels_) == 1.0
    plain = InvariantAttentionClustering(None, random_state=0, config=options).fit(X)
    assert adjusted_rand_score(y, plain.labels_) < 1.0
