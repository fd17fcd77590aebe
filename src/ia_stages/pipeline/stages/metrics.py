"""Stage ``metrics``: one row per method and iteration (results/{dataset}/metrics.csv)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ia_stages.benchmark import metrics as M
from ia_stages.core.smoothing import normalize, sq_distances
from ia_stages.ia.attention import column_normalize
from ia_stages.ia.loop import read_iterations
from ia_stages.pipeline.stages.common import InputError, job_tree, load_features
from ia_stages.pipeline.stages.knn import is_knn_store, read_knn
from ia_stages.pipeline.store import read_store, store_attrs, write_text_atomic
from ia_stages.readout.linkage import cluster_by_distance
from ia_stages.settings.sizing import sized

COLUMNS = [
    "dataset",
    "method",
    "iteration",
    "acc",
    "nmi",
    "ari",
    "clusters_found",
    "classes",
    "block_diagonality",
    "max_within_class_manifold_distance",
    "wall_seconds",
]


def _row(dataset, method, it, labels, pred, W, rmax, seconds) -> dict:
    """One table row; without labels (unlabelled images) only what needs none is filled."""
    known = labels is not None
    return {
        "dataset": dataset,
        "method": method,
        "iteration": it,
        "acc": M.accuracy(labels, pred) if known else np.nan,
        "nmi": M.nmi(labels, pred) if known else np.nan,
        "ari": M.ari(labels, pred) if known else np.nan,
        "clusters_found": int(np.unique(pred).size),
        "classes": int(np.unique(labels).size) if known else np.nan,
        "block_diagonality": M.block_diagonality(W, labels) if known and W is not None else np.nan,
        "max_within_class_manifold_distance": rmax,
        "wall_seconds": seconds,
    }


def _max_within(dist: np.ndarray, labels: np.ndarray | None) -> float:
    return M.max_within_class(dist, labels) if labels is not None else np.nan


def _knn_block_diagonality(knn, labels: np.ndarray) -> float:
    """Share of the kNN lists' kernel mass (each column normalised over its list) between
    samples of one class: the kNN path's block diagonality (no n x n W exists)."""
    W = knn.value / knn.value.sum(1, keepdims=True)
    return float(W[labels[knn.indices] == labels[:, None]].sum() / W.sum())


def classes_partitions(path: str | Path, settings: dict, n_iter: int, n: int) -> np.ndarray:
    """IA's read-out without K of every iteration, ``(n_iter, n)``, as the ``classes`` stage
    made them (its ``pred_iter``) from the same IA settings and seed; a store made with
    other settings or of another size is an :class:`InputError` naming it."""
    ds = read_store(path, required=("pred_iter",))
    made = json.loads(ds.attrs.get("settings", "{}"))
    wanted = json.loads(json.dumps(settings, sort_keys=True, default=str))
    for key in ("settings", "seed"):
        if made.get(key) != wanted.get(key):
            raise InputError(f"{path}: made with other '{key}' settings than these metrics")
    parts = ds["pred_iter"].values
    if parts.shape != (n_iter, n):
        raise InputError(f"{path}: pred_iter is {parts.shape}, expected ({n_iter}, {n})")
    return parts


def ia_rows(
    settings: dict,
    labels: np.ndarray,
    features: list,
    kmax: list,
    classes: str | Path | None = None,
) -> list[dict]:
    """Rows for IA iterations 0..T from features stores (dataset first) and kappa^max stores;
    IA's read-out of every iteration is :func:`ia_stages.ia.loop.read_iterations`'s, as in
    ``clusters.csv`` and the estimator: taken from the ``classes`` store when given (the
    pipeline: made once), else made here. On the kNN path (kNN stores) the block diagonality
    is that of the lists' kernel and the largest within-class distance is the sample's."""
    rows, seconds = [], 0.0
    knn = is_knn_store(kmax[0])
    kms = [read_knn(p) if knn else read_store(p, required=("value", "sqdist")) for p in kmax]
    n = kms[0].n if knn else kms[0]["sqdist"].shape[0]
    try:
        ia = sized(job_tree(settings), n)
    except ValueError as err:
        raise InputError(f"settings key {err}") from None
    if knn:
        sqs, values = kms, None
    else:
        sqs, values = [k["sqdist"].values for k in kms], [k["value"].values for k in kms]
    if classes is not None:
        parts = list(classes_partitions(classes, settings, len(kmax), n))
    else:
        parts, _, _ = read_iterations(sqs, ia, int(settings["seed"]), values)
    for t, (fpath, km, pred) in enumerate(zip(features, kms, parts, strict=True)):
        f = load_features(fpath)
        norms = M.feature_norms(f["features"].values)
        if knn:
            dist = M.manifold_distances(km.sample_sqdist, norms[km.sample])
            rmax = _max_within(dist, None if labels is None else labels[km.sample])
            W = None
            diag = _knn_block_diagonality(km.knn, labels) if labels is not None else np.nan
        else:
            dist = M.manifold_distances(km["sqdist"].values, norms)
            rmax, W, diag = _max_within(dist, labels), column_normalize(km["value"].values), None
        if t > 0:
            seconds += float(f.attrs.get("wall_seconds", 0.0))
        row = _row(settings["dataset"], "IA", t, labels, pred, W, rmax, seconds)
        if diag is not None:
            row["block_diagonality"] = diag
        rows.append(row)
        seconds += float(store_attrs(kmax[t]).get("wall_seconds", 0.0))
    return rows + _rows_with_k(settings, labels, sqs, values, rows)


def _rows_with_k(settings, labels, sqs, values, rows) -> list[dict]:
    """'IA (K)': the same iterations read out into K = the number of classes (labelled data
    only), with the read-out sized to K as the estimator's with ``n_clusters``."""
    if labels is None or np.unique(labels).size < 2:
        return []
    K = int(np.unique(labels).size)
    n = labels.size
    if K >= n:
        return []
    ia = sized(replace(job_tree(settings), n_clusters=K), n)
    parts, _, _ = read_iterations(sqs, ia, int(settings["seed"]), values)
    out = []
    for row, pred in zip(rows, parts, strict=True):
        k_row = _row(row["dataset"], "IA (K)", row["iteration"], labels, pred, None,
                     row["max_within_class_manifold_distance"], row["wall_seconds"])  # fmt: skip
        k_row["block_diagonality"] = row["block_diagonality"]
        out.append(k_row)
    return out


def ka_rows(settings: dict, labels: np.ndarray, ka_path: str | Path) -> list[dict]:
    """Rows for KA iterations 0..K: read-out on Euclidean distances of the normalised features."""
    ka = read_store(ka_path, required=("features", "weights", "seconds"))
    rows = []
    K = ka.sizes["iteration"] - 1
    tree = job_tree(settings)
    for t in range(K + 1):
        X = ka["features"].values[t]
        Xn = normalize(X, tree.normalization)
        pred = cluster_by_distance(
            sq_distances(Xn, Xn), tree.readout.threshold, tree.readout.linkage
        )
        if "kmax_sqdist" in ka:
            dist = M.manifold_distances(ka["kmax_sqdist"].values[t], M.feature_norms(X))
        else:  # points: the group is trivial, manifold distance = Euclidean distance
            dist = np.sqrt(sq_distances(X, X))
        seconds = float(ka["seconds"].values[t])
        rows.append(
            _row(
                settings["dataset"],
                "KA",
                t,
                labels,
                pred,
                ka["weights"].values[t],
                _max_within(dist, labels),
                seconds,
            )
        )
    return rows


def run(
    dataset: str | Path,
    out: str | Path,
    settings: dict,
    ia_features: list[str | Path] = (),
    ia_kmax: list[str | Path] = (),
    ka: str | Path | None = None,
    classes: str | Path | None = None,
) -> pd.DataFrame:
    """Write metrics.csv for one dataset; ``classes``: the classes store, whose read-outs
    without K the IA rows take (:func:`ia_rows`)."""
    data = read_store(dataset)
    labels = data["label"].values if "label" in data else None  # unlabelled images
    rows = []
    if ka is not None:
        rows += ka_rows(settings, labels, ka)
    if ia_kmax:
        rows += ia_rows(settings, labels, [dataset, *ia_features], list(ia_kmax), classes)
    df = pd.DataFrame(rows, columns=COLUMNS)
    write_text_atomic(df.to_csv(index=False, float_format="%.6g"), out)
    return df
