"""Stages ``means``, ``means-gather`` and ``means-whole``: one Invariant Attention
iteration's invariant means.

The means of the columns of W are independent, so the stage is sharded like kappa^max:
``means`` computes one block of columns, ``means-gather`` assembles the next features (and W)
from the blocks; ``means-whole`` does both in one job where the columns are one block. W is
the column-normalised kappa^max ('dense', the paper's) or, with the settings' ``attention`` of
kind 'knn', each column's weights over its k nearest samples under kappa^max; a 'knn' column's
mean aligns only those samples. Both come from :func:`ia_stages.ia.attention.attention_step`,
the estimator's attention step.

On the kNN path (``path.mode: candidates``) ``kmax`` is the kNN store: each column's mean
aligns its listed neighbours only, and W is stored sparse (``weights_index`` and
``weights_knn`` per column), never as n x n.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import group_of
from ia_stages.ia.attention import attention_step, column_normalize, sparse_neighbours
from ia_stages.ia.weights import dense_weights
from ia_stages.kmax import KappaMaxResult, KnnResult
from ia_stages.pipeline.stages.common import (
    InputError,
    job_tree,
    load_features,
    on_backend,
    require_images,
    timer,
    write_gathered,
)
from ia_stages.pipeline.stages.kmax_block import block_range
from ia_stages.pipeline.stages.knn import is_knn_store, read_knn
from ia_stages.pipeline.store import provenance, read_store, write_store
from ia_stages.settings.attention import AttentionSettings
from ia_stages.settings.sizing import check_attention, sized_neighbours


def _read_kmax(kmax: str | Path, n: int) -> xr.Dataset:
    km = read_store(kmax, required=("value", "params", "sqdist"))
    if km["value"].shape != (n, n):
        raise InputError(f"{kmax}: kappa^max is {km['value'].shape}, features have n={n}")
    return km


def _kappa(kmax: str | Path, n: int) -> KappaMaxResult | KnnResult:
    """The stored kappa^max: dense, or the kNN store's lists (the kNN path)."""
    if is_knn_store(kmax):
        return read_knn(kmax, n).knn
    km = _read_kmax(kmax, n)
    return KappaMaxResult(*(km[k].values for k in ("value", "params", "sqdist")))


def attention_of(settings: dict, n: int) -> AttentionSettings:
    """The job's attention, its k sized to ``n`` when None (:func:`~ia_stages.settings.
    sized_neighbours`, as the estimator without K), checked against n."""
    att = job_tree(settings).attention
    if att.k is None:
        att = replace(att, k=sized_neighbours(n)[0])
    try:
        check_attention(att, n)
    except ValueError as err:
        raise InputError(f"settings key {err}") from None
    return att


def run(
    features: str | Path,
    kmax: str | Path,
    out: str | Path,
    settings: dict,
    block: int = 0,
    block_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """Invariant means of the columns in ``block`` (all columns when ``block_size`` is None).

    Writes a store with ``features`` ``(sample, y, x)`` for those columns (``sample`` = column
    index), ``mean_params`` ``(sample, source, param)``, ``objective`` ``(sample, step)`` and
    ``sigma`` ``(sample, step_taken)``.
    """
    ds = compute(features, kmax, settings, block, block_size, progress)
    write_store(ds, out)
    return ds


def compute(
    features: str | Path,
    kmax: str | Path,
    settings: dict,
    block: int = 0,
    block_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """The invariant means of the columns in ``block`` as :func:`run` writes them (not
    written)."""
    V = require_images(load_features(features), features)
    n = V.shape[0]
    km = _kappa(kmax, n)
    size = n if block_size is None else block_size
    n_blocks = -(-n // size)
    if not 0 <= block < n_blocks:
        raise InputError(f"{features}: column block {block} outside 0..{n_blocks - 1} for n={n}")
    cols = block_range(block, size, n)
    tree = job_tree(settings)
    att = attention_of(settings, n)
    Vx, backend = on_backend(V, settings["backend"])
    if isinstance(km, KnnResult):
        res = km  # the kNN path's lists: each column's neighbours only
    else:
        res = KappaMaxResult(*(on_backend(a, backend)[0] for a in (km.value, km.params, km.sqdist)))
    with timer() as t:
        try:
            step = attention_step(
                Vx, res, att, tree.beta, tree.init, tree.mean, group=group_of(tree),
                progress=progress, columns=cols,
            )  # fmt: skip
        except ValueError as err:
            raise InputError(f"{kmax}: settings key {err}") from None
    means, feats = step.means, to_numpy(step.features)
    if att.kind == "knn":
        rows = step.neighbours.indices[cols.start : cols.stop]
        params = np.full((*rows.shape, means[0].params.shape[-1]), np.nan)
        for r, m in enumerate(means):
            params[r, rows[r] >= 0] = to_numpy(m.params)
        variables = {
            "mean_params": (("sample", "neighbour", "param"), params),
            "neighbour_index": (("sample", "neighbour"), rows),
        }
    else:
        variables = {
            "mean_params": (
                ("sample", "source", "param"),
                np.stack([to_numpy(m.params) for m in means]),
            ),
        }
    dropped = max(m.dropped_weight for m in means)
    ds = xr.Dataset(
        {
            "features": (("sample", "y", "x"), feats),
            **variables,
            "objective": (("sample", "step"), np.stack([m.objective for m in means])),
            "sigma": (("sample", "step_taken"), np.stack([m.sigma for m in means])),
        },
        coords={"sample": np.arange(cols.start, cols.stop)},
    )
    if att.kind == "dense":
        ds = ds.assign_coords(source=np.arange(n))
    ds.attrs = provenance(
        "means",
        settings,
        settings["seed"],
        backend,
        block=block,
        n=n,
        wall_seconds=t["seconds"],
        max_dropped_weight=dropped,
    )
    return ds


def gather(
    blocks: list[str | Path], kmax: str | Path, out: str | Path, settings: dict
) -> xr.Dataset:
    """Assemble the next features from column blocks; adds ``weights`` (W) from ``kmax``."""
    if not blocks:
        raise InputError(f"{out}: no invariant-mean blocks to gather")
    parts = [(p, read_store(p, required=("features", "mean_params", "objective"))) for p in blocks]
    return _write(assemble(parts, kmax, out, settings), parts, "means-gather", settings, out)


def whole(
    features: str | Path,
    kmax: str | Path,
    out: str | Path,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """Every column's invariant mean in one job, written as :func:`gather` writes the
    blocks' (for a dataset whose columns are a single block).

    Example
    -------
    >>> ds = whole("data.zarr", "kmax.zarr", "features.zarr", settings)  # doctest: +SKIP
    >>> ds["features"].shape  # doctest: +SKIP
    (100, 40, 40)
    """
    parts = [(features, compute(features, kmax, settings, 0, None, progress))]
    return _write(assemble(parts, kmax, out, settings), parts, "means-whole", settings, out)


def _write(
    ds: xr.Dataset,
    parts: list[tuple[str | Path, xr.Dataset]],
    stage: str,
    settings: dict,
    out: str | Path,
) -> xr.Dataset:
    """:func:`write_gathered`, with the blocks' largest dropped weight."""
    dropped = max(float(b.attrs["max_dropped_weight"]) for _, b in parts)
    return write_gathered(ds, parts, stage, settings, out, "sample", max_dropped_weight=dropped)


def assemble(
    parts: list[tuple[str | Path, xr.Dataset]], kmax: str | Path, out: str | Path, settings: dict
) -> xr.Dataset:
    """The next features from ``(path, block)`` pairs covering every column once, with W from
    ``kmax`` (dense ``weights``, or on the kNN path ``weights_index``/``weights_knn``). No
    attributes; not written."""
    n = int(parts[0][1].attrs["n"])
    for path, b in parts:
        if int(b.attrs.get("n", -1)) != n:
            raise InputError(f"{path}: block is for n={b.attrs.get('n')}, others for n={n}")
    ds = xr.concat([b for _, b in parts], dim="sample").sortby("sample")
    ds.attrs = {}
    cols = ds["sample"].values
    if cols.size != n or not np.array_equal(cols, np.arange(n)):
        missing = sorted(set(range(n)) - set(cols.tolist()))
        what = f"column {missing[0]} missing" if missing else "a column appears twice"
        raise InputError(f"{out}: invariant-mean blocks do not cover 0..{n - 1} ({what})")
    km = _kappa(kmax, n)
    att = attention_of(settings, n)
    beta = job_tree(settings).beta
    if isinstance(km, KnnResult):  # the kNN path: W's columns stay sparse
        knn, w = sparse_neighbours(km, att, beta)
        ds["weights_index"] = (("sample", "slot"), knn.indices)
        ds["weights_knn"] = (("sample", "slot"), w)
    elif att.kind == "knn":
        ds["weights"] = (("sample_i", "sample_j"), dense_weights(*sparse_neighbours(km, att, beta)))
    else:
        ds["weights"] = (("sample_i", "sample_j"), column_normalize(km.value))
    return ds
