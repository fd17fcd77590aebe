"""The group tables: the groups of ``benchmark.groups`` as dataset variants (config), their
rows in Tables 1-3 (bench_tables), the theory stage's group checks on rendered data, the
one-line error for a method that cannot use the dataset's group. The group rows end to end:
tests/test_benchmark_workflow.py (its tiny config runs affnist under se2 and affine)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

from ia_stages.benchmark.methods import METHODS
from ia_stages.benchmark.metrics import accuracy
from ia_stages.benchmark.theory import (
    exact_warp,
    random_group_params,
    random_transforms,
    rendered_invariance_error,
)
from ia_stages.core.groups import SE2, make_group
from ia_stages.pipeline.benchmark_config import cluster_settings, data_of, group_variants
from ia_stages.pipeline.config import ConfigError, stage_settings, validate_config
from ia_stages.pipeline.stages import bench_tables
from ia_stages.pipeline.store import write_store

from .conftest import ROOT

BENCH_GROUPS = yaml.safe_load((ROOT / ".test" / "config" / "bench_groups.yaml").read_text())


def _cfg(**benchmark) -> dict:
    cfg = copy.deepcopy(BENCH_GROUPS)
    cfg["benchmark"].update(benchmark)
    return cfg


# ---------------------------------------------------------------- config


def _group(cfg: dict, name: str) -> dict:
    """A validated dataset's group settings."""
    return cfg["datasets"][name]["settings"]["group"]


def test_each_listed_group_other_than_its_own_is_a_variant_of_the_dataset() -> None:
    cfg = validate_config(_cfg())
    assert group_variants(cfg) == {
        f"{d}@{g}": d for d in ("mnist_rot", "affnist") for g in ("similarity", "affine")
    }
    for name, base in group_variants(cfg).items():
        variant, own = cfg["datasets"][name], cfg["datasets"][base]
        assert data_of(name) == base
        # the base's tree with the group's name: bounds and refinement settings kept
        assert _group(cfg, name) == {**_group(cfg, base), "name": name.split("@")[1]}
        strip = {**variant["settings"], "group": None}
        assert {**variant, "settings": strip} == {
            **own,
            "settings": {**own["settings"], "group": None},
        }
        kmax = stage_settings(cfg, "kmax", name)["settings"]
        assert kmax["group"]["name"] == name.split("@")[1]
    assert validate_config(cfg) == cfg  # a validated config validates to itself


def test_without_groups_the_config_has_no_variants_and_the_jobs_keep_their_settings() -> None:
    plain = validate_config(_cfg(groups=[]))
    grouped = validate_config(_cfg())
    assert group_variants(plain) == {}
    assert not any("@" in name for name in plain["datasets"])
    for d in ("mnist_rot", "affnist"):
        for m in BENCH_GROUPS["benchmark"]["methods"]:
            s = cluster_settings(grouped, d, m, 0, "numpy")
            assert s == cluster_settings(plain, d, m, 0, "numpy")
            assert "data" not in s


def test_a_variant_job_labels_its_base_dataset_and_records_its_group() -> None:
    cfg = validate_config(_cfg())
    s = cluster_settings(cfg, "affnist@affine", "ia_k", 0, "numpy")
    assert s["data"] == "affnist" and s["settings"]["group"]["name"] == "affine"
    given = BENCH_GROUPS["datasets"]["affnist"]["settings"]["group"]["shear"]
    assert s["settings"]["group"]["shear"] == given


def test_a_dataset_name_with_the_variant_separator_is_refused_in_one_line() -> None:
    cfg = _cfg()
    cfg["datasets"]["mnist_rot@mine"] = copy.deepcopy(cfg["datasets"]["mnist_rot"])
    with pytest.raises(ConfigError, match=r"^config key 'datasets.mnist_rot@mine': ") as err:
        validate_config(cfg)
    assert "\n" not in str(err.value)
    cfg = validate_config(_cfg())  # a variant edited by hand is not the variant any more
    cfg["datasets"]["affnist@affine"]["n"] = 7
    with pytest.raises(ConfigError, match=r"^config key 'datasets.affnist@affine': "):
        validate_config(cfg)


@pytest.mark.parametrize("method", [m for m, meth in METHODS.items() if meth.transforms == "se2"])
def test_a_method_that_cannot_use_the_datasets_group_is_a_one_line_config_error(method) -> None:
    cfg = _cfg(methods=["kmeans", method])
    cfg["datasets"]["affnist"]["settings"]["group"]["name"] = "affine"
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    msg = str(err.value)
    assert msg.startswith("config key 'benchmark.methods.1': ") and "\n" not in msg
    assert "'affine'" in msg and "datasets.affnist.settings.group" in msg
    cfg["datasets"]["affnist"]["settings"]["group"] = {"name": "se2"}
    cfg["datasets"]["affnist"]["settings"]["mirror"] = True
    with pytest.raises(ConfigError, match="'se2\\+mirror'"):
        validate_config(cfg)


def test_pixel_and_group_methods_run_on_a_dataset_with_any_group() -> None:
    usable = [m for m, meth in METHODS.items() if meth.transforms != "se2"]
    cfg = _cfg(methods=usable, groups=[])
    cfg["datasets"]["affnist"]["settings"]["group"]["name"] = "affine"
    out = validate_config(cfg)
    assert cluster_settings(out, "affnist", "ia_k", 0, "numpy")["settings"]["group"]["name"] == (
        "affine"
    )
    assert cluster_settings(out, "affnist", "kmeans", 0, "numpy")["settings"] == {}


def test_a_group_name_outside_the_schema_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^config key 'benchmark.groups.1': "):
        validate_config(_cfg(groups=["se2", "projective"]))
    with pytest.raises(ConfigError, match=r"^config key 'benchmark.groups.affnist.0': "):
        validate_config(_cfg(groups={"affnist": ["projective"]}))


def test_a_mapping_of_groups_makes_variants_of_the_named_datasets_only() -> None:
    cfg = validate_config(_cfg(groups={"affnist": ["affine"]}))
    assert group_variants(cfg) == {"affnist@affine": "affnist"}
    assert "mnist_rot@affine" not in cfg["datasets"]
    assert _group(cfg, "affnist@affine")["name"] == "affine"
    assert validate_config(cfg) == cfg
    with pytest.raises(ConfigError, match=r"^config key 'benchmark.groups.mnist': ") as err:
        validate_config(_cfg(groups={"mnist": ["affine"]}))  # not a benchmark dataset
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- tables


def _store(path: Path, attrs: dict, **arrays) -> Path:
    ds = xr.Dataset({k: (("sample",), v) for k, v in arrays.items()})
    ds.attrs = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in attrs.items()}
    write_store(ds, path)
    return path


def test_table1_puts_the_variants_rows_on_their_base_dataset_with_their_group(tmp_path) -> None:
    labels = np.repeat(np.arange(3), 4)
    data = _store(tmp_path / "data.zarr", {"settings": {"dataset": "affnist"}}, label=labels)
    rng = np.random.default_rng(0)
    preds = {g: rng.permutation(labels) for g in ("se2", "affine")}
    runs = []
    for g, name in (("se2", "affnist"), ("affine", "affnist@affine")):
        s = {"dataset": name, "method": "spectral_kmax"}
        if g != "se2":
            s |= {"data": "affnist", "settings": {"group": {"name": g}}}
        attrs = {"settings": s, "n_clusters": 3, "wall_seconds": 1.0}
        runs.append(_store(tmp_path / f"{g}.zarr", attrs, pred=preds[g]))
    s = {"dataset": "affnist", "method": "kmeans"}
    runs.append(_store(tmp_path / "km.zarr", {"settings": s, "n_clusters": 3,
                                              "wall_seconds": 1.0}, pred=labels))  # fmt: skip
    df = bench_tables.clustering(runs, [data], tmp_path / "t1")
    ours = df[df.origin == "run here"].set_index("group")
    assert ours.dataset.tolist() == ["affnist"] * 3
    assert ours.loc["-", "method"] == "kmeans" and ours.loc["-", "acc_mean"] == 1.0
    for g in ("se2", "affine"):
        assert ours.loc[g, "acc_mean"] == pytest.approx(accuracy(labels, preds[g]))
    assert ours.loc["affine", "method_label"].endswith("[affine]")
    assert "[" not in ours.loc["se2", "method_label"]
    assert "| affine " in (tmp_path / "t1.md").read_text()


def test_table3_gives_cpu_per_pair_per_group_and_its_ratio_to_se2(tmp_path) -> None:
    stores = []
    for g, cpu in (("se2", 2.0), ("similarity", 5.0), ("affine", 7.0)):
        name = "affnist" if g == "se2" else f"affnist@{g}"
        s = {"dataset": name} | ({} if g == "se2" else {"settings": {"group": {"name": g}}})
        for b, pairs in enumerate((300, 100)):
            path = tmp_path / name / "iter0" / f"{b}.zarr"
            path.parent.mkdir(parents=True, exist_ok=True)
            attrs = {"settings": s, "stage": "kmax-block", "wall_seconds": 1.0,
                     "cpu_seconds": cpu / 2, "pairs": pairs}  # fmt: skip
            stores.append(_store(path, attrs, x=np.zeros(1)))
    df = bench_tables.cost(stores, tmp_path / "t3").set_index("group")
    assert (df.dataset == "affnist").all() and (df.jobs == 2).all()
    assert df.loc["se2", "cpu_us_per_pair"] == pytest.approx(1e6 * 2.0 / 400)
    assert df.loc["similarity", "cpu_ratio_to_se2"] == pytest.approx(2.5)
    assert df.loc["affine", "cpu_ratio_to_se2"] == pytest.approx(3.5)
    assert df.loc["se2", "cpu_ratio_to_se2"] == 1.0


# ---------------------------------------------------------------- theory


def test_random_group_params_draw_se2_as_before_and_stay_within_the_bounds() -> None:
    a = random_group_params(np.random.default_rng(4), 5, SE2(), 2.0)
    np.testing.assert_array_equal(a, random_transforms(np.random.default_rng(4), 5, 2.0))
    g = make_group("affine", scale=(0.5, 2.0), anisotropy=4.0, shear=0.5)
    p = random_group_params(np.random.default_rng(4), 400, g, 2.0, fraction=0.25)
    np.testing.assert_array_equal(p[:, :3], random_transforms(np.random.default_rng(4), 400, 2.0))
    lo, hi, t_max = g.bounds.limits()
    assert p.shape == (400, 6)
    assert (p[:, 3] >= 0.25 * lo).all() and (p[:, 3] <= 0.25 * hi).all()
    norm = np.hypot(p[:, 4], p[:, 5])
    assert (norm <= 0.25 * t_max).all()
    assert norm.max() > 0.2 * t_max and (p[:, 5] < -0.1 * t_max).any()  # it uses the freedom


def test_exact_warp_matches_an_outline_rendered_under_the_same_affine_map() -> None:
    """The floor's reference: the rendering under tau is the exact warp of the upright one
    (up to the pixels' integration), so the floor measures the data, not a convention."""
    from ia_stages.data.render import letter, render

    g = make_group("affine")
    p = random_group_params(np.random.default_rng(2), 1, g, 0.5, fraction=0.5)[0]
    shape = (40, 40)
    up = render(letter("F", 18.0), shape, psf=1.5, supersample=8)[0]
    got = render(letter("F", 18.0), shape, p[:3], linear=g.matrix(p), psf=1.5, supersample=8)[0]
    s = np.sqrt(abs(np.linalg.det(g.matrix(p))))
    close = np.linalg.norm(s * got - exact_warp(up, p, g)) / np.linalg.norm(up)
    other = np.linalg.norm(s * got - exact_warp(up, g.inverse(p), g)) / np.linalg.norm(up)
    assert close < 0.1 and other > 4 * close  # the inverse map: the convention is tested


def test_the_rendered_floor_is_larger_under_scale_and_shear_than_under_rotations() -> None:
    """Gaussian smoothing commutes with rotations, not with scaling and shear: the data's own
    floor beside the invariance error says how invariant a kernel could be on the renderings."""

    def kernel(X):
        from ia_stages.kmax import kappa_max

        return kappa_max(X, beta=2.0, sigma=2.0)

    kw = {"pairs": 1, "renderings": 2, "psf": 1.0, "sigma": 2.0}
    se2 = rendered_invariance_error(kernel, (40, 40), np.random.default_rng(0), **kw)
    aff = rendered_invariance_error(
        kernel, (40, 40), np.random.default_rng(0), group=make_group("affine"), fraction=1.0, **kw
    )
    assert 0 < se2.floor < 0.01 < aff.floor
    assert np.isnan(rendered_invariance_error(kernel, (40, 40), np.random.default_rng(0),
                                              pairs=1, renderings=1).floor)  # fmt: skip
