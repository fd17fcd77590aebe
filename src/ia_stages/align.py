"""Local alignment of image pairs by damped Gauss-Newton (Levenberg-Marquardt) over group
parameters, for a batch of independent pairs.

Two objectives:

- ``'least-squares'``: ||moving o tau - target||^2;
- ``'correlation'``: ||target||^2 + ||moving||^2 - 2 <target, moving o tau>, the squared
  distance of a norm-preserving transform. It equals the first while the moving image stays on
  the canvas, but it does not reward pushing content off the canvas (which only loses
  correlation), and it is blind to the slight blur of interpolation. kappa^max uses it.

Near the optimum both have the Gauss-Newton matrix 2 J^T J (for the correlation form because
||moving o tau||^2 is constant, so <w, d^2 w> = -<dw, dw>).
"""

from __future__ import annotations

from typing import Any

from .backend import array_module
from .groups import SE2
from .warp import warp, warp_with_jacobian

OBJECTIVES = ("least-squares", "correlation")


def _sumsq(a: Any) -> Any:
    return (a * a).reshape(a.shape[0], -1).sum(1)


def pair_cost(
    target: Any, moving: Any, params: Any, group: SE2 = SE2(), objective: str = "correlation"
) -> Any:
    """The alignment objective for every pair, shape ``(m,)``."""
    w = warp(moving, params, group)
    return _cost(target, moving, w, objective)


def _cost(target: Any, moving: Any, w: Any, objective: str) -> Any:
    if objective == "least-squares":
        return _sumsq(w - target)
    xp = array_module(target)
    cross = (target * w).reshape(w.shape[0], -1).sum(1)
    return xp.maximum(_sumsq(target) + _sumsq(moving) - 2 * cross, 0.0)


def refine_alignment(
    target: Any,
    moving: Any,
    params: Any,
    group: SE2 = SE2(),
    iters: int = 15,
    tol: float = 1e-9,
    objective: str = "least-squares",
) -> tuple[Any, Any]:
    """Levenberg-Marquardt descent of the alignment objective from ``params``.

    Parameters
    ----------
    target, moving : ``(m, H, W)``
    params : ``(m, n_params)`` starting transforms (moving o tau ~ target)
    iters : maximum number of Jacobian evaluations
    tol : stop a pair once a step lowers its cost by less than ``tol`` (absolute; with unit-norm
        images the kernel value then changes by less than beta * tol)
    objective : 'least-squares' or 'correlation' (see the module docstring)

    Returns
    -------
    params : ``(m, n_params)`` refined transforms (never worse than the start)
    cost : ``(m,)`` final objective values
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    xp = array_module(target, moving)
    params = xp.array(params, dtype=float, copy=True)
    m, k = params.shape
    lam = xp.full(m, 1e-3)
    active = xp.arange(m)
    w, J = warp_with_jacobian(moving, params, group)
    cost = _cost(target, moving, w, objective)
    J = J.reshape(m, k, -1)
    eye = xp.eye(k)
    for _ in range(iters):
        if active.size == 0:
            break
        tgt = target[active].reshape(active.size, -1)
        # gradient / 2 of either objective: J^T (w - target), or -J^T target for correlation
        resid = -tgt if objective == "correlation" else w.reshape(active.size, -1) - tgt
        g = xp.einsum("mkp,mp->mk", J, resid)
        H = xp.einsum("mkp,mlp->mkl", J, J)
        damp = lam[active, None, None] * (H * eye).sum(-1, keepdims=True).clip(1e-12) * eye
        step = -xp.linalg.solve(H + damp, g[..., None])[..., 0]
        trial = params[active] + step
        w_t, J_t = warp_with_jacobian(moving[active], trial, group)
        cost_t = _cost(target[active], moving[active], w_t, objective)
        better = cost_t < cost[active]
        gain = cost[active] - cost_t
        idx = active[better]
        params[idx] = trial[better]
        cost[idx] = cost_t[better]
        lam[idx] /= 3.0
        lam[active[~better]] *= 5.0
        J = xp.where(better[:, None, None], J_t.reshape(active.size, k, -1), J)
        w = xp.where(better[:, None, None], w_t, w)
        keep = ~((better & (gain < tol)) | (lam[active] > 1e8))
        active, J, w = active[keep], J[keep], w[keep]
    return params, cost
