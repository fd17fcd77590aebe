"""Rendered test shapes (data.render): area, quarter turns, shifts, the warp convention."""

import numpy as np
import pytest

from ia_stages import warp
from ia_stages.core.smoothing import smooth
from ia_stages.data.render import ellipse, letter, polygon, polygon_area, regular_polygon, render


def test_area_matches_the_polygon():
    v = regular_polygon(5, 13.0, phase=0.3)
    for p in ([0.0, 0.0, 0.0], [0.7, 0.31, -0.45]):
        img = render(polygon(v), (40, 40), p)[0]
        assert img.min() >= 0 and img.max() <= 1
        assert abs(img.sum() - polygon_area(v)) < 1e-9  # every pixel's coverage is exact
        # and so is the coverage seen by the sub-pixels of a camera blur (which keeps mass)
        assert abs(render(polygon(v), (40, 40), p, psf=0.7)[0].sum() - polygon_area(v)) < 1e-6
    a, b, n = 9.0, 5.5, 256
    polygon_of_ellipse = 0.5 * n * a * b * np.sin(2 * np.pi / n)
    assert abs(render(ellipse(a, b, n), (32, 32))[0].sum() - polygon_of_ellipse) < 1e-9


def test_a_pixel_is_the_area_of_the_outline_inside_it():
    # a square from (0.25, 0.1) to (1.75, 1.6) px off the centre of a 4 x 4 canvas (centre 1.5)
    sq = polygon(np.array([[0.25, 0.1], [0.25, 1.6], [1.75, 1.6], [1.75, 0.1]]) - 0.0)
    img = render(sq, (4, 4))[0]
    # pixel (i, j) covers rows [i - 1.5 - 0.5, i - 1.5 + 0.5) of centred coordinates
    edges = np.arange(5) - 2.0
    rows = np.clip(np.minimum(edges[1:], 1.75) - np.maximum(edges[:-1], 0.25), 0, None)
    cols = np.clip(np.minimum(edges[1:], 1.6) - np.maximum(edges[:-1], 0.1), 0, None)
    np.testing.assert_allclose(img, np.outer(rows, cols), atol=1e-12)


def test_letter_holes_stay_empty():
    img = render(letter("O", 20.0), (32, 32))[0]
    assert img[15:17, 15:17].max() == 0.0
    assert img.sum() > 50


def test_quarter_turn_is_rot90():
    for out in (letter("F", 18.0), polygon(regular_polygon(3, 9.0, 0.2))):
        base = render(out, (30, 30))[0]
        turned = render(out, (30, 30), [np.pi / 2, 0.0, 0.0])[0]
        np.testing.assert_allclose(turned, np.rot90(base), atol=1e-12)
        # the same convention as warp: (v o tau) with theta = 90 degrees
        np.testing.assert_allclose(warp(base, np.array([np.pi / 2, 0.0, 0.0])), turned, atol=1e-12)


def test_centroid_follows_the_shift():
    out = polygon(regular_polygon(6, 8.0, phase=0.13))
    ys, xs = np.mgrid[:32, :32]

    def centroid(img):
        return np.array([(img * ys).sum(), (img * xs).sum()]) / img.sum()

    base = centroid(render(out, (32, 32))[0])
    for b in ([0.3, -0.2], [-0.45, 0.15], [1.25, 0.5]):
        moved = centroid(render(out, (32, 32), [0.0, *b])[0])
        # v o tau with tau(p) = p + b moves the content by -b (the pixel grid's moments
        # sum_p p (f * box)(p) = integral of f(x) round(x) follow it up to the sampling)
        np.testing.assert_allclose(moved - base, -np.asarray(b), atol=1e-3)


def test_rendering_at_an_angle_approximates_the_warp():
    out = letter("G", 16.0)
    p = np.array([0.5, 0.4, -0.3])
    rendered = smooth(render(out, (32, 32), p, psf=1.0), 1.0)[0]
    warped = warp(smooth(render(out, (32, 32), psf=1.0), 1.0)[0], p)
    err = np.linalg.norm(rendered - warped) / np.linalg.norm(rendered)
    assert err < 2e-2


def test_psf_keeps_the_mass_and_blurs():
    out = polygon(regular_polygon(4, 8.0))
    sharp = render(out, (32, 32))[0]
    blurred = render(out, (32, 32), psf=1.0)[0]
    assert abs(blurred.sum() - sharp.sum()) < 1e-6 * sharp.sum()
    assert blurred.max() < sharp.max()


def test_bad_input():
    with pytest.raises(ValueError, match="params"):
        render(letter("A"), (16, 16), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="supersample"):
        render(letter("A"), (16, 16), supersample=0)
    with pytest.raises(ValueError, match="psf"):
        render(letter("A"), (16, 16), psf=-1.0)
    with pytest.raises(ValueError, match="vertices"):
        polygon(np.zeros((2, 2)))
