"""xarray/zarr I/O with provenance attributes. Writes are atomic: a store is written under a
temporary name beside its target and renamed into place, so a killed job never leaves a
store that looks complete."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import resource
import shutil
import uuid
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ia_stages import __version__


class StoreError(RuntimeError):
    """A store is missing, unreadable or lacks what a stage needs."""


def config_hash(settings: Any) -> str:
    """sha256 (first 16 hex digits) of the canonical JSON of ``settings``."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def provenance(stage: str, settings: Any, seed: int, backend: str, **extra: Any) -> dict:
    """Attributes every store carries: stage, config hash, version, seed, backend, time."""
    attrs = {
        "stage": stage,
        "config_hash": config_hash(settings),
        "ia_stages_version": __version__,
        "seed": int(seed),
        "backend": backend,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": json.dumps(settings, sort_keys=True, default=str),
        # which GPUs a scheduler gave the job (empty when none): where a result was computed
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        # the process's peak resident memory so far (the job's, since a job is one process)
        "peak_rss_mb": peak_rss_mb(),
    }
    attrs.update(extra)
    return attrs


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (``getrusage``; Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def store_attrs(path: str | Path) -> dict:
    """Attributes of a store, read from its metadata only (no array data)."""
    with _open(Path(path)) as ds:
        return dict(ds.attrs)


def strings(values) -> np.ndarray:
    """Text labels as an object array: stored as Zarr v3 variable-length strings."""
    return np.asarray(list(values), dtype=object)


def _remove_leftovers(path: Path) -> None:
    """Remove the temporaries (``.NAME.tmp-*``, ``.NAME.old-*``) that a writer of ``path``
    killed mid-write (``kill -9``, a node lost) left beside it: one job writes a given output,
    so none of them belongs to a live writer."""
    name = glob.escape(path.name)
    for leftover in (*path.parent.glob(f".{name}.tmp-*"), *path.parent.glob(f".{name}.old-*")):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def write_store(ds: xr.Dataset, path: str | Path) -> Path:
    """Write ``ds`` as a Zarr v3 store at ``path`` atomically (temp dir + rename), after
    removing what an earlier writer of ``path`` killed mid-write left beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        ds.to_zarr(tmp, mode="w", zarr_format=3, consolidated=False)
        if path.exists():  # move the old store aside first: a failed rename can restore it
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:
            if old.exists():
                os.replace(old, path)
            raise
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
    return path


def _open(path: Path) -> xr.Dataset:
    """Open a store lazily; :class:`StoreError` names the path on any problem."""
    if not path.exists():
        raise StoreError(f"{path}: store does not exist")
    try:
        with warnings.catch_warnings():
            # Snakemake leaves a .snakemake_timestamp file inside directory() outputs
            warnings.filterwarnings("ignore", message=".*snakemake_timestamp.*")
            return xr.open_zarr(path, zarr_format=3, consolidated=False)
    except Exception as err:  # zarr raises many kinds; all mean "unreadable"
        raise StoreError(f"{path}: unreadable store ({type(err).__name__}: {err})") from None


def read_store(path: str | Path, required: tuple[str, ...] = ()) -> xr.Dataset:
    """Load a store fully into memory; :class:`StoreError` names the path on any problem."""
    path = Path(path)
    lazy = _open(path)
    try:
        ds = lazy.load()
    except Exception as err:  # a chunk that is missing or corrupt
        raise StoreError(f"{path}: unreadable store ({type(err).__name__}: {err})") from None
    finally:
        lazy.close()
    missing = [v for v in required if v not in ds.variables]
    if missing:
        raise StoreError(f"{path}: store lacks variable(s) {', '.join(missing)}")
    return ds


def store_sizes(path: str | Path) -> dict[str, int]:
    """Dimension sizes of a store, read from its metadata only (no array data)."""
    with _open(Path(path)) as ds:
        return dict(ds.sizes)


def write_text_atomic(text: str, path: str | Path) -> Path:
    """Write a text file atomically (temp file + rename), after removing what an earlier
    writer of ``path`` killed mid-write left beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
