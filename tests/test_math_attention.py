"""Kernel attention vs Invariant Attention on transformed images; the estimator API."""

import numpy as np
import pytest

from ia_stages import InvariantAttentionClustering, kernel_attention
from ia_stages.benchmark.metrics import accuracy, block_diagonality
from ia_stages.core.smoothing import normalize, sq_distances
from ia_stages.data.datasets import blobs, shapes3
from ia_stages.ia.attention import attention_weights, column_normalize
from ia_stages.readout.linkage import cluster_by_distance


@pytest.fixture(scope="module")
def small_shapes():
    return shapes3(n_per_class=4, size=64, shift_px=(8, 8), rng=np.random.default_rng(5))


@pytest.fixture(scope="module")
def ia_fit(small_shapes):
    est = InvariantAttentionClustering(preset="paper", beta=30.0, config={"iterations": 2})
    return est.fit(small_shapes.data)


def test_column_normalisation():
    W = column_normalize(np.random.default_rng(0).random((5, 5)) + 0.1)
    assert np.allclose(W.sum(0), 1.0)


@pytest.mark.slow
def test_ia_finds_the_three_classes(small_shapes, ia_fit):
    y = small_shapes.label
    assert len(np.unique(ia_fit.labels_)) == 3
    assert accuracy(y, ia_fit.labels_) == 1.0
    for step in ia_fit.steps_:
        assert block_diagonality(step.weights, y) >= 0.99
    assert ia_fit.features_.shape == small_shapes.data.shape


@pytest.mark.slow
def test_ia_features_converge_within_classes(small_shapes, ia_fit):
    """Theorem 4.1: within-class manifold distances shrink; classes stay apart."""
    y = small_shapes.label
    same = (y[:, None] == y[None]) & ~np.eye(y.size, dtype=bool)
    d_first = ia_fit.steps_[0].kmax.sqdist
    d_last = ia_fit.kmax_.sqdist
    assert d_last[same].max() <= d_first[same].max()
    assert d_last[~(y[:, None] == y[None])].min() > 0.1


def test_ka_does_not_find_the_classes(small_shapes):
    y = small_shapes.label
    feats, _ = kernel_attention(small_shapes.data, beta=2.0, iterations=4)
    for X in feats:
        Xn = normalize(X)
        pred = cluster_by_distance(sq_distances(Xn, Xn), 0.3)
        assert accuracy(y, pred) < 1.0


def test_ka_collapses_gaussian_blobs():
    ds = blobs(n_samples=150, rng=np.random.default_rng(1))
    feats, weights = kernel_attention(ds.data, beta=0.2, normalization="none", iterations=4)
    assert weights.shape == (4, 150, 150)
    assert np.allclose(weights.sum(1), 1.0)  # columns of W sum to one
    final = feats[-1]
    for k in np.unique(ds.label):
        spread = np.abs(final[ds.label == k] - final[ds.label == k].mean(0)).max()
        assert spread < 1e-3
    pred = cluster_by_distance(sq_distances(final, final), 1.0)
    assert accuracy(ds.label, pred) == 1.0


def test_ka_step_is_the_weighted_mean():
    X = np.random.default_rng(2).random((6, 4, 4))
    feats, weights = kernel_attention(X, beta=1.0, iterations=1)
    W = attention_weights(X, 1.0)
    assert np.allclose(weights[0], W)
    assert np.allclose(feats[1][2], sum(W[i, 2] * X[i] for i in range(6)))


@pytest.mark.slow
def test_estimator_with_given_number_of_clusters(small_shapes, ia_fit):
    est = InvariantAttentionClustering(
        preset="paper", beta=30.0, config={"iterations": 0}, n_clusters=2
    )
    labels = est.fit_predict(small_shapes.data[:8])
    assert len(np.unique(labels)) == 2
    with pytest.raises(ValueError, match="images"):
        est.fit(np.zeros((3, 4)))
