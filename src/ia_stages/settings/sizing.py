"""Settings that follow the data: neighbour counts sized to n (and K), the kNN path's list
width and candidate count, and the checks that need n."""

from __future__ import annotations

import math
from dataclasses import replace

from ia_stages.settings.attention import AttentionSettings
from ia_stages.settings.features import FeatureSettings
from ia_stages.settings.spec import SettingError
from ia_stages.settings.tree import Settings, check_knn_path


def sized_neighbours(n: int, n_clusters: int | None = None) -> tuple[int, int]:
    """The attention and read-out neighbour counts for ``n`` samples (and K when given).

    Attention: round(n / 12) clipped to 2..10 (the column itself included); read-out:
    round(n / 10) clipped to 1..20 (itself excluded): a read-out graph wider than a class
    joins classes, one narrower than about a third of a class splits them, so the read-out
    count stays near the size of a class of a tenth of the data. With K the read-out count
    is also capped by the mean class size less one, n / K - 1; the attention count follows n
    only, so the features (and the pipeline's stored iterations) do not depend on K. Both
    stay below n.

    Parameters
    ----------
    n : int
        Number of samples (>= 2).
    n_clusters : int or None, default None
        K when given.

    Returns
    -------
    (attention_k, readout_k) : tuple[int, int]

    Example
    -------
    >>> sized_neighbours(48), sized_neighbours(1000)
    ((4, 5), (10, 20))
    """
    k_att = min(max(round(n / 12), 2), 10)
    k_read = min(max(round(n / 10), 1), 20)
    if n_clusters is not None:
        k_read = min(k_read, max(1, math.floor(n / n_clusters) - 1))
    return max(1, min(k_att, n - 1)), max(1, min(k_read, n - 1))


def fixed_k(s: Settings) -> int | None:
    """The K of ``s`` when it is one number (a range or None: None)."""
    return s.n_clusters if isinstance(s.n_clusters, int) else None


def sized(s: Settings, n: int) -> Settings:
    """``s`` with every neighbour count left at None set for ``n`` samples (and K when
    ``n_clusters`` is one number) by :func:`sized_neighbours`, and checked against ``n``: a
    count given explicitly wins and must be < n, K must be <= n, and a run that takes the kNN
    path (``path.uses_knn(n)``) must be able to.

    Example
    -------
    >>> s = sized(Settings(), 48)
    >>> s.attention.k, s.readout.k
    (4, 5)
    """
    k_att, k_read = sized_neighbours(n, fixed_k(s))
    if s.attention.k is None:
        s = replace(s, attention=replace(s.attention, k=k_att))
    if s.readout.k is None:
        s = replace(s, readout=replace(s.readout, k=k_read))
    check_n(s, n)
    return s


def check_k(path: str, k: int | None, n: int) -> None:
    """A neighbour count ``k`` (the setting at ``path``) must be < n (None: sized later)."""
    if k is not None and n > 1 and k >= n:
        raise SettingError(f"{path} must satisfy 1 <= k < n (n={n}), got {k}")


def check_attention(attention: AttentionSettings, n: int) -> None:
    """kNN attention's k must be < n."""
    if attention.kind == "knn":
        check_k("attention.k", attention.k, n)


def check_n(s: Settings, n: int) -> None:
    """The checks of ``s`` that need the number of samples ``n``."""
    check_attention(s.attention, n)
    check_k("readout.k", s.readout.k, n)
    K = s.n_clusters
    top = max(K) if isinstance(K, tuple) else K
    if top is not None and top > n:
        raise SettingError(f"n_clusters must be <= the {n} samples, got {K}")
    if s.path.uses_knn(n):
        if s.path.mode == "auto":
            check_knn_path(s, f"path.mode 'auto' with n={n} > path.dense_max={s.path.dense_max}")
        width = knn_width(s, n)
        if not 2 <= width < n:
            raise SettingError(f"path.k must be in 2..n-1 (n={n}), got {width}")
        c = s.path.features.n_candidates
        if c is not None and not width <= c < n:
            raise SettingError(
                f"path.features.n_candidates must be >= the list width k={width} and < n={n}, "
                f"got {c}"
            )


def neighbour_counts(s: Settings, n: int | None) -> tuple[int, int]:
    """The attention's and the read-out graph's k; a count left at None is sized to ``n``
    without K (:func:`sized_neighbours`: the stored lists do not depend on K)."""
    k_att, k_read = s.attention.k, s.readout.k
    if k_att is None or k_read is None:
        if n is None:
            raise SettingError("the neighbour counts are not sized; give n")
        sized_att, sized_read = sized_neighbours(n)
        k_att = sized_att if k_att is None else k_att
        k_read = sized_read if k_read is None else k_read
    return int(k_att), int(k_read)


def knn_width(s: Settings, n: int | None = None) -> int:
    """The kNN path's list width: ``path.k``, or the larger of the attention's k and the
    read-out graph's k + 1 (counts left at None sized to ``n`` without K).

    Example
    -------
    >>> knn_width(Settings(), 100_000)
    21
    """
    if s.path.k is not None:
        return int(s.path.k)
    k_att, k_read = neighbour_counts(s, n)
    return max(k_att, k_read + 1)


def knn_features(s: Settings, n: int) -> FeatureSettings:
    """The kNN path's :class:`~ia_stages.settings.FeatureSettings` for ``n`` samples:
    ``path.features`` with ``exact_width`` None set to the attention's k (sized to n): the
    places the means weigh are refined exactly, the read-out graph's further places keep the
    screen's optimum (its 0/1 links need who is near, not the exact d2).

    Example
    -------
    >>> knn_features(Settings(), 100_000).exact_width
    10
    """
    f = s.path.features
    if f.exact_width is not None:
        return f
    return replace(f, exact_width=neighbour_counts(s, n)[0])


__all__ = [
    "SettingError",
    "check_attention",
    "check_k",
    "check_n",
    "fixed_k",
    "knn_features",
    "knn_width",
    "neighbour_counts",
    "sized",
    "sized_neighbours",
]
