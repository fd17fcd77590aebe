"""InvariantAttentionClustering as a scikit-learn estimator: parameters, validation, fitted
attributes, progress bar, reproducibility and scikit-learn's own estimator checks."""

from __future__ import annotations

from dataclasses import replace

import numba
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks

from ia_stages import InvariantAttentionClustering, kappa_max
from ia_stages.benchmark.metrics import accuracy
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp
from ia_stages.data.datasets import shapes3
from ia_stages.ia.loop import invariant_attention
from ia_stages.readout.linkage import cluster_by_distance
from ia_stages.readout.partition import graph_partition
from ia_stages.settings import (
    DEFAULT_PRESET,
    PRESETS,
    AttentionSettings,
    SearchSettings,
    Settings,
    StopSettings,
)

# Small, fast settings: a coarse search and one cheap invariant-mean step.
FAST_SEARCH = {"n_angles": 16, "n_candidates": 1, "coarse_iters": 0, "refine_iters": 10}
FAST_TREE = {"search": FAST_SEARCH, "mean": {"steps": 2, "sigmas": [0.0]}}


def fast(**settings) -> dict:
    """The estimator's ``config``: the fast settings with ``settings`` laid over them."""
    return {**FAST_TREE, **settings}


@pytest.fixture(autouse=True)
def one_numba_thread():
    """Tiny inputs: numba's thread start-up dominates on a loaded machine; use one thread."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


@pytest.fixture(scope="module")
def shapes():
    """Three base shapes, 4 rotated and shifted copies each, 32 x 32."""
    return shapes3(n_per_class=4, size=32, shift_px=(3, 3), rng=np.random.default_rng(3))


@pytest.fixture(scope="module")
def fitted(shapes):
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    est = InvariantAttentionClustering(
        n_clusters=3, preset="paper", sigma=1.0, config=fast(iterations=1)
    )
    est.fit(shapes.data)
    numba.set_num_threads(before)
    return est


# --- parameters ------------------------------------------------------------------------


def test_clone_get_params_set_params_roundtrip():
    config = Settings.from_dict({"search": {"n_angles": 24}})
    est = InvariantAttentionClustering(n_clusters=4, beta=5.0, config=config, random_state=3)
    params = est.get_params()
    assert params["beta"] == 5.0 and params["config"] is config and params["n_clusters"] == 4
    assert params["sigma"] is None  # left to the config and preset, not replaced in __init__
    assert len(params) <= 12
    copy = clone(est)
    assert copy is not est and copy.get_params() == params
    copy.set_params(beta=7.0, config={"iterations": 0})
    assert copy.get_params()["beta"] == 7.0 and copy._settings().iterations == 0
    assert est.get_params()["beta"] == 5.0  # the original is untouched
    # a default-constructed estimator clones too (this raised TypeError before)
    assert clone(InvariantAttentionClustering()).get_params() == (
        InvariantAttentionClustering().get_params()
    )


def test_clone_of_a_fitted_estimator_is_unfitted(fitted):
    copy = clone(fitted)
    assert not hasattr(copy, "labels_")
    assert copy.get_params() == fitted.get_params()


def test_none_parameters_take_the_config_then_the_preset():
    est = InvariantAttentionClustering(beta=12.0)
    s = est._settings()
    assert s.beta == 12.0
    default = PRESETS[DEFAULT_PRESET]
    assert s == replace(default, beta=12.0)
    assert s.iterations == 1
    paper = InvariantAttentionClustering(preset="paper")._settings()
    assert paper.attention.kind == "dense" and paper.beta == 30.0 and paper.iterations == 2
    assert paper == PRESETS["paper"]
    # a parameter given wins over the config, the config over the preset
    est = InvariantAttentionClustering(
        preset="paper", sigma=0.5, config={"sigma": 3.0, "beta": 4.0}
    )
    assert (est._settings().sigma, est._settings().beta) == (0.5, 4.0)


# --- bad input -------------------------------------------------------------------------

RNG = np.random.default_rng(0)
GOOD = RNG.random((4, 8, 8))


def _with(value, where=(1, 2, 3)):
    X = GOOD.copy()
    X[where] = value
    return X


@pytest.mark.parametrize(
    ("X", "needle"),
    [
        (_with(np.nan), "NaN"),
        (_with(np.inf), "infinity"),
        (_with(-np.inf), "infinity"),
        ([np.zeros((8, 8)), np.zeros((9, 8))], "ragged list"),
        ([[[0.0, 1.0], [2.0]], [[0.0, 1.0], [2.0, 3.0]]], "ragged list"),
        (GOOD[:1], "1 sample"),
        (GOOD[:0], "0 samples"),
        (GOOD.reshape(4, -1), "image_shape"),
        (GOOD[0, 0], "Reshape your data"),
        (np.zeros((2, 3, 4, 5, 6)), "expected images"),
        (GOOD + 1j, "Complex"),
        (np.full((4, 8, 8), "a"), "could not convert"),
    ],
    ids=[
        "nan", "inf", "-inf", "ragged", "ragged-rows", "one", "empty", "2d", "1d", "5d",
        "complex", "strings",
    ],
)  # fmt: skip
def test_bad_images_give_one_line_naming_the_problem(X, needle):
    with pytest.raises(ValueError, match=needle) as err:
        InvariantAttentionClustering(config=fast()).fit(X)
    assert "\n" not in str(err.value)
    assert "X" in str(err.value)


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"beta": 0.0}, "'beta' parameter .* must be None or a float in the range \\(0.0, inf\\)"),
        ({"beta": -1.0}, "'beta' parameter"),
        ({"beta": "big"}, "'beta' parameter"),
        ({"sigma": -2.0}, "'sigma' parameter"),
        ({"n_clusters": 0}, "'n_clusters' parameter"),
        ({"n_clusters": 5}, "n_clusters must be <= the 4 samples"),
        ({"n_clusters": (3, 2)}, "n_clusters must be a range"),
        ({"preset": "fastest"}, "'preset' parameter"),
        ({"verbose": -1}, "'verbose' parameter"),
        ({"background": "grey"}, "'background' parameter"),
        ({"group": "projective"}, "'group' parameter"),
        ({"config": 3}, "'config' parameter"),
        ({"config": {"iterations": -1}}, "^iterations must be >= 0"),
        ({"config": {"iterations": 1.5}}, "^iterations must be an integer"),
        ({"config": {"readout": {"threshold": -0.1}}}, r"^readout\.threshold must be > 0"),
        ({"config": {"readout": {"linkage": "ward"}}}, r"^readout\.linkage must be one of"),
        ({"config": {"init": "random"}}, "^init must be one of"),
        ({"config": {"normalization": "l1"}}, "^normalization must be one of"),
        ({"config": {"readout": {"kind": "magic"}}}, r"^readout\.kind must be one of"),
        ({"config": {"readout": {"kind": "spectral"}}}, "readout.kind 'spectral' needs n_clusters"),
        ({"config": {"search": {"n_angles": 2}}}, r"^search\.n_angles must be >= 4"),
        ({"config": {"attention": {"no_such_option": 1}}}, "attention has no key 'no_such_option'"),
        ({"config": {"attention": {"kind": "sparse"}}}, r"^attention\.kind must be one of"),
        ({"config": {"stop": {"rule": "early"}}}, r"^stop\.rule must be one of"),
        ({"config": {"attention": {"k": 0}}}, r"^attention\.k must be >= 1"),
        ({"config": {"attention": {"k": 4}}}, r"attention\.k must satisfy 1 <= k < n \(n=4\)"),
        ({"config": {"attention": {"k": 2.5}}}, r"^attention\.k must be an integer"),
        ({"config": {"readout": {"k": 9}}}, r"readout\.k must satisfy 1 <= k < n \(n=4\)"),
        ({"config": {"attention": {"symmetry": "both"}}}, r"^attention\.symmetry must be"),
        ({"config": {"attention": {"mean_steps": -1}}}, r"^attention\.mean_steps must be"),
        ({"config": {"attention": 3}}, "attention must be a mapping"),
        ({"config": {"readout": {"with_k": "kmeans"}}}, r"^readout\.with_k must be"),
        ({"config": {"readout": {"resolution": 0.0}}}, r"^readout\.resolution must be"),
        ({"config": {"stop": {"n_seeds": 1}}}, r"^stop\.n_seeds must be >= 2"),
        ({"config": {"stop": {"patience": 2}}}, "stop has no key 'patience'"),
        ({"config": {"mask": {"threshold": 0}}}, r"^mask\.threshold must be > 0"),
        ({"image_shape": (3, 3)}, "image_shape"),
    ],
)
def test_bad_parameters_give_one_line_naming_the_setting(params, needle):
    config = (
        {**FAST_TREE, **params.pop("config", {})}
        if isinstance(params.get("config", {}), dict)
        else params.pop("config")
    )
    with pytest.raises(ValueError, match=needle) as err:
        InvariantAttentionClustering(config=config, **params).fit(GOOD)
    assert "\n" not in str(err.value)


def test_uint8_lists_and_flattened_images_give_the_same_labels(shapes):
    X8 = np.round(shapes.data / shapes.data.max() * 255).astype(np.uint8)
    est = InvariantAttentionClustering(
        n_clusters=3, preset="paper", sigma=1.0, config=fast(iterations=0)
    )
    ref = est.fit(X8.astype(float)).labels_
    assert np.array_equal(est.fit(X8).labels_, ref)
    assert np.array_equal(est.fit(X8.astype(float).tolist()).labels_, ref)
    flat = clone(est).set_params(image_shape=(32, -1))
    assert np.array_equal(flat.fit(X8.reshape(len(X8), -1)).labels_, ref)
    assert flat.image_shape_ == (32, 32) and flat.n_features_in_ == 32 * 32


def test_kappa_max_names_the_bad_input():
    with pytest.raises(ValueError, match="Input U contains NaN") as err:
        kappa_max(_with(np.nan))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="Input V contains infinity"):
        kappa_max(GOOD, _with(np.inf))
    with pytest.raises(ValueError, match=r"V has images of \(8, 9\), expected \(8, 8\) as in U"):
        kappa_max(GOOD, RNG.random((3, 8, 9)))
    with pytest.raises(ValueError, match="U has shape"):
        kappa_max(GOOD[:, 0])


# --- fitted attributes -----------------------------------------------------------------


def test_fitted_attributes_shapes_and_classes(shapes, fitted):
    n, H, W = shapes.data.shape
    assert fitted.labels_.shape == (n,) and fitted.labels_.dtype == np.int64
    assert accuracy(shapes.label, fitted.labels_) == 1.0
    assert fitted.n_clusters_ == 3 and fitted.cluster_means_.shape == (3, H, W)
    assert fitted.poses_.shape == (n, 3) and fitted.distances_.shape == (n,)
    assert fitted.features_.shape == (n, H, W) and len(fitted.steps_) == fitted.n_iter_ == 1
    assert fitted.affinity_matrix_.shape == (n, n)
    assert fitted.image_shape_ == (H, W) and fitted.n_features_in_ == H * W


def test_poses_align_every_image_onto_its_cluster_mean(shapes, fitted):
    """warp(X[i], poses_[i]) lies on its cluster's mean: with u the smoothed unit-norm mean
    and v the smoothed unit-norm image, ``distances_`` is sqrt(||u||^2 + ||v||^2 - 2 <u, v o
    tau>) (kappa^max's squared distance) at tau = ``poses_``, and far below the distance to
    the other clusters' means."""
    X, sigma = shapes.data, fitted.settings_.sigma
    u = normalize(smooth(fitted.cluster_means_[fitted.labels_], sigma))
    v = normalize(smooth(X, sigma))
    moved = warp(v, fitted.poses_, interpolation=fitted.settings_.search.interpolation)
    at_pose = np.sqrt(np.maximum(2.0 - 2.0 * (u * moved).sum((1, 2)), 0.0))
    assert np.allclose(at_pose, fitted.distances_, atol=2e-3)
    assert fitted.distances_.max() < 0.1
    D = fitted.transform(X)  # (n, K)
    assert D.shape == (len(X), 3)
    own = D[np.arange(len(X)), fitted.labels_]
    assert np.allclose(own, fitted.distances_, atol=1e-6)
    others = np.where(np.eye(3, dtype=bool)[fitted.labels_], np.inf, D).min(1)
    assert own.max() < 0.5 * others.min()
    new = fitted.align(X[::2])
    assert np.array_equal(new.label, fitted.labels_[::2])
    assert np.allclose(new.distance, fitted.distances_[::2], atol=1e-6)
    assert fitted.align().params is fitted.poses_


def test_the_estimator_works_in_a_pipeline(shapes):
    pipe = make_pipeline(
        FunctionTransformer(lambda X: np.asarray(X) / 255.0),
        InvariantAttentionClustering(
            n_clusters=3, preset="paper", sigma=1.0, config=fast(iterations=0)
        ),
    )
    labels = pipe.fit_predict(shapes.data * 255.0)
    assert accuracy(shapes.label, labels) == 1.0


# --- presets, attention, read-out, stopping rule ----------------------------------------

# kNN attention and the read-out graph at a size that 12 images can carry
SMALL_GRAPH = {"attention": {"k": 3}, "readout": {"k": 3}}


def test_default_preset_uses_knn_attention_and_the_graph_readout(shapes):
    est = InvariantAttentionClustering(
        n_clusters=3, sigma=1.0, random_state=0, config=fast(**SMALL_GRAPH)
    ).fit(shapes.data)
    s = est.settings_
    assert DEFAULT_PRESET == "images"
    assert s.attention == AttentionSettings("knn", 3, "kth", "mutual", 0)
    assert s.readout.kind == "graph"
    step = est.steps_[0]
    # every column's mean aligns only its (mutual) 3 nearest: at most 3 non-zero weights
    assert step.neighbours is not None and step.neighbours.k == 3
    assert ((step.weights > 0).sum(0) <= 3).all()
    assert np.allclose(step.weights.sum(0), 1.0)
    # the labels are ia13's graph read-out of the chosen iteration's kappa^max
    ref = graph_partition(est.kmax_.sqdist, s.readout, 3, 0)  # random_state=0: seed 0
    assert np.array_equal(est.labels_, ref)
    assert s.readout.k == 3 and s.readout.with_k == "leiden"
    assert accuracy(shapes.label, est.labels_) == 1.0
    # the preset leaves the neighbour counts to the sizing rule; given ones are kept
    tiny = InvariantAttentionClustering()._settings()
    assert tiny.attention.k is None and tiny.readout.k is None


def test_preset_paper_reproduces_the_old_estimator(shapes):
    """preset='paper' is the paper's dense IA with the average-linkage read-out: the same
    labels as the default preset with those settings given, and as the library's dense
    iterations followed by the linkage read-out of the last features' kappa^max."""
    X = shapes.data[::2]
    paper = InvariantAttentionClustering(preset="paper", sigma=1.0, config=fast(iterations=2))
    a = paper.fit_predict(X)
    explicit = InvariantAttentionClustering(
        beta=30.0, sigma=1.0,
        config=fast(iterations=2, readout={"kind": "linkage", "threshold": 0.3,
                                          "linkage": "average"},
                    attention={"kind": "dense"}, stop={"rule": "none"},
                    path={"mode": "dense"}),
    ).fit_predict(X)  # fmt: skip
    steps = invariant_attention(X, fast(preset="paper", iterations=2), sigma=1.0)
    km = kappa_max(steps[-1].features, beta=30.0, settings=SearchSettings(**FAST_SEARCH),
                   sigma=1.0)  # fmt: skip
    ref = cluster_by_distance(km.sqdist, 0.3, "average")
    assert np.array_equal(a, explicit) and np.array_equal(a, ref)
    assert paper.n_iter_ == 2 and "rule 'none'" in paper.stop_reason_
    assert np.allclose(paper.features_, steps[-1].features)


@pytest.mark.parametrize(
    ("stop", "n_iter", "run", "reason"),
    [
        ("none", 3, 3, "last iteration"),
        ("partition", 1, 1, "agrees with 0"),
        ("stability", 1, 2, "community stability"),
    ],
)
def test_the_stopping_rule_chooses_and_records_the_iteration(shapes, stop, n_iter, run, reason):
    """Three iterations at most on three well-separated shapes: the read-out is right from
    the input on, so 'partition' stops after iteration 1 (its read-out agrees with the
    input's), 'stability' needs iteration 2 to see that the stability no longer rises, and
    'none' runs all three. The fitted attributes are those of the chosen iteration."""
    est = InvariantAttentionClustering(
        n_clusters=3, sigma=1.0, config=fast(iterations=3, stop={"rule": stop}, **SMALL_GRAPH)
    ).fit(shapes.data)
    assert (est.n_iter_, est.iterations_run_) == (n_iter, run)
    assert reason in est.stop_reason_ and "\n" not in est.stop_reason_
    assert est.partitions_.shape == (run + 1, len(shapes.data))
    assert np.array_equal(est.labels_, est.partitions_[n_iter])
    assert len(est.steps_) == n_iter and est.features_ is est.steps_[-1].features
    assert est.kmax_ is not est.steps_[-1].kmax  # the chosen features' own kappa^max
    assert accuracy(shapes.label, est.labels_) == 1.0


def test_a_config_dict_clones_and_round_trips():
    config = {
        "attention": {"k": 7, "symmetry": "union"},
        "readout": {"k": 12, "resolution": 0.5},
        "stop": {"rule": "partition", "min_ari": 0.8},
    }
    est = InvariantAttentionClustering(config=config)
    params = est.get_params()
    copy = clone(est)
    assert copy.get_params() == params and params["config"] == config
    s = copy._settings()
    # the dict's keys are laid over the preset's (mean_steps 0 stays)
    assert s.attention == AttentionSettings("knn", 7, "kth", "union", 0)
    assert s.readout.resolution == 0.5 and s.readout.k == 12
    assert s.stop == StopSettings("partition", 5, 0.8)


# --- progress and randomness -----------------------------------------------------------


def test_verbose_shows_a_progress_bar_and_quiet_shows_none(shapes, capsys):
    X = shapes.data[:6]
    InvariantAttentionClustering(sigma=1.0, verbose=0, config=fast(iterations=1)).fit(X)
    assert capsys.readouterr().err == ""
    InvariantAttentionClustering(sigma=1.0, verbose=1, config=fast(iterations=1)).fit(X)
    err = capsys.readouterr().err
    for stage in ("IA clustering", "iteration 1: kappa^max", "invariant means", "final"):
        assert stage in err
    assert "100%" in err


def test_random_state_reproduces_the_spectral_readout(shapes):
    est = InvariantAttentionClustering(
        n_clusters=3,
        sigma=1.0,
        random_state=7,
        config=fast(iterations=0, readout={"kind": "spectral"}),
    )
    a = est.fit_predict(shapes.data)
    b = clone(est).fit_predict(shapes.data)
    assert np.array_equal(a, b)
    assert accuracy(shapes.label, a) == 1.0


# --- scikit-learn's estimator checks ---------------------------------------------------


def _check_instance() -> InvariantAttentionClustering:
    return InvariantAttentionClustering(
        image_shape=(1, -1),
        sigma=0.0,
        config={
            "iterations": 1,
            "search": {"n_angles": 8, "n_candidates": 1, "coarse_iters": 0, "refine_iters": 5},
            "mean": {"steps": 1, "sigmas": [0.0]},
        },
    )


@parametrize_with_checks([_check_instance()])
def test_sklearn_estimator_checks(estimator, check):
    """scikit-learn's estimator checks (``parametrize_with_checks``, legacy set).

    The estimator clusters images ``(n, H, W)``. scikit-learn's checks feed 2-D arrays
    ``(n_samples, n_features)``, so they run on an instance with ``image_shape=(1, -1)``: every
    row is a 1 x n_features image (its rotations and shifts are real SE(2) transforms of a
    one-pixel-high strip). With ``image_shape=None`` the estimator's tags say
    ``two_d_array=False, three_d_array=True`` and scikit-learn runs no check at all, because
    it has no 3-D test data.

    All checks of the clusterer and transformer sets run and pass, except:

    - ``check_array_api_input``: skipped by scikit-learn unless ``SCIPY_ARRAY_API=1``; the
      estimator does not support the array API (it runs on numpy, or on cupy through
      :mod:`ia_stages.core.backend`, not through array-API dispatch).

    Sparse input is refused (as ``check_estimator_sparse_*`` require): images are dense.
    """
    check(estimator)
