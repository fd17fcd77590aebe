"""The per-pair search of listed pairs from their starts, on numba's CPU threads
(:func:`ia_stages.kmax.refine.search_pairs`) for numpy starts or on the GPU
(:func:`ia_stages.kmax.cuda.search_pairs_cuda`) for cupy ones: the one call the all-pairs
search, the kNN routes and the settling check refine through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.core.backend import array_module
from ia_stages.kmax.refine import PairImages, _policy, search_pairs
from ia_stages.settings.search import SearchSettings


def _refine_candidates(
    images: PairImages,
    i: np.ndarray,
    j: np.ndarray,
    starts: Any,
    settings: SearchSettings,
    beta: float,
    n_plain: int | None = None,
    mirrored: Any | None = None,
) -> tuple[Any, Any]:
    """Best refined transform per pair (i[k], j[k]) over its candidates ``starts (m, c, k)``,
    by the compiled per-pair search (:mod:`ia_stages.kmax.refine`): on numba's CPU threads
    for numpy ``starts``, on the GPU (:mod:`ia_stages.kmax.cuda`) for cupy ones. ``images``:
    :func:`_pair_layout`; ``n_plain``, ``mirrored``: the mirror images' candidates, as
    :func:`ia_stages.kmax.refine.search_pairs` takes them. Returns params ``(m, n_params)``
    and sqdist ``(m,)``."""
    xp = array_module(starts)
    policy = _policy(settings)
    coarse = settings.coarse_iters
    if xp is np:
        return search_pairs(images, i, j, starts, beta, policy, coarse, n_plain, mirrored)
    from ia_stages.kmax.cuda import search_pairs_cuda  # lazy: numba.cuda, GPU runs only

    ix, jx = xp.asarray(i), xp.asarray(j)
    return search_pairs_cuda(images, ix, jx, starts, beta, policy, coarse, n_plain, mirrored)
