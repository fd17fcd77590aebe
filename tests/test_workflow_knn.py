"""End to end: the kNN path of the workflow (path.mode: candidates) on a tiny config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ia_stages.benchmark.metrics import accuracy
from ia_stages.ia.distances import knn_search
from ia_stages.ia.loop import run_ia
from ia_stages.kmax import kappa_max
from ia_stages.pipeline.cluster_command import snakemake
from ia_stages.pipeline.config import dataset_settings, stage_settings, validate_config
from ia_stages.pipeline.stages import knn
from ia_stages.pipeline.stages.common import job_tree
from ia_stages.pipeline.store import read_store
from ia_stages.readout.graph import KnnDistances
from ia_stages.settings import knn_features, knn_width

from .test_settings import assert_stability_matches_the_read_out

pytestmark = pytest.mark.slow  # runs the workflow end to end

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".test" / "config" / "knn_tiny.yaml"
N = yaml.safe_load(CONFIG.read_text())["datasets"]["mnist_rot"]["n"]


@pytest.fixture(scope="module")
def knn_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("knn_workflow")
    snakemake(ROOT / "Snakefile", work, CONFIG, [], cores=2)
    return work


def test_no_n_by_n_store_is_written(knn_run):
    res = knn_run / "results"
    assert not list(res.rglob("kmax.zarr")) and not list(res.rglob("kmax"))
    stores = [p for p in res.rglob("*.zarr") if (p / "zarr.json").exists()]
    assert len(stores) >= 7
    for path in stores:
        ds = read_store(path)
        for name, var in ds.data_vars.items():
            assert var.shape[:2] != (N, N), f"{path}: {name} is n x n"


def test_sharded_store_equals_one_job_and_the_library(knn_run, tmp_path):
    """The store of 2 row-block jobs equals that of one job, and the library's one call."""
    it0 = knn_run / "results/mnist_rot/ia/iter0"
    sharded = read_store(it0 / "knn.zarr")
    assert sharded.attrs["blocks"] == 4  # 2 row blocks and their 2 expansion blocks
    settings = json.loads(sharded.attrs["settings"])  # exactly what the jobs used
    images = knn_run / "results/data/mnist_rot.zarr"
    assert job_tree(settings).path.features.n_expand > 0  # the expansion pass is sharded too
    feats = it0 / "knn_features.zarr"
    one = knn.block(images, feats, tmp_path / "b.zarr", 0, N, settings)
    assert one.attrs["rows"] == [0, N]
    knn.gather([tmp_path / "b.zarr"], feats, tmp_path / "first.zarr", settings)
    more = knn.expand(images, tmp_path / "first.zarr", [tmp_path / "b.zarr"],
                      tmp_path / "x.zarr", 0, N, settings)  # fmt: skip
    assert more.sizes["pair"] > 0
    single = knn.gather([tmp_path / "b.zarr", tmp_path / "x.zarr"], feats, tmp_path / "k.zarr",
                        settings)  # fmt: skip
    for name in ("indices", "sqdist", "params", "value", "sample_sqdist"):
        np.testing.assert_array_equal(sharded[name].values, single[name].values, err_msg=name)
    X = read_store(images)["features"].values
    lib = library_lists(X, settings)
    np.testing.assert_array_equal(sharded["indices"].values, lib.indices)
    np.testing.assert_array_equal(sharded["sqdist"].values, lib.sqdist)


def library_lists(X: np.ndarray, settings: dict):
    """The library's ``kappa_max(X, k, mode='candidates')`` with a kNN store's settings (the
    pipeline's stage settings of the kNN path), SE(2)."""
    t, n = job_tree(settings), len(X)
    return kappa_max(
        X, beta=t.beta, normalization=t.normalization, settings=knn_search(t), sigma=t.sigma,
        k=knn_width(t, n), mode="candidates", features=knn_features(t, n),
    )  # fmt: skip


def test_iteration_means_read_out_and_classes(knn_run):
    res = knn_run / "results/mnist_rot"
    f1 = read_store(res / "ia/iter1/features.zarr")
    assert f1["features"].shape[0] == N
    idx, w = f1["weights_index"].values, f1["weights_knn"].values
    np.testing.assert_allclose(w.sum(1), 1.0)  # every column's weights over its neighbours
    lists = read_store(res / "ia/iter0/knn.zarr")["indices"].values
    np.testing.assert_array_equal(idx, lists[:, : idx.shape[1]])  # attention.k of the lists
    # iteration 1's candidate pairs: each image's neighbours in iteration 0's lists
    later = read_store(res / "ia/iter1/knn_features.zarr")
    np.testing.assert_array_equal(later["candidates"].values, lists[:, 1:])
    assert later["embedding"].shape == (N, 0)  # no features computed
    table = pd.read_csv(res / "clusters.csv")
    assert len(table) == N and table["cluster"].min() == 0
    classes = read_store(res / "classes.zarr")
    assert int(classes["size"].sum()) == N
    assert classes.attrs["stability_parameter"] == "resolution"
    assert_stability_matches_the_read_out(classes)  # the lists' graph, the sample's silhouette
    metrics = pd.read_csv(res / "metrics.csv")
    assert list(metrics["iteration"]) == [0, 1, 0, 1]
    assert list(metrics["method"]) == ["IA", "IA", "IA (K)", "IA (K)"]
    with_k = metrics[metrics["method"] == "IA (K)"]
    # read out towards K classes (Leiden bisected on resolution: 30 images, K = 10, may end 1
    # short); without K the silhouette chooses the number
    assert ((with_k["clusters_found"] - with_k["classes"]).abs() <= 1).all()
    assert metrics["acc"].notna().all() and (metrics["block_diagonality"] > 0).all()
    # the rows without K are the classes stage's read-outs (made once), not made again
    labels = read_store(knn_run / "results/data/mnist_rot.zarr")["label"].values
    without_k = metrics[metrics["method"] == "IA"]
    for t, pred in enumerate(classes["pred_iter"].values):
        row = without_k[without_k["iteration"] == t].iloc[0]
        assert row["clusters_found"] == np.unique(pred).size
        assert row["acc"] == pytest.approx(accuracy(labels, pred), abs=1e-6)


def test_metrics_refuse_read_outs_made_with_other_settings(knn_run):
    from ia_stages.pipeline.stages.common import InputError
    from ia_stages.pipeline.stages.metrics import classes_partitions

    cfg = validate_config(yaml.safe_load(CONFIG.read_text()))
    settings = stage_settings(cfg, "metrics", "mnist_rot")
    store = knn_run / "results/mnist_rot/classes.zarr"
    assert classes_partitions(store, settings, 2, N).shape == (2, N)
    with pytest.raises(InputError, match=r"classes\.zarr: made with other 'seed'"):
        classes_partitions(store, {**settings, "seed": settings["seed"] + 1}, 2, N)
    with pytest.raises(InputError, match=r"pred_iter is \(2, \d+\), expected \(3, "):
        classes_partitions(store, settings, 3, N)


def test_the_estimator_on_the_knn_path_gives_the_pipelines_clusters(knn_run):
    """run_ia with the dataset's settings (the kNN path, as the estimator runs it) and the
    same seed: the clusters of clusters.csv and the kept iteration's lists of its kNN store."""
    cfg = validate_config(yaml.safe_load(CONFIG.read_text()))
    s = dataset_settings(cfg, "mnist_rot")
    assert s.path.mode == "candidates"
    res = knn_run / "results/mnist_rot"
    X = read_store(knn_run / "results/data/mnist_rot.zarr")["features"].values
    out = run_ia(X, s, cfg["seed"])
    assert isinstance(out.kmax[0], KnnDistances)
    table = pd.read_csv(res / "clusters.csv")
    np.testing.assert_array_equal(table["cluster"].values, out.labels)
    for t, km in enumerate(out.kmax):
        store = read_store(res / f"ia/iter{t}/knn.zarr")
        np.testing.assert_array_equal(store["indices"].values, km.knn.indices)
        np.testing.assert_array_equal(store["sample_index"].values, km.sample)
