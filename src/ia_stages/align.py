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
from .warp import centred_grid, interpolate, sampling_field, warp, warp_with_jacobian

OBJECTIVES = ("least-squares", "correlation")
HESSIANS = ("gauss-newton", "exact")
LAM0 = 1e-3  # initial Levenberg-Marquardt damping, relative to the Hessian's diagonal
# after a rejected step the damping rises 5x, and to at least this: from a small damping, a
# step 5x more damped is nearly the step just rejected (digit pairs then spent ~1 evaluation
# in 5 on rejected steps; with this floor, ~1 in 8)
LAM_REJECT = 0.3
# a refinement given a bound stops where a positive-definite Newton model puts the local
# optimum above the bound by a margin: cost - ABANDON * (the Newton step's promised drop)
ABANDON = 4.0


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
    ``interpolation``, :func:`ia_stages.warp.warp`)."""
    w = warp(moving, params, group, interpolation)
    return _cost(target, moving, w, objective)


def _cost(target: Any, moving: Any, w: Any, objective: str) -> Any:
    if objective == "least-squares":
        return _sumsq(w - target)
    xp = array_module(target)
    cross = (target * w).reshape(w.shape[0], -1).sum(1)
    return xp.maximum(_sumsq(target) + _sumsq(moving) - 2 * cross, 0.0)


def _terms(
    target: Any,
    moving: Any,
    params: Any,
    group: SE2,
    objective: str,
    exact: bool,
    interpolation: str = "keys",
):
    """Cost ``(m,)``, gradient / 2 ``(m, k)`` and the Hessian model / 2 ``(m, k, k)``.

    Gauss-Newton (J^T J) unless ``exact``, which gives the exact Hessian of the correlation
    objective, -sum_p target[p] d2 (moving o tau)[p] / d params2 (SE(2) only).
    """
    xp = array_module(target, moving)
    m, k = params.shape
    tgt = target.reshape(m, -1)
    if not exact:
        w, J = warp_with_jacobian(moving, params, group, interpolation)
        cost = _cost(target, moving, w, objective)
        J = J.reshape(m, k, -1)
        # gradient / 2 of either objective: J^T (w - target), or -J^T target for correlation
        resid = -tgt if objective == "correlation" else w.reshape(m, -1) - tgt
        return cost, xp.einsum("mkp,mp->mk", J, resid), xp.einsum("mkp,mlp->mkl", J, J)
    shape = moving.shape[1:]
    field = sampling_field(group.matrix(params), group.translation(params), shape)
    w, grad, hess = interpolate(moving, field, with_hessian=True, interpolation=interpolation)
    cost = _cost(target, moving, w, objective)
    g = centred_grid(shape, xp)
    c, s = xp.cos(params[:, 0])[:, None, None], xp.sin(params[:, 0])[:, None, None]
    yt = -s * g[0] + c * g[1]  # d field_row / d theta
    xt = -c * g[0] - s * g[1]
    vy, vx = grad[:, 0], grad[:, 1]
    vyy, vxy, vxx = hess[:, 0], hess[:, 1], hess[:, 2]
    # second derivatives of w along (theta, b0, b1); only theta enters the field nonlinearly
    ytt, xtt = -c * g[0] - s * g[1], s * g[0] - c * g[1]
    tt = yt * yt * vyy + 2 * yt * xt * vxy + xt * xt * vxx + vy * ytt + vx * xtt
    d2 = [
        [tt, yt * vyy + xt * vxy, yt * vxy + xt * vxx],
        [None, vyy, vxy],
        [None, None, vxx],
    ]
    jac = [vy * yt + vx * xt, vy, vx]
    t = target
    gvec = xp.stack([-(t * j).reshape(m, -1).sum(1) for j in jac], 1)
    H = xp.empty((m, 3, 3))
    for a in range(3):
        for b in range(a, 3):
            H[:, a, b] = H[:, b, a] = -(t * d2[a][b]).reshape(m, -1).sum(1)
    return cost, gvec, H


def _model_converged(
    g: Any, H: Any, cost: Any, beta: float, kappa_stop: float, d2_stop: float, bound: Any = None
) -> Any:
    """Mask of pairs whose Hessian is positive definite and whose full Newton step promises
    the kernel value exp(-beta cost) a rise below ``kappa_stop`` or the cost a drop below
    ``d2_stop``, or cannot bring it below ``bound`` (``(m,)`` or None) even ``ABANDON`` times
    over (``g``, ``H``: half the gradient and Hessian; that step lowers the cost by
    g^T H^-1 g)."""
    xp = array_module(H)
    det2 = H[:, 0, 0] * H[:, 1, 1] - H[:, 0, 1] * H[:, 1, 0]
    pos_def = (H[:, 0, 0] > 0) & (det2 > 0) & (xp.linalg.det(H) > 0)
    safe = xp.where(pos_def[:, None, None], H, xp.eye(H.shape[-1]))
    drop = (g * xp.linalg.solve(safe, g[..., None])[..., 0]).sum(-1)
    done = (beta * xp.exp(-beta * cost) * drop < kappa_stop) | (drop < d2_stop)
    if bound is not None:
        done |= cost - ABANDON * drop > bound
    return pos_def & done


def lift_damping(H: Any, lam: Any) -> Any:
    """Damping ``lam (m,)`` raised where needed so that H + lam diag|H| is positive definite:
    to twice the most negative eigenvalue of ``H (m, k, k)`` scaled to a unit diagonal. An
    indefinite Newton model gives no descent step; this finds the damping that does without
    spending evaluations of the objective on rejected steps."""
    xp = array_module(H)
    d = xp.sqrt(xp.maximum(xp.abs(xp.diagonal(H, axis1=1, axis2=2)), 1e-12))
    low = xp.linalg.eigvalsh(H / (d[:, :, None] * d[:, None, :]))[:, 0]
    return xp.maximum(lam, -2.0 * low)


def refine_alignment(
    target: Any,
    moving: Any,
    params: Any,
    group: SE2 = SE2(),
    iters: int = 15,
    tol: float = 1e-9,
    objective: str = "least-squares",
    hessian: str = "gauss-newton",
    beta: float = 0.0,
    kappa_stop: float = 0.0,
    d2_stop: float = 0.0,
    bound: Any = None,
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
    hessian : 'gauss-newton' (J^T J) or 'exact' (correlation objective and SE(2) only: Newton
        steps, far fewer of them when target and moving differ; what the compiled
        :mod:`ia_stages.lm_kernel` does)
    beta, kappa_stop : with ``kappa_stop > 0`` a pair also stops where the Hessian is positive
        definite and the full Newton step promises exp(-beta cost) a rise below ``kappa_stop``
    d2_stop : > 0: ... or promises the cost a drop below ``d2_stop``
    bound : ``(m,)`` or None: ... or promises the cost less than a ``1 / ABANDON`` share of
        the drop to ``bound``: a start that cannot beat the best that its pair has elsewhere
        is not refined to the end
    interpolation : how ``moving`` is warped, 'keys' or 'bspline' (:func:`ia_stages.warp.warp`)

    Returns
    -------
    params : ``(m, n_params)`` refined transforms (never worse than the start)
    cost : ``(m,)`` final objective values
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    exact = hessian == "exact"
    if exact and (objective != "correlation" or group.name != "se2"):
        raise ValueError("hessian='exact' needs objective='correlation' and the SE(2) group")
    xp = array_module(target, moving)
    params = xp.array(params, dtype=float, copy=True)
    m, k = params.shape
    lam = xp.full(m, LAM0)
    active = xp.arange(m)
    cost, g, H = _terms(target, moving, params, group, objective, exact, interpolation)
    eye = xp.eye(k)
    for _ in range(iters):
        if active.size == 0:
            break
        diag = xp.maximum(xp.abs(H * eye).sum(-1, keepdims=True), 1e-12)
        if exact:
            lam[active] = lift_damping(H, lam[active])
        damp = lam[active, None, None] * diag * eye
        step = -xp.linalg.solve(H + damp, g[..., None])[..., 0]
        if kappa_stop > 0 or d2_stop > 0 or bound is not None:
            below = None if bound is None else bound[active]
            done = _model_converged(g, H, cost[active], beta, kappa_stop, d2_stop, below)
            active, g, H, step = active[~done], g[~done], H[~done], step[~done]
            if active.size == 0:
                break
        trial = params[active] + step
        cost_t, g_t, H_t = _terms(
            target[active], moving[active], trial, group, objective, exact, interpolation
        )
        better = cost_t < cost[active]
        gain = cost[active] - cost_t
        idx = active[better]
        params[idx] = trial[better]
        cost[idx] = cost_t[better]
        lam[idx] /= 3.0
        lam[active[~better]] = xp.maximum(5.0 * lam[active[~better]], LAM_REJECT)
        g = xp.where(better[:, None], g_t, g)
        H = xp.where(better[:, None, None], H_t, H)
        keep = ~((better & (gain < tol)) | (lam[active] > 1e8))
        active, g, H = active[keep], g[keep], H[keep]
    return params, cost
