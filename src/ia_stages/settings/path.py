"""Settings of the path: how each iteration's kappa^max is computed, every pair or the kNN path."""

from __future__ import annotations

import math

from ia_stages.settings.features import FeatureSettings
from ia_stages.settings.search import SearchSettings
from ia_stages.settings.spec import choice, integer, number, part, settings_part

PATH_MODES = ("auto", "dense", "candidates")
PATH_SEARCHES = ("exact", "ia")
LATER_CANDIDATES = ("lists", "features")
SAMPLE_SEARCHES = ("screen", "exact")
DENSE_MAX = 5000


@settings_part("path")
class PathSettings:
    """Every pair (dense, ``(n, n)`` arrays) or the kNN path (each sample's nearest refined on
    candidates found in invariant-feature space; never n x n). The kNN path needs kNN attention
    and the graph read-out; with mirror images its features and searches take them too."""

    mode: str = choice(
        "auto",
        PATH_MODES,
        "'dense' (every pair), 'candidates' (the kNN path) or 'auto' (candidates above "
        "dense_max samples, dense otherwise)",
        flag="--path",
    )
    dense_max: int = integer(
        DENSE_MAX, "'auto': the most samples that run dense", low=2, flag="--dense-max"
    )
    k: int | None = integer(
        None,
        "kNN path: list width, the sample itself included; None = the larger of the attention's "
        "k and the read-out graph's k + 1",
        low=2, nullable=True,
    )  # fmt: skip
    search: str = choice(
        "ia",
        PATH_SEARCHES,
        "kNN path: the search of the candidate pairs, 'ia' (the search settings, as the dense "
        "path) or 'exact' (the screen, then the library's exact preset on the listed pairs)",
    )
    sample: int | None = integer(
        None,
        "kNN path: images (seeded, at random) whose all-pairs kappa^max the silhouette and the "
        "stopping rules read; None = max(min_sample, sample_per_root_n * sqrt(n))",
        low=2, nullable=True,
    )  # fmt: skip
    sample_search: str = choice(
        "screen",
        SAMPLE_SEARCHES,
        "kNN path: the search of the sample's pairs, 'screen' (the first pass's) or 'exact' "
        "(the candidate pairs' search)",
    )
    min_sample: int = integer(300, "kNN path: the sample for small n when sample is None", low=2)
    sample_per_root_n: float = number(
        7.0, "kNN path: sample / sqrt(n) for large n when sample is None", low=0.0
    )
    features: FeatureSettings = part(
        FeatureSettings, "kNN path: the invariant features and the candidate search"
    )
    later_candidates: str = choice(
        "lists",
        LATER_CANDIDATES,
        "kNN path, every iteration after the input's: each image's candidates are 'lists' (its "
        "neighbours in the previous iteration's lists; the expansion adds their neighbours') or "
        "'features' (its c nearest in invariant-feature space, as for the input)",
    )

    def uses_knn(self, n: int) -> bool:
        """True when ``n`` samples take the kNN path: mode 'candidates', or 'auto' with more
        than ``dense_max`` samples.

        Example
        -------
        >>> PathSettings().uses_knn(5000), PathSettings().uses_knn(5001)
        (False, True)
        """
        return self.mode == "candidates" or (self.mode == "auto" and n > self.dense_max)

    def sample_size(self, n: int) -> int:
        """Images in the kNN path's sample for ``n`` images: ``sample``, or when None
        max(``min_sample``, round(``sample_per_root_n`` * sqrt(n))); at most n.

        Example
        -------
        >>> PathSettings().sample_size(1000), PathSettings().sample_size(20_000)
        (300, 990)
        """
        if self.sample is not None:
            return min(int(self.sample), n)
        return min(n, max(self.min_sample, round(self.sample_per_root_n * math.sqrt(n))))


def first_pass_search(settings: SearchSettings, features: FeatureSettings) -> SearchSettings:
    """The per-pair search of the kNN path's first pass over the candidate pairs: with
    ``features.screen`` the default search (the screen, with ``settings.memory_mb``), else
    ``settings`` itself.

    Example
    -------
    >>> from ia_stages.settings.search import EXACT_SEARCH
    >>> first_pass_search(EXACT_SEARCH, FeatureSettings()) == SearchSettings(
    ...     memory_mb=EXACT_SEARCH.memory_mb)
    True
    >>> first_pass_search(EXACT_SEARCH, FeatureSettings(screen=False)) == EXACT_SEARCH
    True
    """
    if not features.screen:
        return settings
    return SearchSettings(memory_mb=settings.memory_mb)
