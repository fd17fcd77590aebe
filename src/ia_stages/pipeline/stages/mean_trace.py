"""Stage ``mean-trace``: Algorithm 1 on a whole dataset with uniform weights (Figure 5)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.backend import to_numpy
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import kappa_max
from ia_stages.pipeline.stages.common import (
    job_tree,
    load_features,
    on_backend,
    require_images,
    timer,
)
from ia_stages.pipeline.store import provenance, write_store


def run(dataset: str | Path, out: str | Path, settings: dict) -> xr.Dataset:
    """Invariant mean of all images, snapshots at steps 0, N/2 and N."""
    V = require_images(load_features(dataset), dataset)
    Vx, backend = on_backend(V, settings["backend"])
    trace = settings["trace"]
    steps = trace["steps"]
    tree = job_tree(settings)
    mean = replace(tree.mean, steps=steps)
    record = (0, steps // 2, steps)
    with timer() as t:
        init = None
        if trace["init"] == "kmax":  # align every image onto the first one
            km = kappa_max(
                Vx[:1], Vx, tree.beta, tree.normalization, settings=tree.search, sigma=tree.sigma
            )
            init = km.params[0]
        res = invariant_mean(Vx, np.ones(V.shape[0]), init, mean, record=record)
    ds = xr.Dataset(
        {
            "snapshot": (
                ("step", "y", "x"),
                np.stack([to_numpy(res.snapshots[s]) for s in record]),
            ),
            "objective": (("step_all",), res.objective),
            "sigma": (("step_taken",), res.sigma),
            "params": (("sample", "param"), to_numpy(res.params)),
        },
        coords={"step": list(record), "step_all": np.arange(steps + 1)},
    )
    ds.attrs = provenance(
        "mean-trace", settings, settings["seed"], backend, wall_seconds=t["seconds"]
    )
    write_store(ds, out)
    return ds
