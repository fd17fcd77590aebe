"""Invariant Attention's settings: one frozen dataclass per part, the presets, the sizing rule.

:class:`IASettings` holds everything :func:`ia_stages.ia.loop.run_ia` reads: kappa^max's
kernel and search, the attention (:class:`~ia_stages.ia.weights.AttentionSettings`, including
``mean_steps``), the read-out (:class:`ReadoutSettings`), the stopping rule
(:class:`StopSettings`) and Algorithm 1 (:class:`~ia_stages.ia.invariant_mean.MeanSettings`).
It is built once, from a preset (:data:`PRESETS`) with the given values laid over it
(:func:`ia_settings`), whether those values come from the estimator's parameters, a config
dataset entry or a command option; every key is checked with a one-line ``ValueError`` naming it.

Neighbour counts left at ``None`` follow the data (:func:`sized`): explicit values win.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.core.noise import NoiseSettings
from ia_stages.core.smoothing import NORMALIZATIONS
from ia_stages.core.validation import check_choice, check_number
from ia_stages.ia.invariant_mean import PRECONDITIONERS, MeanSettings
from ia_stages.ia.weights import AttentionSettings
from ia_stages.kmax import EXACT_SEARCH, KappaMaxResult, KnnResult, SearchSettings, kappa_max
from ia_stages.kmax.candidates import first_pass_search, listed_candidates
from ia_stages.kmax.features import DEFAULT_FEATURES, FeatureSettings
from ia_stages.readout.graph import (
    COMMUNITIES,
    LEIDEN_ENGINES,
    WITH_K,
    KnnDistances,
    sample_indices,
    sample_sqdist,
)
from ia_stages.readout.linkage import LINKAGES
from ia_stages.readout.stopping import STOP_RULES

READOUT_KINDS = ("graph", "linkage", "spectral")
# community 'silhouette' tries these Leiden resolutions (README: "Sized to the data")
RESOLUTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)
# community 'silhouette' prefers fewer clusters within this / m of the best silhouette, m its
# cluster count (README: "Sized to the data")
SILHOUETTE_TOLERANCE = 0.1
INITS = ("kmax", "identity")
PATH_MODES = ("auto", "dense", "candidates")
PATH_SEARCHES = ("exact", "ia")
LATER_CANDIDATES = ("lists", "features")
SAMPLE_SEARCHES = ("screen", "exact")
DENSE_MAX = 5000
"""``path.mode`` 'auto' takes the kNN path above this many samples by default: dense
kappa^max holds n x n arrays (n = 5,000: 200 MB per array, 12.5 M pairs per iteration)."""


@dataclass(frozen=True)
class ReadoutSettings:
    """How clusters are read off one iteration's kappa^max (:func:`ia_stages.ia.loop.read_out`).

    kind : 'graph' (the k-NN kappa^max graph: Leiden communities without K; with K,
        ``with_k``), 'linkage' (agglomerative on kappa^max distances, cut at ``threshold`` or
        into K) or 'spectral' (spectral clustering of the dense kappa^max affinity; needs K)
    k : neighbours of every sample in the read-out graph, itself excluded (1 <= k < n); None
        follows the data (:func:`sized`); also the graph of the 'stability' stopping rule
    threshold : 'linkage' without K: merge distance between unit-norm features (0..2)
    linkage : 'average' | 'single' | 'complete'
    with_k : 'graph' with K: 'leiden' (resolution bisected to K) or 'spectral'
    restarts : with_k 'leiden': Leiden bisections with seeds seed, seed + 1, ...; the
        K-partition of highest modularity is kept (>= 1)
    restart_bracket : the restarts after the first bisect within [r / b, b r] of the first
        seed's resolution r (> 1)
    restart_tries : at most this many Leiden runs per restart (>= 1)
    with_k_engine : with_k 'leiden': the Leiden implementation, 'igraph' (igraph's own, the
        default: the highest-modularity rule is served by the faster optimiser that reaches
        higher modularity) or 'leidenalg' (the one the read-outs without K run)
    community : 'graph' without K: 'silhouette' (Leiden at each of ``resolutions``, the
        partition with the highest silhouette on the kappa^max distances kept), 'leiden' (at
        ``resolution``) or 'hdbscan'
    resolution : Leiden's resolution (> 0): community 'leiden' and the 'stability' stopping
        rule
    resolutions : the Leiden resolutions community 'silhouette' chooses from (each > 0)
    silhouette_tolerance : community 'silhouette' keeps the partition with the fewest clusters
        among those whose silhouette is within this / m of the highest, m the highest one's
        cluster count (>= 0; 0: the highest)
    min_cluster_size : HDBSCAN's (>= 2)
    merge : without K, clusters a and b are joined when the kappa^max distance between their
        class averages is at most ``merge`` times the sum of their members' mean distances to
        their own class averages (sub-styles of one class); 0 never joins
        (:func:`ia_stages.ia.class_averages.merge_clusters`)
    """

    kind: str = "graph"
    k: int | None = None
    threshold: float = 0.3
    linkage: str = "average"
    with_k: str = "leiden"
    restarts: int = 8
    restart_bracket: float = 2.0
    restart_tries: int = 8
    with_k_engine: str = "igraph"
    community: str = "silhouette"
    resolution: float = 1.0
    resolutions: tuple[float, ...] = RESOLUTIONS
    silhouette_tolerance: float = SILHOUETTE_TOLERANCE
    min_cluster_size: int = 10
    merge: float = 0.0

    def check(self, n: int | None = None) -> None:
        """Raise ``ValueError`` naming the field when a setting is out of range."""
        check_choice(self.kind, "readout.kind", READOUT_KINDS)
        check_number(self.k, "readout.k", integer=True, low=1, allow_none=True)
        if self.k is not None and n is not None and n > 1 and self.k >= n:
            raise ValueError(f"readout.k must satisfy 1 <= k < n (n={n}), got {self.k}")
        check_number(self.threshold, "readout.threshold", low=0.0)
        check_choice(self.linkage, "readout.linkage", LINKAGES)
        check_choice(self.with_k, "readout.with_k", WITH_K)
        check_number(self.restarts, "readout.restarts", integer=True, low=1)
        check_number(self.restart_bracket, "readout.restart_bracket", low=1.0, low_open=True)
        check_number(self.restart_tries, "readout.restart_tries", integer=True, low=1)
        check_choice(self.with_k_engine, "readout.with_k_engine", LEIDEN_ENGINES)
        check_choice(self.community, "readout.community", COMMUNITIES)
        check_number(self.resolution, "readout.resolution", low=0.0, low_open=True)
        if not isinstance(self.resolutions, (tuple, list)) or not self.resolutions:
            raise ValueError("readout.resolutions must be a non-empty list of numbers > 0")
        for r in self.resolutions:
            check_number(r, "readout.resolutions", low=0.0, low_open=True)
        check_number(self.silhouette_tolerance, "readout.silhouette_tolerance", low=0.0)
        check_number(self.min_cluster_size, "readout.min_cluster_size", integer=True, low=2)
        check_number(self.merge, "readout.merge", low=0.0)

    def graph(self) -> dict[str, Any]:
        """The dict :func:`ia_stages.readout.graph.graph_partition` takes."""
        return {
            "k": self.k,
            "with_k": self.with_k,
            "restarts": self.restarts,
            "restart_bracket": self.restart_bracket,
            "restart_tries": self.restart_tries,
            "with_k_engine": self.with_k_engine,
            "community": self.community,
            "resolution": self.resolution,
            "resolutions": list(self.resolutions),
            "silhouette_tolerance": self.silhouette_tolerance,
            "min_cluster_size": self.min_cluster_size,
        }


@dataclass(frozen=True)
class PathSettings:
    """How each iteration's kappa^max is computed: every pair, or the kNN path.

    mode : 'dense' (every pair, ``(n, n)`` arrays), 'candidates' (the kNN path: each sample's
        nearest refined on candidates in invariant-feature space,
        :func:`ia_stages.kmax.kappa_max` with ``mode='candidates'``; never n x n) or 'auto'
        (candidates above ``dense_max`` samples, dense otherwise)
    dense_max : 'auto': most samples that run dense (>= 2)
    k : kNN path: list width, the sample itself included; None = the larger of the
        attention's k and the read-out graph's k + 1 (:meth:`IASettings.knn_width`)
    search : kNN path: the per-pair search of the candidate pairs: 'ia' (the default:
        ``IASettings.search``, the dense path's search; its optimum of a listed pair equals the
        exact preset's at IA's beta on digits, letters and noisy digits, at half the graph's
        CPU: README "Large image sets") or 'exact' (the screen, then the library's exact
        preset :data:`ia_stages.kmax.EXACT_SEARCH` on the listed pairs)
    sample : kNN path: samples (seeded, at random; all when n is smaller) whose all-pairs
        kappa^max the read-out's silhouette and the stopping rules use in place of the n x n
        distances (:class:`~ia_stages.readout.graph.KnnDistances`; >= 2); None (the default)
        follows n (:meth:`sample_size`)
    sample_search : kNN path: the per-pair search of the sample's pairs: 'screen' (the
        default: the first pass's screen, :func:`~ia_stages.kmax.candidates.first_pass_search`)
        or 'exact' (the candidate pairs' search, ``search``). Most sample pairs are far apart,
        where both searches stop early at a small kernel value; the screen costs a fraction
        (``bench/sample_search.py``; README "Large image sets")
    min_sample, sample_per_root_n : with ``sample`` None, the sample is
        max(min_sample, sample_per_root_n * sqrt(n)) images: a fixed small sample made the
        read-out without K depend on the sample at large n; a larger one lessens that but
        does not remove it where partitions score alike (``bench/readout_sample.py``; README
        "Large image sets")
    features : kNN path: :class:`~ia_stages.kmax.features.FeatureSettings` (the invariant
        features and the candidate count c, sized to n when None)
    later_candidates : kNN path, every iteration after the input's: each sample's candidate
        pairs are 'lists' (the default: its neighbours in the previous iteration's lists; the
        expansion pass, ``features.n_expand``, adds their neighbours' neighbours) or
        'features' (its c nearest in invariant-feature space, as for the input). The
        attention pulls each sample towards its listed neighbours, so their means stay near:
        on 20,000 digit copies the lists' candidates found as many of iteration 1's nearest as
        the features' with half the pairs refined (README "Large image sets")

    The kNN path needs kNN attention and the graph read-out; with a group that holds mirror
    images its features are mirror invariant and its searches take mirror images too.
    """

    mode: str = "auto"
    dense_max: int = DENSE_MAX
    k: int | None = None
    search: str = "ia"
    sample: int | None = None
    sample_search: str = "screen"
    min_sample: int = 300
    sample_per_root_n: float = 7.0
    features: FeatureSettings = DEFAULT_FEATURES
    later_candidates: str = "lists"

    def check(self) -> None:
        """Raise ``ValueError`` naming the field when a setting is out of range."""
        check_choice(self.mode, "path.mode", PATH_MODES)
        check_number(self.dense_max, "path.dense_max", integer=True, low=2)
        check_number(self.k, "path.k", integer=True, low=2, allow_none=True)
        check_choice(self.search, "path.search", PATH_SEARCHES)
        check_number(self.sample, "path.sample", integer=True, low=2, allow_none=True)
        check_choice(self.sample_search, "path.sample_search", SAMPLE_SEARCHES)
        check_choice(self.later_candidates, "path.later_candidates", LATER_CANDIDATES)
        check_number(self.min_sample, "path.min_sample", integer=True, low=2)
        check_number(self.sample_per_root_n, "path.sample_per_root_n", low=0.0)
        if not isinstance(self.features, FeatureSettings):
            kind = type(self.features).__name__
            raise ValueError(f"path.features must be a FeatureSettings or a dict, got {kind}")

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


@dataclass(frozen=True)
class StopSettings:
    """Which iteration's read-out to keep (:func:`ia_stages.readout.stopping.stop_iteration`).

    rule : 'stability' | 'partition' | 'contraction' | 'none'
    n_seeds : 'stability': Leiden seeds compared (>= 2)
    min_ari : 'partition': agreement that ends the iterations (0..1)
    """

    rule: str = "stability"
    n_seeds: int = 5
    min_ari: float = 0.9

    def check(self) -> None:
        """Raise ``ValueError`` naming the field when a setting is out of range."""
        check_choice(self.rule, "stop.rule", STOP_RULES)
        check_number(self.n_seeds, "stop.n_seeds", integer=True, low=2)
        check_number(self.min_ari, "stop.min_ari", low=0.0, high=1.0)


@dataclass(frozen=True)
class IASettings:
    """Every setting of one Invariant Attention run (:func:`ia_stages.ia.loop.run_ia`).

    beta : RBF bandwidth of kappa^max on unit-norm images (> 0)
    iterations : most IA iterations (>= 0); the stopping rule may keep an earlier one
    init : 'kmax' starts each invariant mean at the kappa^max alignments; 'identity' as in
        the paper
    normalization : 'unit' | 'none'
    sigma : Gaussian smoothing (px) inside kappa^max (>= 0), or 'auto': chosen from the input
        images' noise level by ``noise`` (:func:`with_sigma`; clean images get
        ``noise.min_sigma``)
    noise : :class:`~ia_stages.core.noise.NoiseSettings` of ``sigma='auto'``
    attention : :class:`~ia_stages.ia.weights.AttentionSettings` (its ``k`` None follows n)
    readout : :class:`ReadoutSettings`
    stop : :class:`StopSettings`
    mean : :class:`~ia_stages.ia.invariant_mean.MeanSettings` of the columns' means and of
        the class averages (these ignore ``max_images``: their members count equally, the
        ``average_members`` nearest the medoid)
    search : :class:`~ia_stages.kmax.SearchSettings` of kappa^max
    group : the transformations factored out: :class:`~ia_stages.core.groups.SE2` (default)
        or a similarity / affine group (:func:`~ia_stages.core.groups.make_group`), used by
        kappa^max, every invariant mean and the class averages
    path : :class:`PathSettings`: every pair (dense) or the kNN path, by default chosen
        from n ('auto': the kNN path above 5,000 samples)
    """

    beta: float = 20.0
    iterations: int = 1
    init: str = "kmax"
    normalization: str = "unit"
    sigma: float | str = 1.0
    noise: NoiseSettings = field(default_factory=NoiseSettings)
    attention: AttentionSettings = field(
        default_factory=lambda: AttentionSettings("knn", None, "kth", "mutual", 0)
    )
    readout: ReadoutSettings = field(default_factory=lambda: ReadoutSettings(threshold=0.6))
    stop: StopSettings = field(default_factory=StopSettings)
    mean: MeanSettings = field(default_factory=MeanSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    group: SE2 | AffineFamily = field(default_factory=SE2)
    path: PathSettings = field(default_factory=PathSettings)

    def check(self, n: int | None = None) -> None:
        """Raise ``ValueError`` naming the key when a setting is out of range."""
        check_number(self.beta, "beta", low=0.0, low_open=True)
        check_number(self.iterations, "iterations", integer=True, low=0)
        check_choice(self.init, "init", INITS)
        check_choice(self.normalization, "normalization", NORMALIZATIONS)
        if isinstance(self.sigma, str) and self.sigma != "auto":
            raise ValueError(f"sigma must be a number >= 0 or 'auto', got {self.sigma!r}")
        if self.sigma != "auto":
            check_number(self.sigma, "sigma", low=0.0)
        for name, cls in (
            ("noise", NoiseSettings),
            ("attention", AttentionSettings),
            ("readout", ReadoutSettings),
            ("stop", StopSettings),
            ("mean", MeanSettings),
            ("search", SearchSettings),
            ("path", PathSettings),
        ):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ValueError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
        self.noise.check()
        a = self.attention
        if a.kind == "knn" and a.k is None:
            a = replace(a, k=2)  # the sized count is checked once n is known
        a.check(n)
        self.readout.check(n)
        self.stop.check()
        check_choice(self.mean.preconditioner, "mean.preconditioner", PRECONDITIONERS)
        check_number(self.mean.steps, "mean.steps", integer=True, low=0)
        if self.mean.average_members is not None:
            check_number(self.mean.average_members, "mean.average_members", integer=True, low=1)
        self.path.check()
        if n is not None and self.path.uses_knn(n):
            self._check_knn_path(n)

    def _check_knn_path(self, n: int) -> None:
        """What the kNN path needs, one line naming the key otherwise."""
        why = (
            "'candidates'"
            if self.path.mode == "candidates"
            else f"'auto' with n={n} > path.dense_max={self.path.dense_max}"
        )
        head = f"path.mode {why}: the kNN path"
        if self.attention.kind != "knn":
            raise ValueError(
                f"{head} needs attention.kind 'knn' (dense W weighs all pairs); set path.mode "
                "'dense' to compute every pair"
            )
        if self.readout.kind != "graph" or self.readout.community == "hdbscan":
            raise ValueError(
                f"{head} needs the graph read-out (readout.kind 'graph', community not "
                "'hdbscan'); set path.mode 'dense' to compute every pair"
            )
        width = self.knn_width(n)
        if not 2 <= width < n:
            raise ValueError(f"path.k must be in 2..n-1 (n={n}), got {width}")

    def knn_width(self, n: int | None = None) -> int:
        """The kNN path's list width: ``path.k``, or the larger of the attention's k and the
        read-out graph's k + 1; a count left at None is sized to ``n`` without K
        (:func:`sized_neighbours`: the stored lists do not depend on K)."""
        if self.path.k is not None:
            return int(self.path.k)
        k_att, k_read = self._neighbour_counts(n)
        return max(k_att, k_read + 1)

    def _neighbour_counts(self, n: int | None) -> tuple[int, int]:
        """The attention's and the read-out graph's k; a count left at None is sized to ``n``
        without K (:func:`sized_neighbours`)."""
        k_att, k_read = self.attention.k, self.readout.k
        if k_att is None or k_read is None:
            if n is None:
                raise ValueError("knn_width: neighbour counts not sized; give n")
            sized_att, sized_read = sized_neighbours(n)
            k_att = sized_att if k_att is None else k_att
            k_read = sized_read if k_read is None else k_read
        return int(k_att), int(k_read)

    def knn_features(self, n: int) -> FeatureSettings:
        """The kNN path's :class:`~ia_stages.kmax.features.FeatureSettings` for ``n``
        samples: ``path.features`` with ``exact_width`` None set to the attention's k (sized
        to n): the places the means weigh are refined exactly, the read-out graph's further
        places keep the screen's optimum (its 0/1 links need who is near, not the exact d2).

        Example
        -------
        >>> ia_settings().knn_features(100_000).exact_width
        10
        """
        f = self.path.features
        if f.exact_width is not None:
            return f
        return replace(f, exact_width=self._neighbour_counts(n)[0])

    def later_candidates(self, previous: KnnResult | None) -> np.ndarray | None:
        """The candidate pairs of an iteration after the input's: the ``previous`` lists'
        neighbours (each sample's own place left out) with ``path.later_candidates`` 'lists',
        else None (found in invariant-feature space).

        Example
        -------
        >>> knn = KnnResult.itself_only(3, 2, 3)
        >>> knn.indices[:, 1] = [2, 2, 0]
        >>> ia_settings().later_candidates(knn).tolist()
        [[2], [2], [0]]
        """
        if previous is None or self.path.later_candidates != "lists":
            return None
        return listed_candidates(previous)

    def knn_search(self) -> SearchSettings:
        """The per-pair search of the kNN path's candidate pairs: ``search`` (``path.search``
        'ia', the default) or the exact preset ('exact')."""
        return EXACT_SEARCH if self.path.search == "exact" else self.search

    def knn_sample_search(self) -> SearchSettings:
        """The per-pair search of the kNN path's sample: the first pass's screen
        (``path.sample_search`` 'screen') or :meth:`knn_search` ('exact').

        Example
        -------
        >>> ia_settings().knn_sample_search() == SearchSettings(memory_mb=EXACT_SEARCH.memory_mb)
        True
        """
        if self.path.sample_search == "exact":
            return self.knn_search()
        return first_pass_search(self.knn_search())

    def sample_sqdist(self, V: Any, pick: np.ndarray) -> np.ndarray:
        """``(s, s)`` kappa^max squared distances among the images ``V[pick]`` by
        :meth:`knn_sample_search` (the kNN path's sample,
        :class:`~ia_stages.readout.graph.KnnDistances`)."""
        return sample_sqdist(
            V, pick, self.beta, self.normalization, self.group, self.knn_sample_search(),
            self.sigma,
        )  # fmt: skip

    def kmax(self, V: Any, U: Any = None, progress: Any = None) -> KappaMaxResult:
        """kappa^max of ``V`` with itself (``U`` None) or of ``U`` against ``V`` under these
        settings (kernel, smoothing, search)."""
        args = (V,) if U is None else (U, V)
        return kappa_max(
            *args,
            beta=self.beta,
            normalization=self.normalization,
            group=self.group,
            settings=self.search,
            sigma=self.sigma,
            progress=progress,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-able; the pipeline's config hash and store attrs)."""
        d = asdict(replace(self, group=SE2()))
        d["mean"]["sigmas"] = list(d["mean"]["sigmas"])
        d["readout"]["resolutions"] = list(d["readout"]["resolutions"])
        d["group"] = self.group.settings()
        return d

    def knn_distances(
        self, V: Any, seed: int = 0, progress: Any = None, previous: KnnResult | None = None
    ) -> KnnDistances:
        """kappa^max of ``V`` by the kNN path: every sample's :meth:`knn_width` nearest
        (:func:`ia_stages.kmax.kappa_max` with ``mode='candidates'``) and the exact all-pairs
        kappa^max among ``path.sample_size(n)`` samples drawn with ``seed``
        (:func:`~ia_stages.readout.graph.sample_indices`); never an n x n array.

        Parameters
        ----------
        V : ``(n, H, W)`` features (numpy or cupy); the neighbour counts must be sized
        seed : int, default 0
            Seed of the sample.
        progress : called with the number of candidate pairs refined
        previous : the previous iteration's lists (None for the input images): with
            ``path.later_candidates`` 'lists' their indices are the candidates
            (:meth:`later_candidates`)

        Returns
        -------
        KnnDistances

        Example
        -------
        >>> s = sized(ia_settings(path={"mode": "candidates"}), len(V))  # doctest: +SKIP
        >>> kd = s.knn_distances(V)  # doctest: +SKIP
        """
        n = int(V.shape[0])
        knn = kappa_max(
            V,
            k=self.knn_width(n),
            mode="candidates",
            beta=self.beta,
            normalization=self.normalization,
            group=self.group,
            settings=self.knn_search(),
            sigma=self.sigma,
            features=self.knn_features(n),
            progress=progress,
            candidates=self.later_candidates(previous),
        )
        pick = sample_indices(n, self.path.sample_size(n), seed)
        return KnnDistances(knn, pick, self.sample_sqdist(V, pick))


# The presets: the whole IA, named. 'images' (the default) is what works on real images: each
# column attends to its mutual nearest under kappa^max and takes their weighted mean at their
# kappa^max alignments (no gradient steps); clusters are read off the kNN kappa^max graph of
# one iteration (a second one lost ACC on most measured sets: README "Sized to the data");
# with more iterations the stability rule keeps one. 'paper' is the paper's dense IA with the
# average-linkage read-out.
PRESETS: dict[str, IASettings] = {
    "images": IASettings(readout=ReadoutSettings(threshold=0.6)),
    "paper": IASettings(
        beta=30.0,
        iterations=2,
        sigma=2.0,
        attention=AttentionSettings(kind="dense", k=None),
        readout=ReadoutSettings(kind="linkage", threshold=0.3),
        stop=StopSettings(rule="none"),
        path=PathSettings(mode="dense"),
    ),
}
DEFAULT_PRESET = "images"
_PARTS = {
    "attention": AttentionSettings,
    "readout": ReadoutSettings,
    "stop": StopSettings,
    "mean": MeanSettings,
    "search": SearchSettings,
    "noise": NoiseSettings,
    "path": PathSettings,
}


def _part(name: str, base: Any, given: Any) -> Any:
    """``base`` with the keys of ``given`` (a dict or an instance of its class) laid over it."""
    cls = _PARTS[name]
    if given is None:
        return base
    if isinstance(given, cls):
        return given
    if not isinstance(given, dict):
        raise ValueError(f"{name} must be a dict or a {cls.__name__}, got {type(given).__name__}")
    known = [f.name for f in fields(cls)]
    unknown = [k for k in given if k not in known]
    if unknown:
        raise ValueError(
            f"{name} has no key {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
        )
    values = dict(given)
    if name == "mean" and "sigmas" in values:
        values["sigmas"] = tuple(values["sigmas"])
    if name == "path" and isinstance(values.get("features"), dict):
        try:
            values["features"] = FeatureSettings(**values["features"])
        except TypeError as err:
            raise ValueError(f"path.features {err}") from None
        except ValueError as err:
            raise ValueError(f"path.{err}") from None
    if name == "readout" and isinstance(values.get("resolutions"), list):
        values["resolutions"] = tuple(values["resolutions"])
    return replace(base, **values)


def ia_settings(preset: str | None = None, **given: Any) -> IASettings:
    """The settings of one run: the preset, then every given value that is not None.

    Parameters
    ----------
    preset : str or None, default None
        Name in :data:`PRESETS`; None is :data:`DEFAULT_PRESET` ('images').
    **given
        Top-level keys of :class:`IASettings`; the parts (``attention``, ``readout``, ``stop``,
        ``mean``, ``search``) as dicts of their keys (laid over the preset's) or as instances.

    Returns
    -------
    IASettings
        Checked (one-line ``ValueError`` naming the key); neighbour counts may still be None
        (:func:`sized` fills them once n is known).

    Example
    -------
    >>> ia_settings("paper", iterations=1, readout={"threshold": 0.5}).readout.threshold
    0.5
    """
    name = DEFAULT_PRESET if preset is None else preset
    check_choice(name, "preset", tuple(PRESETS))
    s = PRESETS[name]
    top = {f.name for f in fields(IASettings)}
    unknown = [k for k in given if k not in top]
    if unknown:
        raise ValueError(f"IA settings have no key {', '.join(map(repr, unknown))}")
    values = {}
    for key, value in given.items():
        if key in _PARTS:
            values[key] = _part(key, getattr(s, key), value)
        elif value is not None:
            values[key] = value
    s = replace(s, **values)
    s.check()
    return s


def sized_neighbours(n: int, n_clusters: int | None = None) -> tuple[int, int]:
    """The attention and read-out neighbour counts for ``n`` samples (and K when given).

    Attention: round(n / 12) clipped to 2..10 (the column itself included); read-out:
    round(n / 10) clipped to 1..20 (itself excluded): a read-out graph wider than a class
    joins classes, one narrower than about a third of a class splits them, so the read-out
    count stays near the size of a class of a tenth of the data. With K the read-out count
    is also capped by the mean class size less one, n / K - 1; the attention count follows n
    only, so the features (and the pipeline's stored iterations) do not depend on K. Both
    stay below n.
    ``bench/sizes.py`` measures the rule (README: "Sized to the data").

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


def sized(settings: IASettings, n: int, n_clusters: int | None = None) -> IASettings:
    """``settings`` with every neighbour count left at None set by :func:`sized_neighbours`,
    checked against ``n`` (a count given explicitly wins and must be < n)."""
    k_att, k_read = sized_neighbours(n, n_clusters)
    s = settings
    if s.attention.k is None:
        s = replace(s, attention=replace(s.attention, k=k_att))
    if s.readout.k is None:
        s = replace(s, readout=replace(s.readout, k=k_read))
    s.check(n)
    return s


def with_sigma(settings: IASettings, X: Any) -> IASettings:
    """``settings`` with ``sigma='auto'`` replaced by the sigma its ``noise`` settings choose
    for the images ``X`` (:func:`ia_stages.core.noise.choose_sigma`); a number is kept.

    Example
    -------
    >>> with_sigma(ia_settings(), clean_images).sigma  # doctest: +SKIP
    1.0
    """
    if settings.sigma != "auto":
        return settings
    return replace(settings, sigma=settings.noise.sigma(X))


def path_settings(dataset: dict) -> PathSettings:
    """The :class:`PathSettings` of one dataset entry of the pipeline's validated config (its
    ``kmax`` block; absent: the defaults).

    Example
    -------
    >>> path_settings({"kmax": {"mode": "candidates"}}).mode
    'candidates'
    """
    block = dataset.get("kmax") or {}
    given = {f.name: block[f.name] for f in fields(PathSettings) if f.name in block}
    return _part("path", PathSettings(), given)


def _run_path(dataset: dict) -> PathSettings:
    """The path a validated dataset entry runs ('auto' is resolved by the config check): a
    dense dataset's results, hence its settings hash, do not depend on the kNN path's keys."""
    path = path_settings(dataset)
    return path if path.mode == "candidates" else PathSettings(mode="dense")


def ia_iterations(cfg: dict, dataset: str) -> int:
    """IA's iterations for one dataset of the pipeline's validated config: the dataset's own
    ``iterations`` when it sets one, else ``ia.iterations``.

    Example
    -------
    >>> ia_iterations({"ia": {"iterations": 1}, "datasets": {"a": {}, "b": {"iterations": 2}}}, "b")
    2
    """
    own = cfg["datasets"][dataset].get("iterations")
    return int(cfg["ia"]["iterations"] if own is None else own)


def ia_config(cfg: dict, dataset: str) -> dict:
    """The keys of :class:`IASettings` for one dataset of the pipeline's validated config
    (every value that changes IA's result: the stages put it in their settings hash).

    A dataset with ``preset:`` takes the preset's read-out and stopping rule instead of the
    global ``readout``/``ia.stop`` sections (its beta, kernel_sigma, normalization, attention
    and readout_threshold were set from the preset by the config check, where the block does
    not set them).

    Example
    -------
    >>> s = ia_settings(**ia_config(cfg, "mnist_rot"))  # doctest: +SKIP
    """
    ds = cfg["datasets"][dataset]
    r, g = cfg["readout"], cfg["readout"]["graph"]
    threshold = r["threshold"] if ds.get("readout_threshold") is None else ds["readout_threshold"]
    attention = dict(ds.get("attention") or {"kind": "dense"})
    if ds.get("preset") is not None:  # the preset's read-out and stopping rule, not the globals'
        p = ia_settings(ds["preset"])
        readout = {**asdict(p.readout), "threshold": threshold}
        readout["resolutions"] = list(readout["resolutions"])
        stop = asdict(p.stop)
    else:
        readout = {
            "kind": "graph" if r["ia"] == "graph" else "linkage",
            "k": g["k_ia"],
            "threshold": threshold,
            "linkage": r["linkage"],
            "with_k": g["with_k"],
            "restarts": g["restarts"],
            "restart_bracket": g["restart_bracket"],
            "restart_tries": g["restart_tries"],
            "with_k_engine": g["with_k_engine"],
            "community": g["community"],
            "resolution": g["resolution"],
            "resolutions": g["resolutions"],
            "min_cluster_size": g["min_cluster_size"],
            "merge": g["merge"],
        }
        stop = dict(cfg["ia"]["stop"])
    return {
        "beta": ds["beta"],
        "iterations": ia_iterations(cfg, dataset),
        "init": cfg["ia"]["init"],
        "normalization": ds["normalization"],
        "sigma": ds["kernel_sigma"],
        "attention": attention,
        "readout": readout,
        "stop": stop,
        "mean": dict(cfg["ia"]["mean"]),
        "search": dict(cfg["ia"]["search"]),
        "path": asdict(_run_path(ds)),
    }
