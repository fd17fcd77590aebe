"""Stage ``dataset``: generate a dataset store with images, labels and true transforms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.core.background import subtract_background
from ia_stages.core.seeds import stage_seed
from ia_stages.data import datasets
from ia_stages.data import user_images as images
from ia_stages.data.large import digit_copies
from ia_stages.pipeline.stages.common import job_tree
from ia_stages.pipeline.store import provenance, strings, write_store


def build(settings: dict) -> datasets.Dataset:
    """Generate the dataset described by ``settings['dataset_config']``, its images prepared
    by the tree's ``background`` (and ``mask``) once, here: every stage reads these."""
    cfg = dict(settings["dataset_config"])
    tree = job_tree(settings)
    rng = np.random.default_rng(stage_seed(settings["seed"], f"dataset:{settings['dataset']}"))
    kind = cfg.pop("kind")
    for key in ("rotation_deg", "shift_px", "shift_fraction"):
        if key in cfg:
            cfg[key] = tuple(cfg[key])
    factory = {
        "shapes3": datasets.shapes3,
        "mnist3": datasets.mnist3,
        "blobs": datasets.blobs,
        "mnist": datasets.mnist,
        "mnist_rot": datasets.mnist,
        "affnist": datasets.affnist,
        "images": images.load_images,
        "digit_copies": digit_copies,
    }
    if kind == "images":  # the loader names the files in its warnings
        return images.load_images(rng=rng, background=tree.background, mask=tree.mask, **cfg)
    built = factory[kind](rng=rng, **cfg)
    if tree.background != "none" and built.data.ndim == 3:
        built.data = subtract_background(built.data, tree.background, tree.mask)
    return built


def to_xarray(ds: datasets.Dataset) -> xr.Dataset:
    """Dataset -> xarray with dims sample, y, x (or dim), param, class.

    ``label`` is left out for unlabelled images; ``sample_name`` holds file names when known.
    """
    if ds.data.ndim == 3:
        features = (("sample", "y", "x"), ds.data)
    else:
        features = (("sample", "dim"), ds.data)
    out = xr.Dataset(
        {"features": features, "class_name": (("class",), strings(ds.class_names))},
        coords={"sample": np.arange(ds.data.shape[0])},
    )
    if ds.label is not None:  # unlabelled images have none
        out["label"] = (("sample",), ds.label)
    if ds.sample_names is not None:
        out["sample_name"] = (("sample",), strings(ds.sample_names))
    if ds.params is not None:
        out["params"] = (("sample", "param"), ds.params)
        out = out.assign_coords(param=strings(ds.param_names))
    if ds.originals is not None:
        out["original"] = (("sample", "y", "x"), ds.originals)
    return out


def run(settings: dict, out: str | Path) -> xr.Dataset:
    """Build the dataset and write it to ``out``."""
    built = build(settings)
    ds = to_xarray(built)
    ds.attrs = provenance(
        "dataset",
        settings,
        settings["seed"],
        "numpy",
        dataset=settings["dataset"],
        kind=settings["dataset_config"]["kind"],
        source=built.source,
    )
    write_store(ds, out)
    return ds
