"""The user's images (dataset kind ``images``): every format read by its library, the options,
the class averages, and bad input (one line naming the file or key, exit 2, results/ kept)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile
import xarray as xr
import yaml
from PIL import Image

from ia_stages.core.warp import warp
from ia_stages.data.datasets import DatasetError
from ia_stages.data.user_images import fit_canvas, load_images, probe
from ia_stages.ia.class_averages import class_averages
from ia_stages.ia.distances import kmax
from ia_stages.pipeline.cli import main
from ia_stages.pipeline.config import ConfigError, validate_config
from ia_stages.settings import Settings


def _stack(n: int = 6, size: int = 12, seed: int = 0) -> np.ndarray:
    """Distinct float images in [0, 1] with a dark border."""
    rng = np.random.default_rng(seed)
    a = np.zeros((n, size, size))
    a[:, 3:-3, 2:-4] = rng.uniform(0.2, 1.0, (n, size - 6, size - 6))
    return a


def _png_folder(root: Path, stack: np.ndarray, classes=("a", "b")) -> list[str]:
    names = []
    for k, im in enumerate(stack):
        cls = classes[k % len(classes)] if classes else ""
        folder = root / cls
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((im * 255).round().astype(np.uint8)).save(folder / f"im{k:02d}.png")
        names.append(f"{cls}/im{k:02d}.png" if cls else f"im{k:02d}.png")
    return names


def test_folder_with_class_subfolders_gives_labels_and_file_names(tmp_path):
    stack = _stack()
    names = _png_folder(tmp_path / "f", stack)
    ds = load_images(tmp_path / "f")
    order = np.argsort(names)  # files are read folder by folder, in sorted order
    assert ds.sample_names == sorted(names)
    np.testing.assert_allclose(ds.data, stack[order], atol=0.5 / 255)
    assert ds.class_names == ["a", "b"]
    np.testing.assert_array_equal(ds.label, [0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("fmt", ["npy", "npz", "zarr", "tif", "mrcs"])
def test_every_stack_format_reads_the_same_images(tmp_path, fmt):
    stack = _stack().astype(np.float32)
    label = np.array([2, 2, 5, 5, 7, 7])
    path = tmp_path / f"s.{fmt}"
    if fmt == "npy":
        np.save(path, stack)
    elif fmt == "npz":
        np.savez(path, images=stack, label=label)
    elif fmt == "zarr":
        xr.Dataset({"images": (("n", "y", "x"), stack), "label": (("n",), label)}).to_zarr(path)
    elif fmt == "tif":
        tifffile.imwrite(path, stack)  # one page per image
    else:
        with mrcfile.new(path) as mrc:
            mrc.set_data(stack)
    assert probe(path).n == 6
    ds = load_images(path)
    np.testing.assert_allclose(ds.data, stack, rtol=1e-6)
    assert ds.sample_names == [str(k) for k in range(6)]
    if fmt in ("npz", "zarr"):
        assert ds.class_names == ["2", "5", "7"]
        np.testing.assert_array_equal(ds.label, [0, 0, 1, 1, 2, 2])
    else:
        assert ds.label is None


def test_canvas_pads_and_crops_about_the_centre():
    a = np.arange(1, 13, dtype=float).reshape(3, 4)
    padded = fit_canvas(a, 7)
    assert padded.sum() == a.sum() and padded[2:5, 1:5].tolist() == a.tolist()
    cropped = fit_canvas(np.pad(a, 5), 3)  # 13 x 14 -> centre 3 x 3
    np.testing.assert_array_equal(cropped, np.pad(a, 5)[5:8, 5:8])


def test_options_canvas_downsample_invert_rgb_labels_and_subset(tmp_path):
    root = tmp_path / "f"
    root.mkdir()
    rng = np.random.default_rng(3)
    for k, size in enumerate([(10, 12), (14, 8), (12, 12), (8, 10)]):
        rgb = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(rgb).save(root / f"x{k}.png")
    rows = ["file,label", "x0.png,cat", "x1.png,dog", "x2.png,cat", "x3.png,dog"]
    (tmp_path / "lab.csv").write_text("\n".join(rows) + "\n")
    with pytest.warns(UserWarning, match="RGB"):
        ds = load_images(root, canvas=5, downsample=2, invert=True, labels=tmp_path / "lab.csv")
    assert ds.data.shape == (4, 5, 5)
    gray = np.asarray(Image.open(root / "x2.png").convert("L"), dtype=float) / 255
    down = gray.reshape(6, 2, 6, 2).mean((1, 3))
    top = max(
        np.asarray(Image.open(root / f"x{k}.png").convert("L"), dtype=float).max() / 255
        for k in range(4)
    )
    np.testing.assert_allclose(ds.data[2], fit_canvas(top - down, 5))
    assert ds.class_names == ["cat", "dog"] and ds.label.tolist() == [0, 1, 0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = load_images(root, canvas=6, max_images=2, rng=np.random.default_rng(1))
        b = load_images(root, canvas=6, max_images=2, rng=np.random.default_rng(1))
        full = load_images(root, canvas=6)
    assert a.sample_names == b.sample_names and len(a.sample_names) == 2
    for name, im in zip(a.sample_names, a.data, strict=True):
        np.testing.assert_array_equal(im, full.data[full.sample_names.index(name)])


def test_class_averages_recover_the_base_image_and_the_poses():
    """Rotated, shifted copies of two shapes: each class average is its shape in the pose of
    the medoid, every member's pose maps it onto the average, and distances are small."""
    from ia_stages.data.base_shapes import draw_base_shapes

    bases = np.stack(list(draw_base_shapes(48).values()))[:2]
    rng = np.random.default_rng(0)
    label = np.repeat([0, 1], 4)
    params = np.column_stack(
        [rng.uniform(-1.2, 1.2, 8), rng.uniform(-3, 3, 8), rng.uniform(-3, 3, 8)]
    )
    V = warp(bases[label], params)
    settings = Settings.from_dict(dict(beta=10.0, sigma=1.0))
    km = kmax(V, settings)
    res = class_averages(V, label, km, settings)
    assert res.sizes.tolist() == [4, 4]
    assert res.distance.max() < 0.15  # aligned members sit on their class average
    aligned = warp(V, res.params)
    for k in (0, 1):
        members = label == k
        err = np.linalg.norm(aligned[members] - res.means[k], axis=(1, 2))
        assert err.max() < 0.15 * np.linalg.norm(res.means[k])


def test_aligning_onto_own_means_equals_the_full_rectangle():
    """Given labels, every image is aligned onto its own class average only (n pairs): its
    pose and distance equal those picked from kappa^max of every average against every image
    (K n pairs), and without labels each image goes to its nearest average."""
    from ia_stages.data.large import digit_copies
    from ia_stages.ia.class_averages import align_to

    X = digit_copies(copies=1, n_digits=30, seed=3).data.astype(float)
    settings = Settings.from_dict(dict(beta=2.0, sigma=1.0))
    means = X[[0, 1, 2]]
    labels = np.arange(30) % 3
    calls = []
    _, params, distance = align_to(means, X, settings, labels, progress=calls.append)
    full = kmax(X, settings, U=means)
    cols = np.arange(30)
    np.testing.assert_array_equal(params, full.params[labels, cols])
    np.testing.assert_array_equal(distance, np.sqrt(np.maximum(full.sqdist[labels, cols], 0)))
    assert sum(calls) == 30
    nearest, _, d_nearest = align_to(means, X, settings)
    np.testing.assert_array_equal(nearest, np.argmin(full.sqdist, axis=0))
    assert np.all(d_nearest <= distance + 1e-12)


def test_a_class_average_aligns_at_most_average_members_nearest_its_medoid():
    """With ``mean.average_members`` = m below a cluster's size, its average is the invariant
    mean of the m members nearest its medoid (from their kappa^max starts), every member still
    gets a pose and distance; with m at least the size, every member enters."""
    from dataclasses import replace

    from ia_stages.data.large import digit_copies
    from ia_stages.ia.class_averages import class_averages, medoids
    from ia_stages.ia.invariant_mean import invariant_mean

    data = digit_copies(copies=6, n_digits=2, seed=3)  # two digits, six copies each
    X, labels = data.data.astype(float), np.asarray(data.label)
    base = Settings.from_dict(dict(beta=2.0, sigma=1.0))
    K = kmax(X, base)
    capped = replace(base, mean=replace(base.mean, average_members=3))
    got = class_averages(X, labels, K, capped)
    med = medoids(K.sqdist, labels)
    for k in range(2):
        members = np.flatnonzero(labels == k)
        near = members[np.sort(np.argsort(K.sqdist[med[k], members], kind="stable")[:3])]
        want = invariant_mean(X[near], np.ones(3), K.params[med[k]][near], capped.mean)
        np.testing.assert_array_equal(got.means[k], want.mean)
    assert got.distance.shape == (12,) and np.isfinite(got.distance).all()
    every = replace(base, mean=replace(base.mean, average_members=6))
    assert not np.array_equal(class_averages(X, labels, K, every).means, got.means)
    unlimited = replace(base, mean=replace(base.mean, average_members=None))
    np.testing.assert_array_equal(
        class_averages(X, labels, K, every).means, class_averages(X, labels, K, unlimited).means
    )


# ---- bad input: one line naming the file or key, exit 2, results/ untouched ----------------


def _bad_case(tmp_path: Path, case: str) -> tuple[list[str], str]:
    """Arguments of ``ia-stages cluster`` for one bad input and the text the error must name."""
    root = tmp_path / "data"
    root.mkdir()
    if case == "empty folder":
        return [str(root)], "no PNG/TIFF/JPEG images"
    if case == "corrupt PNG":
        _png_folder(root, _stack(3), classes=())
        raw = (root / "im01.png").read_bytes()
        (root / "im01.png").write_bytes(raw[:40] + b"\x00" * 20 + raw[60:])
        return [str(root)], "im01.png"
    if case == "different sizes":
        _png_folder(root, _stack(2, 12), classes=())
        Image.fromarray(np.zeros((9, 14), np.uint8)).save(root / "odd.png")
        return [str(root)], "canvas"
    if case == "4-D array":
        np.save(root / "a.npy", np.zeros((2, 5, 8, 8)))
        return [str(root / "a.npy")], "4-D"
    if case == "not an MRC":
        (root / "a.mrc").write_bytes(b"this is not an MRC file" * 100)
        return [str(root / "a.mrc")], "a.mrc"
    if case == "labels CSV naming missing files":
        _png_folder(root, _stack(2), classes=())
        (tmp_path / "lab.csv").write_text("im00.png,a\nim01.png,b\nghost.png,c\n")
        return [str(root), "--labels", str(tmp_path / "lab.csv")], "ghost.png"
    if case == "max_images too large":
        _png_folder(root, _stack(3), classes=())
        return [str(root), "--max-images", "4"], "max_images=4"
    if case == "zero cores":
        _png_folder(root, _stack(3), classes=())
        return [str(root), "--cores", "0"], "--cores"
    if case == "NaN beta":
        _png_folder(root, _stack(3), classes=())
        return [str(root), "--beta", "nan"], "beta must be finite, got nan (given as --beta nan)"
    raise AssertionError(case)


BAD = [
    "empty folder",
    "corrupt PNG",
    "different sizes",
    "4-D array",
    "not an MRC",
    "labels CSV naming missing files",
    "max_images too large",
    "NaN beta",
    "zero cores",
]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_fails_in_one_line_and_keeps_results(tmp_path, capsys, case):
    args, named = _bad_case(tmp_path, case)
    out = tmp_path / "out"
    kept = out / "results" / "images" / "clusters.csv"
    kept.parent.mkdir(parents=True)
    kept.write_text("an earlier run's result\n")
    rc = main(["cluster", *args, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("ia-stages cluster: error:"), err
    assert named in err[0]
    assert kept.read_text() == "an earlier run's result\n"
    assert sorted(p.name for p in out.rglob("*")) == ["clusters.csv", "images", "results"]


def test_a_stack_larger_than_memory_fails_in_one_line(tmp_path, capsys, monkeypatch):
    """A stack whose float64 pixels exceed the memory available is refused from its header
    (one line naming the file, what it needs and what is free), before anything is read."""
    import psutil

    np.save(tmp_path / "big.npy", _stack(6))
    free = 6 * 12 * 12 * 8 - 1  # a byte short of the six images as float64

    class Memory:
        available = free

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory)
    rc = main(["cluster", str(tmp_path / "big.npy"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "big.npy" in err[0] and "6 images of 12x12 px" in err[0] and "available" in err[0]
    assert not (tmp_path / "out" / "results").exists()
    monkeypatch.setattr(Memory, "available", free + 1)  # exactly enough: accepted
    from ia_stages.data.user_images import check

    assert check(tmp_path / "big.npy") == 6


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("datasets", "shapes3", "settings", "beta"), math.nan),
        (("datasets", "shapes3", "settings", "beta"), math.inf),
        (("settings", "readout", "threshold"), math.nan),
        (("settings", "mean", "step_size"), -math.inf),
        (("settings", "mean", "sigmas", 1), math.nan),
        (("benchmark", "theory", "tolerance"), math.inf),
    ],
)
def test_nan_or_inf_anywhere_in_the_config_is_refused(default_config, schema_path, path, value):
    node = default_config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if path[-2] == "sigmas":
        mean = default_config["settings"].setdefault("mean", {})
        node = mean.setdefault("sigmas", [3.0, 1.5, 0.0])
    node[path[-1]] = value
    with pytest.raises(ConfigError) as err:
        validate_config(default_config, schema_path)
    assert f"config key '{'.'.join(map(str, path))}'" in str(err.value)
    assert "finite" in str(err.value) and "\n" not in str(err.value)


def test_nan_in_a_config_file_fails_check_config(tmp_path, default_config, schema_path, capsys):
    default_config["datasets"]["shapes3"]["settings"]["beta"] = 30.0
    text = yaml.safe_dump(default_config).replace("beta: 30.0", "beta: .nan")
    assert ".nan" in text
    (tmp_path / "c.yaml").write_text(text)
    rc = main(["check-config", str(tmp_path / "c.yaml"), "--schema", str(schema_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "datasets.shapes3.settings.beta" in err[0]


def test_images_dataset_in_the_config_is_checked_and_sized(tmp_path, schema_path):
    _png_folder(tmp_path / "f", _stack(5))
    cfg = {
        "datasets": {"mine": {"kind": "images", "path": str(tmp_path / "f"), "max_images": 3}},
        "ia": {"datasets": ["mine"]},
        "ka": {"datasets": []},
        "figures": {"blobs": None, "shapes": None, "mean_trace": {"dataset": None}},
    }
    from ia_stages.pipeline.config import dataset_size

    valid = validate_config(cfg, schema_path)
    assert dataset_size(valid, "mine") == 3
    assert valid["datasets"]["mine"]["settings"]["beta"] == 20.0
    cfg["datasets"]["mine"]["max_images"] = 9
    with pytest.raises(ConfigError, match=r"datasets\.mine.*max_images=9"):
        validate_config(cfg, schema_path)
    with pytest.raises(DatasetError, match="no such file"):
        probe(tmp_path / "missing")


def test_my_images_template_is_a_valid_config_once_path_is_set(tmp_path, schema_path):
    template = yaml.safe_load((schema_path.parents[5] / "config/my_images.yaml").read_text())
    with pytest.raises(ConfigError, match=r"datasets\.mine.*path/to/your/images"):
        validate_config(template, schema_path)
    _png_folder(tmp_path / "f", _stack(4))
    template["datasets"]["mine"]["path"] = str(tmp_path / "f")
    cfg = validate_config(template, schema_path)
    assert cfg["ia"]["datasets"] == ["mine"] and cfg["figures"]["shapes"] is None
