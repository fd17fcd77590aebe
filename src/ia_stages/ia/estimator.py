"""scikit-learn estimator: a thin wrapper of :func:`ia_stages.ia.loop.run_ia`.

Every setting left at ``None`` is taken from a named preset
(:data:`ia_stages.ia.settings.PRESETS`, the same table ``ia-stages cluster --preset`` reads);
the preset used when ``preset=None`` is ``'images'``; ``preset='paper'`` is the paper's IA.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
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

from ia_stages.core.backend import to_numpy
from ia_stages.core.background import BACKGROUNDS, MaskSettings, subtract_background
from ia_stages.core.groups import make_group
from ia_stages.core.validation import (
    check_choice,
    check_image_content,
    check_images,
    check_number,
)
from ia_stages.ia.class_averages import align_to
from ia_stages.ia.invariant_mean import MeanSettings
from ia_stages.ia.loop import run_ia
from ia_stages.ia.settings import (
    DEFAULT_PRESET,
    INITS,
    PRESETS,
    READOUT_KINDS,
    IASettings,
    PathSettings,
    ia_settings,
    sized,
    with_sigma,
)
from ia_stages.kmax import SearchSettings
from ia_stages.readout.graph import KnnDistances
from ia_stages.readout.stopping import STOP_RULES

READOUTS = READOUT_KINDS
STOPS = STOP_RULES
__all__ = ["DEFAULT_PRESET", "INITS", "PRESETS", "InvariantAttentionClustering"]
# estimator parameter -> (part of IASettings, key); the option dicts map onto their part's keys
_PARAMS = {
    "beta": (None, "beta"),
    "iterations": (None, "iterations"),
    "init": (None, "init"),
    "normalization": (None, "normalization"),
    "sigma": (None, "sigma"),
    "threshold": ("readout", "threshold"),
    "linkage": ("readout", "linkage"),
    "attention": ("attention", "kind"),
    "n_neighbors": ("attention", "k"),
    "readout": ("readout", "kind"),
    "readout_neighbors": ("readout", "k"),
    "stop": ("stop", "rule"),
    "kmax_mode": ("path", "mode"),
}
_OPTIONS = {
    "attention_options": ("attention", ("bandwidth", "symmetry", "mean_steps")),
    "readout_options": (
        "readout",
        (
            "with_k",
            "restarts",
            "restart_bracket",
            "restart_tries",
            "with_k_engine",
            "community",
            "resolution",
            "resolutions",
            "silhouette_tolerance",
            "min_cluster_size",
            "merge",
        ),
    ),
    "stop_options": ("stop", ("n_seeds", "min_ari")),
    # every PathSettings key but the mode (its own parameter, kmax_mode)
    "kmax_options": ("path", tuple(f.name for f in fields(PathSettings) if f.name != "mode")),
}


def _options(param: str, given: Any, keys: tuple[str, ...]) -> dict:
    """The estimator's ``*_options`` parameter ``param``: a dict of some of ``keys`` ({} for
    None), or a one-line ``ValueError`` naming it."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ValueError(f"{param} must be a dict, got {type(given).__name__}")
    unknown = [k for k in given if k not in keys]
    if unknown:
        raise ValueError(
            f"{param} has no key {', '.join(map(repr, unknown))} (known: {', '.join(keys)})"
        )
    return given


def _parameter_names(message: str) -> str:
    """A settings error message with every settings key in it (``readout.kind``) replaced by
    the estimator parameter that sets it (``readout``)."""
    names = {f"{part}.{key}": param for param, (part, key) in _PARAMS.items() if part}
    for param, (part, keys) in _OPTIONS.items():
        names.update({f"{part}.{key}": f"{param}[{key!r}]" for key in keys})
    pattern = (
        r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names, key=len)[::-1])) + r")(?![\w.])"
    )
    message = re.sub(r"\bpath\.features\.(\w+)", r"kmax_options['features']['\1']", message)
    return re.sub(pattern, lambda m: names[m.group(1)], message)


@dataclass
class Alignment:
    """Each sample aligned to an invariant mean.

    label : ``(n,)`` index of the cluster mean (``cluster_means_``) the sample is aligned to
    params : ``(n, n_params)`` pose tau (theta in radians, b_0, b_1 in pixels, then the
        group's further parameters, a mirror flag last) with
        ``warp(X[i], params[i], group) ~ cluster_means_[label[i]]`` (up to scale)
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
    n_clusters : int or None, default None
        None (the read-out finds the number from ``threshold``) or the number K
    preset : {'images', 'paper'} or None, default None
        name in :data:`PRESETS` (None: :data:`DEFAULT_PRESET`, ``'images'``) that fills
        every parameter below left at None; ``'paper'`` is the paper's dense Invariant
        Attention. The option dicts are laid over the preset's (given keys replace its keys).
    beta : float or None, default None
        RBF bandwidth of kappa^max on unit-norm images (> 0); dense W, and kNN attention
        with ``bandwidth='fixed'``
    iterations : int or None, default None
        most IA iterations (>= 0; 0 reads clusters off the input's kappa^max; the
        'images' preset runs 1, 'paper' 2); with more than one the stopping rule may keep an
        earlier one (``n_iter_``)
    threshold : float or None, default None
        read-out distance between unit-norm features (0..2) when ``n_clusters`` is None
    linkage : {'average', 'single', 'complete'} or None, default None
        the agglomeration of the 'linkage' read-out
    init : {'kmax', 'identity'} or None, default None
        'kmax' starts each invariant mean at the kappa^max alignments; 'identity' as in the
        paper
    normalization : {'unit', 'none'} or None, default None
        'unit' scales every image to unit L2 norm before kappa^max
    sigma : float, 'auto' or None, default None
        Gaussian smoothing (px) inside kappa^max (>= 0; the presets': 1 and 2), or 'auto':
        chosen from the images' noise at fit (:func:`ia_stages.ia.settings.with_sigma`; 1 px
        for clean images); the value used is ``settings_.sigma``
    attention : {'dense', 'knn'} or None, default None
        'dense' (the paper's W: every column weighs every sample) or 'knn' (column j
        attends to its ``n_neighbors`` nearest under kappa^max;
        :class:`~ia_stages.ia.weights.AttentionSettings`)
    n_neighbors : int or None, default None
        kNN attention's k, the column itself included (1 <= k < n_samples); None
        (the presets) follows n: round(n / 12) clipped to 2..10
        (:func:`~ia_stages.ia.settings.sized_neighbours`)
    attention_options : dict or None, default None
        kNN attention only: ``bandwidth`` ('kth' | 'fixed'),
        ``symmetry`` ('none' | 'mutual' | 'union') as in
        :class:`~ia_stages.ia.weights.AttentionSettings`, and ``mean_steps`` (None, or the
        Algorithm 1 steps of the columns' means instead of ``mean_settings.steps``; 0 is the
        weighted mean of the neighbours at their kappa^max alignments)
    readout : {'linkage', 'spectral', 'graph'} or None, default None
        'linkage' (agglomerative on kappa^max distances), 'spectral' (spectral
        clustering of the kappa^max affinity; needs ``n_clusters``) or 'graph' (the
        ``readout_neighbors``-NN kappa^max graph, :func:`ia_stages.readout.graph.graph_partition`:
        Leiden communities without ``n_clusters`` (at the resolution whose partition has the
        highest silhouette), with it Leiden with the resolution bisected to K); the randomised
        ones use ``random_state``
    readout_neighbors : int or None, default None
        neighbours of every sample in the read-out graph, itself excluded
        (1 <= k < n_samples); None (the presets) follows n and K: round(n / 10) clipped to
        1..20, at most n / K - 1 with K; also the graph of ``stop='stability'``
    readout_options : dict or None, default None
        for the graph read-out: ``with_k`` ('leiden' | 'spectral', with
        ``n_clusters``), ``restarts`` (Leiden bisections to K, the one of highest modularity
        kept; >= 1), ``community`` ('silhouette' | 'leiden' | 'hdbscan', without),
        ``resolution`` (Leiden's, > 0), ``resolutions`` (those 'silhouette' tries),
        ``silhouette_tolerance`` (>= 0, default 0.1: 'silhouette' keeps the fewest clusters
        within this / m of the best silhouette), ``min_cluster_size`` (HDBSCAN's, >= 2); and
        ``merge`` (>= 0, without ``n_clusters``: join clusters whose class averages lie within
        ``merge`` times their members' spread,
        :func:`~ia_stages.ia.class_averages.merge_clusters`; 0 never joins)
    stop : {'stability', 'partition', 'contraction', 'none'} or None, default None
        which iteration's read-out to keep (:func:`ia_stages.readout.stopping.stop_iteration`):
        'stability' (the last before the Leiden communities of the read-out graph agree less
        across seeds), 'partition' (the first whose read-out agrees with the previous one's),
        'contraction' (the last before the within/between distance ratio stops falling) or
        'none' (the last); iterating stops as soon as the choice is settled
    stop_options : dict or None, default None
        ``n_seeds`` ('stability', >= 2), ``min_ari`` ('partition', 0..1)
    search : SearchSettings or None, default None
        :class:`~ia_stages.kmax.SearchSettings` of the kappa^max search
    mean_settings : MeanSettings or None, default None
        :class:`~ia_stages.ia.invariant_mean.MeanSettings` of Algorithm 1
    background : {'none', 'median', 'mask'} or None, default None
        'none', 'median': subtract each image's border median before
        anything else (a grey or shifted background otherwise dominates kappa^max; a warning
        says so), or 'mask' (noisy images): subtract it, then set every pixel away from the
        object to 0 (:func:`ia_stages.core.background.subtract_background`): the empty
        background's noise then neither enters the distances nor costs search time
    background_options : dict or None, default None
        for ``background='mask'``: ``threshold`` (4.0), ``sigma`` (2.0),
        ``dilation`` (1), ``border`` (3) as in :class:`~ia_stages.core.background.MaskSettings`
    image_shape : tuple of (int, int) or None, default None
        ``(H, W)`` (one entry may be -1) to accept flattened images
        ``(n, H * W)`` as scikit-learn's 2-D convention has them
    random_state : int, numpy.random.RandomState or None, default None
        the seed of the randomised read-outs
    verbose : int, default 0
        0 silent; >= 1 shows tqdm progress bars on stderr: one over the stages (every
        kappa^max, every iteration's means, the cluster means) and, below it, one over the
        pairs of each kappa^max and the columns of each iteration's invariant means
    group : {'se2', 'similarity', 'affine'} or group object, default 'se2'
        a group name, or a group object
        (:func:`ia_stages.core.groups.make_group`, e.g. with ``mirror=True`` or other bounds):
        the transformations kappa^max, the invariant means and the poses factor out
    kmax_mode : {'auto', 'dense', 'candidates'} or None, default None
        'auto' (the presets' 'images'; 'paper': 'dense'), 'dense' or 'candidates':
        how every kappa^max is computed (:class:`~ia_stages.ia.settings.PathSettings`):
        'dense' compares every pair (n x n arrays); 'candidates' is the kNN path for large n
        (each image's nearest refined on candidates found in rotation- and
        translation-invariant feature space; memory and time about linear in n); 'auto' takes
        the kNN path above ``kmax_options['dense_max']`` (5,000) images. The kNN path needs
        ``attention='knn'`` and ``readout='graph'``
    kmax_options : dict or None, default None
        dict, the kNN path's ``dense_max``, ``k`` (list width), ``search``
        ('ia', the default: the estimator's own search | 'exact': the screen, then the exact
        preset on the listed pairs), ``sample`` (images whose all-pairs kappa^max the
        silhouette and the stopping rule read; None follows n: ``min_sample``,
        ``sample_per_root_n``),
        ``sample_search`` ('screen' | 'exact': the search of the sample's pairs),
        ``later_candidates`` ('lists': later iterations refine each image's previous
        neighbours | 'features') and
        ``features`` (a dict of
        :class:`~ia_stages.kmax.features.FeatureSettings` keys, e.g. ``n_candidates``)

    Attributes
    ----------
    labels_ : ndarray of int64, shape (n,)
        cluster index of every sample
    n_clusters_ : int
        number of clusters found
    features_ : ndarray of shape (n, H, W)
        features of the chosen iteration ``n_iter_`` (the input when 0)
    steps_ : list of InvariantAttentionStep
        one :class:`~ia_stages.ia.attention.InvariantAttentionStep` per iteration up to the
        chosen one
    kmax_ : KappaMaxResult or KnnResult
        :class:`~ia_stages.kmax.KappaMaxResult` of those features, ``(n, n)``; on the kNN path
        their :class:`~ia_stages.kmax.KnnResult` (each sample's nearest)
    affinity_matrix_ : ndarray of shape (n, n) or scipy sparse array
        kappa^max of the final features (``kmax_.value``); on the kNN path a sparse array
        holding each sample's listed neighbours
    cluster_means_ : ndarray of shape (n_clusters, H, W)
        invariant mean of every cluster's input images (its "class average")
    poses_ : ndarray of shape (n, n_params)
        pose aligning each input image to its cluster's mean
    distances_ : ndarray of shape (n,)
        manifold distance of each input image to its cluster's mean
    image_shape_ : tuple of (int, int)
        ``(H, W)``
    n_features_in_ : int
        H * W
    n_iter_ : int
        the iteration whose read-out ``labels_`` are (chosen by ``stop``)
    stop_reason_ : str
        one line saying why that iteration
    iterations_run_ : int
        iterations computed (>= ``n_iter_``; the rule may need one more)
    partitions_ : ndarray of shape (iterations_run + 1, n)
        the read-out of every iteration, input first
    settings_ : IASettings
        the :class:`~ia_stages.ia.settings.IASettings` used (preset filled in, sized)
    result_ : IAResult
        the :class:`~ia_stages.ia.loop.IAResult` of :func:`~ia_stages.ia.loop.run_ia`

    See Also
    --------
    ia_stages.kappa_max : the kernel the read-outs and the attention use.

    Examples
    --------
    Eighteen letters rendered from their outlines at random angles and shifts, six of each
    of R, F and P, clustered without being told how many letters there are:

    >>> import numpy as np
    >>> from ia_stages import InvariantAttentionClustering
    >>> from ia_stages.data.render import letter, render
    >>> rng = np.random.default_rng(0)
    >>> poses = np.c_[rng.uniform(-np.pi, np.pi, 18), rng.uniform(-2, 2, (18, 2))]
    >>> X = np.concatenate([render(letter(c, 20.0), (32, 32), poses[6 * k : 6 * k + 6])
    ...                     for k, c in enumerate("RFP")])
    >>> est = InvariantAttentionClustering(random_state=0).fit(X)
    >>> est.n_clusters_, est.cluster_means_.shape
    (3, (3, 32, 32))
    >>> [len(set(row)) for row in est.labels_.reshape(3, 6).tolist()]  # one cluster a letter
    [1, 1, 1]

    With the number of clusters given, and new images placed onto the fitted class averages:

    >>> est = InvariantAttentionClustering(n_clusters=3, random_state=0).fit(X)
    >>> est.transform(X[:2]).shape  # distances to the 3 class averages
    (2, 3)
    >>> est.align(X[:2]).label.tolist()  # both are Rs
    [0, 0]
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
        sigma: float | str | None = None,
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
        background: str | None = None,
        background_options: dict | None = None,
        image_shape: tuple[int, int] | None = None,
        random_state: Any = None,
        verbose: int = 0,
        group: Any = "se2",
        kmax_mode: str | None = None,
        kmax_options: dict | None = None,
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
        self.background = background
        self.background_options = background_options
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose
        self.group = group
        self.kmax_mode = kmax_mode
        self.kmax_options = kmax_options

    # settings ---------------------------------------------------------------------------

    def _resolved(self, n_samples: int | None = None) -> IASettings:
        """The settings this fit uses: the preset with every parameter not None laid over it,
        each checked (one-line ``ValueError`` naming the parameter); neighbour counts are
        sized later by :func:`~ia_stages.ia.settings.sized` when left at None."""
        parts: dict[str, dict] = {"attention": {}, "readout": {}, "stop": {}, "path": {}}
        top: dict[str, Any] = {}
        for param, (part, key) in _PARAMS.items():
            value = getattr(self, param)
            if value is None:
                continue
            if param in ("n_neighbors", "readout_neighbors"):
                check_number(value, param, integer=True, low=1)
                if n_samples is not None and value >= n_samples:
                    raise ValueError(f"{param} must be < n_samples = {n_samples}, got {value}")
            if part is None:
                top[key] = value
            else:
                parts[part][key] = value
        for param, (part, keys) in _OPTIONS.items():
            parts[part].update(_options(param, getattr(self, param), keys))
        for param, part in (("search", "search"), ("mean_settings", "mean")):
            value = getattr(self, param)
            if value is not None:
                cls = SearchSettings if part == "search" else MeanSettings
                if not isinstance(value, cls):
                    kind = type(value).__name__
                    raise ValueError(f"{param} must be a {cls.__name__}, got {kind}")
                top[part] = value
        check_number(self.verbose, "verbose", integer=True, low=0)
        check_number(self.n_clusters, "n_clusters", integer=True, low=1, high=n_samples,
                     allow_none=True)  # fmt: skip
        group = self.group
        if group is not None:
            top["group"] = make_group(group) if isinstance(group, str) else group
        try:
            s = ia_settings(self.preset, **top, **parts)
        except ValueError as err:
            raise ValueError(_parameter_names(str(err))) from None
        if s.readout.kind == "spectral" and self.n_clusters is None:
            raise ValueError("readout='spectral' needs n_clusters")
        return s

    def _validate_X(self, X: Any, min_samples: int = 2, fitted: bool = False) -> Any:
        """Finite images ``(n, H, W)`` with the background setting applied; constant or too
        small images refused (one line), a non-zero background warned about. ``fitted``: the
        images must have the shape the estimator was fitted on."""
        X = check_images(X, "X", image_shape=self.image_shape, min_samples=min_samples)
        if fitted:
            self._check_fitted_shape(X)
        X = subtract_background(X, self._background(), self._mask())
        check_image_content(X, "X", with_sigma(self._resolved(), X).sigma)
        return X

    def _background(self) -> str:
        """The background setting (image preparation, not IA: 'none' when None)."""
        background = "none" if self.background is None else self.background
        check_choice(background, "background", BACKGROUNDS)
        return background

    def _mask(self) -> MaskSettings:
        """The :class:`~ia_stages.core.background.MaskSettings` of ``background='mask'``, from
        ``background_options`` (checked: a one-line error names the key)."""
        keys = tuple(f.name for f in fields(MaskSettings))
        options = _options("background_options", self.background_options, keys)
        if options and self._background() != "mask":
            raise ValueError("background_options apply to background='mask' only")
        mask = MaskSettings(**options)
        try:
            mask.check()
        except ValueError as err:
            named = re.sub(r"\bmask\.(\w+)", r"background_options['\1']", str(err))
            raise ValueError(named) from None
        return mask

    # fitting ----------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> InvariantAttentionClustering:
        """Cluster images.

        Parameters
        ----------
        X : array_like of shape (n, H, W), or (n, H * W) with ``image_shape``
            images (any real dtype, nested lists, cupy arrays); n >= 2
        y : None, default None
            ignored

        Returns
        -------
        InvariantAttentionClustering
            the fitted estimator
        """
        X = self._validate_X(X)
        n = X.shape[0]
        s = self._resolved(n)
        try:
            sized(s, n, self.n_clusters)
        except ValueError as err:
            raise ValueError(_parameter_names(str(err))) from None
        if isinstance(self.random_state, int | np.integer) and not isinstance(
            self.random_state, bool
        ):
            seed = int(self.random_state)  # the pipeline's read-outs take the same int seed
        else:
            rng = check_random_state(self.random_state)
            seed = int(rng.randint(np.iinfo(np.int32).max))
        res = run_ia(X, s, self.n_clusters, seed, self.verbose)
        chosen = res.n_iter
        self.result_ = res
        self.settings_ = res.settings
        self.steps_ = res.steps[:chosen]
        self.features_ = X if chosen == 0 else res.steps[chosen - 1].features
        km = res.kmax[chosen]
        if isinstance(km, KnnDistances):
            self.kmax_ = km.knn
            self.affinity_matrix_ = km.knn.to_sparse("value")
        else:
            self.kmax_ = km
            self.affinity_matrix_ = km.value
        self.labels_ = res.labels
        self.n_clusters_ = int(res.labels.max()) + 1
        self.cluster_means_ = res.averages.means
        self.poses_ = res.averages.params
        self.distances_ = res.averages.distance
        self.image_shape_ = tuple(int(d) for d in X.shape[1:])
        self.n_features_in_ = int(np.prod(self.image_shape_))
        self.n_iter_ = int(chosen)
        self.stop_reason_ = res.stop_reason
        self.iterations_run_ = len(res.steps)
        self.partitions_ = res.partitions
        return self

    def fit_predict(self, X: Any, y: Any = None, **kwargs: Any) -> np.ndarray:
        """Fit and return ``labels_``.

        Parameters
        ----------
        X : array_like of shape (n, H, W), or (n, H * W) with ``image_shape``
            images, as :meth:`fit` takes them
        y : None, default None
            ignored
        **kwargs : dict
            ignored (scikit-learn's signature)

        Returns
        -------
        ndarray of int64, shape (n,)
            the cluster index of every image
        """
        return self.fit(X).labels_

    def _align(self, means: Any, X: Any, s: IASettings) -> Alignment:
        """Pose and distance of every image of ``X`` onto its nearest mean."""
        return Alignment(*align_to(means, X, s))

    # access to the fitted means ----------------------------------------------------------

    def transform(self, X: Any) -> np.ndarray:
        """Manifold distances of images ``X`` to every cluster mean.

        The distance to mean k is the square root of kappa^max's squared distance between the
        unit-norm, smoothed images after the best transformation of the group (0..2).

        Parameters
        ----------
        X : array_like of shape (m, H, W)
            images of the fitted shape

        Returns
        -------
        ndarray of shape (m, n_clusters)
            the distances
        """
        check_is_fitted(self, "cluster_means_")
        X = self._validate_X(X, min_samples=1, fitted=True)
        km = self.settings_.kmax(X, U=self.cluster_means_)
        return np.sqrt(np.maximum(to_numpy(km.sqdist), 0.0)).T

    def align(self, X: Any = None) -> Alignment:
        """Each image's pose onto a cluster mean, and the distance left.

        Parameters
        ----------
        X : array_like of shape (m, H, W) or None, default None
            None for the training images (each aligned to its own cluster's mean, as in
            ``poses_`` and ``distances_``), or new images (each aligned to the nearest
            cluster mean)

        Returns
        -------
        Alignment
            ``label`` ``(m,)``, ``params`` ``(m, n_params)``, ``distance`` ``(m,)``
        """
        check_is_fitted(self, "cluster_means_")
        if X is None:
            return Alignment(self.labels_, self.poses_, self.distances_)
        X = self._validate_X(X, min_samples=1, fitted=True)
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
