"""Stage ``cluster``: one benchmark method on one dataset with one seed -> predicted labels.

Reads the dataset store and, for the kappa^max-based methods, the kappa^max stores the IA
stages already wrote (iteration 0 for spectral, k-medoids and TI K-means; the final iteration
for IA's read-outs), so nothing is searched twice. Writes
``results/{dataset}/cluster/{method}/seed{s}.zarr`` with ``pred`` (sample) and attributes
``method``, ``n_clusters``, ``wall_seconds`` (this job) and ``upstream_seconds`` (the stored
kappa^max / invariant-mean computations the method builds on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .. import baselines as B
from ..attention import invariant_attention_step, kernel_attention
from ..backend import to_numpy
from ..config import stage_seed
from ..group_kernels import GridSettings, group_kernel
from ..invariant_mean import MeanSettings
from ..kernels import normalize, sq_distances
from ..kmax import KappaMaxResult, SearchSettings
from ..methods import METHODS
from ..readout import cluster_by_distance
from ..store import provenance, read_store, store_attrs, write_store
from .common import InputError, load_features, on_backend, require_images, timer


def _kmax(path: str | Path | None, n: int, method: str) -> KappaMaxResult:
    if path is None:
        raise InputError(f"method {method!r} needs a kappa^max store (--kmax)")
    km = read_store(path, required=("value", "params", "sqdist"))
    if km["value"].shape != (n, n):
        raise InputError(f"{path}: kappa^max is {km['value'].shape}, the dataset has n={n}")
    return KappaMaxResult(km["value"].values, km["params"].values, km["sqdist"].values)


def n_clusters_of(settings: dict, labels: np.ndarray, path: str | Path) -> int:
    """K: the configured number of clusters, else the number of classes in the labels."""
    n = labels.size
    K = settings["n_clusters"] or int(np.unique(labels).size)
    if K > n:
        raise InputError(f"{path}: n_clusters={K} is larger than the {n} samples")
    return K


def _ablation(V: np.ndarray, settings: dict, pooling: str, K: int) -> np.ndarray:
    """IA with the group-pooled kernel in place of kappa^max, then the K-cluster cut."""
    abl = settings["ablation"]
    grid = GridSettings(
        n_angles=abl["n_angles"], max_shift=abl["max_shift"], shift_step=abl["shift_step"]
    )
    mean = dict(settings["mean"])
    mean["sigmas"] = tuple(mean["sigmas"])
    Vx, _ = on_backend(V, settings["backend"])

    def kernel(F: Any) -> KappaMaxResult:
        return group_kernel(
            F,
            beta=settings["beta"],
            pooling=pooling,
            temperature=abl.get("temperature", 1.0),
            normalization=settings["normalization"],
            sigma=settings["sigma"],
            grid=grid,
        )

    for _ in range(settings["ia_iterations"]):
        Vx = invariant_attention_step(
            Vx, kernel(Vx), settings["init"], MeanSettings(**mean)
        ).features
    sq = to_numpy(kernel(Vx).sqdist)
    return cluster_by_distance(sq, 0.0, settings["readout"]["linkage"], n_clusters=K)


def predict(
    method: str,
    data: xr.Dataset,
    data_path: str | Path,
    settings: dict,
    kmax: str | Path | None,
    rng: np.random.Generator,
    seed: int,
) -> tuple[np.ndarray, dict]:
    """Labels ``(n,)`` of ``method`` and extra arrays to store (name -> (dims, values))."""
    X = data["features"].values.astype(float)
    labels = data["label"].values
    n = X.shape[0]
    K = n_clusters_of(settings, labels, data_path)
    readout = settings.get("readout", {})
    extra: dict = {}
    if method == "kmeans":
        return B.kmeans_pixels(X, K, seed), extra
    if method == "gmm":
        return B.gmm_pixels(X, K, seed), extra
    if method in ("ka", "ka_k"):
        feats = kernel_attention(
            X, settings["ka_beta"], settings["normalization"], settings["ka_iterations"]
        )[0]
        Xn = normalize(feats[-1], settings["normalization"])
        sq = sq_distances(Xn, Xn)
        if method == "ka_k":
            return cluster_by_distance(sq, 0.0, readout["linkage"], n_clusters=K), extra
        return cluster_by_distance(sq, readout["threshold"], readout["linkage"]), extra
    V = require_images(data, data_path)
    if method in ("ia_kavg_k", "ia_ksoft_k"):
        return _ablation(V, settings, "avg" if method == "ia_kavg_k" else "soft", K), extra
    km = _kmax(kmax, n, method)
    if method == "spectral_kmax":
        return B.spectral_affinity(km.value, K, seed), extra
    if method == "kmedoids_kmax":
        res = B.kmedoids(np.sqrt(np.maximum(km.sqdist, 0.0)), K, rng)
        extra["medoid"] = (("cluster",), res.medoids)
        return res.labels, extra
    if method == "ti_kmeans":
        ti = settings["ti_kmeans"]
        mean = dict(settings["mean"])
        mean["sigmas"] = tuple(mean["sigmas"])
        # a prototype is the mean of all its members (equal weights): no top-k cap
        mean["max_images"] = None
        Vx, _ = on_backend(V, settings["backend"])
        res = B.ti_kmeans(
            Vx,
            K,
            rng,
            settings["beta"],
            settings["normalization"],
            settings["sigma"],
            SearchSettings(**settings["search"]),
            MeanSettings(**mean),
            ti["iterations"],
            ti["n_init"],
            kmax0=km,
        )
        extra["prototype"] = (("cluster", "y", "x"), res.prototypes)
        extra["objective"] = (("round",), np.asarray(res.objective))
        return res.labels, extra
    if method == "ia":
        return cluster_by_distance(km.sqdist, readout["threshold"], readout["linkage"]), extra
    if method == "ia_k":
        return cluster_by_distance(km.sqdist, 0.0, readout["linkage"], n_clusters=K), extra
    raise InputError(f"unknown method {method!r}; known: {sorted(METHODS)}")


def run(
    dataset: str | Path,
    out: str | Path,
    settings: dict,
    kmax: str | Path | None = None,
    upstream: list[str | Path] = (),
) -> xr.Dataset:
    """Run ``settings['method']`` with seed index ``settings['seed_index']`` and write ``out``."""
    method = settings["method"]
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; known: {sorted(METHODS)}")
    data = load_features(dataset)
    if "label" not in data:
        raise InputError(f"{dataset}: store has no 'label' variable; the benchmark needs labels")
    seed = stage_seed(
        settings["seed"], f"cluster:{settings['dataset']}:{method}:{settings['seed_index']}"
    )
    rng = np.random.default_rng(seed)
    with timer() as t:
        pred, extra = predict(method, data, dataset, settings, kmax, rng, seed % 2**31)
    up = sum(float(store_attrs(p).get("wall_seconds", 0.0)) for p in upstream)
    ds = xr.Dataset(
        {"pred": (("sample",), np.asarray(pred, dtype=np.int64)), **extra},
        coords={"sample": np.arange(pred.size)},
    )
    ds.attrs = provenance(
        "cluster",
        settings,
        settings["seed"],
        settings["backend"],
        method=method,
        seed_index=settings["seed_index"],
        n_clusters=n_clusters_of(settings, data["label"].values, dataset),
        wall_seconds=t["seconds"],
        upstream_seconds=up,
    )
    write_store(ds, out)
    return ds
