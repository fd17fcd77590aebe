"""Stage ``classes``: clusters of one dataset, their class averages and every image's pose.

Reads the dataset store, the kappa^max of the input images (IA iteration 0: poses onto each
cluster's medoid) and the kappa^max of IA's final features (the read-out). Writes
``results/{dataset}/classes.zarr`` (class averages, sizes, poses, distances, the read-out's
stability over thresholds) and ``results/{dataset}/clusters.csv``: one row per image with its
name, cluster, distance to the class average and the pose (theta in radians, b0, b1 in px;
v o tau ~ class average in the README's convention), plus its label when the data has one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ia_stages.core.groups import make_group
from ia_stages.ia.class_averages import class_averages, threshold_stability
from ia_stages.ia.invariant_mean import MeanSettings
from ia_stages.pipeline.stages.common import InputError, load_features, require_images, timer
from ia_stages.pipeline.store import provenance, read_store, strings, write_store, write_text_atomic
from ia_stages.readout.linkage import cluster_by_distance


def _kmax(path: str | Path, n: int) -> xr.Dataset:
    km = read_store(path, required=("value", "params", "sqdist"))
    if km["value"].shape != (n, n):
        raise InputError(f"{path}: kappa^max is {km['value'].shape}, the dataset has n={n}")
    return km


def sample_names(data: xr.Dataset) -> list[str]:
    """File names of the samples when the store has them, else their indices."""
    if "sample_name" in data:
        return [str(v) for v in data["sample_name"].values]
    return [str(int(v)) for v in data["sample"].values]


def run(
    dataset: str | Path,
    kmax0: str | Path,
    kmax_final: str | Path,
    out: str | Path,
    csv: str | Path,
    settings: dict,
) -> xr.Dataset:
    """Cluster by the read-out, compute class averages and poses, write the store and CSV."""
    data = load_features(dataset)
    V = require_images(data, dataset)
    n = V.shape[0]
    k0, kf = _kmax(kmax0, n), _kmax(kmax_final, n)
    readout = settings["readout"]
    mean = dict(settings["mean"])
    mean["sigmas"] = tuple(mean["sigmas"])
    with timer() as t:
        sq = kf["sqdist"].values
        pred = cluster_by_distance(sq, readout["threshold"], readout["linkage"])
        res = class_averages(
            V,
            pred,
            k0["params"].values,
            k0["sqdist"].values,
            MeanSettings(**mean),
            settings["normalization"],
            make_group(**settings.get("group", {})),
        )
        thresholds, found, ari = threshold_stability(sq, readout["threshold"], readout["linkage"])
    names = sample_names(data)
    param_names = list(k0["param"].values) if "param" in k0.coords else ["theta", "b0", "b1"]
    ds = xr.Dataset(
        {
            "cluster": (("sample",), pred),
            "distance": (("sample",), res.distance),
            "pose": (("sample", "param"), res.params),
            "sample_name": (("sample",), strings(names)),
            "class_average": (("cluster_id", "y", "x"), res.means),
            "size": (("cluster_id",), res.sizes),
            "medoid": (("cluster_id",), res.medoids),
            "stability_clusters": (("threshold",), found),
            "stability_ari": (("threshold",), ari),
        },
        coords={
            "sample": np.arange(n),
            "cluster_id": np.arange(res.sizes.size),
            "threshold": thresholds,
            "param": strings(param_names),
        },
    )
    ds.attrs = provenance(
        "classes",
        settings,
        settings["seed"],
        "numpy",
        dataset=settings["dataset"],
        threshold=float(readout["threshold"]),
        n_clusters=int(res.sizes.size),
        wall_seconds=t["seconds"],
    )
    table = pd.DataFrame({"sample": np.arange(n), "name": names, "cluster": pred})
    table["distance"] = res.distance
    for k, p in enumerate(param_names):
        table[p] = res.params[:, k]
    if "label" in data:
        classes = [str(c) for c in data["class_name"].values]
        table["label"] = [classes[int(k)] for k in data["label"].values]
    write_store(ds, out)
    write_text_atomic(table.to_csv(index=False, float_format="%.6g"), csv)
    return ds
