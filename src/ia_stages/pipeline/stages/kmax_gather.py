"""Stage ``kmax-gather``: assemble the n x n kappa^max from its upper-triangle blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.groups import make_group
from ia_stages.pipeline.stages.common import InputError
from ia_stages.pipeline.store import provenance, read_store, strings, write_store


def run(blocks: list[str | Path], out: str | Path, settings: dict) -> xr.Dataset:
    """Read every block store, fill the lower triangle by symmetry, write ``out``."""
    stores = [(p, read_store(p, required=("value", "params", "sqdist"))) for p in blocks]
    if not stores:
        raise InputError(f"{out}: no kappa^max blocks to gather")
    n = int(stores[0][1].attrs["n"])
    value = np.full((n, n), np.nan)
    sqdist = np.full((n, n), np.nan)
    group = make_group(**settings.get("group", {}))
    params = np.full((n, n, group.n_params), np.nan)
    seconds = 0.0
    for path, b in stores:
        if int(b.attrs.get("n", -1)) != n:
            raise InputError(f"{path}: block is for n={b.attrs.get('n')}, others for n={n}")
        i, j = b["sample_i"].values, b["sample_j"].values
        ix = np.ix_(i, j)
        value[ix], sqdist[ix], params[ix] = b["value"], b["sqdist"], b["params"]
        value[np.ix_(j, i)] = b["value"].values.T
        sqdist[np.ix_(j, i)] = b["sqdist"].values.T
        params[np.ix_(j, i)] = group.inverse(b["params"].values).transpose(1, 0, 2)
        seconds += float(b.attrs["wall_seconds"])
    if np.isnan(value).any():
        missing = np.argwhere(np.isnan(value))[0]
        raise InputError(f"{out}: blocks do not cover pair {tuple(int(k) for k in missing)}")
    ds = xr.Dataset(
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
    ds.attrs = provenance(
        "kmax-gather",
        settings,
        settings["seed"],
        stores[0][1].attrs.get("backend", "numpy"),
        n=n,
        blocks=len(stores),
        wall_seconds=seconds,
    )
    write_store(ds, out)
    return ds
