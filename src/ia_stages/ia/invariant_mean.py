"""The invariant mean (paper eq. 2.3-2.7, Algorithm 1) with greedy Gaussian smoothing (§5).

For one column j of the weight matrix W, minimise over mu and tau_1..tau_n

    f(tau; mu) = sum_i w_i ||g_sigma * (v_i o tau_i - mu)||^2,  w = W[:, j] / sum(W[:, j]),

by alternating a gradient step on every tau_i (mu fixed) with the closed-form update
mu = sum_i w_i v_i o tau_i (eq. 2.5). At every step each smoothing level sigma in ``sigmas``
is tried and the one whose step lowers the unsmoothed objective (sigma = 0) most is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module
from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.core.smoothing import smooth
from ia_stages.core.validation import check_image_content, check_images
from ia_stages.core.warp import warp_norm_preserving_with_jacobian
from ia_stages.settings.attention import MeanSettings


@dataclass
class InvariantMeanResult:
    """Output of :func:`invariant_mean`.

    mean : ``(H, W)`` the invariant mean mu
    params : ``(n, n_params)`` final tau_i (the start for images left out by the weight floor)
    objective : ``(steps + 1,)`` unsmoothed objective f after each step (index 0 = start)
    sigma : ``(steps,)`` smoothing level chosen at each step (NaN where no level improved)
    snapshots : {step: mean} for the steps in ``record``
    dropped_weight : share of the column's weight carried by the images left out
    """

    mean: Any
    params: Any
    objective: Any
    sigma: Any
    snapshots: dict[int, Any] = field(default_factory=dict)
    dropped_weight: float = 0.0


def invariant_mean(
    V: Any,
    weights: Any,
    init_params: Any | None = None,
    settings: MeanSettings = MeanSettings(),
    group: SE2 | AffineFamily = SE2(),
    record: tuple[int, ...] = (),
) -> InvariantMeanResult:
    """Invariant mean of ``V`` under ``weights`` (Algorithm 1, eq. 2.3-2.7).

    The mean mu = sum_i w_i v_i o tau_i minimising sum_i w_i ||mu - v_i o tau_i||^2 over the
    poses tau_i: alternating gradient steps on every tau_i, each preconditioned by its
    Gauss-Newton matrix, with a greedy choice among smoothing levels (:doc:`/user-guide/method`).

    Parameters
    ----------
    V : array_like of shape (n, H, W)
        images
    weights : array_like of shape (n,)
        non-negative weights (one column of W; normalised here)
    init_params : array_like of shape (n, n_params) or None, default None
        starting tau_i; None = identity (as in the paper)
    settings : MeanSettings, default MeanSettings()
        steps, smoothing levels, preconditioner and weight floor
        (:class:`~ia_stages.ia.invariant_mean.MeanSettings`)
    group : SE2 or AffineFamily, default SE2()
        :class:`~ia_stages.SE2` or a similarity / affine group (with mirrors)
        (:func:`ia_stages.core.groups.make_group`): images are aligned by its norm-preserving
        action (:func:`ia_stages.core.warp.warp_norm_preserving`), the extra parameters kept
        within its bounds; a mirror parameter keeps its starting value
    record : tuple of int, default ()
        steps at which to keep a copy of mu

    Returns
    -------
    InvariantMeanResult
        the mean, the poses tau_i and the objective per step
        (:class:`~ia_stages.ia.invariant_mean.InvariantMeanResult`)

    Examples
    --------
    Three copies of a bar, turned and shifted: started from their kappa^max poses, the mean
    is the bar itself (the upright copy's pose stays near the identity).

    >>> import numpy as np
    >>> from ia_stages import invariant_mean, kappa_max, warp
    >>> bar = np.zeros((24, 24)); bar[6:18, 10:14] = 1.0
    >>> poses = np.array([[0.0, 0.0, 0.0], [0.6, 1.0, -1.0], [-1.2, 0.0, 2.0]])
    >>> V = warp(np.repeat(bar[None], 3, axis=0), poses)
    >>> start = kappa_max(V, beta=2.0, sigma=1.0).params[0]  # each image onto image 0
    >>> res = invariant_mean(V, np.ones(3), init_params=start)
    >>> res.mean.shape
    (24, 24)
    >>> corr = (res.mean * V[0]).sum() / np.linalg.norm(res.mean) / np.linalg.norm(V[0])
    >>> bool(corr > 0.95)
    True
    """
    V = check_images(V, "V", dtype=(np.float64, np.float32))
    check_image_content(V, "V", sigma=0.0)  # no smoothing here: single pixels, constants
    return _invariant_mean(V, weights, init_params, settings, group, record)


def _invariant_mean(
    V: Any,
    weights: Any,
    init_params: Any | None = None,
    settings: MeanSettings = MeanSettings(),
    group: SE2 = SE2(),
    record: tuple[int, ...] = (),
) -> InvariantMeanResult:
    """:func:`invariant_mean` without the check of ``V`` (callers that checked it once)."""
    xp = array_module(V)
    if xp.asarray(weights).shape != (V.shape[0],):
        raise ValueError(
            f"weights has shape {xp.asarray(weights).shape}, expected ({V.shape[0]},): one "
            "weight per image of V"
        )
    n = V.shape[0]
    w_all = xp.asarray(weights, dtype=float)
    if not bool(xp.isfinite(w_all).all()) or float(w_all.sum()) <= 0 or bool(xp.any(w_all < 0)):
        raise ValueError("weights must be non-negative with a positive sum")
    active = xp.flatnonzero(w_all >= settings.weight_floor * w_all.max())
    if settings.max_images is not None and active.size > settings.max_images:
        heaviest = xp.argsort(-w_all[active], kind="stable")[: settings.max_images]
        active = xp.sort(active[heaviest])
    dropped = 1.0 - float(w_all[active].sum() / w_all.sum())
    w = w_all[active] / w_all[active].sum()
    Va = V[active]
    tau = group.identity(n, xp) if init_params is None else xp.array(init_params, dtype=float)
    tau_a = tau[active]

    warped, jac = warp_norm_preserving_with_jacobian(Va, tau_a, group)
    mu = xp.tensordot(w, warped, 1)
    objective = [_objective(w, warped, mu)]
    chosen = []
    snapshots = {0: mu.copy()} if 0 in record else {}
    t = settings.step_size
    for step in range(1, settings.steps + 1):
        best = None
        for sigma in settings.sigmas:
            trial = tau_a - t * _direction(w, warped - mu, jac, sigma, settings.preconditioner)
            trial = xp.asarray(group.clip(trial))  # the group's bounds (none for SE(2))
            w_t, j_t = warp_norm_preserving_with_jacobian(Va, trial, group)
            mu_t = xp.tensordot(w, w_t, 1)
            f_t = _objective(w, w_t, mu_t)
            if best is None or f_t < best[0]:
                best = (f_t, sigma, trial, w_t, j_t, mu_t)
        if best[0] < objective[-1]:
            f_t, sigma, tau_a, warped, jac, mu = best
            chosen.append(sigma)
        else:  # no level lowers f: keep the iterate, shorten the step
            f_t = objective[-1]
            chosen.append(np.nan)
            t *= 0.5
        objective.append(f_t)
        if step in record:
            snapshots[step] = mu.copy()
    tau[active] = tau_a
    return InvariantMeanResult(
        mean=mu,
        params=tau,
        objective=np.asarray(objective, dtype=float),
        sigma=np.asarray(chosen, dtype=float),
        snapshots=snapshots,
        dropped_weight=dropped,
    )


def _objective(w: Any, warped: Any, mu: Any) -> float:
    r = warped - mu
    return float((w * (r * r).reshape(r.shape[0], -1).sum(1)).sum())


def _direction(w: Any, residual: Any, jac: Any, sigma: float, preconditioner: str) -> Any:
    """Per-image descent direction for f_sigma, shape ``(m, n_params)``.

    The gradient of f_sigma with respect to tau_i is 2 w_i <g * r_i, g * J_ik> (g * g * r in the
    paper's notation, since g is symmetric). Gauss-Newton divides it by its 3x3 matrix
    2 w_i <g * J_ik, g * J_il>, in which w_i cancels.
    """
    xp = array_module(residual)
    m, k = jac.shape[:2]
    r = smooth(residual, sigma).reshape(m, -1)
    J = smooth(jac, sigma).reshape(m, k, -1)
    g = 2 * xp.einsum("mkp,mp->mk", J, r)
    if preconditioner == "none":
        return w[:, None] * g
    H = 2 * xp.einsum("mkp,mlp->mkl", J, J)
    eye = xp.eye(k)
    H = H + 1e-6 * (H * eye).sum(-1, keepdims=True).clip(1e-12) * eye
    return xp.linalg.solve(H, g[..., None])[..., 0]
