"""Checks of the paper's theory on data: kernel invariance and uniqueness of the invariant mean.

- :func:`invariance_error`: how much a kernel between a few images changes when every image is
  replaced by a randomly rotated and shifted copy (0 for an exactly invariant kernel).
- :func:`rendered_invariance_error`: the same for pairs of shapes drawn from vector outlines at
  random angles and sub-pixel shifts (:mod:`ia_stages.data.render`), i.e. images that no warp of
  ours made, against the same shapes drawn upright.
- :func:`restart_spread`: Theorem 3.1 says the invariant mean of one weight column is unique up
  to a transform; restart Algorithm 1 from different initial transforms and measure the
  kappa^max (manifold) distance between the means it returns.

Pure functions on arrays; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import sampling_field, warp
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import KappaMaxResult
from ia_stages.settings.attention import MeanSettings

Kernel = Callable[[Any], KappaMaxResult]  # images (m, H, W) -> all-pairs result


def random_transforms(
    rng: np.random.Generator, n: int, max_shift: float = 2.0, group: SE2 = SE2()
) -> np.ndarray:
    """``(n, 3)`` SE(2) parameters: rotation uniform on the circle, shifts U(-max_shift, max)."""
    return group.sample(rng, n, (0.0, 360.0), (max_shift, max_shift))


def random_log_stretch(rng: np.random.Generator, n: int, radius: float) -> np.ndarray:
    """``(n, 2)`` log-stretch parameters uniform on the disk of ``radius`` (an affine group's
    (log_stretch_0, log_stretch_1), :class:`ia_stages.core.groups.AffineFamily`).

    Example
    -------
    >>> t = random_log_stretch(np.random.default_rng(0), 100, 0.2)
    >>> t.shape, bool((np.hypot(*t.T) <= 0.2).all())
    ((100, 2), True)
    """
    r = radius * np.sqrt(rng.uniform(0.0, 1.0, n))
    angle = rng.uniform(-np.pi, np.pi, n)
    return np.column_stack([r * np.cos(angle), r * np.sin(angle)])


def random_group_params(
    rng: np.random.Generator,
    n: int,
    group: SE2 | AffineFamily = SE2(),
    max_shift: float = 2.0,
    fraction: float = 0.25,
) -> np.ndarray:
    """``(n, group.n_params)`` random elements of ``group``, no mirror.

    The SE(2) part as :func:`random_transforms` (the same draws: for SE(2) the two agree);
    then, for a similarity or affine group, log-scale uniform within ``fraction`` of its
    range and the log-stretch uniform on the disk of ``fraction`` of its largest norm (so that
    the optimum of a pair lies inside the bounds).
    """
    p = random_transforms(rng, n, max_shift)
    if group.name == "se2" and group.n_params == 3:
        return p
    out = group.embed(p)
    if group.n_extra:
        lo, hi, t_max = group.bounds.limits()
        out[:, 3] = rng.uniform(fraction * lo, fraction * hi, n)
        if group.n_extra == 3:
            out[:, 4:6] = random_log_stretch(rng, n, fraction * t_max)
    return out


def exact_warp(v: np.ndarray, params: np.ndarray, group: SE2 | AffineFamily) -> np.ndarray:
    """s v o tau for one image ``(H, W)`` by quintic-spline interpolation (scipy), s =
    sqrt|det A| (norm preserving): a reference warp independent of the library's."""
    A = group.matrix(params)
    f = sampling_field(A[None], group.translation(params)[None], v.shape)[0]
    s = np.sqrt(abs(np.linalg.det(A)))
    return s * ndimage.map_coordinates(v, f, order=5, mode="constant", prefilter=True)


@dataclass
class InvarianceError:
    """max_abs_value : max over pairs |k(u_i, u_j) - k(u_i o tau_i, u_j o tau_j)|
    max_abs_sqdist : the same for the kernel's squared distance
    """

    max_abs_value: float
    max_abs_sqdist: float


def invariance_error(
    V: Any, kernel: Kernel, params: np.ndarray, group: SE2 | AffineFamily = SE2()
) -> InvarianceError:
    """Change of ``kernel`` over all pairs of ``V`` ``(m, H, W)`` when V[i] -> V[i] o tau_i.

    ``params`` ``(m, n_params)`` are the tau_i of ``group`` (e.g. from
    :func:`random_group_params`). Images should
    have room on the canvas for the transform (content moved off the canvas is lost).
    """
    xp = array_module(V)
    moved = warp(V, xp.asarray(params), group)
    a, b = kernel(V), kernel(moved)
    dv = np.abs(to_numpy(a.value) - to_numpy(b.value))
    dd = np.abs(to_numpy(a.sqdist) - to_numpy(b.sqdist))
    off = ~np.eye(dv.shape[0], dtype=bool)
    return InvarianceError(float(dv[off].max()), float(dd[off].max()))


RENDERED_PAIRS = (("F", "G"), ("R", "K"), ("a", "e"), ("S", "Z"))


@dataclass
class RenderedInvariance:
    """max_rel_value : max over renderings |k(rendered) - k(upright)| / k(upright)
    max_abs_sqdist : the same for the kernel's squared distance, not relative
    floor : the data's own floor, max over rendered images of ||g * r_tau - s (g * r) o tau||
        for unit-norm images (g the kernel's smoothing, r the upright rendering, s (.) o tau
        its exact quintic-spline warp, :func:`exact_warp`): how far the renderings are from
        being transformed copies of one another after smoothing; NaN when not measured
    """

    max_rel_value: float
    max_abs_sqdist: float
    floor: float = float("nan")


def rendered_invariance_error(
    kernel: Kernel,
    shape: tuple[int, int],
    rng: np.random.Generator,
    pairs: int = 2,
    renderings: int = 2,
    psf: float = 0.5,
    supersample: int = 8,
    group: SE2 | AffineFamily = SE2(),
    fraction: float = 0.25,
    sigma: float | None = None,
) -> RenderedInvariance:
    """Change of ``kernel`` between two different letters when each is drawn under its own
    random map of ``group``.

    For each of the first ``pairs`` of :data:`RENDERED_PAIRS`, both letters are rendered
    (DejaVu Sans, half the canvas tall, :func:`ia_stages.data.render.render`) upright and centred,
    and ``renderings`` times under a map of the group: a rotation uniform on the circle and a
    shift U(-0.5, 0.5) px per axis, each letter its own; for a similarity or affine group also
    a scale and a stretch within ``fraction`` of its bounds (:func:`random_group_params`).
    The outlines are transformed before they are drawn: no warp of ours made the images. The
    kernel of every rendered pair is compared with the upright pair's.

    Parameters
    ----------
    kernel : images ``(2, H, W)`` -> all-pairs result (e.g. a partial :func:`kappa_max`)
    shape : (H, W) of the canvas
    rng : draws the maps
    pairs, renderings : how many letter pairs, and renderings of each
    psf, supersample : the camera (see :func:`ia_stages.data.render.render`)
    group : the maps drawn (the kernel should factor out the same group)
    fraction : the extra parameters' share of the group's bounds
    sigma : the kernel's smoothing (px), for the data's floor; None = no floor

    Returns
    -------
    The largest change over all renderings of the kernel value (relative to the upright
    pair's) and of its squared distance, and the data's floor.
    """
    # lazy: data.render loads matplotlib's text paths
    from ia_stages.data.render import letter, render

    if not 1 <= pairs <= len(RENDERED_PAIRS):
        raise ValueError(f"pairs must be in 1..{len(RENDERED_PAIRS)}, got {pairs}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    height = 0.5 * min(shape)
    kw = {"supersample": supersample, "psf": psf}
    dv, dd, floor = [], [], []
    for a, b in RENDERED_PAIRS[:pairs]:
        outlines = (letter(a, height), letter(b, height))
        up = np.concatenate([render(o, shape, **kw) for o in outlines])
        ref = kernel(up)
        v0, d0 = float(to_numpy(ref.value)[0, 1]), float(to_numpy(ref.sqdist)[0, 1])
        for _ in range(renderings):
            p = random_group_params(rng, 2, group, 0.5, fraction)
            plain = group.n_params == 3  # SE(2): the renderer's own rotation
            X = np.concatenate(
                [
                    render(o, shape, p[i, :3], linear=None if plain else group.matrix(p[i]), **kw)
                    for i, o in enumerate(outlines)
                ]
            )
            got = kernel(X)
            dv.append(abs(float(to_numpy(got.value)[0, 1]) - v0) / v0)
            dd.append(abs(float(to_numpy(got.sqdist)[0, 1]) - d0))
            if sigma is not None:
                # the rendering shows the outline's point x at A (p - c) + c + b = c + x, so
                # r_tau = r o tau: compare with the exact warp of the upright rendering
                u, g = normalize(smooth(up, sigma)), normalize(smooth(X, sigma))
                floor += [np.linalg.norm(g[i] - exact_warp(u[i], p[i], group)) for i in (0, 1)]
    return RenderedInvariance(
        float(max(dv)), float(max(dd)), float(max(floor)) if floor else float("nan")
    )


@dataclass
class RestartSpread:
    """Means of one weight column from several starts and how far apart their manifolds are.

    means : ``(r, H, W)`` invariant means, restart 0 from the given start
    objective : ``(r,)`` final objective f of each restart
    max_distance : largest kappa^max distance between two restarts' unit-norm means
    """

    means: Any
    objective: np.ndarray
    max_distance: float


def restart_inits(
    kmax_params: np.ndarray,
    weights: np.ndarray,
    j: int,
    restarts: int,
    rng: np.random.Generator,
    jitter_deg: float = 10.0,
    jitter_px: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
) -> np.ndarray:
    """Initial transforms ``(restarts, n, n_params)`` for the invariant mean of column j.

    Restart 0 aligns every image onto image j (``kmax_params[j]``, as IA does); restart r >= 1
    aligns every image onto the r-th heaviest other image of the column instead, composed with
    a random per-image perturbation (rotation U(+-jitter_deg), shift U(+-jitter_px)). The starts
    therefore differ in pose and in every image's alignment.
    """
    n = weights.shape[0]
    order = [int(k) for k in np.argsort(-weights, kind="stable") if k != j]
    refs = [j, *order[: restarts - 1]]
    inits = []
    for r, ref in enumerate(refs):
        p = np.asarray(kmax_params[ref], dtype=float)
        if r > 0:
            jit = SE2().sample(rng, n, (-jitter_deg, jitter_deg), (jitter_px, jitter_px))
            p = group.compose(p, jit if group.n_params == 3 else group.embed(jit))
        inits.append(p)
    return np.stack(inits)


def restart_spread(
    V: Any,
    weights: Any,
    inits: np.ndarray,
    distance: Kernel,
    mean_settings: MeanSettings = MeanSettings(),
    group: SE2 | AffineFamily = SE2(),
) -> RestartSpread:
    """Run Algorithm 1 from every start in ``inits`` ``(r, n, n_params)`` and compare the means.

    ``distance`` maps images ``(r, H, W)`` to a result whose ``sqdist`` is the kappa^max
    squared distance of the unit-norm images (e.g. a partial :func:`kappa_max`).
    """
    xp = array_module(V)
    res = [invariant_mean(V, weights, p, mean_settings, group) for p in inits]
    means = xp.stack([r.mean for r in res])
    sq = to_numpy(distance(means).sqdist)
    return RestartSpread(
        means=means,
        objective=np.asarray([r.objective[-1] for r in res]),
        max_distance=float(np.sqrt(max(sq.max(), 0.0))),
    )


def class_separation(dist: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean within-class and mean between-class distance of a distance matrix ``(n, n)``.

    Pairs i != j of one class count as within, pairs of different classes as between (NaN
    when there are none). Theorem 4.1's contraction needs the within-class distances to
    shrink faster than the between-class ones, i.e. their ratio to fall over iterations.
    """
    D = np.asarray(dist, dtype=float)
    same = labels[:, None] == labels[None, :]
    within = same & ~np.eye(labels.size, dtype=bool)
    w = float(D[within].mean()) if within.any() else float("nan")
    b = float(D[~same].mean()) if (~same).any() else float("nan")
    return w, b
