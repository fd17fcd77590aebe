"""The public kappa^max entry: all pairs, or each sample's k nearest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ia_stages.core.groups import SE2, AffineFamily, has_mirror, lists_group
from ia_stages.core.validation import check_image_content, check_images
from ia_stages.kmax.candidates import kappa_max_candidates
from ia_stages.kmax.group_search import kappa_max_group, refine_knn
from ia_stages.kmax.knn import _check_k, kappa_max_knn, knn_scan_memory_mb
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.search import FLOATS, KappaMaxResult, kappa_max_all_pairs
from ia_stages.settings.features import DEFAULT_FEATURES, FeatureSettings
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings
from ia_stages.settings.spec import SettingError
from ia_stages.settings.tree import check_setting

KNN_MODES = ("auto", "exact", "candidates")


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
    mode: str = "auto",
    features: FeatureSettings = DEFAULT_FEATURES,
    candidates: Any = None,
) -> KappaMaxResult | KnnResult:
    """kappa^max between every image of ``U`` and every image of ``V``, or each image's k
    nearest.

    kappa^max(u, v) = max over the group of exp(-beta ||u - v o tau||^2) on the smoothed,
    unit-norm images: a global search over every rotation (a polar scan), then a sub-pixel
    refinement of the best starts (:doc:`/user-guide/method`).

    Parameters
    ----------
    U : array_like of shape (n_i, H, W)
        images (numpy or cupy; any real dtype)
    V : array_like of shape (n_j, H, W) or None, default None
        None for ``V = U``, in which case only pairs i < j are searched and the rest follows
        by symmetry (value equal, params inverted, diagonal = identity). Pass the block of
        later samples as ``V`` when sharding: the searched direction (V[j] warped onto U[i])
        then matches the unsharded computation exactly.
    beta : float, default 1.0
        RBF bandwidth in kappa(u, v) = exp(-beta ||u - v||^2), > 0
    normalization : {'unit', 'none'}, default 'unit'
        'unit' scales every image to unit L2 norm before the search
    group : SE2 or AffineFamily, default SE2()
        :class:`ia_stages.SE2`, or a similarity / affine group with or without mirrors
        (:func:`ia_stages.core.groups.make_group`): the SE(2) search, then the bounded local
        refinement of the extra parameters; d2 is then ``||u - s v o tau||^2`` with
        ``s = sqrt|det A|``, so that a change of area does not bias the score. With ``k``, the
        lists of ``mode`` (SE(2), with mirror images where the group has them) are refined
        over the group and re-ranked.
    settings : SearchSettings or None, default None
        the search; None: ``SearchSettings()``, and for ``mode='candidates'`` the exact preset
        :data:`ia_stages.kmax.EXACT_SEARCH`
    progress : callable or None, default None
        called with the number of pairs finished after every chunk
    sigma : float, default 2.0
        Gaussian smoothing (px) applied to every image before normalisation and comparison,
        >= 0. Smoothing commutes with rotations and translations, so kappa^max stays
        invariant, while it removes what interpolation cannot reproduce and, for images of
        sharp edges, the pixel grid's aliasing, which differs from one angle to another
        (:doc:`/decisions/bsplines`). 0 compares the raw images and is not invariant on such
        images.
    k : int or None, default None
        None: all pairs. An integer (``V`` None): each sample's k nearest, itself included,
        by ``mode``; the kNN modes run on the CPU, cupy images are copied to the host.
    mode : {'auto', 'exact', 'candidates'}, default 'auto'
        with ``k``: 'exact' scans all pairs and refines those that can enter a list (the
        reference); 'candidates' refines only each image's ``features.n_candidates`` nearest
        in invariant-feature space, for large n (:doc:`/user-guide/large-image-sets`); with
        ``features.screen`` (default) every candidate pair by the default search first and
        only the lists' pairs again by ``settings``; 'auto' takes 'candidates' from
        ``settings.candidates_from`` images or where the exact scan would not fit
        ``settings.memory_mb``, 'exact' otherwise (:func:`knn_route`). Without ``k`` only
        'auto' (all pairs)
    features : FeatureSettings, default DEFAULT_FEATURES
        the invariant features and candidate count of ``mode='candidates'``
        (:class:`ia_stages.kmax.features.FeatureSettings`)
    candidates : array_like of int, shape (n, m), or None, default None
        ``mode='candidates'`` only: None (found in invariant-feature space), or each sample's
        candidate pairs given as sample indices (e.g. an earlier result's ``indices``)

    Returns
    -------
    KappaMaxResult or KnnResult
        :class:`~ia_stages.kmax.KappaMaxResult` of ``(n_i, n_j)`` arrays, or for ``k`` a
        :class:`~ia_stages.kmax.KnnResult` of ``(n, k)`` arrays

    Raises
    ------
    ValueError
        one line naming the culprit: ``beta`` not > 0 and finite, ``sigma`` < 0, an unknown
        ``normalization``, images that are not finite ``(n, H, W)`` arrays, a constant image
        or images smaller than the search can use, ``settings`` that are not
        :class:`SearchSettings`, a ``mode`` the request cannot use (a kNN mode without ``k``
        or with ``V``).
    MemoryBudgetError
        ``settings.memory_mb`` cannot hold the route asked for; the line names the route or
        the budget that would fit.

    Examples
    --------
    A bar and the same bar turned by 90 degrees are one orbit: kappa^max is 1 and the pose
    found is the quarter turn.

    >>> import numpy as np
    >>> from ia_stages import kappa_max
    >>> X = np.zeros((3, 16, 16)); X[:, 4:12, 6:10] = 1.0
    >>> X[1] = np.rot90(X[0])
    >>> km = kappa_max(X, beta=2.0)
    >>> bool(km.value[0, 1] > 0.99)
    True
    >>> round(abs(float(km.params[0, 1, 0])) / (np.pi / 2), 2)
    1.0

    Each image's 2 nearest (itself first):

    >>> kappa_max(X, k=2, beta=2.0).indices[:, 0].tolist()
    [0, 1, 2]
    """
    check_setting("beta", beta)
    if isinstance(sigma, str):  # 'auto' is the estimator's: it needs the noise settings
        raise SettingError(f"sigma must be a number >= 0 here, got {sigma!r}")
    check_setting("sigma", sigma)
    check_setting("normalization", normalization)
    first = "U" if k is None else "X"  # the kNN mode compares one set X with itself
    U = check_images(U, first, dtype=FLOATS)
    V = None if V is None else check_images(V, "V", image_shape=U.shape[1:], dtype=FLOATS, like="U")
    for name, images in ((first, U), ("V", V)):
        if images is not None:
            check_image_content(images, name, sigma)
    _check_request(settings, k, V, mode, candidates)
    if k is not None:
        k = _check_k(k, U)
        lists = lists_group(group)
        route = knn_route(U.shape, k, settings, mode, has_mirror(lists), candidates is not None)
        if route == "candidates":
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


def knn_route(
    shape: tuple[int, ...],
    k: int,
    settings: SearchSettings | None = None,
    mode: str = "auto",
    mirror: bool = False,
    candidates_given: bool = False,
) -> str:
    """The route of ``kappa_max(X, k=k, mode=mode)`` for images of ``shape = (n, H, W)``:
    ``mode`` itself unless 'auto', which takes 'candidates' from ``settings.candidates_from``
    images, where candidate pairs are given, or where the exact kNN scan needs more than
    ``settings.memory_mb``
    (:func:`ia_stages.kmax.knn.knn_scan_memory_mb`), 'exact' otherwise.

    Parameters
    ----------
    shape : tuple of int
        ``(n, H, W)`` of the images
    k : int
        list length, the sample itself included
    settings : SearchSettings or None, default None
        the search (None: ``SearchSettings()``)
    mode : {'auto', 'exact', 'candidates'}, default 'auto'
        as :func:`kappa_max` takes it
    mirror : bool, default False
        the scan also takes the mirror images
    candidates_given : bool, default False
        the request names each sample's candidate pairs ('auto' then takes 'candidates')

    Returns
    -------
    str
        'exact' or 'candidates'

    Examples
    --------
    >>> knn_route((1_000, 40, 40), 10), knn_route((100_000, 40, 40), 10)
    ('exact', 'candidates')
    >>> knn_route((100_000, 40, 40), 10, mode="exact")
    'exact'
    """
    if mode != "auto":
        return mode
    if candidates_given:
        return "candidates"
    s = SearchSettings() if settings is None else settings
    if shape[0] >= s.candidates_from:
        return "candidates"
    if knn_scan_memory_mb(shape, k, s, mirror) > s.memory_mb:
        return "candidates"
    return "exact"


def _check_request(settings: Any, k: int | None, V: Any | None, mode: Any, candidates: Any) -> None:
    """One line naming what of a :func:`kappa_max` request cannot be used together."""
    if settings is not None and not isinstance(settings, SearchSettings):
        raise ValueError(
            f"settings must be a SearchSettings (or None), got {type(settings).__name__}"
        )
    if mode not in KNN_MODES:
        raise ValueError(f"mode must be one of {KNN_MODES}, got {mode!r}")
    if k is None and mode != "auto":
        raise ValueError(
            f"mode={mode!r} is a kNN route and needs k (each sample's k nearest); all pairs "
            "(k=None) take mode='auto'"
        )
    if k is not None and V is not None:
        raise ValueError(
            f"V: the kNN mode (k={k}, mode={mode!r}) compares one set of images with itself; "
            "pass V=None, or k=None for all pairs of U and V"
        )
    if candidates is not None and (k is None or mode == "exact"):
        raise ValueError(
            "candidates: given candidate pairs need k and mode='candidates' (or 'auto')"
        )
