"""scikit-learn style estimator: Invariant Attention iterations followed by the read-out."""

from __future__ import annotations

from typing import Any

import numpy as np

from .attention import invariant_attention
from .backend import to_numpy
from .invariant_mean import MeanSettings
from .kmax import SearchSettings, kappa_max
from .readout import cluster_by_distance


class InvariantAttentionClustering:
    """Cluster images whatever their rotations and translations.

    Runs ``iterations`` Invariant Attention iterations, then groups samples whose final
    features lie on one transformation manifold (kappa^max distance below ``threshold``),
    or cuts the tree into ``n_clusters`` when that is given.

    Parameters
    ----------
    beta : RBF bandwidth on unit-norm images
    iterations : number of IA iterations
    threshold : read-out distance between unit-norm features (0..2)
    n_clusters : if set, return exactly this many clusters
    init, search, mean_settings, normalization, sigma : see :func:`invariant_attention`

    Attributes
    ----------
    labels_ : ``(n,)`` cluster index of every sample
    features_ : ``(n, H, W)`` final features (invariant means)
    steps_ : per-iteration results
    """

    def __init__(
        self,
        beta: float = 30.0,
        iterations: int = 2,
        threshold: float = 0.3,
        n_clusters: int | None = None,
        linkage: str = "average",
        init: str = "kmax",
        normalization: str = "unit",
        search: SearchSettings | None = None,
        mean_settings: MeanSettings | None = None,
        sigma: float = 2.0,
    ):
        self.beta = beta
        self.iterations = iterations
        self.threshold = threshold
        self.n_clusters = n_clusters
        self.linkage = linkage
        self.init = init
        self.normalization = normalization
        self.search = search or SearchSettings()
        self.mean_settings = mean_settings or MeanSettings()
        self.sigma = sigma

    def fit(self, X: Any, y: Any = None) -> InvariantAttentionClustering:
        """Cluster images ``X`` ``(n, H, W)``; ``y`` is ignored."""
        X = np.asarray(X, dtype=float) if not hasattr(X, "__cuda_array_interface__") else X
        if X.ndim != 3:
            raise ValueError(f"X must be (n, H, W) images, got shape {X.shape}")
        self.steps_ = invariant_attention(
            X,
            self.beta,
            self.iterations,
            self.normalization,
            self.init,
            self.search,
            self.mean_settings,
            sigma=self.sigma,
        )
        feats = self.steps_[-1].features if self.steps_ else X
        final = kappa_max(
            feats,
            beta=self.beta,
            normalization=self.normalization,
            settings=self.search,
            sigma=self.sigma,
        )
        self.features_ = feats
        self.kmax_ = final
        self.labels_ = cluster_by_distance(
            to_numpy(final.sqdist), self.threshold, self.linkage, self.n_clusters
        )
        return self

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X).labels_
