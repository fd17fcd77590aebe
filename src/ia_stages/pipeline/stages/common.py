"""Helpers shared by the stages: loading features, checking them, timing, backend moves."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ia_stages.core.backend import resolve_backend, to_backend
from ia_stages.pipeline.devices import pin_cupy_device
from ia_stages.pipeline.errors import InputError
from ia_stages.pipeline.store import StoreError, provenance, read_store, write_store
from ia_stages.settings.spec import SettingError
from ia_stages.settings.tree import Settings


def job_tree(settings: dict) -> Settings:
    """The job's settings tree from its settings JSON: the part of the dataset's tree its
    stage reads (:data:`ia_stages.pipeline.config.STAGE_SETTINGS`), every other setting
    unset, so that the job cannot depend on what its settings hash does not cover. Built and
    checked once per job: the stage's helpers that ask again get the same (frozen) tree.

    Example
    -------
    >>> job_tree({"settings": {"beta": 2.0}}).beta
    2.0
    >>> job_tree({"settings": {"beta": 2.0}}) is job_tree({"settings": {"beta": 2.0}})
    True
    """
    return _tree_of(json.dumps(settings.get("settings", {}), sort_keys=True))


@functools.lru_cache(maxsize=16)
def _tree_of(text: str) -> Settings:
    """:func:`job_tree` of the settings JSON ``text`` (keys sorted)."""
    try:
        return Settings.from_dict(json.loads(text), partial=True)
    except SettingError as err:
        raise InputError(f"settings key {err}") from None


def load_features(path: str | Path) -> xr.Dataset:
    """Read a store with a ``features`` variable and check every value is finite."""
    ds = read_store(path, required=("features",))
    values = ds["features"].values
    if not np.issubdtype(values.dtype, np.floating):
        raise InputError(f"{path}: features must be floating point, got {values.dtype}")
    bad = ~np.isfinite(values)
    if bad.any():
        sample = int(np.argwhere(bad)[0][0])
        raise InputError(f"{path}: features contain NaN or inf (first in sample {sample})")
    return ds


def require_images(ds: xr.Dataset, path: str | Path) -> np.ndarray:
    """Return ``features`` as ``(n, H, W)`` float64 or raise naming ``path``."""
    f = ds["features"]
    if f.dims != ("sample", "y", "x"):
        raise InputError(f"{path}: expected image features (sample, y, x), got {f.dims}")
    return f.values.astype(float)


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    """``with timer() as t: ...`` leaves the elapsed wall time in ``t['seconds']`` and the
    process's CPU time (all threads, ``time.process_time``) in ``t['cpu_seconds']``."""
    out: dict[str, float] = {}
    start, cpu = time.perf_counter(), time.process_time()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - start
        out["cpu_seconds"] = time.process_time() - cpu


_pinned: list[int] = []


def on_backend(array: np.ndarray, backend: str) -> tuple[Any, str]:
    """Move ``array`` to the resolved backend; returns (array, backend name).

    The first move to cupy pins the process to a GPU no other job holds
    (:func:`ia_stages.pipeline.devices.pin_cupy_device`).
    """
    name = resolve_backend(backend)
    if name == "cupy" and not _pinned:
        _pinned.append(pin_cupy_device())
    return to_backend(array, name), name


__all__ = [
    "InputError",
    "StoreError",
    "job_tree",
    "load_features",
    "on_backend",
    "require_images",
    "timer",
]


def write_gathered(
    ds: xr.Dataset,
    parts: list[tuple[str | Path, xr.Dataset]],
    stage: str,
    settings: dict,
    out: str | Path,
    dim: str,
    **extra: Any,
) -> xr.Dataset:
    """Give ``ds``, assembled from the block stores ``parts`` ((path, store) pairs), its
    provenance and write it to ``out``: the blocks' backend, their count and summed wall
    time, ``n`` (the size of ``ds``'s dimension ``dim``) and the attributes ``extra``.

    Example
    -------
    >>> write_gathered(ds, parts, "means-gather", settings, "f.zarr", "sample")  # doctest: +SKIP
    """
    ds.attrs = provenance(
        stage,
        settings,
        settings["seed"],
        parts[0][1].attrs.get("backend", "numpy"),
        n=ds.sizes[dim],
        blocks=len(parts),
        wall_seconds=sum(float(b.attrs["wall_seconds"]) for _, b in parts),
        **extra,
    )
    write_store(ds, out)
    return ds
