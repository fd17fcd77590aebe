"""The public kappa^max entry: all pairs, or each sample's k nearest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.kmax.group_search import kappa_max_group
from ia_stages.kmax.knn import kappa_max_knn
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.search import KappaMaxResult, SearchSettings, kappa_max_all_pairs


def kappa_max(
    U: Any,
    V: Any | None = None,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = SearchSettings(),
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
    k: int | None = None,
) -> KappaMaxResult | KnnResult:
    """kappa^max between every image of ``U`` and every image of ``V``.

    Parameters
    ----------
    U : ``(n_i, H, W)``
    V : ``(n_j, H, W)`` or None for ``V = U``, in which case only pairs i < j are searched and
        the rest follows by symmetry (value equal, params inverted, diagonal = identity).
        Pass the block of later samples as ``V`` when sharding: the searched direction (V[j]
        warped onto U[i]) then matches the unsharded computation exactly.
    beta : RBF bandwidth in kappa(u, v) = exp(-beta ||u - v||^2)
    normalization : 'unit' scales every image to unit L2 norm before the search; 'none'.
    progress : called with the number of pairs finished after every chunk.
    sigma : Gaussian smoothing (px) applied to every image before normalisation and comparison.
        Smoothing commutes with rotations and translations, so kappa^max stays invariant, while
        it removes the content that makes kappa^max depend on the angle at which an image was
        taken: what interpolation cannot reproduce and, for images of sharp edges, the
        pixel grid's aliasing, which differs from one angle to another (``bench/invariance.py``
        measures it on shapes rendered at an angle). The default, 2 px, is the estimator's;
        0 compares the raw images and is not invariant on such images.
    group : :class:`ia_stages.core.groups.SE2` (default), or a similarity / affine group with
        or without mirrors (:func:`ia_stages.core.groups.make_group`): the SE(2) search, then
        the bounded local refinement of the extra parameters
        (:mod:`ia_stages.kmax.group_search`); d2 is then ||u - s v o tau||^2 with
        s = sqrt|det A|, so that a change of area does not bias the score.
    k : None: all pairs. An integer (``V`` None): the exact kNN mode, each sample's k
        nearest, itself included (:func:`ia_stages.kmax.knn.kappa_max_knn`); it runs on the
        CPU, cupy images are copied to the host.

    Returns
    -------
    KappaMaxResult, or for ``k`` a :class:`ia_stages.kmax.KnnResult` of ``(n, k)`` arrays
    """
    if isinstance(group, AffineFamily):
        return kappa_max_group(U, V, beta, normalization, group, settings, progress, sigma, k)
    if k is not None:
        if V is not None:
            raise ValueError("k: the kNN mode compares one set of images with itself (V=None)")
        return kappa_max_knn(U, k, beta, normalization, group, settings, progress, sigma)
    return kappa_max_all_pairs(U, V, beta, normalization, group, settings, progress, sigma)
