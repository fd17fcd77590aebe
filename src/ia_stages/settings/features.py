"""Settings of the invariant features and of the candidate search in their space (the kNN
path's first step, :mod:`ia_stages.kmax.features`)."""

from __future__ import annotations

import math
from dataclasses import replace

from ia_stages.settings.spec import SettingError, boolean, choice, integer, number, settings_part

FEATURE_ROUTES = ("spectrum", "centroid", "both")


@settings_part("path.features")
class FeatureSettings:
    """How each image's candidates are found: rotation- and translation-invariant features
    (rings of angular Fourier coefficients, :mod:`ia_stages.kmax.features`), their nearest in
    feature space, and the passes that refine those candidate pairs exactly.
    """

    route: str = choice(
        "both",
        FEATURE_ROUTES,
        "'spectrum' (rings of the amplitude spectrum), 'centroid' (rings about the intensity "
        "centroid) or 'both' stacked",
    )
    n_angles: int = integer(32, "samples per ring", low=1)
    n_freqs: int = integer(12, "angular frequencies kept per ring (0 .. n_freqs - 1)", low=1)
    n_dims: int = integer(128, "PCA dimensions kept; 0 keeps the raw invariants", low=0)
    pca_rows: int = integer(20_000, "rows the PCA is fitted on (a seeded random subset)", low=1)
    n_candidates: int | None = integer(
        None,
        "c: nearest in feature space per image (itself not counted), >= the list length k; "
        "None sizes it to n: max(min_candidates, candidates_per_root_n * sqrt(n))",
        low=1, nullable=True, flag="--candidates",
    )  # fmt: skip
    min_candidates: int = integer(48, "c for small n when n_candidates is None", low=1)
    candidates_per_root_n: float = number(
        0.68, "c / sqrt(n) for large n when n_candidates is None", low=0.0
    )
    n_refine: int = integer(
        0,
        "r: of each image's c candidates, the r of lowest coarse d2 (polar scan about the "
        "centroids) are refined exactly; 0 refines all c",
        low=0,
    )  # fmt: skip
    n_expand: int = integer(
        32,
        "x: after the candidates are refined, each image's x best neighbours of its neighbours "
        "(not yet listed, ranked by the triangle bound) are refined too; 0: no such pass",
        low=0,
    )  # fmt: skip
    screen: bool = boolean(
        True,
        "True: candidate pairs are first refined with the default search, and only what can "
        "enter each image's k nearest again with the exact preset; False: every pair exactly",
    )
    exact_width: int | None = integer(
        None,
        "with screen: the second pass refines exactly only what reaches the first exact_width "
        "places of a list (the image included); None: every place (IA sets it to the "
        "attention's k)",
        low=2, nullable=True,
    )  # fmt: skip
    centroid_noise: float = number(
        3.0,
        "the 'centroid' rings are taken about the centroid of max(|u| - centroid_noise * s, 0), "
        "s the images' white-noise sd from their borders; 0: the centroid of |u|",
        low=0.0,
    )  # fmt: skip
    noise_border: int = integer(3, "width (px) of the frame whose pixels estimate that sd", low=1)
    batch: int = integer(
        2048, "images whose features are computed at once, rows per block of the candidate "
        "search (memory only)", low=1, runtime=True,
    )  # fmt: skip
    seed: int = integer(0, "seed of the PCA's subset", low=0)

    def relations(self) -> None:
        """Checks across fields (one line naming the field)."""
        if self.n_freqs > self.n_angles // 2 + 1:
            raise SettingError(
                f"path.features.n_freqs must be <= n_angles // 2 + 1 = {self.n_angles // 2 + 1}, "
                f"got {self.n_freqs}"
            )
        top = self.n_candidates if self.n_candidates is not None else math.inf
        if not (self.n_refine == 0 or self.n_refine <= top):
            raise SettingError(
                f"path.features.n_refine must be 0 or in [1, n_candidates = {self.n_candidates}]"
                f", got {self.n_refine}"
            )

    def sized(self, n: int, k: int = 1) -> FeatureSettings:
        """These settings with c set for ``n`` images when ``n_candidates`` is None.

        c = max(min_candidates, round(candidates_per_root_n * sqrt(n))), at least ``k`` (the
        list length) and at most n - 1 (every other image). A c given explicitly is kept
        as it is (and checked against k and n where the images are).

        Example
        -------
        >>> FeatureSettings().sized(20_000).n_candidates
        96
        >>> FeatureSettings().sized(30, k=5).n_candidates
        29
        """
        if self.n_candidates is not None:
            return self
        c = max(self.min_candidates, round(self.candidates_per_root_n * math.sqrt(n)))
        return replace(self, n_candidates=int(min(max(c, k), n - 1)))

    def exact_places(self, k: int) -> int:
        """How many places of a k-long list the second pass refines exactly:
        ``exact_width``, or k when None, at most k.

        Example
        -------
        >>> FeatureSettings().exact_places(21), FeatureSettings(exact_width=10).exact_places(21)
        (21, 10)
        """
        return int(k) if self.exact_width is None else min(int(self.exact_width), int(k))


DEFAULT_FEATURES = FeatureSettings()
