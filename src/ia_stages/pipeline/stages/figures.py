"""Stage ``figure``: the paper's Figures 2-5 as PNG, each with a title and a caption."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from ia_stages.pipeline.store import StoreError, read_store

CMAP = "gray"


def _save(fig, out: str | Path, caption: str) -> None:
    wrap = int(15 * fig.get_figwidth())  # characters of 8.5 pt text per line
    fig.text(0.01, 0.005, textwrap.fill(caption, wrap), fontsize=8.5, va="bottom", ha="left")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)


def _image_grid(fig, spec, images: np.ndarray, ncols: int, title: str) -> None:
    sub = spec.subgridspec(int(np.ceil(len(images) / ncols)), ncols, wspace=0.04, hspace=0.04)
    for k, im in enumerate(images):
        ax = fig.add_subplot(sub[k // ncols, k % ncols])
        ax.imshow(np.clip(im, 0, None), cmap=CMAP)
        ax.set_xticks([])
        ax.set_yticks([])
        if k == 0:
            ax.set_title(title, loc="left", fontsize=10)


def fig2(inputs: list[str], out: str | Path) -> None:
    """Kernel attention on blobs at iterations 0, 2 and 4. inputs: dataset, ka store."""
    data, ka = read_store(inputs[0]), read_store(inputs[1])
    y = data["label"].values
    feats = ka["features"].values
    its = [t for t in (0, 2, 4) if t < feats.shape[0]]
    fig, axes = plt.subplots(1, len(its), figsize=(4.2 * len(its), 4.6), squeeze=False)
    lim = np.abs(feats[0]).max() * 1.1
    for ax, t in zip(axes[0], its, strict=True):
        X = feats[t]
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="tab10", s=10, vmin=0, vmax=9)
        means = np.stack([X[y == k].mean(0) for k in np.unique(y)])
        ax.scatter(means[:, 0], means[:, 1], marker="x", c="k", s=80, label="class means")
        ax.set_title("input" if t == 0 else f"after {t} KA iterations")
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.suptitle("Figure 2: kernel attention clusters isotropic Gaussian blobs")
    fig.subplots_adjust(bottom=0.14, top=0.86)
    _save(
        fig,
        out,
        "Kernel attention (RBF, beta="
        f"{_beta(ka)}) replaces every point by a kernel-weighted mean; within a few "
        "iterations each blob collapses towards its mean (crosses).",
    )


def _beta(store) -> str:
    return str(json.loads(store.attrs.get("settings", "{}")).get("beta", "?"))


def fig3(inputs: list[str], out: str | Path) -> None:
    """The shapes dataset and KA's means. inputs: dataset, ka store."""
    data, ka = read_store(inputs[0]), read_store(inputs[1])
    X, y = data["features"].values, data["label"].values
    classes = np.unique(y)
    per = int(np.bincount(y).max())
    firsts = [int(np.flatnonzero(y == k)[0]) for k in classes]
    ka1 = ka["features"].values[1][firsts]
    plain = np.stack([X[y == k].mean(0) for k in classes])
    fig = plt.figure(figsize=(12, 6.4))
    gs = fig.add_gridspec(1, 2, width_ratios=[per, 2.2], wspace=0.15)
    _image_grid(fig, gs[0], X, per, "(a) dataset: one class per row")
    right = gs[1].subgridspec(2, 1, hspace=0.3)
    _image_grid(fig, right[0], ka1, len(classes), "(b) KA means (iter. 1)")
    _image_grid(fig, right[1], plain, len(classes), "(c) plain class means")
    fig.suptitle(
        "Figure 3: transformed dataset of three classes, and what kernel attention averages"
    )
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.1, top=0.9)
    names = ", ".join(str(c) for c in data["class_name"].values)
    _save(
        fig,
        out,
        f"(a) {len(X)} images ({names}), each a random rotation and translation of a "
        "base image. (b) Kernel attention's output for the first image of each class after one "
        "iteration and (c) the plain mean of each class: superpositions of misaligned copies, "
        "not meaningful images.",
    )


def fig4(inputs: list[str], out: str | Path) -> None:
    """IA weights and invariant means after iterations 1 and 2. inputs: iter1, iter2 stores."""
    stores = [read_store(p) for p in inputs]
    n = stores[0].sizes["sample"]
    ncols = int(np.ceil(n / 3))
    fig = plt.figure(figsize=(5 + 1.0 * ncols, 3.4 * len(stores)))
    gs = fig.add_gridspec(
        len(stores), 2, width_ratios=[1.2, ncols / 3 * 1.2], wspace=0.12, hspace=0.3
    )
    letters = "abcdefgh"
    for r, s in enumerate(stores):
        ax = fig.add_subplot(gs[r, 0])
        im = ax.imshow(s["weights"].values, cmap="viridis")
        fig.colorbar(im, ax=ax, fraction=0.046)
        ax.set_title(f"({letters[2 * r]}) weights W, iteration {r + 1}", fontsize=10)
        ax.set_xlabel("j")
        ax.set_ylabel("i")
        _image_grid(
            fig,
            gs[r, 1],
            s["features"].values,
            ncols,
            f"({letters[2 * r + 1]}) invariant means, iteration {r + 1}",
        )
    fig.suptitle("Figure 4: Invariant Attention weights and invariant means")
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.1, top=0.92)
    _save(
        fig,
        out,
        "W[i, j] = kappa^max(v_i, v_j) / sum_l kappa^max(v_l, v_j) is block-diagonal: "
        "images are similar up to rotation and translation only within their class. Each "
        "invariant mean is the W[:, j]-weighted mean of the aligned images (Algorithm 1), a "
        "sharp copy of its class's base image in some pose.",
    )


def fig5(inputs: list[str], out: str | Path) -> None:
    """Invariant mean of one dataset along Algorithm 1. inputs: dataset, mean-trace store."""
    data, tr = read_store(inputs[0]), read_store(inputs[1])
    X = data["features"].values
    snaps, steps = tr["snapshot"].values, tr["step"].values
    fig = plt.figure(figsize=(13, 4.6))
    gs = fig.add_gridspec(
        1, 2 + len(steps), width_ratios=[3.2] + [1] * len(steps) + [1.4], wspace=0.3
    )
    _image_grid(fig, gs[0], X, int(np.ceil(len(X) / 2)), "(a) inputs")
    for k, (s, im) in enumerate(zip(steps, snaps, strict=True)):
        ax = fig.add_subplot(gs[1 + k])
        ax.imshow(np.clip(im, 0, None), cmap=CMAP)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"({'bcdefg'[k]}) step {int(s)}", fontsize=10)
    ax = fig.add_subplot(gs[-1])
    ax.plot(tr["objective"].values)
    ax.set_xlabel("step")
    ax.set_title("objective f", fontsize=10)
    fig.suptitle("Figure 5: invariant mean with intra-class variation")
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.2, top=0.85)
    _save(
        fig,
        out,
        f"(a) {len(X)} handwritten digits, each rotated and shifted at random. "
        "(b-d) The invariant mean after 0, N/2 and N gradient steps of Algorithm 1 with "
        "greedy Gaussian smoothing (uniform weights); the objective sum_i w_i ||v_i o tau_i - "
        "mu||^2 is on the right.",
    )


def method_colours(methods: list[str]) -> dict[str, tuple]:
    """A distinct colour per method: IA's methods (keys starting with 'ia') in reds and
    oranges, every other method in one of the remaining tab20 colours (tab20b past 16)."""
    warm = [2, 3, 6, 7]  # tab20's oranges and reds
    ia = [m for m in methods if m.startswith("ia")]
    others = [m for m in methods if m not in ia]
    tab20, tab20b = plt.get_cmap("tab20"), plt.get_cmap("tab20b")
    cool = [tab20(k) for k in range(20) if k not in warm] + [tab20b(k) for k in range(20)]
    reds = [tab20(6), tab20(2), tab20(7), tab20(3), plt.get_cmap("Reds")(0.9)]
    out = {m: reds[k % len(reds)] for k, m in enumerate(ia)}
    out.update({m: cool[k % len(cool)] for k, m in enumerate(others)})
    return out


def benchmark(inputs: list[str], out: str | Path) -> None:
    """Table 1 as bars: ACC (mean +- std over seeds) per method, one group per dataset.

    One bar per method: IA at the iteration its stopping rule kept (Table 1's per-iteration
    rows are left out), IA's bars picked out by warm colours and a black edge.
    inputs: results/tables/clustering.csv (the rows run here are drawn).
    """
    # lazy: the method table and the settings tree (~40 ms), for this figure only
    from ia_stages.benchmark.methods import METHODS

    t = pd.read_csv(inputs[0])
    t = t[(t.origin == "run here") & ~t.method.astype(str).str.contains("@iter")]
    if "group" not in t:  # tables written before the group column
        t = t.assign(group="se2")
    datasets = list(dict.fromkeys(t.dataset))
    methods = sorted(dict.fromkeys(t.method), key=list(METHODS).index)
    bars = [(m, g) for m in methods for g in dict.fromkeys(t[t.method == m].group)]
    colours = method_colours(methods)
    hatches = {"similarity": "//", "affine": "xx"}  # SE(2) and pixel rows plain
    width_in = min(14.0, max(8.0, 0.3 * len(bars) * len(datasets)))
    fig, ax = plt.subplots(figsize=(width_in, 6.0))
    width = 0.84 / len(bars)
    for k, (m, g) in enumerate(bars):
        rows = [t[(t.dataset == d) & (t.method == m) & (t.group == g)] for d in datasets]
        acc = [100 * r.acc_mean.iloc[0] if len(r) else np.nan for r in rows]
        err = [100 * np.nan_to_num(r.acc_std.iloc[0]) if len(r) else 0 for r in rows]
        x = np.arange(len(datasets)) + (k - (len(bars) - 1) / 2) * width
        ia = m.startswith("ia")
        label = METHODS[m].label + (f" [{g}]" if g not in ("se2", "-") else "")  # as Table 1
        ax.bar(x, acc, width, yerr=err, label=label, color=colours[m], capsize=2,
               hatch=hatches.get(str(g).split("+")[0]),
               edgecolor="black" if ia else "none", linewidth=1.2 if ia else 0)  # fmt: skip
    sizes = {d: int(t[t.dataset == d].n.iloc[0]) for d in datasets}
    ax.set_xticks(np.arange(len(datasets)), [f"{d} (n={sizes[d]})" for d in datasets])
    ax.set_ylabel("ACC (%)")
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    # the most legend columns whose drawn width fits the figure (labels differ in length)
    renderer = fig.canvas.get_renderer()
    for ncol in range(min(4, len(methods)), 0, -1):
        legend = fig.legend(fontsize=8, ncol=ncol, loc="lower center", frameon=False)
        box = legend.get_window_extent(renderer)
        if box.width <= 0.98 * fig.bbox.width or ncol == 1:
            break
        legend.remove()
    caption_h, ticks_h = 0.5, 0.45  # inches, bottom up
    legend_h = box.height / fig.dpi + 0.05
    height = 3.6 + caption_h + legend_h + ticks_h
    fig.set_figheight(height)
    legend.set_bbox_to_anchor((0.5, caption_h / height), transform=fig.transFigure)
    bottom = (caption_h + legend_h + ticks_h) / height
    fig.suptitle("Clustering benchmark: accuracy per method and dataset (IA outlined)")
    fig.subplots_adjust(left=0.07, right=0.99, bottom=bottom, top=0.9)
    _save(
        fig,
        out,
        "ACC with Hungarian matching, mean and standard deviation over seeds (error bars; "
        "methods without randomness run once); IA at the iteration its stopping rule kept. "
        "Methods named 'K given' and the pixel and kappa^max baselines are told the number of "
        "classes; the read-outs find it.",
    )


GALLERY_ROWS = 24  # clusters drawn in the gallery (the largest); the CSV has them all
GALLERY_MEMBERS = 6  # members shown beside each class average (the closest to it)


def classes(inputs: list[str], out: str | Path) -> None:
    """Gallery: every cluster's class average beside its closest members aligned to it.

    inputs: dataset store, classes store (stage ``classes``).
    """
    # lazy: core.warp loads numba, which the other figures' jobs do not load; the groups and
    # the settings tree (~40 ms), for this figure only
    from ia_stages.core.groups import group_of
    from ia_stages.core.warp import warp
    from ia_stages.settings.tree import Settings

    data, cl = read_store(inputs[0]), read_store(inputs[1])
    # the poses are the dataset group's (a mirror image's pose holds its flag)
    tree = json.loads(cl.attrs.get("settings", "{}")).get("settings", {})
    group = group_of(Settings.from_dict(tree))
    V = data["features"].values
    pred, dist = cl["cluster"].values, cl["distance"].values
    pose, means, sizes = cl["pose"].values, cl["class_average"].values, cl["size"].values
    names = [str(v) for v in cl["sample_name"].values]
    singles = np.flatnonzero(sizes == 1)
    order = [k for k in np.argsort(-sizes, kind="stable") if sizes[k] > 1]
    order = order[: GALLERY_ROWS - (1 if singles.size else 0)]
    nrows = len(order) + (1 if singles.size else 0)
    ncols = 1 + GALLERY_MEMBERS
    height = 1.3 * nrows + 1.6
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.25 * ncols + 1.6, height), squeeze=False)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    for row, k in enumerate(order):
        members = np.flatnonzero(pred == k)
        members = members[np.argsort(dist[members], kind="stable")][:GALLERY_MEMBERS]
        aligned = warp(V[members], pose[members], group) if members.size else []
        panels = [(means[k], f"cluster {k}: n={int(sizes[k])}")]
        panels += [
            (a, f"{short_name(names[i])} d={dist[i]:.2f}")
            for i, a in zip(members, aligned, strict=True)
        ]
        _gallery_row(axes[row], panels)
    if singles.size:
        # clusters of one image: no class average to show, so they share one row
        members = np.flatnonzero(np.isin(pred, singles))[:GALLERY_MEMBERS]
        axes[-1][0].axis("off")
        axes[-1][0].text(0.5, 0.5, f"unassigned:\n{singles.size} image(s)\nalone in a\ncluster",
                         ha="center", va="center", fontsize=7.5)  # fmt: skip
        _gallery_row(axes[-1][1:], [(V[i], short_name(names[i])) for i in members], first=False)
    axes[0][0].set_ylabel("class average", fontsize=7)
    grouped = len(order) + singles.size
    shown = (
        f"the {len(order)} largest of {sizes.size} clusters"
        if sizes.size > grouped
        else f"all {sizes.size} clusters"
    )
    fig.suptitle(
        f"Class averages of {data.attrs.get('dataset', '')} ({int(sizes.sum())} images): {shown}",
        y=1 - 0.2 / height,
    )
    fig.subplots_adjust(
        left=0.03, right=0.99, bottom=0.9 / height, top=1 - 0.75 / height, hspace=0.35, wspace=0.08
    )
    _save(
        fig,
        out,
        "Left: each cluster's invariant mean (its class average), with the cluster's size; "
        "right: its members closest to it, each aligned onto it by its pose (rotation and shift; "
        "also scale and shear under a similarity or affine group, and the mirror image "
        "where the group holds mirrors), with "
        "its file name and distance d to the class average (normalised images).",
    )


def short_name(name: str, most: int = 14) -> str:
    """A file name cut to ``most`` characters for a gallery panel: its end kept (the file's
    own name), the cut marked by an ellipsis.

    Example
    -------
    >>> short_name("digit1/img10.png"), short_name("a.png")
    ('…it1/img10.png', 'a.png')
    """
    return name if len(name) <= most else "…" + name[len(name) - most + 1 :]


def _gallery_row(axes, panels: list[tuple[np.ndarray, str]], first: bool = True) -> None:
    """Images with their titles along one row of the gallery; unused axes hidden."""
    for col, ax in enumerate(axes):
        if col < len(panels):
            ax.imshow(np.clip(panels[col][0], 0, None), cmap=CMAP)
            ax.set_title(panels[col][1], fontsize=7.5 if first and col == 0 else 6.5, pad=2)
        else:
            ax.axis("off")


STABILITY_LABELS = {
    "resolution": "Leiden resolution",
    "threshold": "linkage threshold",
    "min_cluster_size": "HDBSCAN's smallest cluster",
}


def stability(inputs: list[str], out: str | Path) -> None:
    """The read-out's clusters as its own setting varies (:mod:`ia_stages.ia.stability`):
    clusters found, the silhouette where the read-out chose by it, and the agreement with the
    read-out's clusters. inputs: classes store."""
    cl = read_store(inputs[0])
    if "stability_value" not in cl:
        raise StoreError(
            f"{inputs[0]}: no read-out stability curve (written by an older ia-stages); "
            "run its classes stage again"
        )
    values = cl["stability_value"].values
    chosen = float(cl.attrs["stability_chosen"])
    label = STABILITY_LABELS[cl.attrs["stability_parameter"]]
    silhouette = cl["stability_silhouette"].values
    panels = 3 if np.isfinite(silhouette).any() else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.4 * panels, 3.8))
    found, ari = cl["stability_clusters"].values, cl["stability_ari"].values
    axes[0].plot(values, found, "o-")
    axes[0].set_ylabel("clusters found")
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    axes[0].set_ylim(found.min() - 0.5, found.max() + 0.5)  # whole counts, even when constant
    axes[-1].plot(values, ari, "o-")
    axes[-1].set_ylabel("ARI with the read-out's clusters")
    axes[-1].set_ylim(-0.05, 1.05)
    if panels == 3:
        axes[1].plot(values, silhouette, "o-")
        axes[1].set_ylabel("silhouette (the read-out's choice)")
        # from 0 (or below): a difference in the third decimal must not look like a cliff
        lo, hi = np.nanmin(silhouette), np.nanmax(silhouette)
        axes[1].set_ylim(min(0.0, lo - 0.05), min(1.0, hi + 0.05))
    for ax in axes:
        ax.axvline(chosen, color="k", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel(label)
    at = int(np.argmin(np.abs(values - chosen)))
    kept = int(cl.sizes["cluster_id"])
    axes[0].axhline(kept, color="C3", ls="--", lw=1)  # the K in clusters.csv
    choice = cl.attrs.get("selection_summary", f"{kept} clusters")
    fig.suptitle(
        f"Stability of the read-out: {cl.attrs.get('dataset', '')} "
        f"({found[at]} clusters at {label} {chosen:g}; chosen: {choice})"
    )
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.25, top=0.86, wspace=0.35)
    chose = (
        "the resolution whose partition had the best silhouette (fewest clusters among near ties)"
        if panels == 3
        else "the value set"
    )
    _save(
        fig,
        out,
        f"Clusters found (left) and adjusted Rand index against the read-out's clusters "
        f"(right) as the read-out's {label} varies; dotted: {chose}, {chosen:g}; dashed: the "
        f"K of clusters.csv, {kept}. "
        + (
            "Middle: each partition's silhouette on the kappa^max distances. "
            if panels == 3
            else ""
        )
        + "A wide plateau of ARI near 1 means the clusters do not hinge on the setting.",
    )


def clusters(inputs: list[str], out: list[str | Path]) -> None:
    """A dataset's two cluster figures in one process: the gallery (:func:`classes`) to
    ``out[0]`` and the read-out's stability (:func:`stability`) to ``out[1]``.

    inputs: dataset store, classes store (stage ``classes``).
    """
    classes(inputs, out[0])
    stability(inputs[1:], out[1])


FIGURES: dict[str, Callable[[list[str], Any], None]] = {
    "benchmark": benchmark,
    "classes": classes,
    "stability": stability,
    "clusters": clusters,
    "fig2": fig2,
    "fig3": fig3,
    "fig4": fig4,
    "fig5": fig5,
}
OUTPUTS = {"clusters": 2}
"""Figures that write more than one file: how many ``--out`` paths each takes (others: 1)."""
