"""Stage ``ka``: kernel-attention iterations (the baseline), with kappa^max diagnostics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import group_of
from ia_stages.ia.attention import attention_weights, kernel_attention
from ia_stages.kmax import kappa_max
from ia_stages.pipeline.stages.common import job_tree, load_features, on_backend, timer
from ia_stages.pipeline.store import provenance, write_store


def run(
    dataset: str | Path,
    out: str | Path,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """Iterate KA; store features and W of every iteration (and, for images, the kappa^max
    distances of every iteration's features, to compare manifold distances with IA)."""
    src = load_features(dataset)
    X, backend = on_backend(src["features"].values.astype(float), settings["backend"])
    tree = job_tree(settings)
    beta, norm = settings["ka_beta"], tree.normalization
    feats, seconds = [X], [0.0]
    for _ in range(settings["iterations"]):
        with timer() as t:
            feats.append(kernel_attention(feats[-1], beta, norm, 1)[0][1])
        seconds.append(seconds[-1] + t["seconds"])
    weights = [attention_weights(f, beta, norm) for f in feats]
    feat_dims = src["features"].dims
    ds = xr.Dataset(
        {
            "features": (("iteration", *feat_dims), np.stack([to_numpy(f) for f in feats])),
            "seconds": (("iteration",), np.asarray(seconds)),
            "weights": (
                ("iteration", "sample_i", "sample_j"),
                np.stack([to_numpy(w) for w in weights]),
            ),
        },
        coords={"iteration": np.arange(len(feats))},
    )
    if feat_dims == ("sample", "y", "x"):
        d2 = []
        for f in feats:
            km = kappa_max(
                f, beta=beta, normalization=norm, group=group_of(tree), settings=tree.search,
                sigma=tree.sigma,
            )  # fmt: skip
            d2.append(to_numpy(km.sqdist))
            if progress is not None:
                progress(1)
        ds["kmax_sqdist"] = (("iteration", "sample_i", "sample_j"), np.stack(d2))
    ds.attrs = provenance("ka", settings, settings["seed"], backend, wall_seconds=seconds[-1])
    write_store(ds, out)
    return ds
