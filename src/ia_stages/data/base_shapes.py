"""Procedurally drawn grayscale base images for Experiment 1 (crab, seven, pikachu).

The images stand in for the hand-drawn pictures of the Invariant Attention paper. Each
shape is drawn with :mod:`PIL.ImageDraw` on a supersampled float canvas, box-downsampled
for anti-aliasing and lightly Gaussian-blurred, so it survives cubic-interpolated rotation.
All ink lies inside a disc of radius ``0.30 * size`` around the canvas centre, so an image
can be rotated by any angle and shifted by ``0.14 * size`` without leaving the canvas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from PIL import Image, ImageDraw
from scipy.ndimage import gaussian_filter

__all__ = ["draw_base_shapes"]

SUPERSAMPLE = 8
INK_RADIUS_FRAC = 0.30
EDGE_MARGIN_PX = 2.5
BLUR_SIGMA_PX = 0.6

Point = tuple[float, float]


@dataclass
class _Pen:
    """Draws on a supersampled float canvas in unit coordinates.

    Unit coordinates have the origin at the canvas centre, ``y`` pointing up and the
    unit circle mapped onto the allowed ink disc (less an anti-aliasing margin).
    """

    draw: ImageDraw.ImageDraw
    centre: float
    scale: float

    def xy(self, pts: Sequence[Point]) -> list[Point]:
        """Convert unit coordinates to supersampled pixel coordinates."""
        return [(self.centre + x * self.scale, self.centre - y * self.scale) for x, y in pts]

    def ellipse(self, c: Point, rx: float, ry: float, ink: float) -> None:
        """Fill an axis-aligned ellipse with centre ``c`` and semi-axes ``rx``, ``ry``."""
        (x0, y0), (x1, y1) = self.xy([(c[0] - rx, c[1] + ry), (c[0] + rx, c[1] - ry)])
        self.draw.ellipse([x0, y0, x1, y1], fill=ink)

    def polygon(self, pts: Sequence[Point], ink: float) -> None:
        """Fill a polygon."""
        self.draw.polygon(self.xy(pts), fill=ink)

    def stroke(self, pts: Sequence[Point], width: float, ink: float) -> None:
        """Draw a polyline of unit ``width`` with round caps and joints."""
        self.draw.line(self.xy(pts), fill=ink, width=max(1, round(width * self.scale)))
        for p in pts:
            self.ellipse(p, width / 2, width / 2, ink)


def _crab(pen: _Pen) -> None:
    """Oval shell, two raised pincers (left one larger), 3 legs a side, eyes on stalks."""
    for side in (-1, 1):
        for k in range(3):
            knee = (side * (0.62 + 0.02 * k), 0.02 - 0.12 * k)
            tip = (side * (0.72 - 0.08 * k), -0.38 - 0.17 * k)
            pen.stroke([(side * 0.30, -0.05 - 0.1 * k), knee, tip], 0.07, 0.55)
        pen.stroke([(side * 0.28, 0.05), (side * 0.55, 0.22), (side * 0.52, 0.42)], 0.10, 0.8)
        pen.stroke([(side * 0.12, 0.12), (side * 0.16, 0.42)], 0.05, 0.8)
        pen.ellipse((side * 0.16, 0.45), 0.075, 0.075, 1.0)
        pen.ellipse((side * 0.16, 0.47), 0.035, 0.035, 0.2)
    for side, r in ((-1, 0.20), (1, 0.15)):
        cx, cy = side * 0.52, 0.58
        pen.ellipse((cx, cy), r * 0.8, r, 1.0)
        notch = [
            (cx, cy - 0.2 * r),
            (cx - side * 0.35 * r, cy + 1.3 * r),
            (cx + side * 0.5 * r, cy + 1.3 * r),
        ]
        pen.polygon(notch, 0.0)
    pen.ellipse((0.0, -0.12), 0.42, 0.27, 0.75)
    for x, y in ((-0.18, -0.08), (0.05, -0.02), (0.2, -0.16), (-0.05, -0.22)):
        pen.ellipse((x, y), 0.06, 0.045, 0.45)


def _seven(pen: _Pen) -> None:
    """Thick handwritten 7: serif hook, slanted top bar, curved stem and a stem crossbar."""
    w = 0.17
    pen.stroke([(-0.58, 0.42), (-0.55, 0.60)], w * 0.8, 0.7)
    top = [(-0.55, 0.60), (-0.2, 0.63), (0.2, 0.66), (0.52, 0.70)]
    pen.stroke(top, w, 0.9)
    stem = [(0.52, 0.70), (0.35, 0.35), (0.17, 0.0), (0.02, -0.40), (-0.06, -0.80)]
    for (a, b), ink in zip(pairwise(stem), (1.0, 0.9, 0.8, 0.65), strict=True):
        pen.stroke([a, b], w, ink)
    pen.stroke([(-0.15, -0.02), (0.50, 0.03)], w * 0.8, 0.55)


def _pikachu(pen: _Pen) -> None:
    """Round head with long dark-tipped ears, eyes, mid-gray cheeks, mouth and zigzag tail."""
    tail = [
        (0.22, -0.50),
        (0.57, -0.30),
        (0.44, -0.12),
        (0.82, 0.08),
        (0.68, 0.26),
        (0.86, 0.42),
        (0.50, 0.34),
        (0.57, 0.18),
        (0.22, -0.02),
        (0.32, -0.20),
        (0.12, -0.32),
    ]
    pen.polygon(tail, 0.7)
    pen.ellipse((-0.08, -0.62), 0.32, 0.24, 0.8)
    for base_l, base_r, tip, frac in (
        ((-0.46, 0.18), (-0.24, 0.34), (-0.70, 0.62), 0.5),
        ((-0.06, 0.36), (0.16, 0.26), (0.22, 0.90), 0.5),
    ):
        pen.polygon([base_l, tip, base_r], 0.85)
        a = (base_l[0] + frac * (tip[0] - base_l[0]), base_l[1] + frac * (tip[1] - base_l[1]))
        b = (base_r[0] + frac * (tip[0] - base_r[0]), base_r[1] + frac * (tip[1] - base_r[1]))
        pen.polygon([a, tip, b], 0.25)
    pen.ellipse((-0.12, -0.04), 0.44, 0.38, 0.9)
    for x in (-0.30, 0.08):
        pen.ellipse((x, 0.04), 0.07, 0.08, 0.1)
        pen.ellipse((x + 0.02, 0.07), 0.025, 0.025, 1.0)
    for x in (-0.44, 0.20):
        pen.ellipse((x, -0.16), 0.09, 0.08, 0.5)
    pen.stroke(
        [(-0.19, -0.16), (-0.15, -0.21), (-0.11, -0.16), (-0.07, -0.21), (-0.03, -0.16)], 0.025, 0.3
    )


def _render(size: int, paint: Callable[[_Pen], None]) -> np.ndarray:
    """Paint one shape supersampled, box-downsample to ``size`` and blur lightly."""
    big = size * SUPERSAMPLE
    canvas = Image.new("F", (big, big), 0.0)
    scale = (INK_RADIUS_FRAC * size - EDGE_MARGIN_PX) * SUPERSAMPLE
    paint(_Pen(ImageDraw.Draw(canvas), centre=big / 2, scale=scale))
    small = canvas.resize((size, size), Image.Resampling.BOX)
    img = gaussian_filter(np.asarray(small, dtype=np.float64), BLUR_SIGMA_PX)
    return np.clip(img, 0.0, 1.0)


def draw_base_shapes(size: int = 72) -> dict[str, np.ndarray]:
    """Draw the three Experiment-1 base images.

    Parameters
    ----------
    size : int
        Side length of the square images in pixels (at least 32).

    Returns
    -------
    dict of str to numpy.ndarray
        ``{"crab": img, "seven": img, "pikachu": img}``; each float64 of shape
        ``(size, size)`` with values in ``[0, 1]`` and background 0. All ink lies within
        ``0.30 * size`` of the centre ``((size - 1) / 2, (size - 1) / 2)``.
    """
    if size < 32:
        raise ValueError(f"size must be >= 32, got {size}")
    painters = {"crab": _crab, "seven": _seven, "pikachu": _pikachu}
    return {name: _render(size, paint) for name, paint in painters.items()}
