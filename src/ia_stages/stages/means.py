"""Stage ``means``: one Invariant Attention iteration's invariant means (the next features)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from ..attention import invariant_attention_step
from ..backend import to_numpy
from ..invariant_mean import MeanSettings
from ..kmax import KappaMaxResult
from ..store import provenance, read_store, write_store
from .common import InputError, load_features, on_backend, require_images, timer


def run(
    features: str | Path,
    kmax: str | Path,
    out: str | Path,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """Invariant means of every column of W = column-normalised kappa^max."""
    V = require_images(load_features(features), features)
    km = read_store(kmax, required=("value", "params", "sqdist"))
    n = V.shape[0]
    if km["value"].shape != (n, n):
        raise InputError(f"{kmax}: kappa^max is {km['value'].shape}, features have n={n}")
    mean = dict(settings["mean"])
    mean["sigmas"] = tuple(mean["sigmas"])
    Vx, backend = on_backend(V, settings["backend"])
    res = KappaMaxResult(
        *(on_backend(km[k].values, backend)[0] for k in ("value", "params", "sqdist"))
    )
    with timer() as t:
        step = invariant_attention_step(
            Vx, res, settings["init"], MeanSettings(**mean), progress=progress
        )
    W = to_numpy(step.weights)
    dropped = max(m.dropped_weight for m in step.means)
    ds = xr.Dataset(
        {
            "features": (("sample", "y", "x"), to_numpy(step.features)),
            "weights": (("sample_i", "sample_j"), W),
            "mean_params": (
                ("sample", "source", "param"),
                np.stack([to_numpy(m.params) for m in step.means]),
            ),
            "objective": (("sample", "step"), np.stack([m.objective for m in step.means])),
            "sigma": (("sample", "step_taken"), np.stack([m.sigma for m in step.means])),
        },
        coords={"sample": np.arange(n), "source": np.arange(n)},
    )
    ds.attrs = provenance(
        "means",
        settings,
        settings["seed"],
        backend,
        wall_seconds=t["seconds"],
        max_dropped_weight=dropped,
    )
    write_store(ds, out)
    return ds
