"""One Invariant Attention: its settings objects, presets, sizing rule and the same partition
from the estimator and from the pipeline's stages."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from ia_stages import InvariantAttentionClustering
from ia_stages.data.render import letter, render
from ia_stages.ia.settings import (
    PRESETS,
    IASettings,
    ReadoutSettings,
    StopSettings,
    ia_settings,
    sized,
    sized_neighbours,
)
from ia_stages.ia.weights import AttentionSettings
from ia_stages.pipeline.cluster_command import DATASET, _auto_sigma, check_images, images_config
from ia_stages.pipeline.config import SCHEMA, ConfigError, stage_settings, validate_config
from ia_stages.pipeline.stages import classes, kmax_block, kmax_gather, means
from ia_stages.pipeline.store import write_store


def _schema() -> dict:
    return yaml.safe_load(Path(SCHEMA).read_text())


def _defaults(node: dict) -> dict:
    return {k: v.get("default") for k, v in node["properties"].items()}


def test_schema_defaults_equal_the_settings_defaults():
    """Every settings object's default is the schema's default for the same key."""
    schema = _schema()
    att = _defaults(schema["$defs"]["attention"])
    assert att == {f.name: getattr(AttentionSettings(), f.name) for f in fields(AttentionSettings)}
    stop = _defaults(schema["properties"]["ia"]["properties"]["stop"])
    assert stop == {f.name: getattr(StopSettings(), f.name) for f in fields(StopSettings)}
    readout = schema["properties"]["readout"]["properties"]
    graph = _defaults(readout["graph"])
    r = ReadoutSettings()
    assert readout["threshold"]["default"] == r.threshold
    assert readout["linkage"]["default"] == r.linkage
    assert graph["k_ia"] == r.k is None  # both: sized to the data
    for key in ("with_k", "community", "resolution", "min_cluster_size", "merge"):
        assert graph[key] == getattr(r, key), key
    assert tuple(graph["resolutions"]) == r.resolutions


def test_every_config_default_builds_the_settings_of_a_dataset():
    """The default config's digit datasets build IASettings whose values are the config's."""
    cfg = validate_config(yaml.safe_load(Path("config/config.yaml").read_text()))
    for name in cfg["ia"]["datasets"]:
        s = ia_settings(**stage_settings(cfg, "classes", name)["ia"])
        ds = cfg["datasets"][name]
        assert s.beta == ds["beta"] and s.sigma == ds["kernel_sigma"]
        assert s.stop == StopSettings(**cfg["ia"]["stop"])
        assert s.readout.k == cfg["readout"]["graph"]["k_ia"]


def test_presets_are_one_table_and_given_values_win():
    assert ia_settings() == PRESETS["images"] == IASettings()
    paper = ia_settings("paper")
    assert paper.attention.kind == "dense" and paper.readout.kind == "linkage"
    assert paper.stop.rule == "none" and paper.beta == 30.0
    s = ia_settings("paper", iterations=1, readout={"threshold": 0.5})
    assert s == replace(paper, iterations=1, readout=replace(paper.readout, threshold=0.5))
    est = InvariantAttentionClustering(preset="paper", iterations=1)._resolved()
    assert est == replace(paper, iterations=1)
    cfg = images_config("x.npy", preset="paper")
    ds = cfg["datasets"][DATASET]
    assert ds["attention"]["kind"] == "dense" and cfg["readout"]["ia"] == "average"
    assert ds["beta"] == 30.0 and cfg["ia"]["stop"]["rule"] == "none"
    cfg = images_config("x.npy")
    assert cfg["datasets"][DATASET]["attention"]["kind"] == "knn"
    assert cfg["datasets"][DATASET]["attention"]["k"] is None
    assert cfg["readout"]["graph"]["k_ia"] is None


def test_a_dataset_preset_sets_its_ia_and_its_own_keys_win():
    """``preset:`` in a dataset's block: the preset's IA for that dataset only; keys written in
    the block win; the other datasets keep the global sections."""
    raw = yaml.safe_load(Path("config/config.yaml").read_text())
    raw["datasets"]["mnist"]["preset"] = "paper"
    raw["datasets"]["mnist_rot"]["preset"] = "paper"
    raw["datasets"]["mnist_rot"]["beta"] = 7.0
    del raw["datasets"]["mnist"]["attention"], raw["datasets"]["mnist"]["readout_threshold"]
    cfg = validate_config(raw)
    paper = ia_settings("paper")
    s = ia_settings(**stage_settings(cfg, "classes", "mnist")["ia"])
    # the iterations are the dataset's own or ia.iterations, not the preset's
    assert s == replace(paper, mean=s.mean, search=s.search, iterations=cfg["ia"]["iterations"])
    assert s.readout.kind == "linkage" and s.stop.rule == "none"
    rot = ia_settings(**stage_settings(cfg, "classes", "mnist_rot")["ia"])
    assert rot.beta == 7.0 and rot.sigma == paper.sigma
    assert rot.attention.kind == "knn"  # written in mnist_rot's block: it wins
    aff = ia_settings(**stage_settings(cfg, "classes", "affnist")["ia"])
    assert aff.readout.kind == "graph" and aff.stop == StopSettings(**cfg["ia"]["stop"])
    assert stage_settings(cfg, "classes", "mnist") != stage_settings(
        validate_config(yaml.safe_load(Path("config/config.yaml").read_text())), "classes", "mnist"
    )
    raw["datasets"]["mnist"]["preset"] = "fast"
    with pytest.raises(ConfigError, match=r"datasets\.mnist\.preset"):
        validate_config(raw)


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"preset": "fast"}, "preset must be one of"),
        ({"beta": 0.0}, "beta"),
        ({"readout": {"kind": "magic"}}, "readout.kind"),
        ({"readout": {"k": 0}}, "readout.k"),
        ({"readout": {"colour": 1}}, "readout has no key 'colour'"),
        ({"stop": {"rule": "never"}}, "stop.rule"),
        ({"stop": {"n_seeds": 1}}, "stop.n_seeds"),
        ({"attention": {"symmetry": "both"}}, "attention.symmetry"),
        ({"attention": {"mean_steps": -1}}, "attention.mean_steps"),
        ({"mean": {"preconditioner": "adam"}}, "mean.preconditioner"),
        ({"colour": 1}, "IA settings have no key 'colour'"),
    ],
)
def test_bad_settings_give_one_line_naming_the_key(given, needle):
    with pytest.raises(ValueError, match=needle) as err:
        ia_settings(**given)
    assert "\n" not in str(err.value)


def test_sizing_rule_follows_n_and_k_and_explicit_values_win():
    assert sized_neighbours(12) == (2, 1)
    assert sized_neighbours(48) == (4, 5)
    assert sized_neighbours(1000) == (10, 20)
    # counts never fall as n grows and always stay below n
    prev = (0, 0)
    for n in range(2, 3000, 7):
        k = sized_neighbours(n)
        assert k[0] >= prev[0] and k[1] >= prev[1] and max(k) < n
        prev = k
    # with K the read-out graph stays within a class
    assert sized_neighbours(300, 3) == (10, 20) and sized_neighbours(60, 10) == (5, 5)
    s = sized(ia_settings(), 48)
    assert s.attention.k == 4 and s.readout.k == 5
    given = sized(ia_settings(readout={"k": 9}), 48)
    assert given.readout.k == 9 and given.attention.k == 4
    with pytest.raises(ValueError, match=r"readout\.k"):
        sized(ia_settings(readout={"k": 48}), 48)
    est = InvariantAttentionClustering(readout_neighbors=48)
    with pytest.raises(ValueError, match="readout_neighbors"):
        est.fit(np.random.default_rng(0).random((48, 8, 8)))


def assert_stability_matches_the_read_out(ds: xr.Dataset) -> None:
    """A classes store's stability curve, at the value the read-out used, finds the kept
    iteration's read-out: as many clusters, ARI 1."""
    at = ds["stability_value"].values == ds.attrs["stability_chosen"]
    kept = ds["pred_iter"].values[ds.attrs["stopped_at"]]
    assert ds["stability_clusters"].values[at].tolist() == [int(kept.max()) + 1]
    assert ds["stability_ari"].values[at].tolist() == [1.0]


def _letters(per_class: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    fonts = ("DejaVu Sans", "DejaVu Serif")
    images, labels = [], []
    for c, ch in enumerate("FKR"):
        for i in range(per_class):
            params = np.array([[rng.uniform(0, 2 * np.pi), *rng.uniform(-1.5, 1.5, 2)]])
            images.append(render(letter(ch, 16.0, fonts[i % 2]), (24, 24), params)[0])
            labels.append(c)
    return np.stack(images), np.asarray(labels)


@pytest.mark.slow
def test_pipeline_stages_and_estimator_give_the_same_partition(tmp_path):
    """clusters.csv (kmax -> means -> kmax ... -> classes stages, settings from the
    ``ia-stages cluster`` config) and the default estimator (same seed) agree, and so do the
    class averages' sizes and distances."""
    X, y = _letters()
    np.save(tmp_path / "x.npy", X)
    cfg = images_config(tmp_path / "x.npy", seed=0)
    auto = _auto_sigma(cfg)  # as ia-stages cluster: sigma 'auto' chosen from the pixels
    cfg = validate_config(cfg)
    check_images(cfg, auto)
    assert cfg["datasets"][DATASET]["kernel_sigma"] == 1.0
    st = {s: stage_settings(cfg, s, DATASET) for s in ("kmax", "means", "classes")}
    n = len(X)
    data = tmp_path / "data.zarr"
    write_store(xr.Dataset({"features": (("sample", "y", "x"), X)}), data)
    feats, kms = data, []
    for t in range(cfg["ia"]["iterations"] + 1):
        blk, km = tmp_path / f"b{t}.zarr", tmp_path / f"k{t}.zarr"
        kmax_block.run(feats, blk, 0, 0, n, st["kmax"])
        kmax_gather.run([blk], km, st["kmax"])
        kms.append(km)
        if t == cfg["ia"]["iterations"]:
            break
        mb, nxt = tmp_path / f"m{t}.zarr", tmp_path / f"f{t + 1}.zarr"
        means.run(feats, km, mb, st["means"])
        means.gather([mb], km, nxt, st["means"])
        feats = nxt
    csv = tmp_path / "clusters.csv"
    ticks = {}

    @contextmanager
    def bar(total, label):
        ticks[label] = (total, [])
        yield ticks[label][1].append

    ds = classes.run(data, kms, tmp_path / "classes.zarr", csv, st["classes"], bar)
    # progress: one tick per iteration read out, then every image aligned onto its class
    # average (again after a merge)
    (total, read), (_, aligned) = ticks.values()
    assert total == len(kms) and read == [1] * len(kms)
    assert sum(aligned) >= n
    table = pd.read_csv(csv)
    est = InvariantAttentionClustering(random_state=0).fit(X)
    assert np.array_equal(table["cluster"].values, est.labels_)
    assert ds.attrs["stopped_at"] == est.n_iter_
    assert_stability_matches_the_read_out(ds)
    np.testing.assert_array_equal(ds["pred_iter"].values[: len(est.partitions_)], est.partitions_)
    np.testing.assert_allclose(table["distance"].values, est.distances_, atol=1e-4)
    # 12 images: the read-out graph has 1 neighbour, so classes may split, never mix
    for k in range(est.n_clusters_):
        assert np.unique(y[est.labels_ == k]).size == 1


@pytest.mark.slow
def test_merge_joins_sub_styles_of_one_class_and_keeps_classes_apart():
    """A letter split into two clusters is joined again by the class-average merge rule; two
    different letters are not; merge 0 changes nothing, and with K nothing is joined."""
    from ia_stages.ia.class_averages import cluster_averages, merge_clusters

    X, y = _letters()
    split = np.array([0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3])  # 'F' in two halves
    s = ia_settings(readout={"merge": 0.67})
    km = s.kmax(X)
    labels, avg = cluster_averages(X, split, km, s)
    np.testing.assert_array_equal(labels, y)
    assert avg.sizes.tolist() == [4, 4, 4] and avg.means.shape == (3, *X.shape[1:])
    off = cluster_averages(X, split, km, ia_settings())[0]
    np.testing.assert_array_equal(off, split)
    np.testing.assert_array_equal(cluster_averages(X, split, km, s, n_clusters=4)[0], split)
    # three letters, one cluster each: nothing to join
    np.testing.assert_array_equal(merge_clusters(y, cluster_averages(X, y, km, s)[1], s), y)


def test_the_cluster_command_takes_the_knn_path_above_dense_max(tmp_path):
    """``--kmax auto`` (the default): dense up to ``dense_max`` images, the kNN path above;
    the schema's default is the code's, and a bad mode is one line naming the option."""
    from ia_stages.ia.settings import DENSE_MAX
    from ia_stages.pipeline import config as pipeline_config
    from ia_stages.pipeline.config import knn_path

    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((12, 24, 24)))
    small = validate_config(images_config(tmp_path / "x.npy"))
    assert small["datasets"][DATASET]["kmax"]["dense_max"] == DENSE_MAX
    assert not knn_path(small, DATASET)
    large = validate_config(images_config(tmp_path / "x.npy", dense_max=11, n_candidates=8))
    assert knn_path(large, DATASET)
    forced = validate_config(images_config(tmp_path / "x.npy", kmax="candidates", n_candidates=8))
    assert knn_path(forced, DATASET)
    assert forced["datasets"][DATASET]["kmax"]["features"]["n_candidates"] == 8
    assert not knn_path(validate_config(images_config(tmp_path / "x.npy", kmax="dense")), DATASET)
    schema = yaml.safe_load(pipeline_config.SCHEMA.read_text())
    assert schema["$defs"]["kmax"]["properties"]["dense_max"]["default"] == DENSE_MAX
    with pytest.raises(ConfigError, match="--kmax"):
        images_config(tmp_path / "x.npy", kmax="sparse")
    with pytest.raises(ConfigError, match="n_candidates"):  # c >= n on the kNN path
        validate_config(images_config(tmp_path / "x.npy", kmax="candidates", n_candidates=12))
