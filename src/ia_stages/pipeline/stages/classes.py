"""Stage ``classes``: clusters of one dataset, their class averages and every image's pose.

Reads the dataset store and the kappa^max of every IA iteration's features (iteration 0, the
input images, first; on the kNN path the kNN stores, whose read-outs use the lists and the
distances of a sample, :class:`ia_stages.readout.graph.KnnDistances`): IA's read-out of
each, the iteration the stopping rule keeps, and the class averages started at the input's
kappa^max alignments onto each cluster's medoid. Writes
``results/{dataset}/classes.zarr`` (class averages, sizes, poses, distances, the read-out's
stability as its own setting varies: :mod:`ia_stages.ia.stability`) and
``results/{dataset}/clusters.csv``: one row per image with its name, cluster, distance to the
class average and the pose (theta in radians, b0, b1 in px; v o tau ~ class average in the
convention of docs/user-guide/method.md), plus its label when the data has one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import group_of
from ia_stages.ia.class_averages import cluster_averages
from ia_stages.ia.loop import model_selection, read_iterations
from ia_stages.ia.stability import read_out_stability
from ia_stages.kmax import KappaMaxResult
from ia_stages.pipeline.stages.common import (
    InputError,
    job_tree,
    load_features,
    require_images,
    timer,
)
from ia_stages.pipeline.stages.knn import is_knn_store, read_knn
from ia_stages.pipeline.store import provenance, read_store, strings, write_store, write_text_atomic
from ia_stages.settings.sizing import sized


def _kmax(path: str | Path, n: int) -> xr.Dataset:
    km = read_store(path, required=("value", "params", "sqdist"))
    if km["value"].shape != (n, n):
        raise InputError(f"{path}: kappa^max is {km['value'].shape}, the dataset has n={n}")
    return km


@contextmanager
def _no_bar(total: int | None, label: str) -> Iterator[None]:
    """No progress shown: the tick is None."""
    yield None


def sample_names(data: xr.Dataset) -> list[str]:
    """File names of the samples when the store has them, else their indices."""
    if "sample_name" in data:
        return [str(v) for v in data["sample_name"].values]
    return [str(int(v)) for v in data["sample"].values]


def run(
    dataset: str | Path,
    kmax: list[str | Path],
    out: str | Path,
    csv: str | Path,
    settings: dict,
    progress: Any = None,
) -> xr.Dataset:
    """Read out every IA iteration's kappa^max (``kmax``: iteration 0 = the input images
    first), keep the iteration the stopping rule chooses, compute class averages and poses,
    write the store and CSV. The same functions as the estimator's
    (:func:`~ia_stages.ia.loop.read_iterations` and
    :func:`~ia_stages.ia.class_averages.class_averages`). ``progress(total, label)``, when
    given, is a context manager yielding a tick (the command's progress bars): one bar over
    the iterations read out, then one over the images aligned onto their class averages.
    """
    bar = progress if progress is not None else _no_bar
    data = load_features(dataset)
    V = require_images(data, dataset)
    n = V.shape[0]
    if not kmax:
        raise InputError(f"{out}: no kappa^max stores given")
    knn = is_knn_store(kmax[0])  # the kNN path: lists and a sample, no n x n store
    kms = [read_knn(p, n) if knn else _kmax(p, n) for p in kmax]
    try:
        ia = sized(job_tree(settings), n)
    except ValueError as err:
        raise InputError(f"settings key {err}") from None
    with timer() as t:
        if knn:
            sqs, values, km0 = kms, None, kms[0]
        else:
            sqs, values = [k["sqdist"].values for k in kms], [k["value"].values for k in kms]
            k0 = kms[0]
            km0 = KappaMaxResult(k0["value"].values, k0["params"].values, k0["sqdist"].values)
        try:
            with bar(len(sqs), "read-outs: iterations") as tick:
                parts, chosen, reason = read_iterations(
                    sqs, ia, int(settings["seed"]), values, tick
                )
        except ValueError as err:
            raise InputError(f"{kmax[0]}: settings key {err}") from None
        # how the kept read-out got its K (the runner-up, the stability over seeds, every
        # candidate partition): the estimator's model_selection_, from the same function
        selection = model_selection(sqs[chosen], ia, int(settings["seed"]), parts[chosen])
        with bar(None, "class averages: images aligned") as tick:
            pred, res = cluster_averages(V, parts[chosen], km0, ia, progress=tick)
        # the read-out's own setting varied (its Leiden runs are the read-out's, kept)
        stable = read_out_stability(sqs[chosen], ia.readout, parts[chosen], int(settings["seed"]))
    names = sample_names(data)
    param_names = list(group_of(ia).param_names)
    means = to_numpy(res.means)
    ds = xr.Dataset(
        {
            "cluster": (("sample",), pred),
            "distance": (("sample",), res.distance),
            "pose": (("sample", "param"), res.params),
            "sample_name": (("sample",), strings(names)),
            "class_average": (("cluster_id", "y", "x"), means),
            "size": (("cluster_id",), res.sizes),
            "medoid": (("cluster_id",), res.medoids),
            "stability_clusters": (("stability_value",), stable.n_clusters),
            "stability_ari": (("stability_value",), stable.ari),
            "stability_silhouette": (("stability_value",), stable.silhouette),
            "pred_iter": (("iteration", "sample"), np.stack(parts)),
            "candidate_partition": (
                ("candidate_k", "sample"),
                np.stack([selection.partitions[k] for k in sorted(selection.partitions)]),
            ),
            "candidate_score": (
                ("candidate_k",),
                np.array([selection.scores.get(k, np.nan) for k in sorted(selection.partitions)]),
            ),
        },
        coords={
            "sample": np.arange(n),
            "cluster_id": np.arange(res.sizes.size),
            "stability_value": stable.values,
            "candidate_k": np.array(sorted(selection.partitions), dtype=np.int64),
            "param": strings(param_names),
        },
    )
    ds.attrs = provenance(
        "classes",
        settings,
        settings["seed"],
        "numpy",
        dataset=settings["dataset"],
        threshold=float(ia.readout.threshold),
        n_clusters=int(res.sizes.size),
        stopped_at=int(chosen),
        stop_reason=reason,
        readout_k=int(ia.readout.k),
        n_clusters_given=ia.n_clusters if isinstance(ia.n_clusters, int) else None,
        stability_parameter=stable.parameter,
        stability_chosen=stable.chosen,
        selection_summary=selection.summary(),
        selection_confidence=selection.confidence(),
        selection_next_merge=selection.next_merge(),
        **{f"selection_{k}": v for k, v in selection.as_dict().items()},
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
