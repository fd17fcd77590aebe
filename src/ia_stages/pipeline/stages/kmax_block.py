"""Stage ``kmax-block``: kappa^max for one block (bi, bj) of the upper triangle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import group_of
from ia_stages.kmax import MemoryBudgetError, kappa_max
from ia_stages.pipeline.stages.common import (
    InputError,
    job_tree,
    load_features,
    on_backend,
    require_images,
    timer,
)
from ia_stages.pipeline.store import provenance, strings, write_store


def block_range(b: int, block_size: int, n: int) -> range:
    """Sample indices of block ``b``."""
    return range(b * block_size, min((b + 1) * block_size, n))


def n_pairs(bi: int, bj: int, block_size: int, n: int) -> int:
    """Pairs a block searches (i < j within a diagonal block)."""
    a, b = len(block_range(bi, block_size, n)), len(block_range(bj, block_size, n))
    return a * (a - 1) // 2 if bi == bj else a * b


def run(
    features: str | Path,
    out: str | Path,
    bi: int,
    bj: int,
    block_size: int,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """Compute the block and write it; ``features`` is a store with (sample, y, x) features."""
    ds = compute(features, bi, bj, block_size, settings, progress)
    write_store(ds, out)
    return ds


def compute(
    features: str | Path,
    bi: int,
    bj: int,
    block_size: int | None,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """The block (bi, bj) of ``features``' kappa^max as a dataset (not written);
    ``block_size`` None: one block of every sample (bi = bj = 0)."""
    V = require_images(load_features(features), features)
    n = V.shape[0]
    block_size = max(n, 1) if block_size is None else block_size
    nb = -(-n // block_size)
    if not (0 <= bi <= bj < nb):
        raise InputError(f"{features}: block ({bi}, {bj}) outside 0 <= bi <= bj < {nb} for n={n}")
    rows, cols = block_range(bi, block_size, n), block_range(bj, block_size, n)
    t = job_tree(settings)
    group = group_of(t)
    U, backend = on_backend(V[rows.start : rows.stop], settings["backend"])
    Vb = None if bi == bj else on_backend(V[cols.start : cols.stop], backend)[0]
    with timer() as clock:
        try:
            res = kappa_max(U, Vb, t.beta, t.normalization, group, t.search, progress, t.sigma)
        except MemoryBudgetError as err:
            raise InputError(f"settings key search.memory_mb: {err}") from None
    ds = xr.Dataset(
        {
            "value": (("sample_i", "sample_j"), to_numpy(res.value)),
            "params": (("sample_i", "sample_j", "param"), to_numpy(res.params)),
            "sqdist": (("sample_i", "sample_j"), to_numpy(res.sqdist)),
        },
        coords={
            "sample_i": np.arange(rows.start, rows.stop),
            "sample_j": np.arange(cols.start, cols.stop),
            "param": strings(group.param_names),
        },
    )
    ds.attrs = provenance(
        "kmax-block",
        settings,
        settings["seed"],
        backend,
        block=[bi, bj],
        n=n,
        wall_seconds=clock["seconds"],
        cpu_seconds=clock["cpu_seconds"],
        pairs=n_pairs(bi, bj, block_size, n),
    )
    return ds
