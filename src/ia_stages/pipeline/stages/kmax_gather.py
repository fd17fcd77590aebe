"""Stages ``kmax-gather`` and ``kmax-whole``: the n x n kappa^max of one IA iteration.

``kmax-gather`` assembles the matrix from its upper-triangle blocks (``kmax-block`` jobs);
``kmax-whole`` computes it in one job, for a dataset whose matrix is a single block (a job
less, and the block's start-up and store less, per iteration). Both write the same store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.groups import group_of
from ia_stages.pipeline.stages.common import InputError, job_tree, write_gathered
from ia_stages.pipeline.store import read_store, strings


def assemble(
    stores: list[tuple[str | Path, xr.Dataset]], out: str | Path, settings: dict
) -> xr.Dataset:
    """The n x n dataset from ``(path, block)`` pairs: the lower triangle filled by symmetry
    (values and sqdist transposed, transforms inverted). No attributes; not written."""
    if not stores:
        raise InputError(f"{out}: no kappa^max blocks to gather")
    n = int(stores[0][1].attrs["n"])
    value = np.full((n, n), np.nan)
    sqdist = np.full((n, n), np.nan)
    group = group_of(job_tree(settings))
    params = np.full((n, n, group.n_params), np.nan)
    for path, b in stores:
        if int(b.attrs.get("n", -1)) != n:
            raise InputError(f"{path}: block is for n={b.attrs.get('n')}, others for n={n}")
        i, j = b["sample_i"].values, b["sample_j"].values
        ix = np.ix_(i, j)
        value[ix], sqdist[ix], params[ix] = b["value"], b["sqdist"], b["params"]
        value[np.ix_(j, i)] = b["value"].values.T
        sqdist[np.ix_(j, i)] = b["sqdist"].values.T
        params[np.ix_(j, i)] = group.inverse(b["params"].values).transpose(1, 0, 2)
    if np.isnan(value).any():
        missing = np.argwhere(np.isnan(value))[0]
        raise InputError(f"{out}: blocks do not cover pair {tuple(int(k) for k in missing)}")
    return xr.Dataset(
        {
            "value": (("sample_i", "sample_j"), value),
            "params": (("sample_i", "sample_j", "param"), params),
            "sqdist": (("sample_i", "sample_j"), sqdist),
        },
        coords={
            "sample_i": np.arange(n),
            "sample_j": np.arange(n),
            "param": strings(group.param_names),
        },
    )


def run(blocks: list[str | Path], out: str | Path, settings: dict) -> xr.Dataset:
    """Read every block store, fill the lower triangle by symmetry, write ``out``."""
    stores = [(p, read_store(p, required=("value", "params", "sqdist"))) for p in blocks]
    return write_gathered(
        assemble(stores, out, settings), stores, "kmax-gather", settings, out, "sample_i"
    )


def whole(
    features: str | Path,
    out: str | Path,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """kappa^max of every pair of ``features`` in one job, written as ``kmax-gather`` writes
    it; the attributes also carry the search's ``pairs`` and ``cpu_seconds`` (Table 3).

    Example
    -------
    >>> ds = whole("results/data/mnist.zarr", "kmax.zarr", settings)  # doctest: +SKIP
    >>> ds["value"].shape  # doctest: +SKIP
    (100, 100)
    """
    # lazy: kmax_block loads numba's kernels, for the one-job path only
    from ia_stages.pipeline.stages import kmax_block  # numba's kernels: not for a gather

    block = kmax_block.compute(features, 0, 0, None, settings, progress)
    stores = [(features, block)]
    ds = assemble(stores, out, settings)
    extra = {k: block.attrs[k] for k in ("cpu_seconds", "pairs")}
    return write_gathered(ds, stores, "kmax-whole", settings, out, "sample_i", **extra)
