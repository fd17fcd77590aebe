"""The method table is the one place a benchmark method is defined; kNN attention config keys."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from ia_stages.benchmark.methods import HEAVY_METHODS, METHODS, NEEDS, Job
from ia_stages.pipeline.benchmark_config import cluster_settings
from ia_stages.pipeline.config import ConfigError, stage_settings, validate_config
from ia_stages.settings import Settings


def _job(cfg: dict, method: str, dataset: str = "mnist_rot") -> dict:
    return cluster_settings(cfg, dataset, method, 0, "numpy")


def test_every_method_has_settings_predict_and_a_known_need(
    default_config: dict, schema_path: Path
) -> None:
    default_config["benchmark"]["n_clusters"] = 10
    cfg = validate_config(default_config, schema_path)
    for name, m in METHODS.items():
        assert m.needs in NEEDS, name
        s = _job(cfg, name)
        assert s["method"] == name
        assert (s["n_clusters"] is None) == (not m.k_given)
        assert callable(m.predict)
    assert set(HEAVY_METHODS) == {m for m, meth in METHODS.items() if meth.heavy}


def test_a_batch_of_light_methods_runs_where_each_of_them_would() -> None:
    """The workflow runs the light methods in one job per dataset and input (pixels, the
    iteration-0 kappa^max, every iteration's): a pixel batch runs on the benchmark datasets
    only, a kappa^max batch also on the group variants, so within a batch every method must
    factor out the same thing."""
    for m, meth in METHODS.items():
        if meth.heavy:
            continue
        if meth.needs == "none":
            assert meth.transforms == "none", m
        else:
            assert meth.transforms == "group", m


def test_schema_takes_its_method_names_from_the_table(schema_path: Path) -> None:
    schema = yaml.safe_load(schema_path.read_text())
    items = schema["properties"]["benchmark"]["properties"]["methods"]["items"]
    assert "enum" not in items  # the config check reads METHODS
    default = schema["properties"]["benchmark"]["properties"]["methods"]["default"]
    assert set(default) <= set(METHODS)


def test_the_rules_read_heavy_methods_from_the_table() -> None:
    root = Path(__file__).resolve().parents[1]
    text = (root / "src/ia_stages/pipeline/workflow/rules/benchmark_common.smk").read_text()
    assert "from ia_stages.benchmark.methods import HEAVY_METHODS" in text
    assert "HEAVY_METHODS = " not in text


def test_graph_settings_rerun_only_the_graph_methods(default_config: dict, schema_path: Path):
    cfg = validate_config(default_config, schema_path)
    edited = copy.deepcopy(default_config)
    edited["benchmark"]["graph_k"] = 7
    edited = validate_config(edited, schema_path)
    changed = {m for m in METHODS if _job(cfg, m) != _job(edited, m)}
    # IA's read-out graph is readout.k: the input graph's k does not rerun IA
    assert changed == {"spectral_knn", "community_knn_k", "community_knn"}
    edited = copy.deepcopy(default_config)
    edited["datasets"]["mnist_rot"]["settings"] = {"readout": {"k": 7}}
    edited = validate_config(edited, schema_path)
    changed = {m for m in METHODS if _job(cfg, m) != _job(edited, m)}
    # the ablations are IA with another kernel: its read-out graph too; the graph baselines
    # read the read-out's settings but their own k
    assert changed == {"ia", "ia_k", "ia_kavg_k", "ia_ksoft_k", "spectral_knn",
                       "community_knn_k", "community_knn"}  # fmt: skip
    assert _job(edited, "community_knn")["graph_k"] == 10


def test_graph_baselines_on_planted_groups() -> None:
    from ia_stages.benchmark.metrics import accuracy
    from ia_stages.kmax import KappaMaxResult

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 10)
    P = rng.normal(size=(3, 4))[y] * 10 + rng.normal(size=(30, 4))
    sq = ((P[:, None] - P[None]) ** 2).sum(-1)
    km = KappaMaxResult(np.exp(-sq), np.zeros((30, 30, 3)), sq)
    readout = Settings.from_dict(
        {"readout": {"community": "leiden", "with_k": "leiden", "resolution": 1.0}}
    ).to_dict()["readout"]
    for name in ("spectral_knn", "community_knn_k", "community_knn"):
        job = Job(P, None, 3, {"settings": {"readout": readout}, "graph_k": 5}, [km], seed=0)
        labels, _ = METHODS[name].predict(job)
        assert accuracy(y, labels) == 1.0, name
    tree = {"readout": {"kind": "graph", "k": 5}, "stop": {"rule": "stability", "n_seeds": 3}}
    settings = {"settings": Settings.from_dict(tree).to_dict()}
    labels, extra = METHODS["ia_k"].predict(Job(P, None, 3, settings, [km, km], seed=0))
    assert accuracy(y, labels) == 1.0
    assert extra["pred_iter"][1].shape == (2, 30)
    assert extra["attrs"]["stopped_at"] == 1  # the graph did not change: a fixed point


def _set(*path, value):
    def edit(cfg: dict) -> None:
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value

    return edit


BAD = {
    "k zero": (_set("datasets", "mnist_rot", "settings", "attention", "k", value=0),
               "attention.k"),
    "k equal to n": (_set("datasets", "mnist_rot", "settings", "attention", "k", value=300),
                     "attention.k must satisfy 1 <= k < n (n=300)"),
    "unknown kind": (_set("datasets", "mnist_rot", "settings", "attention", "kind",
                          value="sparse"), "attention.kind"),
    "unknown bandwidth": (
        _set("datasets", "affnist", "settings", "attention", "bandwidth", value="global"),
        "attention.bandwidth",
    ),
    "unknown community": (_set("settings", "readout", "community", value="louvain"),
                          "readout.community"),
    "unknown IA read-out": (_set("settings", "readout", "kind", value="kmeans"), "readout.kind"),
    "graph k not below n": (_set("benchmark", "graph_k", value=300), "benchmark.graph_k"),
    "unknown stop rule": (_set("settings", "stop", "rule", value="never"), "stop.rule"),
    "unknown method": (_set("benchmark", "methods", value=["kmeans", "dbscan"]), "methods.1"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_graph_settings_give_one_line_naming_the_key(
    case: str, default_config: dict, schema_path: Path
) -> None:
    edit, needle = BAD[case]
    edit(default_config)
    with pytest.raises(ConfigError) as info:
        validate_config(default_config, schema_path)
    msg = str(info.value)
    assert "\n" not in msg and needle in msg, msg


def test_dense_attention_leaves_the_means_settings_as_they_were(
    default_config: dict, schema_path: Path
) -> None:
    cfg = validate_config(default_config, schema_path)
    s = stage_settings(cfg, "means", "shapes3")
    assert set(s["settings"]) == {"beta", "init", "mean", "attention", "group", "mirror"}
    assert s["settings"]["attention"]["kind"] == "dense"
    knn = stage_settings(cfg, "means", "mnist_rot")
    assert knn["settings"]["attention"]["kind"] == "knn"


def test_the_ablation_is_ia_with_the_kernel_in_place_of_kmax() -> None:
    """run_ia's ``kernel`` (the kappa^avg / kappa^soft rows): given kappa^max itself it is the
    plain IA; given a pooled kernel it is called once per iteration read out, on that
    iteration's features, and nothing else of IA changes; the kNN path refuses it."""
    from dataclasses import replace

    from ia_stages.data.render import letter, render
    from ia_stages.ia.distances import kmax
    from ia_stages.ia.loop import run_ia
    from ia_stages.kmax.grid import GridSettings, group_kernel

    rng = np.random.default_rng(2)
    p = np.column_stack([rng.uniform(0, 2 * np.pi, 12), rng.uniform(-1, 1, (12, 2))])
    X = np.concatenate(
        [render(letter(ch, 14), (32, 32), params=p[i::3], psf=1.0) for i, ch in enumerate("RFP")]
    ).astype(float)
    s = Settings.from_dict({"iterations": 1, "n_clusters": 3})
    ref = run_ia(X, s, 0)
    same = run_ia(X, s, 0, kernel=lambda V, st: kmax(V, st))
    np.testing.assert_array_equal(same.partitions, ref.partitions)
    np.testing.assert_array_equal(same.labels, ref.labels)
    seen = []

    def pooled(V, st):
        seen.append(np.array(V))
        return group_kernel(V, beta=st.beta, sigma=st.sigma, grid=GridSettings(n_angles=12))

    res = run_ia(X, s, 0, kernel=pooled)
    assert len(seen) == res.partitions.shape[0] == 2
    np.testing.assert_array_equal(seen[0], X)
    np.testing.assert_array_equal(seen[1], res.steps[0].features)
    assert res.labels.max() + 1 == 3
    with pytest.raises(ValueError, match=r"^kernel: "):
        run_ia(X, replace(s, path=replace(s.path, mode="candidates")), 0, kernel=pooled)
