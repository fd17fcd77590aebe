"""The front page of the report of an ``ia-stages cluster`` run: the user's images, the
clusters found with their sizes and the gallery, the K chosen and how, and the settings.

Written as reStructuredText into ``results/report/front.rst`` (:data:`FRONT`) after the run
and before Snakemake builds the report; the workflow takes it as the report's description
when it exists (``report:`` in the Snakefile), so the paper's description stays the front page
of the paper's pipeline only.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from ia_stages.pipeline.store import read_store

FRONT = "results/report/front.rst"
"""Where the front page goes, relative to the workflow's working directory."""

_INPUT = ("canvas", "downsample", "invert", "max_images")
"""The dataset's input keys the page shows."""


def _cell(value: object) -> str:
    return "–" if value is None else str(value).replace("|", "/")


def front_page(workdir: str | Path, config: dict, dataset: str = "images") -> str:
    """The front page (reStructuredText) of the run in ``workdir`` made from ``config``.

    Reads ``results/{dataset}/clusters.csv``, the classes store's attributes and the gallery
    PNG (embedded, so the page shows it without a click).
    """
    work = Path(workdir)
    ds = config["datasets"][dataset]
    table = pd.read_csv(work / f"results/{dataset}/clusters.csv")
    sizes = table["cluster"].value_counts().sort_values(ascending=False)
    classes = read_store(work / f"results/{dataset}/classes.zarr")
    attrs = classes.attrs
    shape = classes["class_average"].shape[1:]
    k = int(sizes.size)
    given = (ds.get("settings") or {}).get("n_clusters")
    if isinstance(given, int):
        how = f"K = {given} was given (--n-clusters)"
    else:
        searched = f" in {given[0]}..{given[1]}" if isinstance(given, (list, tuple)) else ""
        how = (
            f"K = {k} was found by the read-out{searched}: "
            f"{attrs.get('selection_summary', f'{k} clusters')}, by its "
            f"{attrs.get('selection_criterion', 'read-out')}; "
            f"{attrs.get('selection_next_merge', '')}; iteration {attrs.get('stopped_at', '')} "
            f"kept ({attrs.get('stop_reason', '')})"
        )
    title = f"ia-stages cluster: {k} clusters in {len(table)} images"
    lines = [
        title,
        "=" * len(title),
        "",
        f"**Images**: {len(table)} of {shape[0]} x {shape[1]} px from ``{ds['path']}``"
        + (f", labels from ``{ds['labels']}``" if ds.get("labels") else "")
        + ("; class labels given, so summary.csv has ACC, NMI and ARI" if "label" in table else ""),
        "",
        f"**Clusters found: {k}**. {how}.",
        "",
        "**Sizes**: "
        + ", ".join(f"cluster {c}: {n}" for c, n in sizes.items())
        + " (cluster k is class k + 1 in classes.mrcs, classes.tif and particles.star).",
        "",
        "**Gallery**: each cluster's class average beside its members nearest it, aligned "
        "onto it (the largest clusters first); every image's cluster, pose and distance are "
        "in clusters.csv (category Clusters).",
        "",
    ]
    gallery = work / f"results/figures/{dataset}_classes.png"
    if gallery.is_file():
        # raw HTML: a URL's line breaks are dropped by the browser, and docutils refuses
        # lines longer than 10,000 characters
        data = base64.encodebytes(gallery.read_bytes()).decode().split()
        lines += [".. raw:: html", "", '   <img alt="gallery" style="max-width: 100%" src="'
                  "data:image/png;base64,"]  # fmt: skip
        lines += [f"   {chunk}" for chunk in data]
        lines += ['   ">', ""]
    tree = json.loads(attrs.get("settings", "{}")).get("settings", {})
    group = tree.get("group") or {}
    group_name = group.get("name", "se2") if isinstance(group, dict) else str(group)
    settings = [
        ("beta", tree.get("beta")),
        ("sigma (px)", tree.get("sigma")),
        ("background", tree.get("background")),
        ("group", group_name + (" + mirror" if tree.get("mirror") else "")),
        ("iterations", tree.get("iterations")),
        ("kappa^max path", (tree.get("path") or {}).get("mode")),
        ("n_clusters", given),
        ("mean steps / images", f"{(tree.get('mean') or {}).get('steps')} / "
         f"{(tree.get('mean') or {}).get('max_images')}"),
    ]  # fmt: skip
    settings += [(key, ds.get(key)) for key in _INPUT]
    settings += [
        ("seed", config.get("seed")),
        ("backend", config.get("backend")),
        ("pixel size (Å)", (config.get("exports") or {}).get("pixel_size")),
        ("iteration kept", attrs.get("stopped_at")),
    ]
    width = max(len(label) for label, _ in settings)
    rule = "=" * width + " " + "=" * 40
    lines += ["**Settings**", "", rule, f"{'setting':<{width}} value", rule]
    lines += [f"{label:<{width}} {_cell(value)[:40]}" for label, value in settings]
    lines += [rule, ""]
    lines += [
        "The full settings are the run's ``config.yaml``; the read-out's stability as its own "
        "setting varies is the figure beside the gallery (category Clusters).",
        "",
    ]
    return "\n".join(lines)


def write_front_page(workdir: str | Path, config: dict, dataset: str = "images") -> Path:
    """Write :func:`front_page` to ``workdir/`` :data:`FRONT`; returns its path."""
    path = Path(workdir) / FRONT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(front_page(workdir, config, dataset))
    return path
