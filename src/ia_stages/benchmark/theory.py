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

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2
from ia_stages.ia.invariant_mean import MeanSettings, invariant_mean
from ia_stages.kmax import KappaMaxResult

Kernel = Callable[[Any], KappaMaxResult]  # images (m, H, W) -> all-pairs result


def random_transforms(
    rng: np.random.Generator, n: int, max_shift: float = 2.0, group: SE2 = SE2()
) -> np.ndarray:
    """``(n, 3)`` SE(2) parameters: rotation uniform on the circle, shifts U(-max_shift, max)."""
    return group.sample(rng, n, (0.0, 360.0), (max_shift, max_shift))


@dataclass
class InvarianceError:
    """max_abs_value : max over pairs |k(u_i, u_j) - k(u_i o tau_i, u_j o tau_j)|
    max_abs_sqdist : the same for the kernel's squared distance
    """

    max_abs_value: float
    max_abs_sqdist: float


def invariance_error(
    V: Any, kernel: Kernel, params: np.ndarray, group: SE2 = SE2()
) -> InvarianceError:
    """Change of ``kernel`` over all pairs of ``V`` ``(m, H, W)`` when V[i] -> V[i] o tau_i.

    ``params`` ``(m, 3)`` are the tau_i (e.g. from :func:`random_transforms`). Images should
    have room on the canvas for the transform (content moved off the canvas is lost).
    """
    from ia_stages.core.warp import warp

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
    """

    max_rel_value: float
    max_abs_sqdist: float


def rendered_invariance_error(
    kernel: Kernel,
    shape: tuple[int, int],
    rng: np.random.Generator,
    pairs: int = 2,
    renderings: int = 2,
    psf: float = 0.5,
    supersample: int = 8,
) -> RenderedInvariance:
    """Change of ``kernel`` between two different letters when each is drawn at its own angle.

    For each of the first ``pairs`` of :data:`RENDERED_PAIRS`, both letters are rendered
    (DejaVu Sans, half the canvas tall, :func:`ia_stages.data.render.render`) upright and centred,
    and ``renderings`` times at a rotation uniform on the circle and a shift U(-0.5, 0.5) px per
    axis, each letter its own; the kernel of every rendered pair is compared with the upright
    pair's.

    Parameters
    ----------
    kernel : images ``(2, H, W)`` -> all-pairs result (e.g. a partial :func:`kappa_max`)
    shape : (H, W) of the canvas
    rng : draws the angles and shifts
    pairs, renderings : how many letter pairs, and renderings of each
    psf, supersample : the camera (see :func:`ia_stages.data.render.render`)

    Returns
    -------
    The largest change over all renderings of the kernel value (relative to the upright
    pair's) and of its squared distance.
    """
    from ia_stages.data.render import letter, render

    if not 1 <= pairs <= len(RENDERED_PAIRS):
        raise ValueError(f"pairs must be in 1..{len(RENDERED_PAIRS)}, got {pairs}")
    height = 0.5 * min(shape)
    kw = {"supersample": supersample, "psf": psf}
    dv, dd = [], []
    for a, b in RENDERED_PAIRS[:pairs]:
        oa, ob = letter(a, height), letter(b, height)
        ref = kernel(np.concatenate([render(oa, shape, **kw), render(ob, shape, **kw)]))
        v0, d0 = float(to_numpy(ref.value)[0, 1]), float(to_numpy(ref.sqdist)[0, 1])
        for _ in range(renderings):
            p = SE2().sample(rng, 2, (0.0, 360.0), (0.5, 0.5))
            X = np.concatenate([render(oa, shape, p[0], **kw), render(ob, shape, p[1], **kw)])
            got = kernel(X)
            dv.append(abs(float(to_numpy(got.value)[0, 1]) - v0) / v0)
            dd.append(abs(float(to_numpy(got.sqdist)[0, 1]) - d0))
    return RenderedInvariance(float(max(dv)), float(max(dd)))


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
    group: SE2 = SE2(),
) -> np.ndarray:
    """Initial transforms ``(restarts, n, 3)`` for the invariant mean of column j.

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
            jit = group.sample(rng, n, (-jitter_deg, jitter_deg), (jitter_px, jitter_px))
            p = group.compose(p, jit)
        inits.append(p)
    return np.stack(inits)


def restart_spread(
    V: Any,
    weights: Any,
    inits: np.ndarray,
    distance: Kernel,
    mean_settings: MeanSettings = MeanSettings(),
    group: SE2 = SE2(),
) -> RestartSpread:
    """Run Algorithm 1 from every start in ``inits`` ``(r, n, 3)`` and compare the means.

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
