"""Figures a person reads at a glance: one bar per method with a colour of its own and IA picked
out; the gallery's rows, singletons together in one row, and its title above the first row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from matplotlib.colors import to_hex

from ia_stages.benchmark.methods import METHODS
from ia_stages.pipeline.stages import figures
from ia_stages.pipeline.store import write_store


@pytest.fixture
def captured(monkeypatch):
    """The figure a figure function draws, kept open instead of saved."""
    kept = {}

    def keep(fig, out, caption):
        kept["fig"] = fig
        fig.text(0.01, 0.005, caption, fontsize=8.5)

    monkeypatch.setattr(figures, "_save", keep)
    return kept


def _table(tmp_path, methods, datasets=("mnist_rot", "affnist")):
    rows = []
    for d in datasets:
        for k, m in enumerate(methods):
            for name in (m, f"{m}@iter0", f"{m}@iter1") if m.startswith("ia") else (m,):
                acc = 0.5 + 0.02 * k
                rows.append({"dataset": d, "n": 100, "method": name, "method_label": name,
                             "acc_mean": acc, "acc_std": 0.01, "origin": "run here"})  # fmt: skip
    path = tmp_path / "clustering.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_benchmark_figure_has_one_bar_per_method_and_a_colour_per_method(tmp_path, captured):
    methods = list(METHODS)
    figures.benchmark([str(_table(tmp_path, methods))], tmp_path / "b.png")
    fig = captured["fig"]
    ax = fig.axes[0]
    bars = [p for p in ax.patches]
    assert len(bars) == len(methods) * 2  # per-iteration rows are not drawn
    from matplotlib.container import BarContainer

    bar_sets = [c for c in ax.containers if isinstance(c, BarContainer)]
    by_label: dict[str, set] = {}
    for container in bar_sets:
        colours = {to_hex(b.get_facecolor()) for b in container.patches}
        assert len(colours) == 1
        by_label[container.get_label()] = colours
    assert len({c for cs in by_label.values() for c in cs}) == len(methods)  # all distinct
    edges = {c.get_label(): c.patches[0].get_linewidth() for c in bar_sets}
    assert all((edges[METHODS[m].label] > 0) == m.startswith("ia") for m in methods)
    legend = fig.legends[0]
    fig.canvas.draw()
    box = legend.get_window_extent()
    inside = fig.bbox
    assert box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0
    assert box.y1 <= ax.get_window_extent().y0  # below the axes, not over the bars


def _classes_stores(tmp_path, sizes):
    rng = np.random.default_rng(0)
    n, H = int(sum(sizes)), 12
    pred = np.repeat(np.arange(len(sizes)), sizes)
    data = xr.Dataset({"features": (("sample", "y", "x"), rng.random((n, H, H)))},
                      attrs={"dataset": "mine"})  # fmt: skip
    cl = xr.Dataset(
        {
            "cluster": (("sample",), pred),
            "distance": (("sample",), rng.random(n)),
            "pose": (("sample", "param"), np.zeros((n, 3))),
            "class_average": (("cluster_id", "y", "x"), rng.random((len(sizes), H, H))),
            "size": (("cluster_id",), np.asarray(sizes)),
            "sample_name": (("sample",), np.array([f"img{i}.png" for i in range(n)])),
        }
    )
    return str(write_store(data, tmp_path / "d.zarr")), str(write_store(cl, tmp_path / "c.zarr"))


def test_gallery_puts_singletons_in_one_row_below_a_title_that_overlaps_nothing(tmp_path, captured):
    inputs = _classes_stores(tmp_path, [5, 3, 1, 1, 1])
    figures.classes(list(inputs), tmp_path / "g.png")
    fig = captured["fig"]
    grid = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    rows = {ax.get_subplotspec().rowspan.start for ax in grid}
    assert len(rows) == 3  # two clusters of several images, one row for the three singletons
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    top_row = [ax for ax in grid if ax.get_subplotspec().rowspan.start == 0]
    highest = max(ax.get_tightbbox(renderer).y1 for ax in top_row)
    assert title.y0 > highest  # the title sits above the first row's panel titles
    last = [ax for ax in grid if ax.get_subplotspec().rowspan.start == 2]
    assert any("unassigned" in t.get_text() for ax in last for t in ax.texts)
    assert sum(bool(ax.images) for ax in last) == 3  # the three single images


def test_gallery_aligns_members_by_the_datasets_group(tmp_path, captured):
    """The members' poses are the dataset group's: a pose whose mirror flag is set shows the
    member's mirror image (the store's settings name the group), not the member turned."""
    import json

    rng = np.random.default_rng(1)
    V = rng.random((3, 12, 12))
    pose = np.array([[0.0, 0, 0, 0], [0.0, 0, 0, 1], [0.0, 0, 0, 1]])
    data = xr.Dataset({"features": (("sample", "y", "x"), V)}, attrs={"dataset": "mine"})
    cl = xr.Dataset(
        {
            "cluster": (("sample",), np.zeros(3, int)),
            "distance": (("sample",), np.array([0.0, 0.1, 0.2])),
            "pose": (("sample", "param"), pose),
            "class_average": (("cluster_id", "y", "x"), V[:1]),
            "size": (("cluster_id",), np.array([3])),
            "sample_name": (("sample",), np.array(["a.png", "b.png", "c.png"])),
        },
        attrs={"settings": json.dumps({"settings": {"group": {"name": "se2"}, "mirror": True}})},
    )
    inputs = [
        str(write_store(data, tmp_path / "d.zarr")),
        str(write_store(cl, tmp_path / "c.zarr")),
    ]
    figures.classes(inputs, tmp_path / "g.png")
    panels = [ax.images[0].get_array() for ax in captured["fig"].axes if ax.images]
    np.testing.assert_allclose(panels[1], V[0], atol=1e-6)  # pose identity
    np.testing.assert_allclose(panels[2], V[1, :, ::-1], atol=1e-6)  # the mirror image


def test_benchmark_figure_draws_one_bar_per_method_and_group(tmp_path, captured):
    rows = [
        {"dataset": "affnist", "n": 100, "method": m, "group": g, "method_label": m,
         "acc_mean": 0.5, "acc_std": 0.01, "origin": "run here"}
        for m, g in (("kmeans", "-"), ("ia_k", "se2"), ("ia_k", "similarity"), ("ia_k", "affine"))
    ]  # fmt: skip
    path = tmp_path / "clustering.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    figures.benchmark([str(path)], tmp_path / "b.png")
    from matplotlib.container import BarContainer

    ax = captured["fig"].axes[0]
    bars = {c.get_label(): c.patches[0] for c in ax.containers if isinstance(c, BarContainer)}
    label = METHODS["ia_k"].label
    assert set(bars) == {METHODS["kmeans"].label, label, f"{label} [similarity]",
                         f"{label} [affine]"}  # fmt: skip
    assert bars[label].get_hatch() is None and bars[f"{label} [affine]"].get_hatch()
    assert bars[f"{label} [affine]"].get_facecolor() == bars[label].get_facecolor()
