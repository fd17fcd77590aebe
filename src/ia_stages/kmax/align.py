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

This is array code for any group and backend: the paper-style local descent (``bench/kmax.py``'s
``local`` method) and an independent reference in tests. kappa^max's own search (Newton steps on
the exact Hessian, pruning, stopping rules) is :mod:`ia_stages.kmax.refine`, written once.
"""

from __future__ import annotations

from typing import Any

from ia_stages.core.backend import array_module
from ia_stages.core.groups import SE2
from ia_stages.core.warp import warp, warp_with_jacobian

OBJECTIVES = ("least-squares", "correlation")


def _sumsq(a: Any) -> Any:
    return (a * a).reshape(a.shape[0], -1).sum(1)


def pair_cost(
    target: Any,
    moving: Any,
    params: Any,
    group: SE2 = SE2(),
    objective: str = "correlation",
    interpolation: str = "keys",
) -> Any:
    """The alignment objective for every pair, shape ``(m,)`` (``moving`` warped by
    ``interpolation``, :func:`ia_stages.core.warp.warp`)."""
    w = warp(moving, params, group, interpolation)
    return _cost(target, moving, w, objective)


def _cost(target: Any, moving: Any, w: Any, objective: str) -> Any:
    if objective == "least-squares":
        return _sumsq(w - target)
    xp = array_module(target)
    cross = (target * w).reshape(w.shape[0], -1).sum(1)
    return xp.maximum(_sumsq(target) + _sumsq(moving) - 2 * cross, 0.0)


def _terms(target: Any, moving: Any, params: Any, group: SE2, objective: str, interpolation: str):
    """Cost ``(m,)``, gradient / 2 ``(m, k)`` and the Gauss-Newton matrix J^T J ``(m, k, k)``."""
    xp = array_module(target, moving)
    m, k = params.shape
    tgt = target.reshape(m, -1)
    w, J = warp_with_jacobian(moving, params, group, interpolation)
    cost = _cost(target, moving, w, objective)
    J = J.reshape(m, k, -1)
    # gradient / 2 of either objective: J^T (w - target), or -J^T target for correlation
    resid = -tgt if objective == "correlation" else w.reshape(m, -1) - tgt
    return cost, xp.einsum("mkp,mp->mk", J, resid), xp.einsum("mkp,mlp->mkl", J, J)


def refine_alignment(
    target: Any,
    moving: Any,
    params: Any,
    group: SE2 = SE2(),
    iters: int = 15,
    tol: float = 1e-9,
    objective: str = "least-squares",
    lam0: float = 1e-3,
    lam_reject: float = 0.3,
    interpolation: str = "keys",
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
    lam0 : initial damping, relative to the diagonal of J^T J
    lam_reject : after a rejected step the damping rises 5x, and to at least this
    interpolation : how ``moving`` is warped, 'keys' or 'bspline' (:func:`ia_stages.core.warp.warp`)

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
    lam = xp.full(m, lam0)
    active = xp.arange(m)
    cost, g, H = _terms(target, moving, params, group, objective, interpolation)
    eye = xp.eye(k)
    for _ in range(iters):
        if active.size == 0:
            break
        diag = xp.maximum(xp.abs(H * eye).sum(-1, keepdims=True), 1e-12)
        damp = lam[active, None, None] * diag * eye
        step = -xp.linalg.solve(H + damp, g[..., None])[..., 0]
        trial = params[active] + step
        cost_t, g_t, H_t = _terms(
            target[active], moving[active], trial, group, objective, interpolation
        )
        better = cost_t < cost[active]
        gain = cost[active] - cost_t
        idx = active[better]
        params[idx] = trial[better]
        cost[idx] = cost_t[better]
        lam[idx] /= 3.0
        lam[active[~better]] = xp.maximum(5.0 * lam[active[~better]], lam_reject)
        g = xp.where(better[:, None], g_t, g)
        H = xp.where(better[:, None, None], H_t, H)
        keep = ~((better & (gain < tol)) | (lam[active] > 1e8))
        active, g, H = active[keep], g[keep], H[keep]
    return params, cost
