"""Shapes drawn from vector outlines, rasterised at any rotation and sub-pixel shift.

Test data that no warp of ours has touched: the transform is applied to the outline (a
:class:`matplotlib.path.Path` in continuous pixel coordinates), and only then is the outline
rasterised: every pixel is the exact area of the outline inside it (a box filter of the sharp
outline), or, with a camera blur (``psf``), the mean over its ``s x s`` sub-pixels of the
blurred exact sub-pixel coverage. Point-sampled supersampling would not do: it puts an edge
parallel to the grid off by up to 1 / (2 s) px, a bias that depends on the angle.
Used to measure how invariant kappa^max is on images that were acquired at an angle rather
than warped (``bench/invariance.py``, Table 2).

Coordinates are (row, column) in pixels; outlines should lie inside the canvas (edges crossing
its border are cut approximately); an outline is centred on the image centre
c = ((H - 1) / 2, (W - 1) / 2). The transform follows the warp convention of
:mod:`ia_stages.core.warp`: rendering with SE(2) parameters (theta, b0, b1) draws the image
v o tau, i.e. the outline's point x appears at the pixel p with A (p - c) + c + b = c + x, so
``render(o, params=p) ~ warp(render(o), p)`` up to interpolation and rasterisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.textpath import TextPath
from numba import njit
from scipy import ndimage

__all__ = ["coverage", "ellipse", "letter", "polygon", "polygon_area", "regular_polygon", "render"]


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


@njit(cache=True)
def _accumulate(segments: np.ndarray, H: int, W: int) -> np.ndarray:
    """Signed area of every pixel covered by closed polygons, exactly.

    ``segments (m, 4)`` are edges (y0, x0, y1, x1) in pixel units, pixel (i, j) covering
    [i, i + 1) x [j, j + 1). Each edge adds, in every pixel row it crosses, the signed area
    between it and the row's right end; a running sum along the row then gives the coverage
    (the accumulation rasteriser of font renderers). Returns the ``(H, W)`` winding-weighted
    coverage.
    """
    acc = np.zeros((H, W + 2))
    for k in range(segments.shape[0]):
        ya, xa, yb, xb = segments[k, 0], segments[k, 1], segments[k, 2], segments[k, 3]
        if ya == yb:
            continue
        direction = 1.0
        if ya > yb:
            ya, xa, yb, xb = yb, xb, ya, xa
            direction = -1.0
        dxdy = (xb - xa) / (yb - ya)
        first = max(int(np.floor(ya)), 0)
        last = min(int(np.ceil(yb)), H)
        for row in range(first, last):
            top, bottom = max(float(row), ya), min(row + 1.0, yb)
            if bottom <= top:
                continue
            x = xa + dxdy * (top - ya)
            xnext = xa + dxdy * (bottom - ya)
            d = (bottom - top) * direction
            x0, x1 = min(x, xnext), max(x, xnext)
            x0 = min(max(x0, 0.0), W + 0.0)
            x1 = min(max(x1, 0.0), W + 0.0)
            x0f = np.floor(x0)
            i0 = int(x0f)
            x1c = np.ceil(x1)
            i1 = int(x1c)
            if i1 <= i0 + 1:
                xm = 0.5 * (x0 + x1) - x0f
                acc[row, i0] += d * (1.0 - xm)
                acc[row, i0 + 1] += d * xm
            else:
                inv = 1.0 / (x1 - x0)
                f0 = x0 - x0f
                a0 = 0.5 * inv * (1.0 - f0) * (1.0 - f0)
                f1 = x1 - x1c + 1.0
                am = 0.5 * inv * f1 * f1
                acc[row, i0] += d * a0
                if i1 == i0 + 2:
                    acc[row, i0 + 1] += d * (1.0 - a0 - am)
                else:
                    a1 = inv * (1.5 - f0)
                    acc[row, i0 + 1] += d * (a1 - a0)
                    for i in range(i0 + 2, i1 - 1):
                        acc[row, i] += d * inv
                    a2 = a1 + (i1 - i0 - 3) * inv
                    acc[row, i1 - 1] += d * (1.0 - a2 - am)
                acc[row, i1] += d * am
    out = np.empty((H, W))
    for row in range(H):
        run = 0.0
        for i in range(W):
            run += acc[row, i]
            out[row, i] = run
    return out


def coverage(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """Exact share of every pixel's area inside the closed outline ``path`` (coordinates
    (row, column) relative to the image centre), ``(H, W)`` in [0, 1]; holes are contours of
    the opposite orientation (as in fonts) and stay empty."""
    H, W = shape
    segs = []
    for poly in path.to_polygons(closed_only=False):
        p = np.asarray(poly, dtype=float) + np.array([H / 2, W / 2])  # pixel i covers [i, i+1)
        q = np.roll(p, -1, axis=0)
        segs.append(np.column_stack([p, q]))
    cov = _accumulate(np.ascontiguousarray(np.vstack(segs)), H, W)
    cov = np.clip(np.abs(cov), 0.0, 1.0)
    cov[cov < 1e-12] = 0.0  # the running sums' rounding outside the outline
    return cov


def render(
    outlines: Path | Sequence[Path],
    shape: tuple[int, int],
    params: np.ndarray | None = None,
    supersample: int = 4,
    psf: float = 0.0,
    linear: np.ndarray | None = None,
) -> np.ndarray:
    """Rasterise outlines after transforming them: every pixel integrates the (optionally
    blurred) transformed outline over its area.

    Parameters
    ----------
    outlines : one outline or ``n`` outlines (:func:`letter`, :func:`polygon`,
        :func:`ellipse`), coordinates (row, column) in px relative to the image centre
    shape : (H, W)
    params : ``(n, 3)`` (or ``(3,)``) SE(2) parameters (theta [rad], b0, b1 [px]) applied to
        the outlines, with the meaning of :func:`ia_stages.core.warp.warp`; None = identity. With a
        single outline and ``(n, 3)`` params, that outline is drawn ``n`` times.
    supersample : with ``psf > 0``, sub-pixels per axis of the raster that is blurred before
        the pixels integrate it (the sub-pixels' coverage is exact, so only the sampling of
        the blur depends on it); unused without a psf
    psf : standard deviation (px) of a Gaussian optical blur applied before the pixels
        integrate the outline (a camera's point-spread function); 0 = none: each pixel is the
        exact area of the outline inside it, a box filter of the sharp outline, whose edges
        alias
    linear : None, or ``(n, 2, 2)`` (or ``(2, 2)``) linear parts A that replace the rotation of
        ``params`` (whose angle is then unused; its b still applies): the outline's point x
        appears at the pixel p with A (p - c) + c + b = c + x, an affine map of the outline
        (e.g. :meth:`ia_stages.core.groups.AffineFamily.matrix`)

    Returns
    -------
    ``(n, H, W)`` float64 in [0, 1].
    """
    if isinstance(outlines, Path):
        outlines = [outlines]
    outlines = list(outlines)
    H, W = shape
    if supersample < 1:
        raise ValueError(f"supersample must be >= 1, got {supersample}")
    if psf < 0:
        raise ValueError(f"psf must be >= 0, got {psf}")
    P = np.zeros((len(outlines), 3)) if params is None else np.atleast_2d(np.asarray(params, float))
    if P.shape[1] != 3:
        raise ValueError(f"params must have shape (n, 3) (theta, b0, b1), got {P.shape}")
    if len(outlines) == 1 and P.shape[0] > 1:
        outlines = outlines * P.shape[0]
    if len(outlines) != P.shape[0]:
        raise ValueError(f"{len(outlines)} outlines but {P.shape[0]} rows of params")
    if linear is not None:
        linear = np.asarray(linear, dtype=float).reshape(-1, 2, 2)
        if linear.shape[0] != P.shape[0] or not np.all(np.abs(np.linalg.det(linear)) > 0):
            raise ValueError(f"linear must be {P.shape[0]} invertible 2 x 2 matrices")
    s = supersample if psf > 0 else 1
    out = np.empty((len(outlines), H, W))
    for k, (path, (th, b0, b1)) in enumerate(zip(outlines, P, strict=True)):
        if linear is None:
            c, sn = _exact_trig(th)
            A = np.array([[c, sn], [-sn, c]])
            # x = A p' + b with p' the centred pixel point: p' = A^T (x - b)
            moved = (path.vertices - np.array([b0, b1])) @ A
        else:  # p' = A^-1 (x - b)
            moved = (path.vertices - np.array([b0, b1])) @ np.linalg.inv(linear[k]).T
        fine = coverage(Path(moved * s, path.codes), (H * s, W * s))
        if psf > 0:
            fine = ndimage.gaussian_filter(fine, psf * s, mode="constant", truncate=4.0)
        out[k] = fine.reshape(H, s, W, s).mean(axis=(1, 3))
    return out
