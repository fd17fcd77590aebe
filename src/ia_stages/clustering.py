"""scikit-learn estimator: Invariant Attention iterations followed by a read-out.

Every setting left at ``None`` is taken from a named preset (:data:`PRESETS`); the preset used
when ``preset=None`` is :data:`DEFAULT_PRESET`. Switching the estimator's defaults is therefore
one edit here, and the paper's settings stay available as ``preset='paper'``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from .attention import InvariantAttentionStep, invariant_attention_step
from .backend import array_module, to_numpy
from .baselines import spectral_affinity
from .invariant_mean import PRECONDITIONERS, MeanSettings, invariant_mean
from .kernels import NORMALIZATIONS
from .kmax import KappaMaxResult, SearchSettings, kappa_max
from .readout import LINKAGES, cluster_by_distance
from .validation import check_choice, check_images, check_number

# Named settings. A parameter left at None takes its value from the chosen preset.
PRESETS: dict[str, dict[str, Any]] = {
    # the paper's Invariant Attention (dense W, eq. 2.1), as the estimator behaved before presets
    "paper": {
        "beta": 30.0,
        "iterations": 2,
        "threshold": 0.3,
        "linkage": "average",
        "init": "kmax",
        "normalization": "unit",
        "sigma": 2.0,
        "attention": "dense",
        "n_neighbors": None,
        "readout": "linkage",
        "search": SearchSettings(),
        "mean_settings": MeanSettings(),
    },
}
DEFAULT_PRESET = "paper"
INITS = ("kmax", "identity")
READOUTS = ("linkage", "spectral")


@dataclass
class Alignment:
    """Each sample aligned to an invariant mean.

    label : ``(n,)`` index of the cluster mean (``cluster_means_``) the sample is aligned to
    params : ``(n, n_params)`` pose tau (theta in radians, b_0, b_1 in pixels) with
        ``warp(X[i], params[i]) ~ cluster_means_[label[i]]`` (up to scale)
    distance : ``(n,)`` manifold distance after that alignment, sqrt(||u||^2 + ||v||^2 - 2
        <u, v o tau>) with u the mean and v the image, both smoothed (``sigma``) and at unit
        norm: kappa^max's distance (0..2, the units of ``threshold``)
    """

    label: np.ndarray
    params: np.ndarray
    distance: np.ndarray


class InvariantAttentionClustering(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator
):
    """Cluster images whatever their rotations and translations (Invariant Attention).

    Runs ``iterations`` Invariant Attention iterations (kappa^max of the features, attention
    weights W, an invariant mean per column), computes kappa^max of the final features and
    reads clusters off it: average linkage below ``threshold``, or cut into ``n_clusters``.
    Each cluster's invariant mean (its "class average") and every sample's pose onto it are
    fitted too.

    Parameters
    ----------
    n_clusters : None (the read-out finds the number from ``threshold``) or the number K
    preset : name in :data:`PRESETS` (None: :data:`DEFAULT_PRESET`) that fills every parameter
        below left at None; ``'paper'`` is the paper's dense Invariant Attention
    beta : RBF bandwidth of kappa^max on unit-norm images (> 0)
    iterations : number of IA iterations (>= 0; 0 reads clusters off the input's kappa^max)
    threshold : read-out distance between unit-norm features (0..2) when ``n_clusters`` is None
    linkage : 'average' | 'single' | 'complete' ('linkage' read-out)
    init : 'kmax' starts each invariant mean at the kappa^max alignments; 'identity' as in the
        paper
    normalization : 'unit' | 'none'
    sigma : Gaussian smoothing (px) inside kappa^max (>= 0)
    attention : 'dense' (the paper's W); any other kind is handed to
        :func:`ia_stages.attention.invariant_attention_step` with ``n_neighbors`` and
        ``attention_options``, where that function offers it
    n_neighbors : neighbours per column for sparse attention kinds (>= 1, < n_samples)
    attention_options : extra keyword arguments for the attention function (dict)
    readout : 'linkage' (agglomerative on kappa^max distances) or 'spectral' (spectral
        clustering of the kappa^max affinity; needs ``n_clusters``; uses ``random_state``)
    search : :class:`~ia_stages.kmax.SearchSettings` of the kappa^max search
    mean_settings : :class:`~ia_stages.invariant_mean.MeanSettings` of Algorithm 1
    image_shape : None, or ``(H, W)`` (one entry may be -1) to accept flattened images
        ``(n, H * W)`` as scikit-learn's 2-D convention has them
    random_state : seed, ``numpy.random.RandomState`` or None, for the randomised read-outs
    verbose : 0 silent; >= 1 shows tqdm progress bars on stderr: one over the stages (the
        iterations, the final kappa^max, the cluster means) and, below it, one over the pairs
        of each kappa^max and the columns of each iteration's invariant means

    Attributes
    ----------
    labels_ : ``(n,)`` int64 cluster index of every sample
    n_clusters_ : number of clusters found
    features_ : ``(n, H, W)`` final features (the invariant means of the last iteration; the
        input when ``iterations == 0``)
    steps_ : list of :class:`~ia_stages.attention.InvariantAttentionStep`, one per iteration
    kmax_ : :class:`~ia_stages.kmax.KappaMaxResult` of the final features, ``(n, n)``
    affinity_matrix_ : ``(n, n)`` kappa^max of the final features (``kmax_.value``)
    cluster_means_ : ``(n_clusters_, H, W)`` invariant mean of every cluster's input images
    poses_ : ``(n, n_params)`` pose aligning each input image to its cluster's mean
    distances_ : ``(n,)`` manifold distance of each input image to its cluster's mean
    image_shape_ : ``(H, W)``
    n_features_in_ : H * W
    n_iter_ : iterations run
    settings_ : dict of the resolved settings (preset filled in)
    """

    def __init__(
        self,
        n_clusters: int | None = None,
        *,
        preset: str | None = None,
        beta: float | None = None,
        iterations: int | None = None,
        threshold: float | None = None,
        linkage: str | None = None,
        init: str | None = None,
        normalization: str | None = None,
        sigma: float | None = None,
        attention: str | None = None,
        n_neighbors: int | None = None,
        attention_options: dict | None = None,
        readout: str | None = None,
        search: SearchSettings | None = None,
        mean_settings: MeanSettings | None = None,
        image_shape: tuple[int, int] | None = None,
        random_state: Any = None,
        verbose: int = 0,
    ):
        self.n_clusters = n_clusters
        self.preset = preset
        self.beta = beta
        self.iterations = iterations
        self.threshold = threshold
        self.linkage = linkage
        self.init = init
        self.normalization = normalization
        self.sigma = sigma
        self.attention = attention
        self.n_neighbors = n_neighbors
        self.attention_options = attention_options
        self.readout = readout
        self.search = search
        self.mean_settings = mean_settings
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose

    # settings ---------------------------------------------------------------------------

    def _resolved(self, n_samples: int | None = None) -> dict[str, Any]:
        """The settings this fit uses: the preset filled into every parameter left at None,
        each checked (one-line ``ValueError`` naming the parameter)."""
        preset = DEFAULT_PRESET if self.preset is None else self.preset
        check_choice(preset, "preset", tuple(PRESETS))
        s = dict(PRESETS[preset])
        for key in s:
            value = getattr(self, key)
            if value is not None:
                s[key] = value
        check_number(s["beta"], "beta", low=0.0, low_open=True)
        check_number(s["iterations"], "iterations", integer=True, low=0)
        check_number(s["threshold"], "threshold", low=0.0)
        check_number(s["sigma"], "sigma", low=0.0)
        check_choice(s["linkage"], "linkage", LINKAGES)
        check_choice(s["init"], "init", INITS)
        check_choice(s["normalization"], "normalization", NORMALIZATIONS)
        check_choice(s["readout"], "readout", READOUTS)
        check_number(self.verbose, "verbose", integer=True, low=0)
        high = None if n_samples is None else n_samples
        check_number(self.n_clusters, "n_clusters", integer=True, low=1, high=high,
                     allow_none=True)  # fmt: skip
        if s["readout"] == "spectral" and self.n_clusters is None:
            raise ValueError("readout='spectral' needs n_clusters")
        if not isinstance(s["search"], SearchSettings):
            raise ValueError(f"search must be a SearchSettings, got {type(s['search']).__name__}")
        if not isinstance(s["mean_settings"], MeanSettings):
            raise ValueError(
                f"mean_settings must be a MeanSettings, got {type(s['mean_settings']).__name__}"
            )
        check_choice(s["mean_settings"].preconditioner, "mean_settings.preconditioner",
                     PRECONDITIONERS)  # fmt: skip
        s["attention_kwargs"] = self._attention_kwargs(s, n_samples)
        s["preset"] = preset
        return s

    def _attention_kwargs(self, s: dict[str, Any], n_samples: int | None) -> dict[str, Any]:
        """Keyword arguments for :func:`invariant_attention_step` beyond the paper's: empty for
        'dense'; otherwise ``attention``, ``n_neighbors`` and ``attention_options``, which the
        attention function must accept (it owns their meaning)."""
        options = dict(self.attention_options or {})
        if s["attention"] == "dense" and not options and s["n_neighbors"] is None:
            return {}
        if not isinstance(s["attention"], str):
            raise ValueError(f"attention must be a string, got {s['attention']!r}")
        high = None if n_samples is None else n_samples - 1
        check_number(s["n_neighbors"], "n_neighbors", integer=True, low=1, high=high,
                     allow_none=True)  # fmt: skip
        kwargs = {"attention": s["attention"], **options}
        if s["n_neighbors"] is not None:
            kwargs["n_neighbors"] = s["n_neighbors"]
        accepted = inspect.signature(invariant_attention_step).parameters
        unknown = [k for k in kwargs if k not in accepted]
        if unknown:
            raise ValueError(
                f"attention={s['attention']!r}: invariant_attention_step does not take "
                f"{', '.join(unknown)} (only attention='dense' is available in this version)"
            )
        return kwargs

    def _validate_X(self, X: Any, min_samples: int = 2) -> Any:
        return check_images(
            X,
            "X",
            image_shape=self.image_shape,
            min_samples=min_samples,
        )

    # fitting ----------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> InvariantAttentionClustering:
        """Cluster images.

        Parameters
        ----------
        X : ``(n, H, W)`` images (any real dtype, nested lists, cupy arrays), or ``(n, H * W)``
            with ``image_shape``; n >= 2
        y : ignored

        Returns
        -------
        self
        """
        X = self._validate_X(X)
        n = X.shape[0]
        s = self._resolved(n)
        rng = check_random_state(self.random_state)
        stages = s["iterations"] + 2
        quiet = not self.verbose
        with tqdm(total=stages, disable=quiet, desc="IA clustering", unit="stage") as bar:
            steps: list[InvariantAttentionStep] = []
            V = X
            for it in range(s["iterations"]):
                with self._bar(n * (n - 1) // 2, f"iteration {it + 1}: kappa^max", "pair") as b:
                    km = self._kmax(V, s, b.update)
                with self._bar(n, f"iteration {it + 1}: invariant means", "column") as b:
                    step = invariant_attention_step(
                        V, km, s["init"], s["mean_settings"], progress=b.update,
                        **s["attention_kwargs"],
                    )  # fmt: skip
                steps.append(step)
                V = step.features
                bar.update()
            with self._bar(n * (n - 1) // 2, "final kappa^max", "pair") as b:
                final = self._kmax(V, s, b.update)
            bar.update()
            labels = self._readout(final, s, rng)
            first = steps[0].kmax if steps else final
            with self._bar(n * (int(labels.max()) + 1), "cluster means and poses", "pair") as b:
                means, poses, dist = self._cluster_means(X, labels, first, s, b.update)
            bar.update()
        self.settings_ = s
        self.steps_ = steps
        self.features_ = V
        self.kmax_ = final
        self.affinity_matrix_ = final.value
        self.labels_ = labels
        self.n_clusters_ = int(labels.max()) + 1
        self.cluster_means_ = means
        self.poses_ = poses
        self.distances_ = dist
        self.image_shape_ = tuple(int(d) for d in X.shape[1:])
        self.n_features_in_ = int(np.prod(self.image_shape_))
        self.n_iter_ = s["iterations"]
        return self

    def _bar(self, total: int, desc: str, unit: str) -> tqdm:
        """A progress bar for one stage (stderr; shown when ``verbose``, removed when done)."""
        return tqdm(total=total, desc=desc, unit=unit, disable=not self.verbose, leave=False)

    def fit_predict(self, X: Any, y: Any = None, **kwargs: Any) -> np.ndarray:
        """Fit and return ``labels_`` ``(n,)``."""
        return self.fit(X).labels_

    def _kmax(self, V: Any, s: dict[str, Any], progress: Any, U: Any = None) -> KappaMaxResult:
        """kappa^max of ``V`` with itself (``U`` None) or of ``U`` against ``V``."""
        args = (V,) if U is None else (U, V)
        return kappa_max(
            *args,
            beta=s["beta"],
            normalization=s["normalization"],
            settings=s["search"],
            sigma=s["sigma"],
            progress=progress,
        )

    def _readout(self, km: KappaMaxResult, s: dict[str, Any], rng: Any) -> np.ndarray:
        if s["readout"] == "spectral":
            seed = int(rng.randint(np.iinfo(np.int32).max))
            return spectral_affinity(to_numpy(km.value), self.n_clusters, seed)
        return cluster_by_distance(
            to_numpy(km.sqdist), s["threshold"], s["linkage"], self.n_clusters
        )

    def _cluster_means(
        self, X: Any, labels: np.ndarray, km: KappaMaxResult, s: dict[str, Any], progress: Any
    ) -> tuple[Any, np.ndarray, np.ndarray]:
        """Invariant mean of every cluster's images (uniform weights, Algorithm 1 started at
        the kappa^max alignments onto the cluster's medoid; a single image is its own mean),
        then each image's pose onto its cluster's mean and the distance, by kappa^max."""
        xp = array_module(X)
        sq = to_numpy(km.sqdist)
        means = []
        for k in range(int(labels.max()) + 1):
            members = np.flatnonzero(labels == k)
            if members.size == 1:
                means.append(X[int(members[0])])
                continue
            medoid = members[np.argmin(sq[np.ix_(members, members)].sum(1))]
            idx = xp.asarray(members)
            res = invariant_mean(X[idx], xp.ones(members.size), km.params[medoid][idx],
                                 s["mean_settings"])  # fmt: skip
            means.append(res.mean)
        means = xp.stack(means)
        ali = self._align(means, X, s, progress, labels)
        return means, ali.params, ali.distance

    def _align(
        self,
        means: Any,
        X: Any,
        s: dict[str, Any],
        progress: Any = None,
        labels: np.ndarray | None = None,
    ) -> Alignment:
        """Pose and distance of every image of ``X`` onto ``means[labels]`` (the nearest mean
        when ``labels`` is None), from one kappa^max of ``means`` against ``X``."""
        km = self._kmax(X, s, progress, U=means)
        sq = to_numpy(km.sqdist)  # (K, n)
        if labels is None:
            labels = np.argmin(sq, axis=0).astype(np.int64)
        cols = np.arange(X.shape[0])
        return Alignment(
            labels,
            to_numpy(km.params)[labels, cols],
            np.sqrt(np.maximum(sq[labels, cols], 0.0)),
        )

    # access to the fitted means ----------------------------------------------------------

    def transform(self, X: Any) -> np.ndarray:
        """Manifold distances of images ``X`` to every cluster mean, ``(n, n_clusters_)``.

        The distance to mean k is sqrt of kappa^max's squared distance between the unit-norm,
        smoothed images after the best rotation and translation (0..2).
        """
        check_is_fitted(self, "cluster_means_")
        X = self._check_fitted_shape(self._validate_X(X, min_samples=1))
        km = self._kmax(X, self.settings_, None, U=self.cluster_means_)
        return np.sqrt(np.maximum(to_numpy(km.sqdist), 0.0)).T

    def align(self, X: Any = None) -> Alignment:
        """Each image's pose onto a cluster mean, and the distance left.

        Parameters
        ----------
        X : None for the training images (each aligned to its own cluster's mean, as in
            ``poses_``/``distances_``), or new images ``(m, H, W)`` (each aligned to the
            nearest cluster mean)

        Returns
        -------
        :class:`Alignment` with ``label (m,)``, ``params (m, n_params)``, ``distance (m,)``
        """
        check_is_fitted(self, "cluster_means_")
        if X is None:
            return Alignment(self.labels_, self.poses_, self.distances_)
        X = self._check_fitted_shape(self._validate_X(X, min_samples=1))
        return self._align(self.cluster_means_, X, self.settings_)

    @property
    def _n_features_out(self) -> int:
        """Number of columns of :meth:`transform` (for ``get_feature_names_out``)."""
        return self.n_clusters_

    def _check_fitted_shape(self, X: Any) -> Any:
        if tuple(X.shape[1:]) != self.image_shape_:
            raise ValueError(
                f"X has {int(np.prod(X.shape[1:]))} features, but {type(self).__name__} is "
                f"expecting {self.n_features_in_} features as input (images of "
                f"{tuple(X.shape[1:])}, fitted on {self.image_shape_})"
            )
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = self.image_shape is not None
        tags.input_tags.three_d_array = True
        return tags
