"""Official-format loaders (MNIST IDX, affNIST .mat) on small files written here, and the
mnist / mnist_rot / affnist dataset kinds."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import scipy.io
import yaml

from ia_stages.core.groups import SE2
from ia_stages.core.warp import warp
from ia_stages.data.datasets import DatasetError, affnist, mnist
from ia_stages.data.loaders import LoaderError, load_affnist_mat, load_mnist_idx, read_idx
from ia_stages.pipeline.config import ConfigError, dataset_size, validate_config
from ia_stages.pipeline.stages import dataset as dataset_stage


def write_idx(path, array, code=0x08, compress=False):
    head = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    blob = head + array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if compress else open
    with opener(path, "wb") as fh:
        fh.write(blob)
    return path


@pytest.fixture
def idx_pair(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (12, 28, 28)).astype(np.uint8)
    y = np.arange(12, dtype=np.uint8) % 10
    return write_idx(tmp_path / "img.idx", X), write_idx(tmp_path / "lab.idx", y), X, y


def test_idx_round_trip_plain_and_gzip(tmp_path, idx_pair):
    img, lab, X, y = idx_pair
    Xr, yr = load_mnist_idx(img, lab)
    assert np.array_equal(Xr, X / 255.0) and np.array_equal(yr, y)
    gz = write_idx(tmp_path / "img.idx.gz", X, compress=True)
    assert np.array_equal(read_idx(gz), X)
    f32 = write_idx(tmp_path / "f.idx", np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3), 0x0D)
    assert np.allclose(read_idx(f32), np.linspace(0, 1, 6).reshape(2, 3))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b"\x01\x02" + b[2:], "bad magic"),
        (lambda b: b[:6], "truncated IDX header"),
        (lambda b: b[:-5], "header says"),
        (lambda b: b"", "bad magic"),
    ],
)
def test_malformed_idx_is_named(tmp_path, idx_pair, damage, message):
    img = idx_pair[0]
    bad = tmp_path / "bad.idx"
    bad.write_bytes(damage(img.read_bytes()))
    with pytest.raises(LoaderError, match=message) as err:
        read_idx(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_idx_label_count_must_match(tmp_path, idx_pair):
    img = idx_pair[0]
    lab = write_idx(tmp_path / "few.idx", np.zeros(5, dtype=np.uint8))
    with pytest.raises(LoaderError, match="5 labels for 12 images"):
        load_mnist_idx(img, lab)
    with pytest.raises(LoaderError, match="does not exist"):
        load_mnist_idx(tmp_path / "absent.idx", lab)


def affnist_file(path, n=6, struct_wrapped=True):
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, (n, 40, 40)).astype(np.uint8)
    image = np.stack([im.flatten(order="F") for im in imgs], 1)  # 1600 x n, column-major
    labels = np.arange(n) % 10
    if struct_wrapped:
        scipy.io.savemat(path, {"affNISTdata": {"image": image, "label_int": labels}})
    else:
        scipy.io.savemat(path, {"image": image, "label_int": labels})
    return imgs, labels


@pytest.mark.parametrize("wrapped", [True, False])
def test_affnist_mat_layout(tmp_path, wrapped):
    imgs, labels = affnist_file(tmp_path / "a.mat", struct_wrapped=wrapped)
    X, y = load_affnist_mat(tmp_path / "a.mat")
    assert np.array_equal(X, imgs / 255.0) and np.array_equal(y, labels)


def test_malformed_affnist_mat_is_named(tmp_path):
    bad = tmp_path / "junk.mat"
    bad.write_text("not a mat file")
    with pytest.raises(LoaderError, match=r"junk\.mat"):
        load_affnist_mat(bad)
    scipy.io.savemat(tmp_path / "nolab.mat", {"image": np.zeros((1600, 2))})
    with pytest.raises(LoaderError, match="lacks label_int"):
        load_affnist_mat(tmp_path / "nolab.mat")
    scipy.io.savemat(tmp_path / "shape.mat", {"image": np.zeros((100, 2)), "label_int": [1, 2]})
    with pytest.raises(LoaderError, match="1600 x n"):
        load_affnist_mat(tmp_path / "shape.mat")


def test_mnist_rot_from_idx_keeps_labels_and_transforms(idx_pair):
    img, lab, X, y = idx_pair
    ds = mnist(
        n=8,
        canvas=40,
        rotation_deg=(0, 360),
        idx_images=str(img),
        idx_labels=str(lab),
        rng=np.random.default_rng(3),
    )
    assert ds.data.shape == (8, 40, 40)
    assert np.allclose(ds.data, warp(ds.originals, ds.params))
    for orig, label in zip(ds.originals, ds.label, strict=True):  # each is one of the digits
        k = [i for i in range(len(X)) if np.array_equal(orig[6:34, 6:34], X[i] / 255.0)]
        assert k and y[k[0]] == label
    with pytest.raises(DatasetError, match="n=20 is larger than the 12"):
        mnist(n=20, idx_images=str(img), idx_labels=str(lab))


def test_affnist_style_regeneration_keeps_ink_inside():
    ds = affnist(n=20, rng=np.random.default_rng(4))
    assert ds.data.shape == (20, 40, 40) and ds.params.shape == (20, 6)
    assert ds.param_names == ("a00", "a01", "a10", "a11", "b0", "b1")
    border = np.concatenate([ds.data[:, 0], ds.data[:, -1], ds.data[:, :, 0], ds.data[:, :, -1]], 1)
    assert np.abs(border).max() < 0.05
    # mass is roughly kept (scale 0.8-1.2 per axis changes it by at most 1.44x)
    ratio = ds.data.sum((1, 2)) / ds.originals.sum((1, 2))
    assert np.all((ratio > 0.55) & (ratio < 1.6))
    A = ds.params[:, :4].reshape(-1, 2, 2)
    assert not np.allclose(A, SE2().matrix(np.zeros((20, 3))))  # not mere rotations


def test_new_kinds_through_config_and_stage(tmp_path, idx_pair, schema_path):
    img, lab, _, _ = idx_pair
    affnist_file(tmp_path / "a.mat", n=6)
    cfg = yaml.safe_load((schema_path.parents[5] / "config" / "config.yaml").read_text())
    cfg["datasets"]["rot"] = {
        "kind": "mnist_rot",
        "n": 5,
        "idx_images": str(img),
        "idx_labels": str(lab),
    }
    cfg["datasets"]["aff"] = {"kind": "affnist", "n": 4, "mat_path": str(tmp_path / "a.mat")}
    valid = validate_config(cfg, schema_path)
    assert valid["datasets"]["rot"]["rotation_deg"] == [0, 360]
    assert dataset_size(valid, "rot") == 5
    from ia_stages.pipeline.config import stage_settings

    ds = dataset_stage.run(stage_settings(valid, "dataset", "rot"), tmp_path / "rot.zarr")
    assert list(ds["param"].values) == ["theta", "b0", "b1"]
    ds = dataset_stage.run(stage_settings(valid, "dataset", "aff"), tmp_path / "aff.zarr")
    assert ds.sizes["sample"] == 4 and "params" not in ds
    assert ds.attrs["source"] == "affNIST (official file a.mat)"
    assert affnist(n=2).source == "affNIST-style (regenerated)"
    cfg["datasets"]["rot"]["idx_labels"] = str(tmp_path / "missing.idx")
    with pytest.raises(ConfigError, match=r"datasets\.rot\.idx_labels"):
        validate_config(cfg, schema_path)
    del cfg["datasets"]["rot"]["idx_labels"]
    with pytest.raises(ConfigError, match="both idx_images and idx_labels"):
        validate_config(cfg, schema_path)
