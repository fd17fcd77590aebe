"""The kNN path's library pieces and config: read-outs, attention and class averages on kNN
lists, and the config key ``kmax`` (the workflow itself: tests/test_workflow_knn.py)."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from ia_stages.ia.attention import sparse_neighbours
from ia_stages.ia.class_averages import knn_medoids
from ia_stages.ia.loop import read_out
from ia_stages.kmax import KappaMaxResult
from ia_stages.kmax.neighbours import knn_from_dense
from ia_stages.pipeline.config import (
    ConfigError,
    column_blocks,
    knn_row_blocks,
    knn_rows_per_job,
    knn_settings,
    stage_settings_json,
    validate_config,
)
from ia_stages.pipeline.stages.common import job_tree
from ia_stages.readout.graph import KnnDistances
from ia_stages.readout.partition import graph_partition
from ia_stages.readout.stopping import community_stability, contraction_ratio
from ia_stages.settings import Settings
from ia_stages.settings.attention import AttentionSettings
from ia_stages.settings.readout import ReadoutSettings

ROOT = Path(__file__).resolve().parents[1]
KNN_TINY = yaml.safe_load((ROOT / ".test" / "config" / "knn_tiny.yaml").read_text())


def _three_groups(seed: int = 0, n: int = 36) -> np.ndarray:
    """Squared distances of points in three separated groups."""
    rng = np.random.default_rng(seed)
    P = rng.normal(size=(n, 2)) * 0.3 + np.repeat([[0, 0], [4, 0], [0, 4]], n // 3, 0)
    return ((P[:, None] - P[None]) ** 2).sum(-1)


GRAPH = ReadoutSettings(k=5, community="silhouette", resolutions=(0.2, 0.5, 1.0, 2.0, 4.0),
                        resolution=1.0, with_k="spectral", silhouette_tolerance=0.0)  # fmt: skip


def test_knn_read_out_with_everyone_sampled_is_the_dense_one():
    sq = _three_groups()
    n = sq.shape[0]
    kd = KnnDistances(knn_from_dense(sq, 8), np.arange(n), sq)
    for K in (None, 3):
        dense = graph_partition(sq, GRAPH, K, seed=1)
        assert np.array_equal(graph_partition(kd, GRAPH, K, seed=1), dense)
    labels = graph_partition(sq, GRAPH, None, seed=1)
    assert np.unique(labels).size == 3
    assert community_stability(kd, GRAPH, 3) == community_stability(sq, GRAPH, 3)
    assert contraction_ratio(kd, labels) == contraction_ratio(sq, labels)


def test_knn_read_out_on_a_sample_and_its_errors():
    sq = _three_groups(1, 60)
    pick = np.arange(0, 60, 3)  # a third of the samples
    kd = KnnDistances(knn_from_dense(sq, 8), pick, sq[np.ix_(pick, pick)])
    labels = graph_partition(kd, GRAPH, None, seed=0)
    truth = np.repeat(np.arange(3), 20)
    assert all(np.unique(labels[truth == c]).size == 1 for c in range(3))
    with pytest.raises(ValueError, match=r"readout\.k: .* needs 10 .* hold 8"):
        graph_partition(kd, replace(GRAPH, k=9), None, seed=0)
    with pytest.raises(ValueError, match=r"readout.kind: 'linkage' needs the dense"):
        read_out(kd, ReadoutSettings(kind="linkage", k=5))
    with pytest.raises(ValueError, match="'hdbscan' needs the dense"):
        graph_partition(kd, replace(GRAPH, community="hdbscan"), None, seed=0)


def test_attention_on_knn_lists_equals_attention_on_the_dense_result():
    rng = np.random.default_rng(2)
    sq = _three_groups(2)
    n = sq.shape[0]
    P = rng.normal(size=(n, n, 3))
    dense = KappaMaxResult(np.exp(-sq), P, sq)
    lists = knn_from_dense(sq, 7, P)  # wider than the attention's k
    att = AttentionSettings("knn", 4, symmetry="mutual")
    a, wa = sparse_neighbours(dense, att, 1.0)
    b, wb = sparse_neighbours(lists, att, 1.0)
    assert np.array_equal(a.indices, b.indices) and np.array_equal(wa, wb)
    assert np.array_equal(a.params, b.params)
    with pytest.raises(ValueError, match=r"attention.k: 8 neighbours per column, .* hold 7"):
        sparse_neighbours(lists, AttentionSettings("knn", 8), 1.0)


def test_knn_medoid_is_the_member_with_most_members_listed():
    sq = _three_groups(3)
    labels = np.repeat(np.arange(3), 12)
    knn = knn_from_dense(sq, 6)
    meds = knn_medoids(knn, labels)
    assert [labels[m] for m in meds] == [0, 1, 2]
    # a member whose list holds other clusters' samples is not chosen
    mixed = labels.copy()
    mixed[meds[0]] = 1
    assert knn_medoids(knn, mixed)[1] != meds[0]


def _knn_tiny(**features) -> dict:
    cfg = copy.deepcopy(KNN_TINY)
    cfg["datasets"]["mnist_rot"]["settings"]["path"]["features"].update(features)
    return cfg


def test_knn_config_sizes_and_blocks():
    cfg = validate_config(KNN_TINY)
    assert knn_row_blocks(cfg, "mnist_rot") == [0, 1]  # 30 rows, 15 per job
    assert column_blocks(cfg, "mnist_rot") == [0, 1]  # the means jobs take as many columns
    assert knn_settings(cfg, "mnist_rot")[0] == 5  # read-out graph k 4 + itself > attention k 4
    other = copy.deepcopy(KNN_TINY)
    other["datasets"]["mnist_rot"]["rows_per_job"] = 7  # sharding: same settings
    assert stage_settings_json(validate_config(other), "knn", "mnist_rot") == (
        stage_settings_json(cfg, "knn", "mnist_rot")
    )


def test_dense_datasets_keep_their_settings(default_config):
    """A dense dataset's stage settings (hence its stores) do not change with path.mode
    'dense' given (auto resolves to it)."""
    cfg = validate_config(default_config)
    marked = copy.deepcopy(default_config)
    for ds in marked["datasets"].values():
        if ds["kind"] != "blobs":
            ds.setdefault("settings", {})["path"] = {"mode": "dense"}
    cfg2 = validate_config(marked)
    for name in cfg["ia"]["datasets"]:
        for stage in ("dataset", "kmax", "means", "classes", "metrics"):
            assert stage_settings_json(cfg, stage, name) == stage_settings_json(cfg2, stage, name)


KEY = "config key 'datasets.mnist_rot.settings'"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda s: s["attention"].update(kind="dense"),
         r"path\.mode 'candidates': the kNN path needs attention\.kind 'knn'"),
        (lambda s: s["path"]["features"].update(n_candidates=30),
         r"path\.features\.n_candidates must be >= the list width k=5 and < n=30"),
        (lambda s: s["path"]["features"].update(n_candidates=3),
         r"path\.features\.n_candidates must be >= the list width k=5"),
        (lambda s: s["path"].update(k=30), r"path\.k must be in 2\.\.n-1"),
        (lambda s: s["path"].update(mode="sparse"), r"path\.mode must be one of"),
        (lambda s: s["path"].update(sample=1), r"path\.sample must be >= 2"),
        (lambda s: s["path"].update(sample_search="fast"), r"path\.sample_search must be"),
        # 'auto' above dense_max with dense attention: the line says 'auto' chose the path
        (lambda s: (s["path"].update(mode="auto", dense_max=10),
                    s["attention"].update(kind="dense")),
         r"path\.mode 'auto' with n=30 > path\.dense_max=10: the kNN path needs"),
    ],
)  # fmt: skip
def test_bad_knn_config_names_the_setting(change, needle):
    cfg = copy.deepcopy(KNN_TINY)
    change(cfg["datasets"]["mnist_rot"]["settings"])
    with pytest.raises(ConfigError, match=f"^{KEY}: {needle}"):
        validate_config(cfg)


@pytest.mark.parametrize("mirror", [False, True])
def test_the_knn_stages_refine_over_the_datasets_group_as_the_library_does(tmp_path, mirror):
    """A dataset with ``group: similarity`` (with mirror images: every fourth render
    mirrored) on the kNN path: the stages (features, two row blocks, the expansion, the
    gather; and the one job of ``knn-whole``, with the same store) search its candidates
    (and their mirror images), refine them over the group and store the library's
    ``kappa_max(mode='candidates', group=...)`` lists, with the group's parameters."""
    import xarray as xr

    from ia_stages.core.groups import make_group
    from ia_stages.data.render import letter, render
    from ia_stages.ia.distances import knn_sample_search
    from ia_stages.kmax import kappa_max
    from ia_stages.pipeline.config import stage_settings
    from ia_stages.pipeline.stages import knn
    from ia_stages.pipeline.store import write_store
    from ia_stages.settings.search import SearchSettings

    g = make_group("similarity", mirror=mirror)
    rng = np.random.default_rng(4)
    p = np.column_stack([rng.uniform(0, 2 * np.pi, 12), rng.uniform(-1, 1, (12, 2)),
                         np.log(rng.uniform(0.85, 1.15, 12))])  # fmt: skip
    X = np.concatenate(
        [render(letter(ch, 14), (32, 32), params=p[i::3, :3], psf=1.0, linear=g.matrix(p[i::3]))
         for i, ch in enumerate("RFP")]
    ).astype(float)  # fmt: skip
    if mirror:
        X[::4] = X[::4, :, ::-1]
    cfg = _knn_tiny(n_candidates=6, n_expand=3, n_dims=8)
    ds = cfg["datasets"]["mnist_rot"]
    ds.update(n=12, rows_per_job=6)
    ds["settings"].update(group={"name": "similarity"}, mirror=mirror)
    ds["settings"]["path"].update(sample=8)
    valid = validate_config(cfg)
    settings = stage_settings(valid, "knn", "mnist_rot")
    t = job_tree(settings)
    k, features = knn_settings(valid, "mnist_rot")
    assert t.group.name == "similarity"
    images = tmp_path / "images.zarr"
    write_store(xr.Dataset({"features": (("sample", "y", "x"), X)}), images)
    feats = knn.features(images, tmp_path / "f.zarr", settings)
    for i in range(2):
        knn.block(images, tmp_path / "f.zarr", tmp_path / f"b{i}.zarr", i, 6, settings)
    assert feats.sizes["pick"] == 8
    paths = [tmp_path / "b0.zarr", tmp_path / "b1.zarr"]
    knn.gather(paths, tmp_path / "f.zarr", tmp_path / "first.zarr", settings)
    more = [tmp_path / f"x{i}.zarr" for i in range(2)]
    for i, path in enumerate(more):
        knn.expand(images, tmp_path / "first.zarr", paths, path, i, 6, settings)
    store = knn.gather(paths + more, tmp_path / "f.zarr", tmp_path / "knn.zarr", settings, images)
    whole = knn.whole(images, tmp_path / "whole.zarr", settings)  # the one-job path
    for name in ("indices", "sqdist", "params", "value", "sample_sqdist"):
        np.testing.assert_array_equal(whole[name].values, store[name].values, err_msg=name)
    lib = kappa_max(
        X, beta=t.beta, normalization=t.normalization, group=g, settings=t.search,
        sigma=t.sigma, k=k, mode="candidates", features=features,
    )  # fmt: skip
    np.testing.assert_array_equal(store["indices"].values, lib.indices)
    np.testing.assert_allclose(store["sqdist"].values, lib.sqdist, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(store["params"].values, lib.params, rtol=1e-12, atol=1e-12)
    assert list(store["param"].values) == list(g.param_names)
    if mirror:  # a listed pair is flipped where one of its two renders was mirrored
        flipped = store["params"].values[:, 1:, -1] == 1
        side = np.arange(12) % 4 == 0
        assert np.array_equal(flipped, side[:, None] != side[store["indices"].values[:, 1:]])
    se2 = kappa_max(X, beta=t.beta, normalization=t.normalization, settings=t.search,
                    sigma=t.sigma, k=k, mode="candidates", features=features)  # fmt: skip
    # the scale freedom brings every image's listed neighbours nearer than SE(2) alone
    assert store["sqdist"].values[:, 1:].sum() < se2.sqdist[:, 1:].sum()
    sample = feats["sample_index"].values
    # the sample's pairs: by the settings' sample search (the screen by default)
    assert knn_sample_search(t) == SearchSettings()
    ref = kappa_max(X[sample], beta=t.beta, normalization=t.normalization, group=g,
                    settings=knn_sample_search(t), sigma=t.sigma)  # fmt: skip
    np.testing.assert_allclose(store["sample_sqdist"].values, ref.sqdist, atol=1e-12)


def test_aligning_onto_class_averages_in_chunks_equals_one_scan(monkeypatch):
    """align_to scans the images in chunks (memory): the poses and distances are those of one
    scan of all images (at 20,000 images one scan overran the polar scan's memory budget)."""
    from ia_stages.ia import class_averages

    rng = np.random.default_rng(0)
    V = rng.random((11, 20, 20))
    means = V[[0, 5]]
    settings = Settings()
    whole = class_averages.align_to(means, V, settings)
    monkeypatch.setattr(class_averages, "ALIGN_CHUNK", 4)
    chunked = class_averages.align_to(means, V, settings)
    for a, b in zip(whole, chunked, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", [1, 20])
def test_the_silhouette_read_out_keeps_the_best_partition_of_all_resolutions(seed):
    """Two resolutions can give different partitions with the same number of communities
    (on these planted point sets they do): the read-out keeps the best silhouette among all
    partitions, not among the first of each count."""
    from sklearn.metrics import silhouette_score

    from ia_stages.readout.graph import leiden_knn, leiden_silhouette

    rng = np.random.default_rng(seed)
    centers = rng.uniform(-6, 6, (5, 2))
    P = np.concatenate([c + rng.normal(0, rng.uniform(0.6, 1.6), (30, 2)) for c in centers])
    sq = ((P[:, None] - P[None]) ** 2).sum(-1)
    knn = knn_from_dense(sq, 9)
    res = tuple(np.round(np.arange(0.1, 2.01, 0.1), 2))
    D = np.sqrt(sq)
    scores, first_of_count = [], {}
    for r in res:
        lab = leiden_knn(knn, 0, r)
        if 2 <= lab.max() + 1 < len(P):
            scores.append(silhouette_score(D, lab, metric="precomputed"))
            first_of_count.setdefault(lab.max() + 1, scores[-1])
    assert max(scores) > max(first_of_count.values())  # the case the rule must handle
    chosen = leiden_silhouette(knn, sq, res, seed=0)
    assert silhouette_score(D, chosen, metric="precomputed") == pytest.approx(max(scores))


@pytest.mark.parametrize(("n", "given", "rows", "blocks"), [
    (100_000, None, 100_000, 1), (5_000, None, 5_000, 1), (100_000, 7_000, 7_000, 15),
])  # fmt: skip
def test_knn_jobs_take_every_row_unless_the_config_sets_their_rows(n, given, rows, blocks):
    """rows_per_job null: one job per pass (each job prepares nearly all images, so more
    jobs on one machine repeat that set-up); a given count wins."""
    cfg = {"datasets": {"d": {"kind": "blobs", "n_samples": n, "rows_per_job": given}}}
    assert knn_rows_per_job(cfg, "d") == rows
    assert len(knn_row_blocks(cfg, "d")) == blocks
