"""kappa^max over a group beyond SE(2) (:class:`ia_stages.core.groups.AffineFamily`): the
global SE(2) search as for SE(2) (on the mirror images too, where the group holds them), then
the bounded local refinement of :mod:`ia_stages.kmax.group_refine` from each pair's optimum."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2, AffineFamily, lists_group
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.validation import check_images
from ia_stages.kmax.group_refine import N_Q, refine_in_stages, refine_stage
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.search import (
    FLOATS,
    KappaMaxResult,
    kappa_max_all_pairs,
    kappa_max_with_mirrors,
)
from ia_stages.settings.search import SearchSettings


def _refine(Un, Vn, ii, jj, se2, flipped, group, settings, se2_d2):
    """Refine SE(2) optima ``se2 (m, 3)`` (d2 ``se2_d2 (m,)``) of V[jj] (its mirror image where
    ``flipped``) onto U[ii]; returns the group's parameters ``(m, n_params)`` and d2 ``(m,)``.
    A group with no parameter beyond SE(2)'s (SE(2) with mirrors) keeps the search's optima:
    nothing is left to refine."""
    q0 = np.zeros((len(ii), N_Q))
    q0[:, :3] = se2
    if group.n_extra == 0:
        d2 = np.asarray(se2_d2, dtype=np.float64)
        return group.of_mirror_image(q0[:, : group.n_continuous], flipped), d2
    n_j = Vn.shape[0]
    moving = np.concatenate([Vn, Vn[..., ::-1]]) if group.mirror else Vn
    jm = jj + n_j * flipped.astype(np.int64)
    xp = array_module(Un)

    def run(U, V, q, g):
        if xp is np:
            return refine_stage(U, V, ii, jm, q, g, settings.interpolation)
        # lazy: numba.cuda is optional (arrays on a GPU only)
        from ia_stages.kmax.cuda import group_refine_cuda

        return tuple(to_numpy(a) for a in group_refine_cuda(U, V, ii, jm, q, g,
                                                            settings.interpolation))  # fmt: skip

    q, d2 = refine_in_stages(run, Un, moving, q0, group)
    return group.of_mirror_image(q[:, : group.n_continuous], flipped), d2


def kappa_max_group(
    U: Any,
    V: Any | None,
    beta: float,
    normalization: str,
    group: AffineFamily,
    settings: SearchSettings,
    progress: Callable[[int], None] | None,
    sigma: float,
) -> KappaMaxResult:
    """:func:`ia_stages.kmax.kappa_max` of all pairs for an :class:`AffineFamily` group (same
    parameters; the kNN modes: :func:`refine_knn`).

    The score is d2 = ||u - s v o tau||^2 with s = sqrt|det A| (norm preserving), minimised
    over the group within its bounds; kappa^max = exp(-beta d2).
    """
    U = check_images(U, "U", dtype=FLOATS)
    V = None if V is None else check_images(V, "V", image_shape=U.shape[1:], dtype=FLOATS, like="U")
    xp = array_module(U)
    symmetric = V is None
    if group.mirror:  # V[j] and its mirror image in one search (for V None: pairs i < j)
        found = kappa_max_with_mirrors(U, V, beta, normalization, settings, progress, sigma)
        P, D, flip = (to_numpy(a) for a in found)
    else:
        res = kappa_max_all_pairs(U, V, beta, normalization, SE2(), settings, progress, sigma)
        P, D = to_numpy(res.params), to_numpy(res.sqdist)
        flip = np.zeros(D.shape, dtype=bool)
    Un = smooth_normalize(U, sigma, normalization)
    Vn = Un if symmetric else smooth_normalize(V, sigma, normalization)
    Un_h, Vn_h = (np.asarray(to_numpy(a), dtype=np.float64) for a in (Un, Vn))
    if xp is not np:
        Un_h, Vn_h = Un, Vn
    n_i, n_j = D.shape
    if symmetric:
        ii, jj = np.triu_indices(n_i, k=1)
    else:
        ii, jj = (a.ravel() for a in np.meshgrid(np.arange(n_i), np.arange(n_j), indexing="ij"))
    p, d2 = _refine(Un_h, Vn_h, ii, jj, P[ii, jj], flip[ii, jj], group, settings, D[ii, jj])
    params = np.zeros((n_i, n_j, group.n_params))
    sqdist = np.zeros((n_i, n_j))
    params[ii, jj], sqdist[ii, jj] = p, d2
    if symmetric:
        params[jj, ii] = group.inverse(p)
        sqdist[jj, ii] = d2
    params, sqdist = xp.asarray(params), xp.asarray(sqdist)
    return KappaMaxResult(value=xp.exp(-beta * sqdist), params=params, sqdist=sqdist)


def refine_knn(
    U: Any,
    knn: KnnResult,
    beta: float,
    normalization: str,
    group: AffineFamily,
    settings: SearchSettings,
    sigma: float,
) -> KnnResult:
    """kNN lists of ``U`` searched over :func:`~ia_stages.core.groups.lists_group` (SE(2),
    with mirror images where ``group`` has them; either kNN mode of
    :func:`ia_stages.kmax.kappa_max`) refined over ``group`` from their optima and re-ranked,
    in place and returned. A pair whose image won as its mirror image is refined as such.

    A pair that only the extra freedom would bring into a list is not found.

    Example
    -------
    >>> knn = refine_knn(X, kappa_max(X, k=5), 1.0, "unit", make_group("affine"),
    ...                  SearchSettings(), 2.0)  # doctest: +SKIP
    """
    X = np.asarray(to_numpy(U), dtype=np.float64)
    Un = smooth_normalize(X, sigma, normalization)
    n, kk = knn.indices.shape
    rows, cols = np.nonzero(knn.indices[:, 1:] >= 0)
    cols = cols + 1
    jj = knn.indices[rows, cols]
    se2, flipped = lists_group(group).split_mirror(knn.params[rows, cols])
    p, d2 = _refine(Un, Un, rows, jj, se2, flipped, group, settings, knn.sqdist[rows, cols])
    params = np.zeros((n, kk, group.n_params))
    params[rows, cols] = p
    sqdist = np.array(knn.sqdist, dtype=np.float64)
    sqdist[rows, cols] = d2
    order = np.argsort(sqdist[:, 1:], axis=1, kind="stable") + 1  # itself stays first
    order = np.concatenate([np.zeros((n, 1), dtype=np.int64), order], 1)
    take = np.take_along_axis
    knn.indices = take(knn.indices, order, 1)
    knn.sqdist = take(sqdist, order, 1)
    knn.params = take(params, order[..., None], 1)
    knn.value = np.exp(-beta * knn.sqdist)
    return knn
