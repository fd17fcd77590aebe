"""Stage ``cluster``: one benchmark method on one dataset with one seed -> predicted labels.

The workflow runs each heavy method in a job of its own and the light ones in one job per
dataset and input (``ia-stages run-method`` takes several settings and stores); each store is
the same either way.

Reads the dataset store and, for the kappa^max-based methods, the kappa^max stores the IA
stages already wrote (iteration 0 for the baselines on kappa^max; every iteration 0..T for
IA's read-outs, which label every iteration and report the one the stopping rule chose), so
nothing is searched twice. What each method does is in :mod:`ia_stages.benchmark.methods`. Writes
``results/{dataset}/cluster/{method}/seed{s}.zarr`` with ``pred`` (sample) and attributes
``method``, ``n_clusters``, ``wall_seconds`` (this job) and ``upstream_seconds`` (the stored
kappa^max / invariant-mean computations the method builds on).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.benchmark.methods import ATTRS, METHODS, Job
from ia_stages.core.seeds import stage_seed
from ia_stages.kmax import KappaMaxResult
from ia_stages.pipeline.stages.common import (
    InputError,
    load_features,
    on_backend,
    require_images,
    timer,
)
from ia_stages.pipeline.store import provenance, read_store, store_attrs, write_store


def _kmax(path: str | Path | None, n: int, method: str) -> KappaMaxResult:
    if path is None:
        raise InputError(f"method {method!r} needs a kappa^max store (--kmax)")
    km = read_store(path, required=("value", "params", "sqdist"))
    if km["value"].shape != (n, n):
        raise InputError(f"{path}: kappa^max is {km['value'].shape}, the dataset has n={n}")
    return KappaMaxResult(km["value"].values, km["params"].values, km["sqdist"].values)


def _read_once(
    stored: dict[str, KappaMaxResult], path: str | Path, n: int, method: str
) -> KappaMaxResult:
    if str(path) not in stored:
        stored[str(path)] = _kmax(path, n, method)
    return stored[str(path)]


def n_clusters_of(settings: dict, labels: np.ndarray, path: str | Path) -> int:
    """K: the configured number of clusters, else the number of classes in the labels."""
    n = labels.size
    K = settings["n_clusters"] or int(np.unique(labels).size)
    if K > n:
        raise InputError(f"{path}: n_clusters={K} is larger than the {n} samples")
    return K


def method_seed(settings: dict) -> int:
    """The seed of one benchmark job (:func:`ia_stages.pipeline.benchmark_config.cluster_settings`):
    the run's seed, the dataset, the method and the seed index together."""
    s = settings
    return stage_seed(s["seed"], f"cluster:{s['dataset']}:{s['method']}:{s['seed_index']}")


def predict(
    method: str,
    data: xr.Dataset,
    data_path: str | Path,
    settings: dict,
    kmax: list[str | Path] | str | Path | None,
    rng: np.random.Generator,
    seed: int,
    stored: dict[str, KappaMaxResult] | None = None,
) -> tuple[np.ndarray, dict]:
    """Labels ``(n,)`` of ``method`` and extra arrays to store (name -> (dims, values)).

    ``kmax``: the kappa^max stores the method reads (see :data:`ia_stages.benchmark.methods.NEEDS`).
    ``stored``: the stores already read, by path (filled here; a batch passes one dict, so
    that each store is read once).
    """
    stored = {} if stored is None else stored
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; known: {sorted(METHODS)}")
    meth = METHODS[method]
    X = data["features"].values.astype(float)
    labels = data["label"].values
    n = X.shape[0]
    paths = [] if kmax is None else [kmax] if isinstance(kmax, (str, Path)) else list(kmax)
    if meth.needs != "none" and not paths:
        raise InputError(f"method {method!r} needs a kappa^max store (--kmax)")
    if meth.needs == "kmax0":
        paths = paths[:1]
    images = require_images(data, data_path) if meth.heavy or meth.needs != "none" else None
    job = Job(
        X=X,
        images=images,
        n_clusters=n_clusters_of(settings, labels, data_path),
        settings=settings,
        kmax=[_read_once(stored, p, n, method) for p in paths],
        rng=rng,
        seed=seed,
        to_backend=lambda a: on_backend(a, settings["backend"])[0],
    )
    try:
        return meth.predict(job)
    except ValueError as err:
        raise InputError(f"{data_path}: {method}: {err}") from None


def run(
    dataset: str | Path,
    out: str | Path,
    settings: dict,
    kmax: list[str | Path] | str | Path | None = None,
    upstream: list[str | Path] = (),
) -> xr.Dataset:
    """Run ``settings['method']`` with seed index ``settings['seed_index']`` and write ``out``
    (one job of :func:`run_batch`)."""
    return run_batch(dataset, [(settings, out)], kmax, upstream)[0]


def run_batch(
    dataset: str | Path,
    jobs: list[tuple[dict, str | Path]],
    kmax: list[str | Path] | str | Path | None = None,
    upstream: list[str | Path] = (),
) -> list[xr.Dataset]:
    """Run several jobs ``(settings, out)`` on one dataset, reading the dataset and each
    kappa^max store once; each store written is the one :func:`run` would write alone."""
    for settings, _ in jobs:
        if settings["method"] not in METHODS:
            raise InputError(f"unknown method {settings['method']!r}; known: {sorted(METHODS)}")
    data = load_features(dataset)
    if "label" not in data:
        raise InputError(f"{dataset}: store has no 'label' variable; the benchmark needs labels")
    up = sum(float(store_attrs(p).get("wall_seconds", 0.0)) for p in upstream)
    stored: dict[str, KappaMaxResult] = {}
    return [_run_one(data, dataset, s, out, kmax, up, stored) for s, out in jobs]


def _run_one(
    data: xr.Dataset,
    dataset: str | Path,
    settings: dict,
    out: str | Path,
    kmax: list[str | Path] | str | Path | None,
    upstream_seconds: float,
    stored: dict[str, KappaMaxResult],
) -> xr.Dataset:
    method = settings["method"]
    seed = method_seed(settings)
    rng = np.random.default_rng(seed)
    with timer() as t:
        pred, extra = predict(method, data, dataset, settings, kmax, rng, seed % 2**31, stored)
    attrs = extra.pop(ATTRS, {})
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
        upstream_seconds=upstream_seconds,
        **attrs,
    )
    write_store(ds, out)
    return ds
