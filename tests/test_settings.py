"""The settings tree: one declaration per setting, read by the estimator, the YAML, the schema
and the command's flags alike; presets; the sizing rule; and the same partition from the
estimator and from the pipeline's stages."""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from ia_stages import InvariantAttentionClustering
from ia_stages.data.render import letter, render
from ia_stages.ia.class_averages import cluster_averages, merge_clusters
from ia_stages.ia.distances import kmax
from ia_stages.pipeline.cluster_command import DATASET, check_images, images_config
from ia_stages.pipeline.config import (
    STAGE_SETTINGS,
    ConfigError,
    dataset_settings,
    full_schema,
    knn_path,
    stage_settings,
    validate_config,
)
from ia_stages.pipeline.flags import add_settings_flags, flag_name, flagged, settings_of_flags
from ia_stages.pipeline.stages import classes, kmax_block, kmax_gather, means
from ia_stages.pipeline.stages.common import job_tree
from ia_stages.pipeline.store import write_store
from ia_stages.settings import (
    PRESETS,
    AttentionSettings,
    ReadoutSettings,
    SettingError,
    Settings,
    sized,
    sized_neighbours,
)
from ia_stages.settings.path import DENSE_MAX
from ia_stages.settings.spec import leaves
from ia_stages.settings.tree import SPECS, settings_of

CONFIG = Path("config/config.yaml")


def _schema_node(schema: dict, path: str) -> dict:
    node = schema["$defs"]["settings"]
    *parts, leaf = path.split(".")
    for key in parts:
        node = node["properties"][key]
    return node["properties"][leaf]


def _bounds(node: dict) -> dict:
    core = next((alt for alt in node.get("anyOf", []) if "type" in alt and alt["type"] != "null"),
                node)  # fmt: skip
    keys = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "enum")
    return {k: core[k] for k in keys if k in core} | (
        {"enum": node["enum"]} if "enum" in node else {}
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_settings_flags(p)
    return p


def test_the_schema_the_dataclasses_and_the_flags_hold_the_same_settings():
    """Every setting of the tree is a key of the configuration's schema with the tree's
    default and range, and every flag of ``ia-stages cluster`` is a setting of the tree with
    its default (None: the preset's), its options, and the tree's check."""
    schema = full_schema()
    for path, spec, default in leaves(Settings):
        node = _schema_node(schema, path)
        expected = list(default) if isinstance(default, tuple) else default
        assert node["default"] == expected, path
        bounds = _bounds(node)
        if spec.kind in ("number", "integer"):
            low = "exclusiveMinimum" if spec.low_open else "minimum"
            assert bounds.get(low) == spec.low, path
            high = "exclusiveMaximum" if spec.high_open else "maximum"
            assert bounds.get(high) == spec.high, path
        if spec.kind == "choice":
            assert bounds["enum"] == list(spec.choices), path

    # the schema holds no setting the tree lacks
    def walk(node: dict, prefix: str) -> list[str]:
        out = []
        for key, sub in node["properties"].items():
            path = f"{prefix}{key}"
            if "properties" in sub:
                out += walk(sub, path + ".")
            elif path != "preset":
                out.append(path)
        return out

    assert sorted(walk(schema["$defs"]["settings"], "")) == sorted(SPECS)
    p = _parser()
    actions = {o: a for a in p._actions for o in a.option_strings}
    for path, spec in flagged():
        action = actions[flag_name(path, spec)]
        assert action.dest == f"setting:{path}"
        assert action.default is None
        if spec.kind == "choice":
            assert action.choices == list(spec.choices)
    # a flag's value goes through the tree's one check, under the setting's one name
    args = p.parse_args(["--sigma", "-1"])
    with pytest.raises(SettingError, match=r"^sigma must be >= 0"):
        Settings.from_dict(settings_of_flags(args))
    args = p.parse_args(["--group", "affine", "--mask-threshold", "2", "--set", "readout.k=7"])
    given = settings_of_flags(args)
    assert given == {"group": {"name": "affine"}, "mask": {"threshold": 2.0}, "readout": {"k": 7}}
    args = p.parse_args(["--mask-threshold", "0"])
    with pytest.raises(SettingError, match=r"^mask\.threshold must be > 0, got 0.0 \(given as "):
        settings_of_flags(args)


def test_a_setting_has_one_name_in_the_estimator_the_yaml_and_the_flags():
    """The estimator's tree parameters, a YAML's keys and the flags set the same field."""
    est = InvariantAttentionClustering(n_clusters=3, sigma=2.0, group="affine", mirror=True)
    via_estimator = est._settings()
    via_yaml = Settings.from_dict(
        yaml.safe_load("n_clusters: 3\nsigma: 2.0\ngroup: affine\nmirror: true\n")
    )
    args = _parser().parse_args(["--n-clusters", "3", "--sigma", "2", "--group", "affine",
                                 "--mirror"])  # fmt: skip
    via_flags = Settings.from_dict(settings_of_flags(args))
    assert via_estimator == via_yaml == via_flags
    for name in ("n_clusters", "sigma", "beta", "mirror", "background", "backend"):
        assert name in SPECS and name in InvariantAttentionClustering._parameter_constraints


def test_presets_are_named_trees_and_given_values_win(tmp_path):
    assert PRESETS["images"] == Settings() == settings_of()
    paper = PRESETS["paper"]
    assert paper.attention.kind == "dense" and paper.readout.kind == "linkage"
    assert paper.stop.rule == "none" and paper.beta == 30.0
    s = settings_of("paper", {"readout": {"threshold": 0.5}}, iterations=1)
    assert s == replace(paper, iterations=1, readout=replace(paper.readout, threshold=0.5))
    assert InvariantAttentionClustering(preset="paper", config={"iterations": 1})._settings() == (
        replace(paper, iterations=1)
    )
    assert Settings.from_dict({"preset": "exact"}).search.centre_rings == 4
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((12, 16, 16)))
    cfg = validate_config(images_config(tmp_path / "x.npy", {"preset": "paper"}))
    assert dataset_settings(cfg, DATASET).readout.kind == "linkage"


def test_a_dataset_takes_the_kind_defaults_then_the_top_block_then_its_own():
    """With no preset named, a dataset's tree is the tree's defaults with its kind's, then the
    top-level ``settings:``, then its own block; a preset it names replaces the kind's."""
    raw = yaml.safe_load(CONFIG.read_text())
    cfg = validate_config(raw)
    shapes = dataset_settings(cfg, "shapes3")
    assert (shapes.beta, shapes.sigma, shapes.attention.kind) == (30.0, 2.0, "dense")
    assert shapes.iterations == 2 and shapes.mean.max_images == 24  # its own, the top block's
    digits = dataset_settings(cfg, "mnist")
    # the estimator's settings, its path resolved for its 300 images
    assert replace(digits, mean=Settings().mean, path=Settings().path) == Settings()
    assert digits.path.mode == "dense"
    raw["datasets"]["mnist"]["settings"] = {"preset": "paper", "beta": 7.0}
    cfg = validate_config(raw)
    s = dataset_settings(cfg, "mnist")
    assert s.beta == 7.0 and s.readout.kind == "linkage" and s.mean.max_images == 24
    raw["datasets"]["mnist"]["settings"] = {"preset": "fast"}
    with pytest.raises(ConfigError, match=r"datasets\.mnist\.settings\.preset"):
        validate_config(raw)


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"preset": "fast"}, "preset must be one of"),
        ({"beta": 0.0}, "^beta must be > 0"),
        ({"sigma": "soft"}, "^sigma must be a number or 'auto'"),
        ({"readout": {"kind": "magic"}}, r"^readout\.kind must be one of"),
        ({"readout": {"k": 0}}, r"^readout\.k must be >= 1"),
        ({"readout": {"kk": 1}}, "readout has no key 'kk'; did you mean 'k'"),
        ({"stop": {"rule": "never"}}, r"^stop\.rule"),
        ({"stop": {"n_seeds": 1}}, r"^stop\.n_seeds"),
        ({"attention": {"symmetry": "both"}}, r"^attention\.symmetry"),
        ({"attention": {"mean_steps": -1}}, r"^attention\.mean_steps"),
        ({"mean": {"preconditioner": "adam"}}, r"^mean\.preconditioner"),
        ({"path": {"features": {"n_freqs": 40}}}, r"^path\.features\.n_freqs"),
        ({"search": {"n_angles": 0}}, r"^search\.n_angles must be >= 4"),
        ({"group": {"scale": [1.1, 1.2]}}, r"^group\.scale must contain 1"),
        ({"n_clusters": [5, 3]}, "^n_clusters must be a range"),
        ({"colour": 1}, "the settings have no key 'colour'"),
        ({"path": {"mode": "candidates"}, "attention": {"kind": "dense"}},
         r"^path\.mode 'candidates': the kNN path needs attention\.kind 'knn'"),
    ],
)  # fmt: skip
def test_bad_settings_give_one_line_naming_the_setting(given, needle):
    with pytest.raises(SettingError, match=needle) as err:
        Settings.from_dict(given)
    assert "\n" not in str(err.value)


def test_the_same_bad_setting_is_named_alike_by_the_estimator_the_config_and_the_flag(tmp_path):
    X = np.random.default_rng(0).random((12, 16, 16))
    with pytest.raises(ValueError, match=r"readout\.k must be >= 1"):
        InvariantAttentionClustering(config={"readout": {"k": 0}}).fit(X)
    raw = yaml.safe_load(CONFIG.read_text())
    raw["settings"]["readout"] = {"k": 0}
    with pytest.raises(ConfigError, match=r"config key 'settings': readout\.k must be >= 1"):
        validate_config(raw)
    args = _parser().parse_args(["--set", "readout.k=0"])
    with pytest.raises(SettingError, match=r"readout\.k must be >= 1"):
        Settings.from_dict(settings_of_flags(args))


def test_sizing_rule_follows_n_and_k_and_explicit_values_win():
    assert sized_neighbours(12) == (2, 1)
    assert sized_neighbours(48) == (4, 5)
    assert sized_neighbours(1000) == (10, 20)
    prev = (0, 0)  # counts never fall as n grows and always stay below n
    for n in range(2, 3000, 7):
        k = sized_neighbours(n)
        assert k[0] >= prev[0] and k[1] >= prev[1] and max(k) < n
        prev = k
    assert sized_neighbours(300, 3) == (10, 20) and sized_neighbours(60, 10) == (5, 5)
    s = sized(Settings(), 48)
    assert s.attention.k == 4 and s.readout.k == 5
    assert sized(Settings.from_dict({"n_clusters": 10}), 60).readout.k == 5
    given = sized(Settings.from_dict({"readout": {"k": 9}}), 48)
    assert given.readout.k == 9 and given.attention.k == 4
    with pytest.raises(SettingError, match=r"readout\.k must satisfy 1 <= k < n \(n=48\)"):
        sized(Settings.from_dict({"readout": {"k": 48}}), 48)
    with pytest.raises(SettingError, match="n_clusters must be <= the 12 samples"):
        sized(Settings.from_dict({"n_clusters": 13}), 12)
    with pytest.raises(SettingError, match=r"path\.mode 'auto' with n=20 > path\.dense_max=10"):
        sized(Settings.from_dict({"path": {"dense_max": 10}, "attention": {"kind": "dense"}}), 20)


def test_a_job_reads_only_the_settings_its_stage_hash_covers():
    """A stage's tree holds the settings of its :data:`STAGE_SETTINGS` only: reading another
    is a one-line error naming it, and changing another leaves the stage's settings as they
    are (its jobs do not rerun)."""
    cfg = validate_config(yaml.safe_load(CONFIG.read_text()))
    job = job_tree(stage_settings(cfg, "kmax", "mnist"))
    assert job.beta == 20.0 and job.search == Settings().search
    with pytest.raises(SettingError, match=r"do not hold readout\.threshold"):
        _ = job.readout.threshold
    raw = yaml.safe_load(CONFIG.read_text())
    raw["datasets"]["mnist"]["settings"] = {"readout": {"threshold": 0.4}}
    changed = validate_config(raw)
    for stage in STAGE_SETTINGS:
        same = stage_settings(cfg, stage, "mnist") == stage_settings(changed, stage, "mnist")
        reads = not STAGE_SETTINGS[stage] or any(
            p in ("readout", "readout.threshold") for p in STAGE_SETTINGS[stage]
        )
        assert same != reads, stage


def test_the_old_estimator_parameters_are_gone_with_a_clear_error():
    """0.2 renamed the estimator's parameters (the changelog maps them): an old one is
    scikit-learn's one-line TypeError naming it."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'readout_neighbors'"):
        InvariantAttentionClustering(readout_neighbors=7)


def test_the_cluster_command_takes_the_knn_path_above_dense_max(tmp_path):
    """``path.mode: auto`` (the default): dense up to ``dense_max`` images, the kNN path
    above; c >= n on the kNN path is one line naming the setting."""
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((12, 24, 24)))
    small = validate_config(images_config(tmp_path / "x.npy"))
    assert dataset_settings(small, DATASET).path.dense_max == DENSE_MAX
    assert not knn_path(small, DATASET)
    settings = {"path": {"dense_max": 11, "features": {"n_candidates": 8}}}
    large = validate_config(images_config(tmp_path / "x.npy", settings))
    assert knn_path(large, DATASET)
    assert dataset_settings(large, DATASET).path.mode == "candidates"  # resolved: what ran
    dense = validate_config(images_config(tmp_path / "x.npy", {"path": {"mode": "dense"}}))
    assert not knn_path(dense, DATASET)
    bad = {"path": {"mode": "candidates", "features": {"n_candidates": 12}}}
    with pytest.raises(ConfigError, match=r"path\.features\.n_candidates"):
        validate_config(images_config(tmp_path / "x.npy", bad))


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
    cfg = validate_config(images_config(tmp_path / "x.npy", {"sigma": "auto"}, seed=0))
    assert check_images(cfg)[0] == {DATASET: 1.0}  # as ia-stages cluster: sigma 'auto' resolved
    cfg["datasets"][DATASET]["settings"]["sigma"] = 1.0
    st = {s: stage_settings(cfg, s, DATASET) for s in ("kmax", "means", "classes")}
    n = len(X)
    T = dataset_settings(cfg, DATASET).iterations
    data = tmp_path / "data.zarr"
    write_store(xr.Dataset({"features": (("sample", "y", "x"), X)}), data)
    feats, kms = data, []
    for t in range(T + 1):
        blk, km = tmp_path / f"b{t}.zarr", tmp_path / f"k{t}.zarr"
        kmax_block.run(feats, blk, 0, 0, n, st["kmax"])
        kmax_gather.run([blk], km, st["kmax"])
        kms.append(km)
        if t == T:
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
    X, y = _letters()
    split = np.array([0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3])  # 'F' in two halves
    s = Settings.from_dict({"readout": {"merge": 0.67}})
    km = kmax(X, s)
    labels, avg = cluster_averages(X, split, km, s)
    np.testing.assert_array_equal(labels, y)
    assert avg.sizes.tolist() == [4, 4, 4] and avg.means.shape == (3, *X.shape[1:])
    off = cluster_averages(X, split, km, Settings())[0]
    np.testing.assert_array_equal(off, split)
    with_k = replace(s, n_clusters=4)
    np.testing.assert_array_equal(cluster_averages(X, split, km, with_k)[0], split)
    np.testing.assert_array_equal(merge_clusters(y, cluster_averages(X, y, km, s)[1], s), y)


def test_part_classes_are_the_tree_parts():
    """The parts a user builds by hand are the tree's (one class per idea)."""
    assert isinstance(Settings().attention, AttentionSettings)
    assert isinstance(Settings().readout, ReadoutSettings)
    assert AttentionSettings() == Settings().attention  # the class defaults are the tree's
