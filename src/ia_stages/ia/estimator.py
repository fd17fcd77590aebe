"""scikit-learn estimator: a thin wrapper of :func:`ia_stages.ia.loop.run_ia`.

Its parameters are the settings a user sets most often, each named as in the settings tree
(:class:`ia_stages.settings.Settings`), plus the tree itself (``config``) for everything else;
the parameters' constraints are generated from the tree's declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ia_stages.core.backend import to_numpy
from ia_stages.core.validation import check_images
from ia_stages.ia.class_averages import align_to
from ia_stages.ia.distances import kmax
from ia_stages.ia.loop import run_ia
from ia_stages.ia.prepare import prepare
from ia_stages.readout.graph import KnnDistances
from ia_stages.settings.group import GroupSettings
from ia_stages.settings.sizing import sized
from ia_stages.settings.spec import Spec
from ia_stages.settings.tree import PRESETS, SPECS, Settings, settings_of

__all__ = ["InvariantAttentionClustering"]

# the tree's settings that are also estimator parameters (None: the config's or preset's)
TREE_PARAMETERS = ("n_clusters", "group", "mirror", "sigma", "beta", "background", "backend")


def _constraint(spec: Spec) -> list:
    """The ``_parameter_constraints`` entry of a tree setting, from its declaration."""
    out: list = [None]
    if spec.kind in ("number", "integer"):
        kind = Integral if spec.kind == "integer" else Real
        left = spec.low is not None and not spec.low_open
        right = spec.high is not None and not spec.high_open
        closed = {(True, True): "both", (True, False): "left", (False, True): "right"}.get(
            (left, right), "neither"
        )
        out.append(Interval(kind, spec.low, spec.high, closed=closed))
        if spec.words:
            out.append(StrOptions(set(spec.words)))
    elif spec.kind == "choice":
        out.append(StrOptions(set(spec.choices)))
    elif spec.kind == "boolean":
        out.append("boolean")
    elif spec.kind == "clusters":
        out += [Interval(Integral, 1, None, closed="left"), tuple, list]
    return out


@dataclass
class Alignment:
    """Each sample aligned to an invariant mean.

    label : ``(n,)`` index of the cluster mean (``cluster_means_``) the sample is aligned to
    params : ``(n, n_params)`` pose tau (theta in radians, b_0, b_1 in pixels, then the
        group's further parameters, a mirror flag last) with
        ``warp(X[i], params[i], group) ~ cluster_means_[label[i]]`` (up to scale)
    distance : ``(n,)`` manifold distance after that alignment, sqrt(||u||^2 + ||v||^2 - 2
        <u, v o tau>) with u the mean and v the image, both smoothed (``sigma``) and at unit
        norm: kappa^max's distance (0..2, the units of ``readout.threshold``)
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
    rule chooses. Each cluster's invariant mean (its "class average") and every sample's pose
    onto it are fitted too.

    Every parameter but ``preset``, ``config``, ``image_shape``, ``random_state`` and
    ``verbose`` is a setting of the tree (:class:`~ia_stages.settings.Settings`) under the
    same name; one left at None takes the value of ``config``, else of the preset. The
    default preset ``'images'`` is what worked best on rotated digits (kNN attention, one
    iteration, the kNN-graph read-out); ``preset='paper'`` is the paper's dense Invariant
    Attention with the average-linkage read-out.

    Parameters
    ----------
    n_clusters : int, tuple (lo, hi) or None, default None
        The number of clusters K; None finds it from the data.
    preset : {'images', 'paper', 'exact'} or None, default None
        The named settings the others are laid over (:data:`~ia_stages.settings.PRESETS`);
        None is 'images', or the ``preset`` key of a dict ``config``.
    config : Settings, dict or None, default None
        Every other setting: a settings tree, or a nested dict of its keys, e.g.
        ``{"iterations": 2, "readout": {"k": 8}, "path": {"mode": "candidates"}}``
        (the YAML's ``settings:`` block; docs: configuration).
    group : {'se2', 'similarity', 'affine'}, dict, GroupSettings, group object or None, default None
        The transformations factored out (the tree's ``group``): a name, a dict of
        :class:`~ia_stages.settings.GroupSettings` keys (bounds), or a group made by
        :func:`~ia_stages.core.groups.make_group` (its mirror flag included).
    mirror : bool or None, default None
        The group also holds mirror images (tree default False).
    sigma : float >= 0, 'auto' or None, default None
        Gaussian smoothing (px) inside kappa^max; 'auto' chooses it from the images' noise at
        fit (tree default 1).
    beta : float > 0 or None, default None
        RBF bandwidth of kappa^max on unit-norm images (tree default 20).
    background : {'none', 'median', 'mask'} or None, default None
        'median' subtracts each image's border median; 'mask' (noisy images) also sets every
        pixel away from the object to 0 (tree default 'none').
    backend : {'auto', 'numpy', 'cupy'} or None, default None
        Array backend (tree default 'auto').
    image_shape : tuple (H, W) or None, default None
        ``(H, W)`` (one entry may be -1) to accept flattened images ``(n, H * W)`` as
        scikit-learn's 2-D convention has them.
    random_state : int, RandomState or None, default None
        Seed of the randomised read-outs and of the kNN path's sample.
    verbose : int, default 0
        0 silent; >= 1 shows progress bars on stderr.

    Attributes
    ----------
    labels_ : ndarray (n,)
        int64 cluster index of every sample.
    n_clusters_ : int
        Number of clusters: the K given (honoured exactly), else the K chosen.
    model_selection_ : ModelSelection
        How K was chosen (:class:`~ia_stages.readout.model_selection.ModelSelection`): the K, the
        criterion's value of every candidate K and of the runner-up, the stability of the
        choice over Leiden seeds (``summary()``: ``'3 clusters (stable in 5 of 5 seeds; next
        best 4)'``), and every candidate partition (``partition(k)``: the K = k read-out,
        without computing kappa^max again).
    features_ : ndarray (n, H, W)
        Features of the chosen iteration ``n_iter_`` (the input when 0).
    steps_ : list of InvariantAttentionStep
        One per iteration up to the chosen one.
    kmax_ : KappaMaxResult or KnnResult
        kappa^max of those features, ``(n, n)``; on the kNN path each sample's nearest.
    affinity_matrix_ : ndarray (n, n) or sparse array
        kappa^max of the final features (on the kNN path the listed neighbours only).
    cluster_means_ : ndarray (K, H, W)
        Invariant mean of every cluster's input images.
    poses_ : ndarray (n, n_params)
        Pose aligning each input image to its cluster's mean.
    distances_ : ndarray (n,)
        Manifold distance of each input image to its cluster's mean.
    image_shape_ : tuple (H, W)
    n_features_in_ : int
        H * W.
    n_iter_ : int
        The iteration whose read-out ``labels_`` are (chosen by the stopping rule).
    stop_reason_ : str
        One line saying why that iteration.
    iterations_run_ : int
        Iterations computed (>= ``n_iter_``; the rule may need one more).
    partitions_ : ndarray (T + 1, n)
        The read-out of every iteration, input first (T = ``iterations_run_``).
    settings_ : Settings
        The settings tree used (preset and config filled in, sized to n, sigma resolved).
    result_ : IAResult
        The result of :func:`~ia_stages.ia.loop.run_ia`.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.ndimage import rotate
    >>> rng = np.random.default_rng(0)
    >>> bar = np.zeros((15, 15)); bar[4:11, 6:9] = 1.0
    >>> ell = np.zeros((15, 15)); ell[4:11, 5:7] = 1.0; ell[9:11, 5:10] = 1.0
    >>> X = np.stack([rotate(img, rng.uniform(0, 360), reshape=False, order=1)
    ...               for img in [bar] * 6 + [ell] * 6])
    >>> est = InvariantAttentionClustering(n_clusters=2, config={"readout": {"k": 3}},
    ...                                    random_state=0).fit(X)
    >>> sorted(np.bincount(est.labels_).tolist())
    [6, 6]
    """

    _parameter_constraints: ClassVar[dict] = {
        **{name: _constraint(SPECS[name]) for name in TREE_PARAMETERS if name != "group"},
        "group": [
            None,
            StrOptions(set(SPECS["group.name"].choices)),
            dict,
            GroupSettings,
            HasMethods(["settings"]),
        ],
        "preset": [None, StrOptions(set(PRESETS))],
        "config": [None, Settings, dict],
        "image_shape": [None, tuple, list],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_clusters: int | tuple[int, int] | None = None,
        *,
        preset: str | None = None,
        config: Settings | dict | None = None,
        group: Any = None,
        mirror: bool | None = None,
        sigma: float | str | None = None,
        beta: float | None = None,
        background: str | None = None,
        backend: str | None = None,
        image_shape: tuple[int, int] | None = None,
        random_state: Any = None,
        verbose: int = 0,
    ):
        self.n_clusters = n_clusters
        self.preset = preset
        self.config = config
        self.group = group
        self.mirror = mirror
        self.sigma = sigma
        self.beta = beta
        self.background = background
        self.backend = backend
        self.image_shape = image_shape
        self.random_state = random_state
        self.verbose = verbose

    # settings ---------------------------------------------------------------------------

    def _settings(self) -> Settings:
        """The tree of this estimator: the preset, ``config``, then every tree parameter
        that is not None (checked: one line naming the setting)."""
        group, mirror = self.group, self.mirror
        if group is not None and callable(getattr(group, "settings", None)):
            mirror = group.settings().get("mirror", False) if mirror is None else mirror
        values = {name: getattr(self, name) for name in TREE_PARAMETERS}
        values.update(group=group, mirror=mirror)
        return settings_of(self.preset, self.config, **values)

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
        self._validate_params()
        X = check_images(X, "X", image_shape=self.image_shape, min_samples=2)
        X, s = prepare(X, self._settings())
        s = sized(s, int(X.shape[0]))
        if isinstance(self.random_state, int | np.integer) and not isinstance(
            self.random_state, bool
        ):
            seed = int(self.random_state)  # the pipeline's read-outs take the same int seed
        else:
            rng = check_random_state(self.random_state)
            seed = int(rng.randint(np.iinfo(np.int32).max))
        res = run_ia(X, s, seed, self.verbose)
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
        self.n_clusters_ = int(np.unique(res.labels).size)
        self.model_selection_ = res.selection
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

    def _fitted_images(self, X: Any) -> Any:
        """New images, prepared as the training images were, of the fitted shape."""
        check_is_fitted(self, "cluster_means_")
        X = check_images(X, "X", image_shape=self.image_shape, min_samples=1)
        if tuple(X.shape[1:]) != self.image_shape_:
            raise ValueError(
                f"X has {int(np.prod(X.shape[1:]))} features, but {type(self).__name__} is "
                f"expecting {self.n_features_in_} features as input (images of "
                f"{tuple(X.shape[1:])}, fitted on {self.image_shape_})"
            )
        return prepare(X, self.settings_)[0]

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
        X = self._fitted_images(X)
        km = kmax(X, self.settings_, U=self.cluster_means_)
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
        X = self._fitted_images(X)
        return Alignment(*align_to(self.cluster_means_, X, self.settings_))

    @property
    def _n_features_out(self) -> int:
        """Number of columns of :meth:`transform` (for ``get_feature_names_out``)."""
        return self.n_clusters_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = self.image_shape is not None
        tags.input_tags.three_d_array = True
        return tags
