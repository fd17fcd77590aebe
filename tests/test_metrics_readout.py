"""Tests for the clustering metrics, the geometric diagnostics and the distance read-out."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from ia_stages.benchmark.metrics import (
    accuracy,
    ari,
    block_diagonality,
    manifold_distances,
    max_within_class,
    nmi,
)
from ia_stages.readout.linkage import cluster_by_distance

# ---------------------------------------------------------------- accuracy, NMI, ARI


def test_accuracy_of_a_relabelling_is_one() -> None:
    truth = np.array([0, 0, 1, 1, 1, 2, 2, 0, 2])
    names = np.array([7, -1, 42])  # arbitrary cluster ids, permuted
    assert accuracy(truth, names[truth]) == 1.0
    assert accuracy(truth, truth) == 1.0


def test_accuracy_known_confusion() -> None:
    truth = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    pred = np.array([1, 1, 0, 0, 0, 0, 2, 2, 2, 1])
    # clusters x classes:   c0 c1 c2
    #   cluster 0           1  3  0
    #   cluster 1           2  0  1
    #   cluster 2           0  0  3
    # best one-to-one matching 1->c0, 0->c1, 2->c2: 2 + 3 + 3 = 8 of 10
    assert accuracy(truth, pred) == pytest.approx(0.8)


def test_accuracy_is_the_optimal_not_the_greedy_matching() -> None:
    truth = np.array([0, 0, 0, 1, 1, 0, 0])
    pred = np.array([5, 5, 5, 5, 5, 9, 9])
    # clusters x classes: cluster 5 = [3, 2], cluster 9 = [2, 0]. Greedy (5->c0 first) gets
    # 3 + 0; the optimal matching 5->c1, 9->c0 gets 2 + 2 = 4 of 7.
    assert accuracy(truth, pred) == pytest.approx(4 / 7)


def test_accuracy_extra_clusters_count_as_errors() -> None:
    truth = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    split = np.array([0, 0, 1, 1, 2, 2, 3, 3])  # every class split in two
    assert accuracy(truth, split) == pytest.approx(0.5)
    singletons = np.arange(8)
    assert accuracy(truth, singletons) == pytest.approx(2 / 8)


def test_accuracy_fewer_clusters_than_classes() -> None:
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert accuracy(truth, np.zeros(6, dtype=int)) == pytest.approx(2 / 6)


def test_nmi_and_ari_equal_sklearn() -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        truth = rng.integers(0, 3, 30)
        pred = np.where(rng.random(30) < 0.7, truth, rng.integers(0, 4, 30))
        assert nmi(truth, pred) == pytest.approx(normalized_mutual_info_score(truth, pred))
        assert ari(truth, pred) == pytest.approx(adjusted_rand_score(truth, pred))
    truth = np.array([0, 0, 1, 1])
    assert nmi(truth, np.array([5, 5, 3, 3])) == pytest.approx(1.0)
    assert ari(truth, np.array([5, 5, 3, 3])) == pytest.approx(1.0)
    assert isinstance(nmi(truth, truth), float) and isinstance(ari(truth, truth), float)


# ---------------------------------------------------------------- diagnostics


def test_block_diagonality() -> None:
    labels = np.array([0, 0, 1, 1, 1, 2])
    same = labels[:, None] == labels[None, :]
    rng = np.random.default_rng(0)
    W = np.where(same, rng.uniform(0.1, 1.0, (6, 6)), 0.0)
    assert block_diagonality(W, labels) == pytest.approx(1.0)
    two = np.array([0, 0, 0, 1, 1, 1])
    assert block_diagonality(np.ones((6, 6)), two) == pytest.approx(0.5)
    assert block_diagonality(np.ones((6, 6)) - np.eye(6), two) == pytest.approx(12 / 30)
    assert block_diagonality(np.where(same, 0.0, 1.0), labels) == pytest.approx(0.0)


def test_max_within_class_picks_same_class_off_diagonal_pairs() -> None:
    rng = np.random.default_rng(1)
    labels = np.array([0, 1, 0, 2, 1, 0])
    d = rng.uniform(0, 1, (6, 6))
    d = 0.5 * (d + d.T)
    np.fill_diagonal(d, 50.0)  # the diagonal is not a pair
    d[0, 1] = d[1, 0] = 10.0  # neither are pairs of different classes
    expected = max(d[i, j] for i in range(6) for j in range(6) if i != j and labels[i] == labels[j])
    assert max_within_class(d, labels) == pytest.approx(expected)
    d[2, 5] = d[5, 2] = 3.0
    assert max_within_class(d, labels) == pytest.approx(3.0)


def test_max_within_class_is_nan_with_singleton_classes() -> None:
    d = np.ones((3, 3))
    assert np.isnan(max_within_class(d, np.array([0, 1, 2])))
    assert max_within_class(d, np.array([0, 1, 1])) == 1.0


def test_manifold_distances_unit_norms() -> None:
    rng = np.random.default_rng(2)
    u = rng.normal(size=(5, 7))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    sq = ((u[:, None] - u[None]) ** 2).sum(-1)
    np.testing.assert_allclose(manifold_distances(sq, np.ones(5)), np.sqrt(sq), atol=1e-12)


def test_manifold_distances_with_norms_match_direct_computation() -> None:
    rng = np.random.default_rng(3)
    u_hat = rng.normal(size=(6, 9))
    u_hat /= np.linalg.norm(u_hat, axis=1, keepdims=True)
    sq_unit = ((u_hat[:, None] - u_hat[None]) ** 2).sum(-1)
    norms = rng.uniform(0.5, 3.0, 6)
    raw = norms[:, None] * u_hat
    direct = np.linalg.norm(raw[:, None] - raw[None], axis=-1)
    got = manifold_distances(sq_unit, norms)
    np.testing.assert_allclose(got, direct, atol=1e-12)
    np.testing.assert_allclose(manifold_distances(sq_unit, 2.5 * norms), 2.5 * got, atol=1e-12)
    assert np.all(np.diag(got) < 1e-6)


def test_manifold_distances_never_nan() -> None:
    """Round-off may push the squared distance slightly negative; the result stays >= 0."""
    sq = np.array([[0.0, 0.0], [0.0, 0.0]])
    out = manifold_distances(sq, np.array([1.0, 1.0 + 1e-17]))
    assert np.all(np.isfinite(out)) and np.all(out >= 0)


# ---------------------------------------------------------------- read-out


def _two_groups(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    truth = np.array([0, 1, 0, 1, 1, 0, 0, 1])
    pts = np.where(truth[:, None] == 0, 0.0, 10.0) + rng.normal(scale=0.1, size=(8, 2))
    sq = ((pts[:, None] - pts[None]) ** 2).sum(-1)
    return sq, truth


@pytest.mark.parametrize("method", ["average", "single", "complete"])
def test_cluster_by_distance_recovers_separated_groups(method: str) -> None:
    sq, truth = _two_groups(np.random.default_rng(4))
    labels = cluster_by_distance(sq, threshold=1.0, method=method)
    assert labels.dtype == np.int64
    assert accuracy(truth, labels) == 1.0 and np.unique(labels).size == 2
    # a threshold below every distance leaves singletons; above every distance, one cluster
    assert np.unique(cluster_by_distance(sq, threshold=1e-6, method=method)).size == 8
    assert np.unique(cluster_by_distance(sq, threshold=100.0, method=method)).size == 1


def test_cluster_by_distance_threshold_is_on_distances_not_squares() -> None:
    sq = np.array([[0.0, 4.0], [4.0, 0.0]])  # distance 2
    assert cluster_by_distance(sq, threshold=3.0).tolist() == [0, 0]
    assert cluster_by_distance(sq, threshold=1.5).tolist() == [0, 1]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_cluster_by_distance_returns_exactly_n_clusters(k: int) -> None:
    sq, _ = _two_groups(np.random.default_rng(5))
    labels = cluster_by_distance(sq, threshold=1.0, n_clusters=k)
    assert sorted(np.unique(labels)) == list(range(k))


def test_cluster_by_distance_single_sample() -> None:
    np.testing.assert_array_equal(cluster_by_distance(np.zeros((1, 1)), 0.3), [0])
    np.testing.assert_array_equal(cluster_by_distance(np.zeros((1, 1)), 0.3, n_clusters=1), [0])


def test_cluster_by_distance_tolerates_asymmetry_and_negative_roundoff() -> None:
    sq, truth = _two_groups(np.random.default_rng(6))
    noisy = sq + np.triu(np.full_like(sq, 1e-9), 1)  # slightly asymmetric
    np.fill_diagonal(noisy, -1e-12)
    labels = cluster_by_distance(noisy, threshold=1.0)
    assert accuracy(truth, labels) == 1.0


def test_cluster_by_distance_rejects_unknown_linkage() -> None:
    with pytest.raises(ValueError, match="ward"):
        cluster_by_distance(np.zeros((3, 3)), 1.0, method="ward")
