"""Local alignment of image pairs: damped Gauss-Newton (Levenberg-Marquardt) over group parameters.

Minimises ||moving_k o tau_k - target_k||^2 over tau_k for a batch of independent pairs.
"""

from __future__ import annotations

from typing import Any

from .backend import array_module
from .groups import SE2
from .warp import warp, warp_with_jacobian


def sq_residual(target: Any, moving: Any, params: Any, group: SE2 = SE2()) -> Any:
    """||moving_k o tau_k - target_k||^2 for every pair, shape ``(m,)``."""
    r = warp(moving, params, group) - target
    return (r * r).reshape(r.shape[0], -1).sum(1)


def refine_alignment(
    target: Any,
    moving: Any,
    params: Any,
    group: SE2 = SE2(),
    iters: int = 15,
    tol: float = 1e-10,
) -> tuple[Any, Any]:
    """Levenberg-Marquardt descent of ||moving o tau - target||^2 from ``params``.

    Parameters
    ----------
    target, moving : ``(m, H, W)``
    params : ``(m, n_params)`` starting transforms
    iters : maximum number of Jacobian evaluations
    tol : stop a pair once its relative cost decrease falls below ``tol``

    Returns
    -------
    params : ``(m, n_params)`` refined transforms (never worse than the start)
    cost : ``(m,)`` final squared residuals
    """
    xp = array_module(target, moving)
    params = xp.array(params, dtype=float, copy=True)
    m, k = params.shape
    lam = xp.full(m, 1e-3)
    active = xp.arange(m)
    w, J = warp_with_jacobian(moving, params, group)
    r = (w - target).reshape(m, -1)
    J = J.reshape(m, k, -1)
    cost = (r * r).sum(1)
    eye = xp.eye(k)
    for _ in range(iters):
        if active.size == 0:
            break
        Ja, ra = J, r
        g = xp.einsum("mkp,mp->mk", Ja, ra)
        H = xp.einsum("mkp,mlp->mkl", Ja, Ja)
        damp = lam[active, None, None] * (H * eye).sum(-1, keepdims=True).clip(1e-12) * eye
        step = -xp.linalg.solve(H + damp, g[..., None])[..., 0]
        trial = params[active] + step
        w_t, J_t = warp_with_jacobian(moving[active], trial, group)
        r_t = (w_t - target[active]).reshape(active.size, -1)
        cost_t = (r_t * r_t).sum(1)
        better = cost_t < cost[active]
        gain = (cost[active] - cost_t) / xp.maximum(cost[active], 1e-300)
        idx = active[better]
        params[idx] = trial[better]
        cost[idx] = cost_t[better]
        lam[idx] /= 3.0
        lam[active[~better]] *= 5.0
        J = xp.where(better[:, None, None], J_t.reshape(active.size, k, -1), Ja)
        r = xp.where(better[:, None], r_t, ra)
        keep = ~((better & (gain < tol)) | (lam[active] > 1e8))
        active, J, r = active[keep], J[keep], r[keep]
    return params, cost
