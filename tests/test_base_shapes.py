"""Tests for the procedurally drawn Experiment-1 base images."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ia_stages.data.base_shapes import draw_base_shapes

NAMES = ("crab", "seven", "pikachu")


def _ncc(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised (zero-mean) correlation of two equally shaped images."""
    a = a - a.mean()
    b = b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


@pytest.fixture(scope="module", params=[48, 72, 96])
def shapes(request: pytest.FixtureRequest) -> tuple[int, dict[str, np.ndarray]]:
    return request.param, draw_base_shapes(request.param)


def test_default_size_is_72() -> None:
    assert all(img.shape == (72, 72) for img in draw_base_shapes().values())


def test_keys_shape_dtype_range(shapes: tuple[int, dict[str, np.ndarray]]) -> None:
    size, imgs = shapes
    assert tuple(imgs) == NAMES
    for img in imgs.values():
        assert img.shape == (size, size)
        assert img.dtype == np.float64
        assert img.min() >= 0.0 and img.max() <= 1.0
        assert img.max() > 0.7
        assert img[0, :].max() == 0.0 and img[:, 0].max() == 0.0


def test_several_gray_levels(shapes: tuple[int, dict[str, np.ndarray]]) -> None:
    for img in shapes[1].values():
        ink = img[img > 0.02]
        levels = np.unique(np.round(ink, 1))
        assert len(levels) >= 6
        # Substantial mid-gray area, not just anti-aliased edges of a binary shape.
        assert np.mean((ink > 0.3) & (ink < 0.75)) > 0.15


def test_ink_inside_disc(shapes: tuple[int, dict[str, np.ndarray]]) -> None:
    size, imgs = shapes
    c = (size - 1) / 2
    yy, xx = np.mgrid[:size, :size]
    outside = np.hypot(yy - c, xx - c) > 0.30 * size
    for name, img in imgs.items():
        assert not (img[outside] > 0.02).any(), name
        assert (img > 0.02).sum() > 0.05 * size * size, name


def test_pairwise_distinct(shapes: tuple[int, dict[str, np.ndarray]]) -> None:
    imgs = shapes[1]
    for a, b in itertools.combinations(NAMES, 2):
        assert _ncc(imgs[a], imgs[b]) < 0.8, (a, b)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_no_rotational_symmetry(shapes: tuple[int, dict[str, np.ndarray]], k: int) -> None:
    for name, img in shapes[1].items():
        assert _ncc(img, np.rot90(img, k)) < 0.9, (name, k)


def test_deterministic() -> None:
    a, b = draw_base_shapes(48), draw_base_shapes(48)
    for name in NAMES:
        np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("size", [32, 33, 57])
def test_odd_and_small_sizes(size: int) -> None:
    imgs = draw_base_shapes(size)
    c = (size - 1) / 2
    yy, xx = np.mgrid[:size, :size]
    outside = np.hypot(yy - c, xx - c) > 0.30 * size
    for img in imgs.values():
        assert img.shape == (size, size)
        assert not (img[outside] > 0.02).any()


def test_rejects_too_small() -> None:
    with pytest.raises(ValueError):
        draw_base_shapes(31)
