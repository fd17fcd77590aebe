"""The similarity and affine groups (with mirrors): A(params), dA/dparams, compose, inverse,
bounds."""

import copy
import re

import numpy as np
import pytest

from ia_stages.core.groups import SE2, AffineFamily, GroupBounds, group_of, make_group
from ia_stages.pipeline.config import (
    ConfigError,
    stage_settings,
    stage_settings_json,
    validate_config,
)
from ia_stages.pipeline.stages.common import job_tree
from ia_stages.settings import GroupSettings

GROUPS = [
    make_group("similarity"),
    make_group("affine"),
    make_group("se2", mirror=True),
    make_group("similarity", mirror=True),
    make_group("affine", mirror=True),
]


def _random(group, rng, n):
    p = np.zeros((n, group.n_params))
    p[:, 0] = rng.uniform(-np.pi, np.pi, n)
    p[:, 1:3] = rng.normal(0, 3, (n, 2))
    if group.n_extra:
        p[:, 3] = rng.uniform(-0.2, 0.2, n)
    if group.n_extra == 3:
        p[:, 4] = rng.uniform(-0.2, 0.2, n)
        p[:, 5] = rng.uniform(-0.3, 0.3, n)
    if group.mirror:
        p[:, -1] = rng.integers(0, 2, n)
    return p


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: f"{g.name}-{g.mirror}")
def test_jacobian_matches_finite_differences(group):
    rng = np.random.default_rng(0)
    p = _random(group, rng, 5)
    dA, db = group.jacobian(p)
    h = 1e-6
    for k in range(group.n_continuous):
        e = np.zeros(group.n_params)
        e[k] = h
        fd = (group.matrix(p + e) - group.matrix(p - e)) / (2 * h)
        np.testing.assert_allclose(dA[:, k], fd, atol=1e-8)
        fb = (group.translation(p + e) - group.translation(p - e)) / (2 * h)
        np.testing.assert_allclose(db[:, k], fb, atol=1e-8)


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: f"{g.name}-{g.mirror}")
def test_compose_inverse_identities(group):
    rng = np.random.default_rng(1)
    p, q, r = (_random(group, rng, 7) for _ in range(3))
    ident = group.identity(7)

    def same(a, b):
        np.testing.assert_allclose(group.matrix(a), group.matrix(b), atol=1e-10)
        np.testing.assert_allclose(group.translation(a), group.translation(b), atol=1e-9)

    same(group.compose(p, group.inverse(p)), ident)
    same(group.compose(group.inverse(p), p), ident)
    same(group.compose(group.compose(p, q), r), group.compose(p, group.compose(q, r)))
    same(group.compose(p, ident), p)
    # from_matrix inverts matrix: the parameters come back
    back = group.from_matrix(group.matrix(p), group.translation(p))
    np.testing.assert_allclose(back, p, atol=1e-10)
    # composition is that of the sampling maps tau(x) = A x + b
    A = group.matrix(p) @ group.matrix(q)
    np.testing.assert_allclose(group.matrix(group.compose(p, q)), A, atol=1e-10)


def test_matrix_parts():
    g = make_group("affine", mirror=True)
    p = np.array([0.0, 1.0, 2.0, np.log(1.1), 0.2, 0.0, 1.0])
    A = g.matrix(p)
    np.testing.assert_allclose(A, 1.1 * np.array([[np.exp(0.2), 0.0], [0.0, -np.exp(-0.2)]]))
    assert np.isclose(abs(np.linalg.det(A)), 1.1**2) and np.isclose(g.scale(p), 1.1)
    # log_stretch_1 stretches along the diagonals: expm([[0, t], [t, 0]])
    t = 0.3
    q = np.array([0.0, 0.0, 0.0, 0.0, 0.0, t, 0.0])
    np.testing.assert_allclose(g.matrix(q), [[np.cosh(t), np.sinh(t)], [np.sinh(t), np.cosh(t)]])
    # SE(2)'s parameters embed unchanged
    se = np.array([0.3, 1.0, -2.0])
    np.testing.assert_allclose(g.matrix(g.embed(se)), SE2().matrix(se))


def test_the_bounded_set_holds_rotations_on_either_side_and_inverses():
    """The bounds depend on a map's singular values only: R1 A R2 and A^-1 of an element A
    within them lie within them (the parameters from_matrix returns are their own clip), and
    the axis ratio is the largest that diag(e^a, e^-a) [[1, h], [0, 1]] reaches on the corners
    of the anisotropy and shear bounds (a grid over those bounds reaches no more)."""
    g = make_group("affine", anisotropy=1.4, shear=0.3)
    lo, hi, t_max = g.bounds.limits()
    rng = np.random.default_rng(5)
    n = 200
    radius = t_max * np.sqrt(rng.uniform(0, 1, n))
    angle = rng.uniform(-np.pi, np.pi, n)
    t = radius[:, None] * np.column_stack([np.cos(angle), np.sin(angle)])
    p = np.column_stack([rng.uniform(-np.pi, np.pi, n), rng.normal(size=(n, 2)),
                         rng.uniform(lo, hi, n), t])  # fmt: skip
    A = g.matrix(p)
    r1, r2 = (SE2().matrix(np.column_stack([rng.uniform(-np.pi, np.pi, n), np.zeros((n, 2))]))
              for _ in range(2))  # fmt: skip
    turned = g.from_matrix(r1 @ A @ r2, np.zeros((n, 2)))
    np.testing.assert_allclose(g.clip(turned), turned, atol=1e-12)
    np.testing.assert_allclose(np.hypot(turned[:, 4], turned[:, 5]), radius, atol=1e-9)
    inv = g.inverse(p)
    np.testing.assert_allclose(g.clip(inv), inv, atol=1e-12)
    np.testing.assert_allclose(g.matrix(inv) @ A, np.broadcast_to(np.eye(2), A.shape), atol=1e-12)
    a, h = np.meshgrid(np.linspace(-0.5, 0.5, 41) * np.log(1.4), np.linspace(-0.3, 0.3, 41))
    D = np.stack([np.stack([np.exp(a), np.exp(a) * h], -1),
                  np.stack([0 * a, np.exp(-a)], -1)], -2)  # fmt: skip
    sv = np.linalg.svd(D, compute_uv=False)
    assert np.isclose((sv[..., 0] / sv[..., 1]).max(), g.bounds.axis_ratio())
    assert np.isclose(np.exp(2 * t_max), g.bounds.axis_ratio())


def test_make_group_and_settings():
    assert make_group("se2") == SE2()
    g = make_group("similarity", mirror=True, scale=(0.9, 1.1))
    assert isinstance(g, AffineFamily)
    assert g.param_names == ("theta", "b0", "b1", "log_scale", "mirror")
    assert g.settings() == {
        "name": "similarity", "mirror": True, "scale": [0.9, 1.1], "anisotropy": 1.5,
        "shear": 0.25, "iters": 2, "half_iters": 6, "tol": 1e-9, "lam0": 1e-3, "floor": 1e-3,
    }  # fmt: skip
    # the object's settings are the tree's: they build the same group again
    settings = dict(g.settings())
    assert make_group(settings, mirror=settings.pop("mirror")) == g
    with pytest.raises(ValueError, match="a mirror image"):
        make_group("affine").from_matrix(np.diag([1.0, -1.0]), np.zeros(2))


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"name": "projective"}, r"^group\.name must be one of"),
        ({"scale": (0.0, 1.2)}, r"^group\.scale must be > 0"),
        ({"scale": (-1.0, 1.2)}, r"^group\.scale must be > 0"),
        ({"scale": (1.2, 0.8)}, r"^group\.scale is an inverted range"),
        ({"shear": 1.0}, r"^group\.shear must be >= 0 and < 1"),
        ({"shear": -0.1}, r"^group\.shear must be >= 0 and < 1"),
        ({"anisotropy": 0.5}, r"^group\.anisotropy must be >= 1"),
    ],
)
def test_bad_bounds_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key) as info:
        make_group(**{"group": "affine", **kwargs})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^mirror must be true or false"):
        make_group("affine", mirror="yes")


def test_bounds_limits():
    lo, hi, t = GroupBounds((0.8, 1.25), 1.5, 0.0).limits()
    assert np.isclose(np.exp(lo), 0.8) and np.isclose(np.exp(hi), 1.25)
    assert np.isclose(np.exp(2 * t), 1.5)
    # a shear h alone: the axis ratio of [[1, h], [0, 1]], ((h + sqrt(h^2 + 4)) / 2)^2
    h = 0.2
    assert np.isclose(GroupBounds(anisotropy=1.0, shear=h).axis_ratio(),
                      ((h + np.sqrt(h * h + 4)) / 2) ** 2)  # fmt: skip


def _config_with_group(default_config: dict, group: dict, mirror: bool = False) -> dict:
    cfg = copy.deepcopy(default_config)
    name = next(n for n, d in cfg["datasets"].items() if d["kind"] == "mnist3")
    own = cfg["datasets"][name].setdefault("settings", {})
    own["group"] = group
    own["mirror"] = mirror
    return cfg, name


def test_the_group_defaults_are_the_settings_tree_s():
    g = make_group("affine")
    assert g.settings() == {**GroupSettings(name="affine").__dict__, "mirror": False,
                            "scale": list(GroupSettings().scale)}  # fmt: skip


@pytest.mark.parametrize(
    "group, key",
    [
        ({"name": "projective"}, "group.name"),
        ({"name": "affine", "scale": [1.2, 0.9]}, "group.scale"),
        ({"name": "affine", "scale": [0.0, 1.2]}, "group.scale"),
        ({"name": "affine", "shear": 1.0}, "group.shear"),
        ({"name": "affine", "anisotropy": 0.5}, "group.anisotropy"),
        ({"name": "affine", "scale": [1.1, 1.3]}, "group.scale"),
    ],
)
def test_bad_group_config_names_the_key(default_config, group, key):
    cfg, name = _config_with_group(default_config, group)
    with pytest.raises(ConfigError, match=re.escape(f"'datasets.{name}.settings': {key}")) as info:
        validate_config(cfg)
    assert "\n" not in str(info.value)


def test_group_enters_the_stage_settings_and_the_hash(default_config):
    cfg, name = _config_with_group(default_config, {"name": "affine"}, mirror=True)
    cfg = validate_config(cfg)
    plain = validate_config(copy.deepcopy(default_config))
    for stage in ("kmax", "means", "classes"):
        s = stage_settings(cfg, stage, name)["settings"]
        assert s["group"]["name"] == "affine" and s["mirror"] is True
        assert stage_settings_json(cfg, stage, name) != stage_settings_json(plain, stage, name)
    assert plain["datasets"][name]["settings"]["group"] == {
        "name": "se2", "scale": [0.8, 1.25], "anisotropy": 1.5, "shear": 0.25,
        "iters": 2, "half_iters": 6, "tol": 1e-9, "lam0": 1e-3, "floor": 1e-3,
    }  # fmt: skip
    # the kmax stage builds the group from its settings
    assert group_of(job_tree(stage_settings(cfg, "kmax", name))).n_params == 7


def test_cluster_command_config_carries_the_group(tmp_path):
    from ia_stages.pipeline.cluster_command import images_config

    np.save(tmp_path / "x.npy", np.zeros((3, 8, 8)))
    cfg = images_config(tmp_path / "x.npy", {"group": "similarity", "mirror": True})
    ds = next(iter(cfg["datasets"].values()))
    assert ds["settings"] == {"group": "similarity", "mirror": True}
