"""kNN attention (sparse W over kappa^max neighbours), graph read-outs and the stopping rule."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import silhouette_score

from ia_stages.benchmark.metrics import accuracy
from ia_stages.ia.attention import column_normalize, knn_attention_step, sparse_neighbours
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.ia.weights import dense_weights, knn_weights
from ia_stages.kmax import KappaMaxResult
from ia_stages.kmax.neighbours import knn_from_dense, symmetrize
from ia_stages.readout.graph import (
    leiden_knn,
    leiden_n_clusters,
    leiden_silhouette,
    leiden_sweep,
    leiden_sweeps,
    prefetch_sweeps,
)
from ia_stages.readout.partition import graph_partition
from ia_stages.readout.stopping import contraction_ratio, stop_iteration
from ia_stages.settings.attention import AttentionSettings, MeanSettings
from ia_stages.settings.readout import ReadoutSettings, StopSettings
from ia_stages.settings.sizing import check_attention
from ia_stages.settings.spec import SettingError


def _planted(n_per: int = 12, groups: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Squared distances of points in well-separated groups, and the group labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(groups, 5)) * 10
    y = np.repeat(np.arange(groups), n_per)
    P = centres[y] + rng.normal(size=(y.size, 5))
    sq = ((P[:, None] - P[None]) ** 2).sum(-1)
    return sq, y


def _kmax(sq: np.ndarray, beta: float, rng: np.random.Generator) -> KappaMaxResult:
    n = sq.shape[0]
    params = rng.normal(size=(n, n, 3)) * 0.1
    return KappaMaxResult(np.exp(-beta * sq), params, sq)


def test_knn_lists_put_self_first_and_sort_by_distance() -> None:
    sq, _ = _planted()
    knn = knn_from_dense(sq, 5)
    assert (knn.indices[:, 0] == np.arange(sq.shape[0])).all()
    assert (np.diff(knn.sqdist, axis=1) >= 0).all()
    # the k-th listed distance is the k-th smallest of the row
    np.testing.assert_allclose(knn.sqdist[:, -1], np.sort(sq, axis=1)[:, 4])


def test_knn_with_k_n_and_fixed_bandwidth_equals_dense_weights() -> None:
    sq, _ = _planted(n_per=5, groups=3)
    sq = sq / sq.max()  # a bandwidth at which no weight underflows
    n, beta = sq.shape[0], 3.0
    km = _kmax(sq, beta, np.random.default_rng(1))
    att = AttentionSettings(kind="knn", k=n, bandwidth="fixed")
    knn = knn_from_dense(sq, n, km.params)
    W = dense_weights(knn, knn_weights(knn, att, beta))
    np.testing.assert_allclose(W, column_normalize(km.value), rtol=1e-12, atol=1e-15)


def test_knn_with_k_n_gives_the_dense_invariant_means() -> None:
    rng = np.random.default_rng(2)
    V = rng.random((6, 16, 16))
    sq = rng.random((6, 6))
    sq = sq + sq.T
    np.fill_diagonal(sq, 0.0)
    km = _kmax(sq, 2.0, rng)
    km.params[np.arange(6), np.arange(6)] = 0.0
    att = AttentionSettings(kind="knn", k=6, bandwidth="fixed")
    knn = knn_from_dense(sq, 6, km.params)
    w = knn_weights(knn, att, 2.0)
    ms = MeanSettings(steps=2, weight_floor=0.0)
    sparse = knn_attention_step(V, knn, w, "kmax", ms, columns=[0, 3])
    W = column_normalize(km.value)
    for r, j in enumerate([0, 3]):
        dense = invariant_mean(V, W[:, j], km.params[j], ms)
        np.testing.assert_allclose(sparse[r].mean, dense.mean, atol=1e-10)


@pytest.mark.parametrize("symmetry", ["none", "mutual", "union"])
@pytest.mark.parametrize("bandwidth", ["kth", "fixed"])
def test_column_weights_are_zero_outside_its_neighbours(symmetry: str, bandwidth: str) -> None:
    sq, _ = _planted()
    n, k = sq.shape[0], 4
    att = AttentionSettings(kind="knn", k=k, bandwidth=bandwidth, symmetry=symmetry)
    base = knn_from_dense(sq, k)
    knn = symmetrize(base, symmetry)
    W = dense_weights(knn, knn_weights(knn, att, 0.5))
    np.testing.assert_allclose(W.sum(0), 1.0)
    near = np.zeros((n, n), dtype=bool)  # near[i, j]: i among j's k nearest
    near[base.indices, np.arange(n)[:, None]] = True
    if symmetry == "none":
        allowed = near
    elif symmetry == "mutual":
        allowed = near & near.T
    else:
        allowed = near | near.T
    assert (W[~allowed] == 0).all()
    assert (W[allowed & (W > 0)] > 0).all()
    assert np.diag(W).min() > 0  # every column attends to itself


def test_kth_bandwidth_scales_with_the_kth_neighbour() -> None:
    sq, _ = _planted()
    att = AttentionSettings(kind="knn", k=5, bandwidth="kth")
    w1 = knn_weights(knn_from_dense(sq, 5), att, 1.0)
    w2 = knn_weights(knn_from_dense(4.0 * sq, 5), att, 1.0)
    np.testing.assert_allclose(w1, w2)  # scale-free: the bandwidth follows the data


def test_union_carries_the_inverted_alignment() -> None:
    from ia_stages.core.groups import SE2

    sq = np.array([[0.0, 1.0, 5.0], [1.0, 0.0, 2.0], [5.0, 2.0, 0.0]])
    params = np.zeros((3, 3, 3))
    params[2, 1] = [0.3, 1.0, -2.0]  # aligns v_1 onto v_2
    knn = symmetrize(knn_from_dense(sq, 2, params), "union")
    # 1 is 2's nearest but 2 is not 1's: column 1 gains 2 with the inverse alignment
    row = list(knn.indices[1])
    m = row.index(2)
    np.testing.assert_allclose(knn.params[1, m], SE2().inverse(params[2, 1][None])[0])


@pytest.mark.parametrize("bad", [{"k": 0}, {"kind": "sparse"}, {"symmetry": "x"}])
def test_bad_attention_settings_name_the_key(bad: dict) -> None:
    with pytest.raises(ValueError, match=r"^attention\.(k|kind|symmetry) must be"):
        AttentionSettings(**{"kind": "knn", "k": 3, **bad})
    with pytest.raises(ValueError, match=r"^attention\.k must satisfy 1 <= k < n \(n=12\)"):
        check_attention(AttentionSettings(kind="knn", k=12), 12)


def test_sparse_neighbours_rejects_k_not_below_n() -> None:
    sq, _ = _planted(n_per=3, groups=2)
    km = _kmax(sq, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"attention\.k"):
        sparse_neighbours(km, AttentionSettings(kind="knn", k=6), 1.0)


GRAPH = ReadoutSettings(
    k=5,
    community="leiden",
    resolution=1.0,
    resolutions=(0.1, 0.5, 1.0),
    min_cluster_size=5,
    silhouette_tolerance=0.0,
    restarts=1,
    with_k="spectral",
)


@pytest.mark.parametrize("with_k", ["spectral", "leiden"])
def test_read_out_with_k_recovers_planted_groups(with_k: str) -> None:
    sq, y = _planted()
    labels = graph_partition(sq, replace(GRAPH, with_k=with_k), 4, seed=0)
    assert accuracy(y, labels) == 1.0


@pytest.mark.parametrize("community", ["silhouette", "leiden", "hdbscan"])
def test_read_out_without_k_recovers_planted_groups(community: str) -> None:
    sq, y = _planted()
    labels = graph_partition(sq, replace(GRAPH, community=community), None, seed=0)
    assert accuracy(y, labels) == 1.0
    assert labels.max() + 1 == 4


def test_silhouette_read_out_keeps_large_classes_whole_where_modularity_splits_them() -> None:
    """Three far-apart Gaussian blobs of 100 points: modularity at resolution 1 splits each
    (its null model favours about sqrt(edges) communities), the silhouette choice does not."""
    rng = np.random.default_rng(0)
    centres = ([0.0, 0.0], [12.0, 0.0], [0.0, 12.0])
    P = np.concatenate([rng.normal(c, 1.0, (100, 2)) for c in centres])
    y = np.repeat(np.arange(3), 100)
    sq = ((P[:, None] - P[None]) ** 2).sum(-1)
    graph = replace(GRAPH, k=20, resolutions=(0.1, 0.2, 0.5, 1.0, 1.5))
    fixed = graph_partition(sq, graph, None, seed=0)
    chosen = graph_partition(sq, replace(graph, community="silhouette"), None, seed=0)
    assert fixed.max() + 1 > 3
    assert chosen.max() + 1 == 3 and accuracy(y, chosen) == 1.0
    # the choice is the resolution with the highest silhouette among those tried
    D = np.sqrt(sq)
    scores = {}
    for r in graph.resolutions:
        lab = leiden_knn(knn_from_dense(sq, 21), 0, r)
        if 2 <= lab.max() + 1 < len(y):
            scores[r] = silhouette_score(D, lab, metric="precomputed")
    best = max(scores, key=scores.get)
    assert np.array_equal(chosen, leiden_knn(knn_from_dense(sq, 21), 0, best))


def test_leiden_sweep_in_worker_processes_gives_the_partitions_of_one_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resolution sweep spread over two worker processes (the size threshold lowered to
    this graph's) returns, in order, the partitions the runs here give: each run is seeded
    alone, so the read-out does not depend on how many cores it had."""
    import ia_stages.readout.graph as graph

    rng = np.random.default_rng(5)
    centres = ([0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0])
    P = np.concatenate([rng.normal(c, 1.5, (50, 2)) for c in centres])
    sq = ((P[:, None] - P[None]) ** 2).sum(-1)
    lists = knn_from_dense(sq, 11)
    resolutions = (0.05, 0.3, 1.0, 2.0, 4.0)
    here = [leiden_knn(lists, 3, r) for r in resolutions]
    assert len({int(p.max()) for p in here}) > 2  # the resolutions give different partitions
    monkeypatch.setattr(graph, "PARALLEL_MIN_NODES", 0)
    apart = leiden_sweep(lists, 3, resolutions, workers=2)
    assert all(np.array_equal(a, b) for a, b in zip(here, apart, strict=True))
    chosen = leiden_silhouette(lists, sq, resolutions, seed=3)
    monkeypatch.setattr(graph, "PARALLEL_MIN_NODES", 10**9)
    assert np.array_equal(chosen, leiden_silhouette(lists, sq, resolutions, seed=3))


def _four_blobs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = ([0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [6.0, 6.0])
    P = np.concatenate([rng.normal(c, 1.5, (50, 2)) for c in centres])
    return ((P[:, None] - P[None]) ** 2).sum(-1)


def test_sweeps_of_two_graphs_in_one_pool_are_each_graphs_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two graphs' sweeps sharing two worker processes return, graph by graph and in the
    order of the resolutions, the partitions of each run made here alone."""
    import ia_stages.readout.graph as graph

    lists = [knn_from_dense(_four_blobs(5), 11), knn_from_dense(_four_blobs(6), 7)]
    resolutions = (0.05, 0.3, 1.0, 2.0, 4.0)
    here = [[leiden_knn(knn, 3, r) for r in resolutions] for knn in lists]
    monkeypatch.setattr(graph, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(graph, "_SWEEPS", {})
    apart = leiden_sweeps(lists, 3, resolutions, workers=2)
    assert len(apart) == 2
    for mine, theirs in zip(here, apart, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert not np.array_equal(here[0][2], here[1][2])  # two graphs, two results


def test_prefetched_sweeps_serve_the_read_outs_without_k(monkeypatch: pytest.MonkeyPatch) -> None:
    """After :func:`prefetch_sweeps` of two iterations, their silhouette read-outs run no
    Leiden of their own and return what they return without the prefetch."""
    import ia_stages.readout.graph as graph
    import ia_stages.readout.partition as partition

    sqs = [_four_blobs(5), _four_blobs(6)]
    g = ReadoutSettings(k=10, resolutions=(1.0, 0.3, 2.0), silhouette_tolerance=0.0)
    monkeypatch.setattr(graph, "_SWEEPS", {})
    expected = [partition.graph_partition(sq, g, None, 4) for sq in sqs]
    monkeypatch.setattr(graph, "_SWEEPS", {})
    monkeypatch.setattr(graph, "PARALLEL_MIN_NODES", 0)
    prefetch_sweeps(sqs, g, None, 4)
    assert len(graph._SWEEPS) == 2

    def no_run(*args: object) -> None:
        raise AssertionError("a Leiden run after the prefetch")

    monkeypatch.setattr(graph, "_leidenalg_leiden", no_run)
    for sq, labels in zip(sqs, expected, strict=True):
        assert np.array_equal(partition.graph_partition(sq, g, None, 4), labels)
    prefetch_sweeps(sqs, g, 4, 4)  # with K: nothing to run ahead (no_run would raise)


def test_read_outs_with_k_in_worker_processes_are_this_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two iterations read out into K in two worker processes (the size threshold lowered to
    these graphs') give, in order, the partitions made here; below the threshold, or with one
    worker, nothing runs in workers."""
    import numba

    import ia_stages.readout.graph as graph
    import ia_stages.readout.partition as partition

    sqs = [_four_blobs(5), _four_blobs(6)]
    g = ReadoutSettings(k=10, with_k="leiden", restarts=3)
    here = [partition.graph_partition(sq, g, 3, 4) for sq in sqs]
    assert not np.array_equal(here[0], here[1]) and all(p.max() + 1 == 3 for p in here)
    assert partition.partitions_with_k(sqs, g, 3, 4) is None  # 200 nodes: not worth a worker
    monkeypatch.setattr(graph, "PARALLEL_MIN_NODES", 0)
    if numba.get_num_threads() >= 2:
        apart = partition.partitions_with_k(sqs, g, 3, 4)
        assert all(np.array_equal(a, b) for a, b in zip(here, apart, strict=True))
    monkeypatch.setattr(numba, "get_num_threads", lambda: 1)
    assert partition.partitions_with_k(sqs, g, 3, 4) is None


def test_silhouette_read_out_of_one_group_returns_one_cluster() -> None:
    sq, _ = _planted(n_per=12, groups=1)
    labels = leiden_silhouette(knn_from_dense(sq, 6), sq, (0.01,), seed=0)
    assert labels.max() + 1 == 1


def test_leiden_with_k_finds_exactly_k_communities() -> None:
    sq, _ = _planted(n_per=10, groups=6)  # 6 components: resolution splits, never merges them
    for K in (6, 9):
        labels = leiden_n_clusters(knn_from_dense(sq, 6), K, seed=1)
        assert labels.max() + 1 == K


@pytest.mark.parametrize("engine", ["igraph", "leidenalg"])
def test_leiden_with_k_restarts_keep_the_k_partition_of_highest_modularity(engine: str) -> None:
    """Restarts from other seeds: the partition kept has K communities and the highest
    modularity of those tried, so at least that of one seed's bisection; with leidenalg here
    (4 blobs, K = 3: its seeds join different pairs) strictly more."""
    from ia_stages.readout.graph import _leiden_bisect, igraph_of

    rng = np.random.default_rng(2)
    centres = ([0.0, 0.0], [5.0, 0.0], [0.0, 5.0], [5.0, 5.0])
    P = np.concatenate([rng.normal(c, 1.8, (40, 2)) for c in centres])
    lists = knn_from_dense(((P[:, None] - P[None]) ** 2).sum(-1), 11)
    g = igraph_of(lists)
    one = leiden_n_clusters(lists, 3, seed=0, restarts=1, with_k_engine=engine)
    kept = leiden_n_clusters(
        lists, 3, seed=0, restarts=6, restart_bracket=3.0, restart_tries=6, with_k_engine=engine
    )
    assert kept.max() + 1 == 3
    if engine == "leidenalg":
        assert g.modularity(kept.tolist()) > g.modularity(one.tolist()) + 0.002
    first, r = _leiden_bisect(lists, 3, 0, (1e-3, 20.0), 40, g, engine)
    assert np.array_equal(first, one)
    tried = [first] + [
        _leiden_bisect(lists, 3, s, (r / 3.0, r * 3.0), 6, g, engine)[0] for s in range(1, 6)
    ]
    q = [g.modularity(lab.tolist()) for lab in tried if lab.max() + 1 == 3]
    assert g.modularity(kept.tolist()) == pytest.approx(max(q))
    assert g.modularity(kept.tolist()) >= g.modularity(one.tolist())


def test_igraph_leiden_is_seeded_and_leaves_the_global_generator_alone() -> None:
    """The same seed gives the same partition; igraph's generator is Python's ``random``
    again afterwards, so a caller's ``random`` stream is not the read-out's business."""
    import random

    rng = np.random.default_rng(4)
    P = np.concatenate([rng.normal(c, 1.5, (30, 2)) for c in ([0, 0], [4, 0], [0, 4])])
    lists = knn_from_dense(((P[:, None] - P[None]) ** 2).sum(-1), 8)
    random.seed(7)
    expected = random.random()
    random.seed(7)
    a = leiden_knn(lists, 3, 1.0, engine="igraph")
    assert random.random() == expected
    assert np.array_equal(a, leiden_knn(lists, 3, 1.0, engine="igraph"))
    with pytest.raises(ValueError, match="with_k_engine"):
        leiden_knn(lists, 3, 1.0, engine="networkx")


def test_read_out_rejects_k_not_below_n() -> None:
    sq, _ = _planted(n_per=2, groups=2)
    with pytest.raises(ValueError, match=r"^readout\.k must satisfy"):
        graph_partition(sq, replace(GRAPH, k=4), None, 0)


def test_contraction_ratio_falls_when_groups_tighten() -> None:
    sq, y = _planted()
    same = y[:, None] == y[None, :]
    tighter = np.where(same, 0.25 * sq, sq)
    assert contraction_ratio(tighter, y) < contraction_ratio(sq, y)


@pytest.mark.parametrize("rule", ["stability", "partition", "contraction"])
def test_stopping_rule_stops_on_a_fixed_point(rule: str) -> None:
    sq, y = _planted()
    parts = [y.copy() for _ in range(4)]
    stop = StopSettings(rule=rule, min_ari=0.9, n_seeds=3)
    t, reason = stop_iteration(parts, [sq] * 4, stop, GRAPH)
    assert t == 1, reason  # nothing changes after the first iteration


def test_partition_rule_waits_until_the_partition_settles() -> None:
    sq, y = _planted()
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 4, y.size), rng.integers(0, 4, y.size), y, y]
    t, _ = stop_iteration(parts, [sq] * 4, StopSettings(rule="partition", min_ari=0.9))
    assert t == 3


def test_contraction_rule_stops_before_the_ratio_rises() -> None:
    sq, y = _planted()
    same = y[:, None] == y[None, :]
    sqs = [sq, np.where(same, 0.5 * sq, sq), np.where(same, 0.25 * sq, sq), sq]
    t, reason = stop_iteration([y] * 4, sqs, StopSettings(rule="contraction", min_ari=0.9))
    assert t == 2, reason
    assert stop_iteration([y] * 4, sqs, StopSettings(rule="none", min_ari=0.9))[0] == 3


def test_community_stability_is_one_on_separated_groups_and_lower_on_noise() -> None:
    from ia_stages.readout.stopping import community_stability

    sq, _ = _planted()
    rng = np.random.default_rng(0)
    P = rng.normal(size=(sq.shape[0], 5))
    noise = ((P[:, None] - P[None]) ** 2).sum(-1)
    assert community_stability(sq, GRAPH, 4) == pytest.approx(1.0)
    assert community_stability(noise, GRAPH, 4) < 0.9


def test_stability_rule_stops_before_the_graph_blurs() -> None:
    sq, y = _planted()
    rng = np.random.default_rng(0)
    P = rng.normal(size=(sq.shape[0], 5))
    noise = ((P[:, None] - P[None]) ** 2).sum(-1)
    stop = StopSettings(rule="stability", n_seeds=4)
    t, reason = stop_iteration([y] * 4, [noise, sq, noise, sq], stop, GRAPH)
    assert t == 1, reason
    assert stop_iteration([y] * 3, [sq] * 3, stop, GRAPH)[0] == 1  # a fixed point


def test_stability_rule_with_one_iteration_runs_no_leiden() -> None:
    """With iterations 0 and 1 only, the rule keeps 1 whatever the statistic, so it must not
    spend Leiden runs on it: distances it cannot read (None) do not reach community_stability."""
    _, y = _planted()
    stop = StopSettings(rule="stability", n_seeds=5)
    t, reason = stop_iteration([y, y], [None, None], stop, GRAPH)
    assert t == 1 and "one iteration" in reason


def test_near_ties_of_the_silhouette_go_to_the_fewest_clusters():
    """Within tolerance / m of the best score (m: the best partition's clusters) the partition
    with the fewest clusters wins; beyond it, or at tolerance 0, the best score; among equal
    counts the higher score, then the first given."""
    from ia_stages.readout.graph import fewest_near_best

    def split(m):
        return np.arange(12) % m

    scored = [(0.40, split(2)), (0.50, split(3)), (0.52, split(4)), (0.51, split(6))]
    assert fewest_near_best(scored, 0.0).max() + 1 == 4
    assert fewest_near_best(scored, 0.05).max() + 1 == 4  # 0.05 / 4 < 0.02
    assert fewest_near_best(scored, 0.09).max() + 1 == 3  # 0.09 / 4 > 0.02
    assert fewest_near_best(scored, 0.5).max() + 1 == 2  # 0.125 >= 0.12
    a, b = split(3), split(3)[::-1].copy()
    assert fewest_near_best([(0.5, a), (0.5, b)], 0.0) is a
    assert fewest_near_best([(0.49, a), (0.5, b), (0.52, split(4))], 0.2) is b


def test_adjacent_near_ties_stop_at_the_first_count_outside_the_tolerance():
    """'adjacent' walks down from the best partition's cluster count through the counts
    scored and stops at the first outside the tolerance: a far coarser partition within it
    (two clusters, the silhouette's usual near-tie) is not taken over the finer ones
    between that are not; with every count between within it, it keeps the fewest, as
    'fewest' does. The silhouette choice of a sweep follows the same rule."""
    from ia_stages.readout.graph import fewest_near_best, silhouette_choice

    def split(m):
        return np.arange(36) % m

    # best 9 at 0.164, 2 within 0.1 / 9 of it, 4 and 6 outside, 7 and 8 inside
    scored = [(0.1616, split(2)), (0.135, split(4)), (0.138, split(6)), (0.158, split(7)),
              (0.1632, split(8)), (0.164, split(9))]  # fmt: skip
    assert fewest_near_best(scored, 0.1, "fewest").max() + 1 == 2
    assert fewest_near_best(scored, 0.1, "adjacent").max() + 1 == 7
    assert fewest_near_best(scored, 0.0, "adjacent").max() + 1 == 9
    every = [(0.16, split(2)), (0.159, split(3)), (0.164, split(9))]
    assert fewest_near_best(every, 0.1, "adjacent").max() + 1 == 2
    parts = [labels for _, labels in scored]
    score = np.array([s for s, _ in scored])
    assert silhouette_choice(parts, score, 0.1, "adjacent") == 3
    assert silhouette_choice(parts, score, 0.1, "fewest") == 0
    assert silhouette_choice(parts, score, 0.1) == 3  # the library's default is the setting's
    with pytest.raises(SettingError, match=r"readout\.near_best"):
        fewest_near_best(scored, 0.1, "nearest")


# A 10-node kNN graph (3 neighbours, affNIST-style digits under the similarity group) on which
# igraph's Leiden "until no change" (n_iterations=-1) never ended, at this seed and resolution.
ENDLESS_EDGES = [
    (0, 2), (0, 8), (0, 9), (1, 2), (1, 6), (1, 9), (2, 3), (3, 5), (3, 7), (3, 8),
    (3, 9), (4, 6), (4, 8), (4, 9), (5, 6), (5, 8), (6, 9), (7, 8), (7, 9), (8, 9),
]  # fmt: skip
ENDLESS_SEED, ENDLESS_RESOLUTION = 424494935, 1.681792830507429


def test_igraph_leiden_ends_where_igraphs_own_loop_does_not_and_no_node_move_gains() -> None:
    """In a child process with a time limit (a regression would hang, not fail): the partition
    comes back, and moving any one node to another (or a new) community does not raise the
    modularity at that resolution."""
    import json
    import subprocess
    import sys

    code = (
        "import igraph as ig\n"
        "from ia_stages.readout.graph import leiden_knn\n"
        f"g = ig.Graph(n=10, edges={ENDLESS_EDGES})\n"
        f"print(leiden_knn(None, {ENDLESS_SEED}, {ENDLESS_RESOLUTION}, graph=g,"
        " engine='igraph').tolist())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import igraph as ig

    labels = np.array(json.loads(proc.stdout))
    g = ig.Graph(n=10, edges=ENDLESS_EDGES)
    q = g.modularity(labels.tolist(), resolution=ENDLESS_RESOLUTION)
    for v in range(10):
        for c in range(labels.max() + 2):
            moved = labels.copy()
            moved[v] = c
            assert g.modularity(moved.tolist(), resolution=ENDLESS_RESOLUTION) <= q + 1e-12


def test_leiden_iterations_reach_every_run_and_key_the_kept_sweeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``readout.leiden_iterations`` is what every leidenalg run of a read-out without K gets,
    a sweep kept for one count is not served for another, and 0 is refused naming the key."""
    import ia_stages.readout.graph as graph
    import ia_stages.readout.partition as partition

    seen: list[int | None] = []
    run = graph._leidenalg_leiden

    def spy(g, seed, resolution, iterations=graph.LEIDEN_ITERATIONS):
        seen.append(iterations)
        return run(g, seed, resolution, iterations)

    monkeypatch.setattr(graph, "_leidenalg_leiden", spy)
    monkeypatch.setattr(graph, "_SWEEPS", {})
    sq = _four_blobs(5)
    for count in (1, None):
        seen.clear()
        g = ReadoutSettings(k=10, resolutions=(0.3, 1.0, 2.0), leiden_iterations=count)
        partition.graph_partition(sq, g, None, 4)
        assert seen and set(seen) == {count}, (count, seen)
    assert ReadoutSettings().leiden_iterations is None
    with pytest.raises(SettingError, match="leiden_iterations"):
        ReadoutSettings(leiden_iterations=0)


def test_leiden_runs_to_convergence_are_leidenalgs_own() -> None:
    """Without a cap the read-out's Leiden run is leidenalg's ``n_iterations=-1`` partition,
    and a cap above the iterations a run needs changes nothing."""
    import leidenalg

    import ia_stages.readout.graph as graph

    g = graph.igraph_of(knn_from_dense(_four_blobs(5), 9))
    for r in (0.3, 1.0, 3.0):
        ref = leidenalg.find_partition(
            g, leidenalg.RBConfigurationVertexPartition, resolution_parameter=r, seed=7,
            n_iterations=-1,
        ).membership  # fmt: skip
        assert np.array_equal(graph._leidenalg_leiden(g, 7, r, None), ref)
        assert np.array_equal(graph._leidenalg_leiden(g, 7, r, 50), ref)
