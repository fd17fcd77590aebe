"""scikit-learn estimator: Invariant Attention iterations followed by a read-out.

Every setting left at ``None`` is taken from a named preset (:data:`PRESETS`); the preset used
when ``preset=None`` is :data:`DEFAULT_PRESET`. Switching the estimator's defaults is therefore
one edit here, and the paper's settings stay available as ``preset='paper'``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.metrics import adjusted_rand_score
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import make_group
from ia_stages.core.smoothing import NORMALIZATIONS
from ia_stages.core.validation import check_choice, check_images, check_number
from ia_stages.ia.attention import InvariantAttentionStep, attention_step
from ia_stages.ia.invariant_mean import PRECONDITIONERS, MeanSettings, invariant_mean
from ia_stages.ia.weights import ATTENTION_KINDS, BANDWIDTHS, AttentionSettings
from ia_stages.kmax import KappaMaxResult, SearchSettings, kappa_max
from ia_stages.kmax.neighbours import SYMMETRIES
from ia_stages.readout.graph import COMMUNITIES, WITH_K, graph_partition, spectral_affinity
from ia_stages.readout.linkage import LINKAGES, cluster_by_distance
from ia_stages.readout.stopping import STOP_RULES, stop_iteration

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
        "n_neighbors": 10,
        "attention_options": {},
        "readout": "linkage",
        "readout_neighbors": 20,
        "readout_options": {},
        "stop": "none",
        "stop_options": {},
        "search": SearchSettings(),
        "mean_settings": MeanSettings(),
    },
    # what works best on real images (issue 13's benchmark on rotated digits): each column
    # attends to its 10 mutual nearest under kappa^max, its mean is the weighted mean of those
    # neighbours at their kappa^max alignments (no gradient steps), clusters read off the
    # 20-NN kappa^max graph (Leiden; with K, Leiden bisected to K), and the stability rule
    # keeps iteration 1 or 2 (it needs iteration 2 to decide)
    "images": {
        "beta": 20.0,
        "iterations": 2,
        "threshold": 0.6,
        "linkage": "average",
        "init": "kmax",
        "normalization": "unit",
        "sigma": 1.0,
        "attention": "knn",
        "n_neighbors": 10,
        "attention_options": {"bandwidth": "kth", "symmetry": "mutual", "mean_steps": 0},
        "readout": "graph",
        "readout_neighbors": 20,
        "readout_options": {},
        "stop": "stability",
        "stop_options": {},
        "search": SearchSettings(),
        "mean_settings": MeanSettings(),
    },
}
DEFAULT_PRESET = "images"
INITS = ("kmax", "identity")
READOUTS = ("linkage", "spectral", "graph")
STOPS = STOP_RULES
# Defaults of the option dicts; a preset's dict and then the user's are laid over them.
ATTENTION_OPTIONS: dict[str, Any] = {"bandwidth": "kth", "symmetry": "none", "mean_steps": None}
READOUT_OPTIONS: dict[str, Any] = {
    "with_k": "leiden",
    "community": "leiden",
    "resolution": 1.0,
    "min_cluster_size": 10,
}
STOP_OPTIONS: dict[str, Any] = {"n_seeds": 5, "min_ari": 0.9}
_OPTIONS = {
    "attention_options": ATTENTION_OPTIONS,
    "readout_options": READOUT_OPTIONS,
    "stop_options": STOP_OPTIONS,
}


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

    Runs up to ``iterations`` Invariant Attention iterations (kappa^max of the features,
    attention weights W, an invariant mean per column), reads clusters off the kappa^max of
    every iteration's features (the input's included) and keeps the iteration the stopping
    rule ``stop`` chooses. Each cluster's invariant mean (its "class average") and every
    sample's pose onto it are fitted too.

    The default preset ``'images'`` is what worked best on rotated digits (kNN attention, one
    iteration, the kNN-graph read-out); ``preset='paper'`` is the paper's dense Invariant
    Attention with the average-linkage read-out.

    Parameters
    ----------
    n_clusters : None (the read-out finds the number from ``threshold``) or the number K
    preset : name in :data:`PRESETS` (None: :data:`DEFAULT_PRESET`, ``'images'``) that fills
        every parameter below left at None; ``'paper'`` is the paper's dense Invariant
        Attention. The option dicts are laid over the preset's (given keys replace its keys).
    beta : RBF bandwidth of kappa^max on unit-norm images (> 0); dense W, and kNN attention
        with ``bandwidth='fixed'``
    iterations : most IA iterations (>= 0; 0 reads clusters off the input's kappa^max); the
        stopping rule may end earlier (``n_iter_``)
    threshold : read-out distance between unit-norm features (0..2) when ``n_clusters`` is None
    linkage : 'average' | 'single' | 'complete' ('linkage' read-out)
    init : 'kmax' starts each invariant mean at the kappa^max alignments; 'identity' as in the
        paper
    normalization : 'unit' | 'none'
    sigma : Gaussian smoothing (px) inside kappa^max (>= 0)
    attention : 'dense' (the paper's W: every column weighs every sample) or 'knn' (column j
        attends to its ``n_neighbors`` nearest under kappa^max;
        :class:`~ia_stages.ia.weights.AttentionSettings`)
    n_neighbors : kNN attention's k, the column itself included (1 <= k < n_samples); a
        preset's value is lowered to n_samples - 1 on smaller data, a given one is not
    attention_options : dict, kNN attention only: ``bandwidth`` ('kth' | 'fixed'),
        ``symmetry`` ('none' | 'mutual' | 'union') as in
        :class:`~ia_stages.ia.weights.AttentionSettings`, and ``mean_steps`` (None, or the
        Algorithm 1 steps of the columns' means instead of ``mean_settings.steps``; 0 is the
        weighted mean of the neighbours at their kappa^max alignments)
    readout : 'linkage' (agglomerative on kappa^max distances), 'spectral' (spectral
        clustering of the kappa^max affinity; needs ``n_clusters``) or 'graph' (the
        ``readout_neighbors``-NN kappa^max graph, :func:`ia_stages.readout.graph.graph_partition`:
        Leiden communities without ``n_clusters``, with it Leiden with the resolution bisected
        to K); the randomised ones use ``random_state``
    readout_neighbors : neighbours of every sample in the read-out graph, itself excluded
        (1 <= k < n_samples; a preset's value is lowered to n_samples - 1); also the graph of
        ``stop='stability'``
    readout_options : dict for the graph read-out: ``with_k`` ('leiden' | 'spectral', with
        ``n_clusters``), ``community`` ('leiden' | 'hdbscan', without), ``resolution``
        (Leiden's, > 0), ``min_cluster_size`` (HDBSCAN's, >= 2)
    stop : which iteration's read-out to keep (:func:`ia_stages.readout.stopping.stop_iteration`):
        'stability' (the last before the Leiden communities of the read-out graph agree less
        across seeds), 'partition' (the first whose read-out agrees with the previous one's),
        'contraction' (the last before the within/between distance ratio stops falling) or
        'none' (the last); iterating stops as soon as the choice is settled
    stop_options : dict: ``n_seeds`` ('stability', >= 2), ``min_ari`` ('partition', 0..1)
    search : :class:`~ia_stages.kmax.SearchSettings` of the kappa^max search
    mean_settings : :class:`~ia_stages.ia.invariant_mean.MeanSettings` of Algorithm 1
    image_shape : None, or ``(H, W)`` (one entry may be -1) to accept flattened images
        ``(n, H * W)`` as scikit-learn's 2-D convention has them
    random_state : seed, ``numpy.random.RandomState`` or None, for the randomised read-outs
    verbose : 0 silent; >= 1 shows tqdm progress bars on stderr: one over the stages (every
        kappa^max, every iteration's means, the cluster means) and, below it, one over the
        pairs of each kappa^max and the columns of each iteration's invariant means
    group : 'se2' (default), 'similarity' or 'affine', or a group object
        (:func:`ia_stages.core.groups.make_group`, e.g. with ``mirror=True`` or other bounds):
        the transformations kappa^max, the invariant means and the poses factor out

    Attributes
    ----------
    labels_ : ``(n,)`` int64 cluster index of every sample
    n_clusters_ : number of clusters found
    features_ : ``(n, H, W)`` features of the chosen iteration ``n_iter_`` (the input when 0)
    steps_ : list of :class:`~ia_stages.ia.attention.InvariantAttentionStep`, one per iteration
        up to the chosen one
    kmax_ : :class:`~ia_stages.kmax.KappaMaxResult` of those features, ``(n, n)``
    affinity_matrix_ : ``(n, n)`` kappa^max of the final features (``kmax_.value``)
    cluster_means_ : ``(n_clusters_, H, W)`` invariant mean of every cluster's input images
    poses_ : ``(n, n_params)`` pose aligning each input image to its cluster's mean
    distances_ : ``(n,)`` manifold distance of each input image to its cluster's mean
    image_shape_ : ``(H, W)``
    n_features_in_ : H * W
    n_iter_ : the iteration whose read-out ``labels_`` are (chosen by ``stop``)
    stop_reason_ : one line saying why that iteration
    iterations_run_ : iterations computed (>= ``n_iter_``; the rule may need one more)
    partitions_ : ``(iterations_run_ + 1, n)`` the read-out of every iteration, input first
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
        readout_neighbors: int | None = None,
        readout_options: dict | None = None,
        stop: str | None = None,
        stop_options: dict | None = None,
        search: SearchSettings | None = None,
        mean_settings: MeanSettings | None = None,
        image_shape: tuple[int, int] | None = None,
        random_state: Any = None,
        verbose: int = 0,
        group: Any = "se2",
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
        self.readout_neighbors = readout_neighbors
        self.readout_options = readout_options
        self.stop = stop
        self.stop_options = stop_options
        self.search = search
        self.mean_settings = mean_settings
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose
        self.group = group

    # settings ---------------------------------------------------------------------------

    def _resolved(self, n_samples: int | None = None) -> dict[str, Any]:
        """The settings this fit uses: the preset filled into every parameter left at None,
        each checked (one-line ``ValueError`` naming the parameter).

        Adds ``attention_settings`` (:class:`~ia_stages.ia.weights.AttentionSettings`),
        ``attention_mean`` (the :class:`MeanSettings` of the columns' means), ``graph`` and
        ``stop_rule`` (the dicts :func:`~ia_stages.readout.graph.graph_partition` and
        :func:`~ia_stages.readout.stopping.stop_iteration` take) and ``preset``.
        """
        preset = DEFAULT_PRESET if self.preset is None else self.preset
        check_choice(preset, "preset", tuple(PRESETS))
        s = dict(PRESETS[preset])
        for key in s:
            value = getattr(self, key)
            if key in _OPTIONS:
                s[key] = self._options(key, s[key], value)
            elif value is not None:
                s[key] = value
        check_number(s["beta"], "beta", low=0.0, low_open=True)
        check_number(s["iterations"], "iterations", integer=True, low=0)
        check_number(s["threshold"], "threshold", low=0.0)
        check_number(s["sigma"], "sigma", low=0.0)
        check_choice(s["linkage"], "linkage", LINKAGES)
        check_choice(s["init"], "init", INITS)
        check_choice(s["normalization"], "normalization", NORMALIZATIONS)
        check_choice(s["readout"], "readout", READOUTS)
        check_choice(s["attention"], "attention", ATTENTION_KINDS)
        check_choice(s["stop"], "stop", STOPS)
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
        for key in ("n_neighbors", "readout_neighbors"):
            s[key] = self._neighbours(key, s[key], n_samples)
        a = s["attention_options"]
        check_choice(a["bandwidth"], "attention_options['bandwidth']", BANDWIDTHS)
        check_choice(a["symmetry"], "attention_options['symmetry']", SYMMETRIES)
        check_number(a["mean_steps"], "attention_options['mean_steps']", integer=True, low=0,
                     allow_none=True)  # fmt: skip
        s["attention_settings"] = AttentionSettings(
            kind=s["attention"], k=s["n_neighbors"], bandwidth=a["bandwidth"],
            symmetry=a["symmetry"],
        )  # fmt: skip
        s["attention_mean"] = s["mean_settings"]
        if s["attention"] == "knn" and a["mean_steps"] is not None:
            s["attention_mean"] = replace(s["mean_settings"], steps=a["mean_steps"])
        r = s["readout_options"]
        check_choice(r["with_k"], "readout_options['with_k']", WITH_K)
        check_choice(r["community"], "readout_options['community']", COMMUNITIES)
        check_number(r["resolution"], "readout_options['resolution']", low=0.0, low_open=True)
        check_number(r["min_cluster_size"], "readout_options['min_cluster_size']",
                     integer=True, low=2)  # fmt: skip
        s["graph"] = {**r, "k": s["readout_neighbors"]}
        o = s["stop_options"]
        check_number(o["n_seeds"], "stop_options['n_seeds']", integer=True, low=2)
        check_number(o["min_ari"], "stop_options['min_ari']", low=0.0, high=1.0)
        s["stop_rule"] = {"rule": s["stop"], **o}
        s["preset"] = preset
        return s

    @staticmethod
    def _options(name: str, preset: dict, given: Any) -> dict[str, Any]:
        """An option dict: its defaults, then the preset's keys, then the given keys."""
        if given is not None and not isinstance(given, dict):
            raise ValueError(f"{name} must be a dict, got {type(given).__name__}")
        known = _OPTIONS[name]
        unknown = [k for k in (given or {}) if k not in known]
        if unknown:
            raise ValueError(
                f"{name} has no key {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
            )
        return {**known, **preset, **(given or {})}

    def _neighbours(self, name: str, preset_k: int, n_samples: int | None) -> int:
        """A neighbour count: a given one must satisfy 1 <= k < n_samples; the preset's is
        lowered to n_samples - 1 so that small data sets run with the defaults."""
        given = getattr(self, name)
        k = preset_k if given is None else given
        check_number(k, name, integer=True, low=1)
        if n_samples is not None:
            if given is None:
                k = max(1, min(int(k), n_samples - 1))
            elif k >= n_samples:
                raise ValueError(f"{name} must be < n_samples = {n_samples}, got {k}")
        return int(k)

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
        seed = int(rng.randint(np.iinfo(np.int32).max))  # one seed for every read-out
        T = s["iterations"]
        pairs = n * (n - 1) // 2
        with tqdm(total=2 * T + 2, disable=not self.verbose, desc="IA clustering",
                  unit="stage") as bar:  # fmt: skip
            steps: list[InvariantAttentionStep] = []
            kms: list[KappaMaxResult] = []
            parts: list[np.ndarray] = []
            V = X
            for t in range(T + 1):
                what = "final kappa^max" if t == T else f"iteration {t + 1}: kappa^max"
                with self._bar(pairs, what, "pair") as b:
                    kms.append(self._kmax(V, s, b.update))
                parts.append(self._readout(kms[-1], s, seed))
                bar.update()
                if t == T or self._stop_settled(parts, kms, s):
                    break
                with self._bar(n, f"iteration {t + 1}: invariant means", "column") as b:
                    step = attention_step(
                        V, kms[-1], s["attention_settings"], s["beta"], s["init"],
                        s["attention_mean"], self._group(), progress=b.update,
                    )  # fmt: skip
                steps.append(step)
                V = step.features
                bar.update()
            chosen, reason = self._stop(parts, kms, s)
            bar.total = bar.n + 1
            bar.refresh()
            labels = parts[chosen]
            with self._bar(n * (int(labels.max()) + 1), "cluster means and poses", "pair") as b:
                means, poses, dist = self._cluster_means(X, labels, kms[0], s, b.update)
            bar.update()
        self.settings_ = s
        self.steps_ = steps[:chosen]
        self.features_ = X if chosen == 0 else steps[chosen - 1].features
        self.kmax_ = kms[chosen]
        self.affinity_matrix_ = kms[chosen].value
        self.labels_ = labels
        self.n_clusters_ = int(labels.max()) + 1
        self.cluster_means_ = means
        self.poses_ = poses
        self.distances_ = dist
        self.image_shape_ = tuple(int(d) for d in X.shape[1:])
        self.n_features_in_ = int(np.prod(self.image_shape_))
        self.n_iter_ = int(chosen)
        self.stop_reason_ = reason
        self.iterations_run_ = len(steps)
        self.partitions_ = np.stack(parts)
        return self

    @staticmethod
    def _stop(
        parts: list[np.ndarray], kms: list[KappaMaxResult], s: dict[str, Any]
    ) -> tuple[int, str]:
        """The iteration the stopping rule chooses among those computed, and why."""
        sq = [to_numpy(km.sqdist) for km in kms]
        return stop_iteration(parts, sq, s["stop_rule"], s["graph"])

    def _stop_settled(
        self, parts: list[np.ndarray], kms: list[KappaMaxResult], s: dict[str, Any]
    ) -> bool:
        """True when more iterations cannot change the rule's choice: it chose an earlier
        iteration than the last computed, or ('partition') the last read-out agrees with the
        one before."""
        if len(parts) < 2 or s["stop"] == "none":
            return False
        chosen, _ = self._stop(parts, kms, s)
        if chosen < len(parts) - 1:
            return True
        if s["stop"] == "partition":
            ari = adjusted_rand_score(parts[-2], parts[-1])
            return bool(ari >= s["stop_rule"]["min_ari"])
        return False

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
            group=self._group(),
            settings=s["search"],
            sigma=s["sigma"],
            progress=progress,
        )

    def _group(self) -> Any:
        """The ``group`` setting as a group object (a name: :func:`make_group` with its
        default bounds)."""
        return make_group(self.group) if isinstance(self.group, str) else self.group

    def _readout(self, km: KappaMaxResult, s: dict[str, Any], seed: int) -> np.ndarray:
        """Labels ``(n,)`` of one kappa^max by the ``readout`` setting."""
        if s["readout"] == "spectral":
            return spectral_affinity(to_numpy(km.value), self.n_clusters, seed)
        if s["readout"] == "graph":
            return graph_partition(to_numpy(km.sqdist), s["graph"], self.n_clusters, seed)
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
                                 s["mean_settings"], self._group())  # fmt: skip
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
