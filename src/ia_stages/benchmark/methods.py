"""The clustering benchmark's methods, one entry each: the only place a method is defined.

Each :class:`Method` carries its table label, whether it runs once per seed, the stores it
reads, whether K is given, its weight (heavy jobs get threads and a GPU), the settings it
reads from the config and its predict function. The workflow (job lists, ``HEAVY_METHODS``),
the config check of ``benchmark.methods``, the cluster stage and the tables read this table.

``needs`` says which stores a method's job reads besides the dataset: ``'kmax0'`` the
kappa^max of the input images (IA iteration 0), ``'kmax_all'`` the kappa^max of every IA
iteration 0..T (IA's read-outs, one partition per iteration); ``'none'``: only the dataset.

Heavy libraries are imported inside the predict functions, so importing this module (as the
Snakefile does) stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ia_stages.core.smoothing import normalize, sq_distances
from ia_stages.settings.sizing import sized
from ia_stages.settings.tree import Settings

NEEDS = ("none", "kmax0", "kmax_all")
TRANSFORMS = ("group", "se2", "none")
ATTRS = "attrs"  # key of a predict function's extra dict holding store attributes, not arrays


@dataclass
class Job:
    """What a predict function gets.

    X : ``(n, ...)`` the dataset's features as floats
    images : ``(n, H, W)`` or None (point sets)
    n_clusters : K (the configured one, else the number of classes)
    settings : the job's settings (:func:`~ia_stages.pipeline.benchmark_config.cluster_settings`)
    kmax : kappa^max results (:class:`~ia_stages.kmax.KappaMaxResult`) of the stores read:
        ``[iteration 0]`` for 'kmax0', ``[iteration 0, ..., T]`` for 'kmax_all'
    rng : the job's generator; seed : an int seed for scikit-learn
    to_backend : maps a numpy array to the configured backend (numpy or cupy)
    """

    X: np.ndarray
    images: np.ndarray | None
    n_clusters: int
    settings: dict
    kmax: list = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    seed: int = 0
    to_backend: Callable[[np.ndarray], Any] = lambda a: a


Prediction = tuple[np.ndarray, dict]


@dataclass(frozen=True)
class Method:
    """label : name in the tables; randomized : runs once per seed (else once);
    needs : 'none' | 'kmax0' | 'kmax_all'; k_given : takes the number of clusters K;
    heavy : searches kappa^max or computes invariant means (threads, a GPU);
    settings : (dataset's tree, config, dataset) -> the settings it reads besides the common
        ones;
    predict : Job -> (labels ``(n,)``, extra arrays to store: name -> (dims, values), and
        under :data:`ATTRS` a dict of store attributes);
    transforms : what it factors out (:data:`TRANSFORMS`): 'group' the dataset's group (it
        reads the kappa^max stores, made under that group), 'se2' rotations and translations
        only (its own SE(2) search or grid: a dataset with another group is a config error),
        'none' nothing (pixel-space baselines: their rows hold whatever the group)."""

    label: str
    randomized: bool
    needs: str
    k_given: bool
    heavy: bool
    settings: Callable[[Settings, dict, str], dict]
    predict: Callable[[Job], Prediction]
    transforms: str = "group"


# --- settings each method reads -------------------------------------------------------------
# Each takes the dataset's settings tree, the validated config and the dataset's name, and
# returns the job's settings: the part of the tree the method reads (under ``settings``, its
# job's tree: :func:`job_tree`) and the benchmark's own keys.

READOUT = ("readout.threshold", "readout.linkage")
KERNEL = ("beta", "normalization", "sigma")


def job_tree(job: Job) -> Settings:
    """The job's settings tree: the part its method reads, every other setting unset."""
    return Settings.from_dict(job.settings["settings"], partial=True)


def _none(tree: Settings, cfg: dict, dataset: str) -> dict:
    return {"settings": {}}


def _ka_settings(tree: Settings, cfg: dict, dataset: str) -> dict:
    ds = cfg["datasets"][dataset]
    return {
        "settings": tree.subset(("normalization", *READOUT)),
        "ka_beta": tree.beta if ds.get("ka_beta") is None else ds["ka_beta"],
        "ka_iterations": cfg["ka"]["iterations"],
    }


def _readout_settings(tree: Settings, cfg: dict, dataset: str) -> dict:
    return {"settings": tree.subset(READOUT)}


def _graph_settings(tree: Settings, cfg: dict, dataset: str) -> dict:
    # the input graph's k is the baselines' own (IA's read-out graph is readout.k)
    return {"settings": tree.subset(("readout",)), "graph_k": cfg["benchmark"]["graph_k"]}


def _ia_settings(tree: Settings, cfg: dict, dataset: str) -> dict:
    return {"settings": tree.to_dict()}


def _ti_settings(tree: Settings, cfg: dict, dataset: str) -> dict:
    return {
        "settings": tree.subset((*KERNEL, "mean", "init", "search")),
        "ti_kmeans": cfg["benchmark"]["ti_kmeans"],
    }


def _ablation_settings(pooling: str) -> Callable[[Settings, dict, str], dict]:
    def settings(tree: Settings, cfg: dict, dataset: str) -> dict:
        ablation = dict(cfg["benchmark"]["ablation"])
        if pooling == "avg":  # the average has no temperature
            ablation.pop("temperature")
        return {**_ia_settings(tree, cfg, dataset), "ablation": ablation}

    return settings


# --- predict functions ----------------------------------------------------------------------


def _kmeans(job: Job) -> Prediction:
    # lazy: a method's engine loads when it runs (see the module docstring)
    from ia_stages.benchmark.baselines import kmeans_pixels

    return kmeans_pixels(job.X, job.n_clusters, job.seed), {}


def _gmm(job: Job) -> Prediction:
    # lazy: a method's engine loads when it runs (see the module docstring)
    from ia_stages.benchmark.baselines import gmm_pixels

    return gmm_pixels(job.X, job.n_clusters, job.seed), {}


def _ka(k_given: bool) -> Callable[[Job], Prediction]:
    def predict(job: Job) -> Prediction:
        # lazy: a method's engine loads when it runs (see the module docstring)
        from ia_stages.ia.attention import kernel_attention
        from ia_stages.readout.linkage import cluster_by_distance

        s, t = job.settings, job_tree(job)
        feats = kernel_attention(job.X, s["ka_beta"], t.normalization, s["ka_iterations"])[0]
        Xn = normalize(feats[-1], t.normalization)
        sq = sq_distances(Xn, Xn)
        if k_given:
            return cluster_by_distance(sq, 0.0, t.readout.linkage, n_clusters=job.n_clusters), {}
        return cluster_by_distance(sq, t.readout.threshold, t.readout.linkage), {}

    return predict


def _spectral_kmax(job: Job) -> Prediction:
    # lazy: a method's engine loads when it runs (see the module docstring)
    from ia_stages.readout.graph import spectral_affinity

    return spectral_affinity(job.kmax[0].value, job.n_clusters, job.seed), {}


def _kmedoids_kmax(job: Job) -> Prediction:
    # lazy: a method's engine loads when it runs (see the module docstring)
    from ia_stages.benchmark.baselines import kmedoids

    res = kmedoids(np.sqrt(np.maximum(job.kmax[0].sqdist, 0.0)), job.n_clusters, job.rng)
    return res.labels, {"medoid": (("cluster",), res.medoids)}


def _graph_readout(with_k: str | None) -> Callable[[Job], Prediction]:
    """A read-out of the input images' kNN kappa^max graph (a baseline, no IA): ``with_k``
    'spectral' (spectral clustering alone) or 'leiden' (IA's read-out with K given) with K
    given, None: community detection without K."""

    def predict(job: Job) -> Prediction:
        # lazy: a method's engine loads when it runs (see the module docstring)
        from ia_stages.readout.partition import graph_partition

        readout = replace(job_tree(job).readout, k=job.settings["graph_k"])
        K = None if with_k is None else job.n_clusters
        if with_k is not None:
            readout = replace(readout, with_k=with_k, with_k_join=with_k != "spectral")
        return graph_partition(job.kmax[0].sqdist, readout, K, job.seed), {}

    return predict


def _ia(k_given: bool) -> Callable[[Job], Prediction]:
    """IA's read-out at every iteration 0..T and the iteration the stopping rule chose."""

    def predict(job: Job) -> Prediction:
        # lazy: a method's engine loads when it runs (see the module docstring)
        from ia_stages.ia.loop import read_iterations

        K = job.n_clusters if k_given else None
        n = job.kmax[0].sqdist.shape[0]
        s = sized(replace(job_tree(job), n_clusters=K), n)
        parts, chosen, reason = read_iterations(
            [km.sqdist for km in job.kmax], s, job.seed, [km.value for km in job.kmax]
        )
        labels = parts[chosen]
        if K is None and s.readout.merge > 0:  # as clusters.csv: join sub-styles
            # lazy: a method's engine loads when it runs (see the module docstring)
            from ia_stages.ia.class_averages import cluster_averages

            labels, _ = cluster_averages(np.asarray(job.images, dtype=float), labels,
                                         job.kmax[0], s)  # fmt: skip
        extra = {
            "pred_iter": (("iteration", "sample"), np.stack(parts)),
            ATTRS: {"stopped_at": int(chosen), "stop_reason": reason},
        }
        return labels, extra

    return predict


def _ti_kmeans(job: Job) -> Prediction:
    # lazy: a method's engine loads when it runs (see the module docstring)
    from ia_stages.benchmark.baselines import ti_kmeans

    s, t = job.settings, job_tree(job)
    mean = replace(t.mean, max_images=None)  # a prototype is the mean of all its members
    res = ti_kmeans(
        job.to_backend(job.images),
        job.n_clusters,
        job.rng,
        t.beta,
        t.normalization,
        t.sigma,
        t.search,
        mean,
        s["ti_kmeans"]["iterations"],
        s["ti_kmeans"]["n_init"],
        kmax0=job.kmax[0],
    )
    extra = {
        "prototype": (("cluster", "y", "x"), res.prototypes),
        "objective": (("round",), np.asarray(res.objective)),
    }
    return res.labels, extra


def _ablation(pooling: str) -> Callable[[Job], Prediction]:
    """The dataset's IA (its attention, means, read-out and stopping rule: :func:`ia_stages.ia.
    loop.run_ia`) with kappa^max replaced by the group-pooled kernel, K given."""

    def predict(job: Job) -> Prediction:
        # lazy: a method's engine loads when it runs (see the module docstring)
        from ia_stages.ia.loop import run_ia
        from ia_stages.kmax import KappaMaxResult
        from ia_stages.kmax.grid import GridSettings, group_kernel

        abl = job.settings["ablation"]
        grid = GridSettings(
            n_angles=abl["n_angles"], max_shift=abl["max_shift"], shift_step=abl["shift_step"]
        )

        def kernel(V: Any, s: Settings) -> KappaMaxResult:
            return group_kernel(
                V, beta=s.beta, pooling=pooling, temperature=abl.get("temperature", 1.0),
                normalization=s.normalization, sigma=s.sigma, grid=grid,
            )  # fmt: skip

        s = replace(job_tree(job), n_clusters=job.n_clusters)
        res = run_ia(job.to_backend(job.images), s, job.seed, kernel=kernel)
        return res.labels, {ATTRS: {"stopped_at": res.n_iter, "stop_reason": res.stop_reason}}

    return predict


METHODS: dict[str, Method] = {
    "kmeans": Method("K-means (pixels)", True, "none", True, False, _none, _kmeans, "none"),
    "gmm": Method("GMM, diagonal (pixels)", True, "none", True, False, _none, _gmm, "none"),
    "ka": Method("KA + read-out", False, "none", False, False, _ka_settings, _ka(False), "none"),
    "ka_k": Method("KA, K given", False, "none", True, False, _ka_settings, _ka(True), "none"),
    "spectral_kmax": Method(
        "spectral on kappa^max", True, "kmax0", True, False, _readout_settings, _spectral_kmax
    ),
    "kmedoids_kmax": Method(
        "k-medoids on kappa^max", True, "kmax0", True, False, _readout_settings, _kmedoids_kmax
    ),
    "spectral_knn": Method(
        "spectral on kNN kappa^max graph",
        True,
        "kmax0",
        True,
        False,
        _graph_settings,
        _graph_readout("spectral"),
    ),
    "community_knn_k": Method(
        "communities of kNN kappa^max graph, K given",
        True,
        "kmax0",
        True,
        False,
        _graph_settings,
        _graph_readout("leiden"),
    ),
    "community_knn": Method(
        "communities of kNN kappa^max graph",
        True,
        "kmax0",
        False,
        False,
        _graph_settings,
        _graph_readout(None),
    ),
    "ti_kmeans": Method(
        "TI K-means (SE(2))", True, "kmax0", True, True, _ti_settings, _ti_kmeans, "se2"
    ),
    "ia": Method("IA + read-out", True, "kmax_all", False, False, _ia_settings, _ia(False)),
    "ia_k": Method(
        "IA (kappa^max), K given", True, "kmax_all", True, False, _ia_settings, _ia(True)
    ),
    "ia_kavg_k": Method(
        "IA (kappa^avg), K given",
        False,
        "none",
        True,
        True,
        _ablation_settings("avg"),
        _ablation("avg"),
        "se2",
    ),
    "ia_ksoft_k": Method(
        "IA (kappa^soft), K given",
        False,
        "none",
        True,
        True,
        _ablation_settings("soft"),
        _ablation("soft"),
        "se2",
    ),
}

HEAVY_METHODS = tuple(m for m, meth in METHODS.items() if meth.heavy)


def method_seeds(method: str, n_seeds: int) -> list[int]:
    """Seed indices a method runs with: 0..n_seeds-1 if randomised, else just 0."""
    return list(range(n_seeds)) if METHODS[method].randomized else [0]
