"""Exports a cryo-EM or microscopy user opens: class averages as ``classes.mrcs`` and
``classes.tif``, the members turned upright class by class as ``aligned.tif``, and a RELION
``particles.star`` (with the ``particles.mrcs`` stack it points into), written with mrcfile,
tifffile and starfile from the ``classes`` stage's store.

Pose conventions. The package's pose of image v (``clusters.csv``: theta, b0, b1; README and
DESIGN.md) maps it onto its class average u: u[p] ~ v(A (p - c) + c + b), with p = (row, col),
c = ((H-1)/2, (W-1)/2), A = [[cos t, sin t], [-sin t, cos t]]. In (x, y) = (col, row) this
is v(R(t) (p - c) + c + b_xy) with R(t) the counter-clockwise rotation [[cos, -sin], [sin,
cos]] and b_xy = (b1, b0). RELION (Conventions, "Orientations") rotates the reference into
the particle by psi and shifts the particle by its origin offsets (applied before the
rotation) into the reference, about the centre (W // 2, H // 2): the particle v is aligned
by u[p] ~ v(R(-psi) (p - c_R) + c_R - o). Equal for every p when

    psi = -t (degrees),   o = (I - R(t)) (c_R - c) - b_xy,

where c_R - c is 0.5 px along an even side and 0 along an odd one (:func:`relion_poses`).
Only plain SE(2) poses have RELION columns; other groups' stars carry the classes alone.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import tifffile

from ia_stages.core.groups import SE2, make_group
from ia_stages.pipeline.store import read_store

CLASS_FILES = ("classes.mrcs", "classes.tif", "particles.mrcs")
"""What :func:`write_classes` writes into its folder."""


def relion_poses(params: np.ndarray, shape: tuple[int, int]) -> pd.DataFrame:
    """RELION's in-plane angle and origin offsets (px) of the package's SE(2) poses.

    Parameters
    ----------
    params : ``(n, 3)`` array, theta (rad), b0, b1 (px): the pose mapping each image onto its
        class average (``clusters.csv``)
    shape : (H, W) of the images

    Returns
    -------
    DataFrame with ``rlnAnglePsi`` (degrees, in (-180, 180]), ``rlnOriginX`` and
    ``rlnOriginY`` (px).

    Example
    -------
    >>> relion_poses(np.array([[np.pi / 2, 1.0, 2.0]]), (29, 29)).round(6).values.tolist()
    [[-90.0, -2.0, -1.0]]
    """
    params = np.asarray(params, dtype=float)
    theta, b0, b1 = params[:, 0], params[:, 1], params[:, 2]
    H, W = shape
    dx, dy = W // 2 - (W - 1) / 2, H // 2 - (H - 1) / 2
    c, s = np.cos(theta), np.sin(theta)
    ox = dx - (c * dx - s * dy) - b1
    oy = dy - (s * dx + c * dy) - b0
    psi = -np.degrees(theta)
    psi = 180.0 - np.mod(180.0 - psi, 360.0)  # (-180, 180]
    return pd.DataFrame({"rlnAnglePsi": psi, "rlnOriginX": ox, "rlnOriginY": oy})


def _stores(dataset: str | Path, classes: str | Path):
    data = read_store(dataset, required=("features",))
    cls = read_store(classes, required=("class_average", "cluster", "pose"))
    return data, cls


def _group(cls) -> object:
    """The group the classes store's poses belong to (its settings tree's group and mirror)."""
    job = json.loads(cls.attrs.get("settings", "{}"))
    tree = job.get("settings", {})
    return make_group(tree.get("group", "se2"), bool(tree.get("mirror", False)))


def write_classes(
    dataset: str | Path, classes: str | Path, out_dir: str | Path, pixel_size: float | None
) -> list[Path]:
    """``classes.mrcs`` and ``classes.tif``: the class averages, class k+1 = cluster k (as
    float32, ``(K, H, W)``); ``particles.mrcs``: the images the poses were measured on (the
    dataset store's, float32, in sample order), which ``particles.star`` points into.
    ``pixel_size`` (Å, None: unknown) goes into the MRC headers."""
    data, cls = _stores(dataset, classes)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    averages = cls["class_average"].values.astype(np.float32)
    images = data["features"].values.astype(np.float32)
    for name, stack in (("classes.mrcs", averages), ("particles.mrcs", images)):
        with mrcfile.new(out / name, overwrite=True) as mrc:
            mrc.set_data(stack)
            mrc.set_image_stack()
            if pixel_size:
                mrc.voxel_size = pixel_size
    tifffile.imwrite(
        out / "classes.tif",
        averages,
        imagej=True,
        metadata={"axes": "ZYX", "Labels": [f"class {k + 1}" for k in range(len(averages))]},
    )
    return [out / n for n in CLASS_FILES]


def write_star(
    dataset: str | Path, classes: str | Path, out: str | Path, pixel_size: float | None
) -> Path:
    """``particles.star`` (RELION 3.1+): every image's ``_rlnImageName`` (``k@particles.mrcs``,
    the stack :func:`write_classes` writes beside it) and ``_rlnClassNumber`` (cluster + 1);
    for SE(2) poses also ``_rlnAnglePsi`` and the origin offsets (:func:`relion_poses`), in Å
    (``_rlnOriginXAngst``/``YAngst``, with an optics table) given ``pixel_size``, else in px
    (``_rlnOriginX``/``Y``, RELION 3.0's columns)."""
    import starfile  # lazy: starfile is optional (the relion extra)

    data, cls = _stores(dataset, classes)
    n, H, W = data["features"].shape
    table = pd.DataFrame(
        {
            "rlnImageName": [f"{k + 1:06d}@particles.mrcs" for k in range(n)],
            "rlnClassNumber": cls["cluster"].values.astype(int) + 1,
        }
    )
    if type(_group(cls)) is SE2:
        poses = relion_poses(cls["pose"].values, (H, W))
        table["rlnAnglePsi"] = poses["rlnAnglePsi"].values
        if pixel_size:
            table["rlnOriginXAngst"] = poses["rlnOriginX"].values * pixel_size
            table["rlnOriginYAngst"] = poses["rlnOriginY"].values * pixel_size
        else:
            table["rlnOriginX"] = poses["rlnOriginX"].values
            table["rlnOriginY"] = poses["rlnOriginY"].values
    blocks: dict[str, pd.DataFrame] = {}
    if pixel_size:
        blocks["optics"] = pd.DataFrame(
            {
                "rlnOpticsGroup": [1],
                "rlnOpticsGroupName": ["opticsGroup1"],
                "rlnImagePixelSize": [float(pixel_size)],
                "rlnImageSize": [int(H)],
                "rlnImageDimensionality": [2],
            }
        )
        table["rlnOpticsGroup"] = 1
    blocks["particles"] = table
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    starfile.write(blocks, out, overwrite=True, float_format="%.6f")
    return out


def write_aligned(dataset: str | Path, classes: str | Path, out: str | Path) -> Path:
    """``aligned.tif``: every image moved by its pose onto its class average (cubic B-spline,
    :func:`ia_stages.core.warp.warp`), class by class (cluster 0 first), each class's members
    nearest their average first; each page is labelled with its class and file name."""
    from ia_stages.core.warp import warp  # lazy: core.warp loads numba, for the aligned stack only
    from ia_stages.pipeline.stages.classes import sample_names

    data, cls = _stores(dataset, classes)
    V = data["features"].values
    cluster = cls["cluster"].values.astype(int)
    order = np.lexsort((cls["distance"].values, cluster))
    moved = warp(V[order], cls["pose"].values[order], _group(cls), interpolation="bspline")
    names = sample_names(cls) if "sample_name" in cls else sample_names(data)
    labels = [f"class {cluster[k] + 1}: {names[k]}" for k in order]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tifffile.imwrite(
        out,
        np.asarray(moved, dtype=np.float32),
        imagej=True,
        metadata={"axes": "ZYX", "Labels": labels},
    )
    return out


def source_pixel_size(path: str | Path, downsample: int = 1) -> float | None:
    """The pixel size (Å) an MRC stack's header gives, times ``downsample``; None for other
    inputs or a header without one."""
    path = Path(path)
    if path.suffix.lower() not in (".mrc", ".mrcs") or not path.is_file():
        return None

    try:  # a broken file is the reader's to report, in one line
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mrcfile.open(path, mode="r", header_only=True) as mrc:
                size = float(mrc.voxel_size.x)
    except (ValueError, OSError, EOFError):
        return None
    return size * downsample if size > 0 else None


def export_settings(cfg: dict) -> dict:
    """The exports' settings in a workflow config (the ``exports`` block; absent: defaults)."""
    block = cfg.get("exports") or {}
    return {"pixel_size": block.get("pixel_size")}


def star_available() -> bool:
    """True when starfile imports (the ``relion`` extra)."""
    try:
        import starfile  # noqa: F401  # lazy: starfile is optional (the relion extra)
    except ImportError:
        return False
    return True
