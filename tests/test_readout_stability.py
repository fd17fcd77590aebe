"""The read-out's stability curve (ia_stages.ia.stability): it varies the setting the read-out
itself uses, so that at the value used it finds the read-out's own clusters, for every kind of
read-out and on both paths (dense, kNN)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ia_stages.data.render import letter, render
from ia_stages.ia.distances import kmax
from ia_stages.ia.loop import read_out
from ia_stages.ia.stability import read_out_stability
from ia_stages.readout import graph
from ia_stages.readout.graph import KnnDistances
from ia_stages.settings import Settings
from ia_stages.settings.sizing import sized


@pytest.fixture(scope="module")
def letters():
    """18 letters (3 classes, two fonts) rendered from outlines at random angles and shifts,
    their kappa^max and the default read-out's sized settings."""
    rng = np.random.default_rng(5)
    images = []
    for ch in "FKR":
        for i in range(6):
            params = np.array([[rng.uniform(0, 2 * np.pi), *rng.uniform(-1.5, 1.5, 2)]])
            font = ("DejaVu Sans", "DejaVu Serif")[i % 2]
            images.append(render(letter(ch, 16.0, font), (24, 24), params)[0])
    X = np.stack(images)
    settings = sized(Settings(), len(X))
    return kmax(X, settings).sqdist, settings.readout


def _at_chosen(stable):
    at = np.flatnonzero(stable.values == stable.chosen)
    assert at.size == 1, stable
    return int(at[0])


def test_the_graph_curve_reuses_the_read_outs_leiden_runs_and_finds_its_clusters(
    letters, monkeypatch
):
    sq, readout = letters
    assert readout.kind == "graph" and readout.community == "silhouette"
    labels = read_out(sq, readout, None, seed=3)
    runs = []
    original = graph._leidenalg_leiden
    monkeypatch.setattr(graph, "_leidenalg_leiden", lambda *a: runs.append(a) or original(*a))
    stable = read_out_stability(sq, readout, labels, seed=3)
    assert runs == []  # the read-out's sweep, kept: no Leiden run made twice
    assert stable.parameter == "resolution"
    np.testing.assert_array_equal(stable.values, sorted(readout.resolutions))
    at = _at_chosen(stable)
    assert stable.ari[at] == 1.0 and stable.n_clusters[at] == labels.max() + 1
    # the value used is one the silhouette allows: within tolerance / m of the best
    best = np.nanmax(stable.silhouette)
    assert stable.silhouette[at] >= best - readout.silhouette_tolerance / stable.n_clusters[at]
    # more resolution, more communities (Leiden's, on one graph: never fewer by much)
    assert stable.n_clusters[-1] >= stable.n_clusters[0]
    # another seed is another sweep: Leiden runs again
    read_out_stability(sq, readout, labels, seed=4)
    assert len(runs) == len(readout.resolutions)


def test_the_knn_path_with_every_sample_gives_the_dense_curve(letters):
    sq, readout = letters
    labels = read_out(sq, readout, None, seed=0)
    dense = read_out_stability(sq, readout, labels, seed=0)
    knn = read_out_stability(KnnDistances.dense(sq), readout, labels, seed=0)
    for field in ("values", "n_clusters", "ari", "silhouette"):
        np.testing.assert_array_equal(getattr(knn, field), getattr(dense, field))
    assert knn.chosen == dense.chosen


@pytest.mark.parametrize(
    "change, parameter",
    [
        ({"kind": "linkage", "threshold": 0.4}, "threshold"),
        ({"community": "leiden", "resolution": 0.5}, "resolution"),
        ({"community": "hdbscan", "min_cluster_size": 4}, "min_cluster_size"),
    ],
)
def test_a_fixed_setting_is_scaled_about_its_value(letters, change, parameter):
    sq, readout = letters
    readout = replace(readout, **change)
    labels = read_out(sq, readout, None, seed=0)
    stable = read_out_stability(sq, readout, labels, seed=0)
    assert stable.parameter == parameter
    assert stable.chosen == change[parameter]
    at = _at_chosen(stable)
    assert stable.ari[at] == 1.0
    assert stable.n_clusters[at] == np.unique(labels[labels >= 0]).size
    assert np.isnan(stable.silhouette).all()
    assert stable.values.min() < stable.chosen < stable.values.max()
    if parameter == "threshold":  # a larger threshold never finds more clusters
        assert np.all(np.diff(stable.n_clusters) <= 0)


def test_a_read_out_without_a_curve_is_named(letters):
    sq, readout = letters
    labels = np.zeros(sq.shape[0], dtype=np.int64)
    with pytest.raises(ValueError, match=r"readout\.kind 'spectral'"):
        read_out_stability(sq, replace(readout, kind="spectral"), labels)
    with pytest.raises(ValueError, match="hdbscan"):
        kd = KnnDistances.dense(sq)
        read_out_stability(kd, replace(readout, community="hdbscan"), labels)
