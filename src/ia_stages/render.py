"""Shapes drawn from vector outlines, rasterised with supersampling at any rotation and shift.

Test data that no warp of ours has touched: the transform is applied to the outline (a
:class:`matplotlib.path.Path` in continuous pixel coordinates), and only then is the outline
rasterised, by the share of each pixel's ``s x s`` sub-pixel points that fall inside it (a
box-filtered, supersampled raster). Used to measure how invariant kappa^max is on images that
were acquired at an angle rather than warped (``bench/invariance.py``, Table 2).

Coordinates are (row, column) in pixels; an outline is centred on the image centre
c = ((H - 1) / 2, (W - 1) / 2). The transform follows the warp convention of
:mod:`ia_stages.warp`: rendering with SE(2) parameters (theta, b0, b1) draws the image
v o tau, i.e. the outline's point x appears at the pixel p with A (p - c) + c + b = c + x, so
``render(o, params=p) ~ warp(render(o), p)`` up to interpolation and rasterisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.textpath import TextPath
from scipy import ndimage

__all__ = ["ellipse", "letter", "polygon", "polygon_area", "regular_polygon", "render"]


def polygon(vertices: np.ndarray) -> Path:
    """A closed polygon outline from ``vertices (m, 2)`` (row, column) relative to the centre."""
    v = np.asarray(vertices, dtype=float)
    if v.ndim != 2 or v.shape[1] != 2 or v.shape[0] < 3:
        raise ValueError(f"polygon vertices must have shape (m >= 3, 2), got {v.shape}")
    return Path(np.vstack([v, v[:1]]), closed=True)


def polygon_area(vertices: np.ndarray) -> float:
    """Area of the simple polygon ``vertices (m, 2)`` (shoelace formula), in px^2."""
    v = np.asarray(vertices, dtype=float)
    y, x = v[:, 0], v[:, 1]
    return 0.5 * abs(float(np.dot(y, np.roll(x, -1)) - np.dot(x, np.roll(y, -1))))


def regular_polygon(n_sides: int, radius: float, phase: float = 0.0) -> np.ndarray:
    """Vertices ``(n_sides, 2)`` of a regular polygon of circumradius ``radius`` px."""
    a = phase + 2 * np.pi * np.arange(n_sides) / n_sides
    return radius * np.stack([np.sin(a), np.cos(a)], 1)


def ellipse(a: float, b: float, n_vertices: int = 256) -> Path:
    """An ellipse of semi-axes ``a`` (rows) and ``b`` (columns) px, as a polygon of
    ``n_vertices`` vertices (its area is within 2 pi^3 a b / (3 n^2) of pi a b)."""
    t = 2 * np.pi * np.arange(n_vertices) / n_vertices
    return polygon(np.stack([a * np.sin(t), b * np.cos(t)], 1))


def letter(text: str, height: float = 24.0, family: str = "DejaVu Sans") -> Path:
    """The outline of ``text`` in the font ``family`` (DejaVu Sans ships with matplotlib),
    scaled so that its bounding box is ``height`` px tall, upright and centred on the origin.

    Curves are flattened to polygons; :func:`render` fills them by the even-odd rule, so holes
    (as in 'A', 'O') stay empty.
    """
    tp = TextPath((0, 0), text, size=100.0, prop=FontProperties(family=family))
    polys = [p for p in tp.to_polygons(closed_only=True) if len(p) >= 3]
    if not polys:
        raise ValueError(f"text {text!r} has no outline in font {family!r}")
    pts = np.vstack(polys)
    lo, hi = pts.min(0), pts.max(0)
    scale = height / (hi[1] - lo[1])
    mid = (lo + hi) / 2
    verts, codes = [], []
    for p in polys:
        rc = np.stack([-(p[:, 1] - mid[1]), p[:, 0] - mid[0]], 1) * scale  # y up -> row down
        verts.append(rc)
        c = np.full(len(rc), Path.LINETO, dtype=Path.code_type)
        c[0] = Path.MOVETO
        c[-1] = Path.CLOSEPOLY
        codes.append(c)
    return Path(np.vstack(verts), np.concatenate(codes))


def _exact_trig(theta: float) -> tuple[float, float]:
    """cos and sin of ``theta``, exact at multiples of 90 degrees (so that a quarter turn
    maps the sub-pixel grid onto itself)."""
    c, s = np.cos(theta), np.sin(theta)
    c = float(np.round(c)) if abs(c - np.round(c)) < 1e-12 else float(c)
    s = float(np.round(s)) if abs(s - np.round(s)) < 1e-12 else float(s)
    return c, s


def render(
    outlines: Path | Sequence[Path],
    shape: tuple[int, int],
    params: np.ndarray | None = None,
    supersample: int = 8,
    psf: float = 0.0,
) -> np.ndarray:
    """Rasterise outlines after transforming them, with ``supersample`` x ``supersample``
    sub-pixel points per pixel.

    Parameters
    ----------
    outlines : one outline or ``n`` outlines (:func:`letter`, :func:`polygon`,
        :func:`ellipse`), coordinates (row, column) in px relative to the image centre
    shape : (H, W)
    params : ``(n, 3)`` (or ``(3,)``) SE(2) parameters (theta [rad], b0, b1 [px]) applied to
        the outlines, with the meaning of :func:`ia_stages.warp.warp`; None = identity. With a
        single outline and ``(n, 3)`` params, that outline is drawn ``n`` times.
    supersample : sub-pixel points per axis; a pixel's value is the share of its points inside
        the transformed outline (a box filter, error ~ perimeter / supersample^2 in area)
    psf : standard deviation (px) of a Gaussian optical blur applied to the sub-pixel raster
        before the pixels integrate it (a camera's point-spread function); 0 = none, i.e. the
        pixels integrate the sharp outline and its edges alias

    Returns
    -------
    ``(n, H, W)`` float64 in [0, 1].
    """
    if isinstance(outlines, Path):
        outlines = [outlines]
    outlines = list(outlines)
    H, W = shape
    if psf < 0:
        raise ValueError(f"psf must be >= 0, got {psf}")
    if supersample < 1:
        raise ValueError(f"supersample must be >= 1, got {supersample}")
    P = np.zeros((len(outlines), 3)) if params is None else np.atleast_2d(np.asarray(params, float))
    if P.shape[1] != 3:
        raise ValueError(f"params must have shape (n, 3) (theta, b0, b1), got {P.shape}")
    if len(outlines) == 1 and P.shape[0] > 1:
        outlines = outlines * P.shape[0]
    if len(outlines) != P.shape[0]:
        raise ValueError(f"{len(outlines)} outlines but {P.shape[0]} rows of params")
    s = supersample
    sub = (np.arange(s) + 0.5) / s - 0.5
    ys = (np.arange(H)[:, None] + sub[None, :]).ravel() - (H - 1) / 2
    xs = (np.arange(W)[:, None] + sub[None, :]).ravel() - (W - 1) / 2
    grid = np.stack(np.meshgrid(ys, xs, indexing="ij"), -1).reshape(-1, 2)
    out = np.empty((len(outlines), H, W))
    for k, (path, (th, b0, b1)) in enumerate(zip(outlines, P, strict=True)):
        c, sn = _exact_trig(th)
        A = np.array([[c, sn], [-sn, c]])
        # x = A p' + b with p' the centred pixel point: p' = A^T (x - b)
        moved = Path((path.vertices - np.array([b0, b1])) @ A, path.codes)
        # even-odd rule over the closed polygons, so holes stay empty whatever their orientation
        inside = np.zeros(grid.shape[0], dtype=bool)
        for poly in moved.to_polygons(closed_only=False):
            inside ^= Path(poly).contains_points(grid)
        fine = inside.reshape(H * s, W * s).astype(float)
        if psf > 0:
            fine = ndimage.gaussian_filter(fine, psf * s, mode="constant", truncate=4.0)
        out[k] = fine.reshape(H, s, W, s).mean(axis=(1, 3))
    return out
