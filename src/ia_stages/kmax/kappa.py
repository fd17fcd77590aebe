"""The public kappa^max entry: all pairs, or each sample's k nearest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ia_stages.core.groups import SE2, AffineFamily, lists_group
from ia_stages.core.validation import check_choice, check_image_content, check_images, check_number
from ia_stages.kmax.candidates import kappa_max_candidates
from ia_stages.kmax.group_search import kappa_max_group, refine_knn
from ia_stages.kmax.knn import kappa_max_knn
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.search import FLOATS, KappaMaxResult, kappa_max_all_pairs
from ia_stages.settings.features import DEFAULT_FEATURES, FeatureSettings
from ia_stages.settings.images import NORMALIZATIONS
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings

KNN_MODES = ("exact", "candidates")


def kappa_max(
    U: Any,
    V: Any | None = None,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings | None = None,
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
    k: int | None = None,
    mode: str = "exact",
    features: FeatureSettings = DEFAULT_FEATURES,
    candidates: Any = None,
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
        s = sqrt|det A|, so that a change of area does not bias the score. With ``k``, the
        lists of ``mode`` (SE(2), with mirror images where the group has them) are refined
        over the group and re-ranked.
    k : None: all pairs. An integer (``V`` None): each sample's k nearest, itself included,
        by ``mode``; the kNN modes run on the CPU, cupy images are copied to the host.
    settings : the search; None: ``SearchSettings()``, and for ``mode='candidates'`` the exact
        preset :data:`ia_stages.kmax.EXACT_SEARCH`
    mode : with ``k``: 'exact' scans all pairs and refines those that can enter a list
        (:func:`ia_stages.kmax.knn.kappa_max_knn`, the reference); 'candidates' refines only
        each image's ``features.n_candidates`` nearest in invariant-feature space
        (:func:`ia_stages.kmax.candidates.kappa_max_candidates`), for large n; with
        ``features.screen`` (default) every candidate pair by the default search first and
        only the lists' pairs again by ``settings``
    features : the invariant features and candidate count of ``mode='candidates'``
    candidates : ``mode='candidates'`` only: None (found in invariant-feature space), or
        ``(n, m)`` sample indices, each sample's candidate pairs given (e.g. an earlier
        result's ``indices``)

    Returns
    -------
    KappaMaxResult, or for ``k`` a :class:`ia_stages.kmax.KnnResult` of ``(n, k)`` arrays

    Raises
    ------
    ValueError
        one line naming the culprit: ``beta`` not > 0 and finite, ``sigma`` < 0, an unknown
        ``normalization``, images that are not finite ``(n, H, W)`` arrays, a constant image
        or images smaller than the search can use
        (:func:`~ia_stages.core.validation.check_image_content`).

    Example
    -------
    >>> import numpy as np
    >>> X = np.zeros((3, 16, 16)); X[:, 4:12, 6:10] = 1.0
    >>> X[1] = np.rot90(X[0])
    >>> km = kappa_max(X, beta=2.0)
    >>> bool(km.value[0, 1] > 0.99)
    True
    """
    check_number(beta, "beta", low=0.0, low_open=True)
    check_number(sigma, "sigma", low=0.0)
    check_choice(normalization, "normalization", NORMALIZATIONS)
    first = "U" if k is None else "X"  # the kNN mode compares one set X with itself
    U = check_images(U, first, dtype=FLOATS)
    V = None if V is None else check_images(V, "V", image_shape=U.shape[1:], dtype=FLOATS, like="U")
    for name, images in ((first, U), ("V", V)):
        if images is not None:
            check_image_content(images, name, sigma)
    if candidates is not None and (k is None or mode != "candidates"):
        raise ValueError("candidates: given candidate pairs need k and mode='candidates'")
    if k is not None:
        if V is not None:
            raise ValueError("k: the kNN mode compares one set of images with itself (V=None)")
        if mode not in KNN_MODES:
            raise ValueError(f"mode must be one of {KNN_MODES}, got {mode!r}")
        lists = lists_group(group)
        if mode == "candidates":
            settings = EXACT_SEARCH if settings is None else settings
            knn = kappa_max_candidates(
                U, k, beta, normalization, lists, settings, progress, sigma, features, candidates
            )
        else:
            settings = SearchSettings() if settings is None else settings
            knn = kappa_max_knn(U, k, beta, normalization, lists, settings, progress, sigma)
        if group != lists:  # the lists' pairs, refined over the group's extra parameters
            return refine_knn(U, knn, beta, normalization, group, settings, sigma)
        return knn
    if isinstance(group, AffineFamily):
        settings = SearchSettings() if settings is None else settings
        return kappa_max_group(U, V, beta, normalization, group, settings, progress, sigma)
    settings = SearchSettings() if settings is None else settings
    return kappa_max_all_pairs(U, V, beta, normalization, group, settings, progress, sigma)
