"""The one Invariant Attention: kappa^max -> attention step -> read-out -> stopping rule ->
class averages.

:func:`run_ia` runs it on images. The pipeline runs the same pieces stage by stage (kappa^max
and the attention step sharded, then :func:`read_iterations` and
:func:`~ia_stages.ia.class_averages.class_averages` on the stored kappa^max), so the estimator,
the ``means``/``classes``/``metrics`` stages, the benchmark's ``ia``/``ia_k`` methods and
``ia-stages cluster`` all read clusters the same way: :func:`read_out` is the only IA read-out.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ia_stages.core.backend import to_numpy
from ia_stages.ia.attention import InvariantAttentionStep, attention_step
from ia_stages.ia.class_averages import ClassAverages, cluster_averages
from ia_stages.ia.settings import IASettings, ReadoutSettings, StopSettings, sized, with_sigma
from ia_stages.kmax import KappaMaxResult
from ia_stages.readout.graph import (
    KnnDistances,
    graph_partition,
    partitions_with_k,
    prefetch_sweeps,
    spectral_affinity,
)
from ia_stages.readout.linkage import cluster_by_distance
from ia_stages.readout.stopping import stop_iteration


def read_out(
    sqdist: Any,
    readout: ReadoutSettings,
    n_clusters: int | None = None,
    seed: int = 0,
    value: Any = None,
) -> np.ndarray:
    """Clusters of one iteration's kappa^max: IA's only read-out.

    Parameters
    ----------
    sqdist : ``(n, n)`` kappa^max squared distances of unit-norm features, or a
        :class:`~ia_stages.readout.graph.KnnDistances` (the pipeline's kNN path; graph
        read-outs only)
    readout : :class:`~ia_stages.ia.settings.ReadoutSettings` with ``k`` set
    n_clusters : K, or None (the read-out finds the number)
    seed : seed of the randomised read-outs (Leiden, spectral)
    value : ``(n, n)`` kappa^max affinity; read by ``kind='spectral'`` only

    Returns
    -------
    labels : ``(n,)`` int64, 0..clusters-1

    Example
    -------
    >>> labels = read_out(km.sqdist, ReadoutSettings(k=5), None, seed=0)  # doctest: +SKIP
    """
    if isinstance(sqdist, KnnDistances):
        if readout.kind != "graph":
            raise ValueError(
                f"readout.kind: {readout.kind!r} needs the dense kappa^max; the kNN path "
                "(kmax.mode 'candidates') reads out with 'graph'"
            )
        return graph_partition(sqdist, readout.graph(), n_clusters, seed)
    sq = to_numpy(sqdist)
    if readout.kind == "spectral":
        if n_clusters is None:
            raise ValueError("readout.kind 'spectral' needs n_clusters")
        if value is None:
            raise ValueError("readout.kind 'spectral' needs the kappa^max affinity")
        return spectral_affinity(to_numpy(value), n_clusters, seed)
    if readout.kind == "graph":
        return graph_partition(sq, readout.graph(), n_clusters, seed)
    if n_clusters is not None:
        return cluster_by_distance(sq, 0.0, readout.linkage, n_clusters=n_clusters)
    return cluster_by_distance(sq, readout.threshold, readout.linkage)


def choose_iteration(
    partitions: list[np.ndarray], sqdists: list[Any], settings: IASettings
) -> tuple[int, str]:
    """The iteration the stopping rule keeps among those read out (input first), and why."""
    stop: StopSettings = settings.stop
    rule = {"rule": stop.rule, "n_seeds": stop.n_seeds, "min_ari": stop.min_ari}
    sqdists = [s if isinstance(s, KnnDistances) else to_numpy(s) for s in sqdists]
    return stop_iteration(partitions, sqdists, rule, settings.readout.graph())


def settled(partitions: list[np.ndarray], sqdists: list[Any], settings: IASettings) -> bool:
    """True when more iterations cannot change the rule's choice: it chose an earlier
    iteration than the last read out, or ('partition') the last read-out agrees with the one
    before."""
    if len(partitions) < 2 or settings.stop.rule == "none":
        return False
    chosen, _ = choose_iteration(partitions, sqdists, settings)
    if chosen < len(partitions) - 1:
        return True
    if settings.stop.rule == "partition":
        from sklearn.metrics import adjusted_rand_score

        return bool(adjusted_rand_score(partitions[-2], partitions[-1]) >= settings.stop.min_ari)
    return False


def read_iterations(
    sqdists: list[Any],
    settings: IASettings,
    n_clusters: int | None = None,
    seed: int = 0,
    values: list[Any] | None = None,
    progress: Any = None,
) -> tuple[list[np.ndarray], int, str]:
    """Read out every iteration's kappa^max (input first) and choose one by the stopping rule.

    Parameters
    ----------
    sqdists : T + 1 squared-distance matrices ``(n, n)`` or
        :class:`~ia_stages.readout.graph.KnnDistances` (the kNN path)
    settings : sized :class:`~ia_stages.ia.settings.IASettings`
    n_clusters, seed : as :func:`read_out`
    values : the affinities (``kind='spectral'`` only)
    progress : None, or called with 1 after each iteration's read-out

    Returns
    -------
    partitions : T + 1 label arrays ``(n,)``
    chosen : the iteration kept
    reason : one line saying why
    """
    values = values if values is not None else [None] * len(sqdists)
    parts = None
    if settings.readout.kind == "graph":  # the iterations' Leiden runs in worker processes
        prefetch_sweeps(sqdists, settings.readout.graph(), n_clusters, seed)
        if n_clusters is not None:
            parts = partitions_with_k(sqdists, settings.readout.graph(), n_clusters, seed)
            if parts is not None and progress is not None:
                progress(len(parts))
    if parts is None:
        parts = []
        for sq, v in zip(sqdists, values, strict=True):
            parts.append(read_out(sq, settings.readout, n_clusters, seed, v))
            if progress is not None:
                progress(1)
    chosen, reason = choose_iteration(parts, sqdists, settings)
    return parts, chosen, reason


def distances(kmax: KappaMaxResult | KnnDistances) -> Any:
    """What the read-outs and stopping rules take of one iteration's kappa^max: the
    ``(n, n)`` squared distances, or the kNN path's :class:`KnnDistances` as they are."""
    return kmax if isinstance(kmax, KnnDistances) else kmax.sqdist


def value(kmax: KappaMaxResult | KnnDistances) -> Any:
    """The ``(n, n)`` kappa^max affinity (the spectral read-out's), None on the kNN path."""
    return None if isinstance(kmax, KnnDistances) else kmax.value


@dataclass
class IAResult:
    """Output of :func:`run_ia` (n samples, K clusters, T iterations computed).

    labels : ``(n,)`` the kept iteration's read-out (joined by ``readout.merge`` without K)
    n_iter : the iteration kept (0 = the input)
    stop_reason : one line saying why
    partitions : ``(T + 1, n)`` every iteration's read-out, input first
    steps : the :class:`~ia_stages.ia.attention.InvariantAttentionStep` of every iteration
        computed
    kmax : kappa^max of every iteration's features, input first: ``KappaMaxResult``, or on
        the kNN path (``settings.path``) :class:`~ia_stages.readout.graph.KnnDistances`
    averages : :class:`~ia_stages.ia.class_averages.ClassAverages` of the input images
    settings : the sized settings used
    seed : the read-outs' seed
    seconds : wall seconds spent in every kappa^max ('kmax'), the read-outs and the stopping
        rule ('readout'), the attention steps ('means') and the class averages ('averages')
    """

    labels: np.ndarray
    n_iter: int
    stop_reason: str
    partitions: np.ndarray
    steps: list[InvariantAttentionStep]
    kmax: list[KappaMaxResult | KnnDistances]
    averages: ClassAverages
    settings: IASettings
    seed: int
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def features(self) -> Any:
        """``(n, H, W)`` features of the kept iteration."""
        return None if self.n_iter == 0 else self.steps[self.n_iter - 1].features


def run_ia(
    X: Any,
    settings: IASettings,
    n_clusters: int | None = None,
    seed: int = 0,
    verbose: int = 0,
    kernel: Callable[[Any, IASettings], KappaMaxResult] | None = None,
) -> IAResult:
    """Invariant Attention clustering of images: the one algorithm behind every entry point.

    kappa^max of the features -> read-out -> (unless the stopping rule has settled) the
    attention step -> next features ..., up to ``settings.iterations``; the stopping rule keeps
    one iteration's read-out; then every cluster's class average and every image's pose.
    Each kappa^max is dense (every pair) or, where ``settings.path`` says so (by default above
    5,000 images), the kNN path (:meth:`~ia_stages.ia.settings.IASettings.knn_distances`:
    each image's nearest refined on candidates, no n x n array).

    Parameters
    ----------
    X : ``(n, H, W)`` images (numpy or cupy), n >= 2
    settings : :class:`~ia_stages.ia.settings.IASettings`; neighbour counts left at None are
        sized to n (and K) by :func:`~ia_stages.ia.settings.sized`, ``sigma='auto'`` is
        chosen from the images' noise (:func:`~ia_stages.ia.settings.with_sigma`)
    n_clusters : int or None, default None
        K, or None to let the read-out find the number of clusters.
    seed : int, default 0
        Seed of every read-out (and of the kNN path's sample).
    verbose : int, default 0
        >= 1 shows tqdm progress bars on stderr.
    kernel : None (kappa^max), or a function ``(V, settings) -> KappaMaxResult`` giving the
        similarity of the features ``V`` with themselves in its place at every iteration
        (dense path only): the benchmark's ablation with group-pooled kernels
        (:func:`ia_stages.kmax.grid.group_kernel`) changes nothing else of IA.

    Returns
    -------
    IAResult

    Example
    -------
    >>> from ia_stages.ia.settings import ia_settings  # doctest: +SKIP
    >>> res = run_ia(images, ia_settings(), n_clusters=None, seed=0)  # doctest: +SKIP
    >>> res.labels.shape == (images.shape[0],)  # doctest: +SKIP
    True
    """
    n = int(X.shape[0])
    s = with_sigma(sized(settings, n, n_clusters), X)
    T = s.iterations
    knn_path = s.path.uses_knn(n)
    pairs = n * (n - 1) // 2
    seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def clock(part: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        seconds[part] += time.perf_counter() - start

    if kernel is not None and knn_path:
        raise ValueError("kernel: a kernel in place of kappa^max needs path.mode 'dense'")

    def kmax_of(V: Any, progress: Any, previous: Any) -> KappaMaxResult | KnnDistances:
        if kernel is not None:
            return kernel(V, s)
        if knn_path:
            return s.knn_distances(V, seed, progress, None if previous is None else previous.knn)
        return s.kmax(V, progress=progress)

    def bar(total: int, desc: str, unit: str) -> tqdm:
        return tqdm(total=total, desc=desc, unit=unit, disable=not verbose, leave=False)

    with tqdm(total=2 * T + 2, disable=not verbose, desc="IA clustering", unit="stage") as top:
        steps: list[InvariantAttentionStep] = []
        kms: list[KappaMaxResult | KnnDistances] = []
        parts: list[np.ndarray] = []
        V = X
        for t in range(T + 1):
            what = "final kappa^max" if t == T else f"iteration {t + 1}: kappa^max"
            with bar(None if knn_path else pairs, what, "pair") as b, clock("kmax"):
                kms.append(kmax_of(V, b.update, kms[-1] if kms else None))
            with clock("readout"):
                parts.append(
                    read_out(distances(kms[-1]), s.readout, n_clusters, seed, value(kms[-1]))
                )
            top.update()
            if t == T or settled(parts, [distances(k) for k in kms], s):
                break
            lists = kms[-1].knn if knn_path else kms[-1]
            with bar(n, f"iteration {t + 1}: invariant means", "column") as b, clock("means"):
                step = attention_step(
                    V, lists, s.attention, s.beta, s.init, s.mean, s.group, progress=b.update
                )
            steps.append(step)
            V = step.features
            top.update()
        with clock("readout"):
            chosen, reason = choose_iteration(parts, [distances(k) for k in kms], s)
        labels = parts[chosen]
        top.total = top.n + 1
        top.refresh()
        with (
            bar(n, "class averages and poses", "image") as b,
            clock("averages"),
        ):
            labels, averages = cluster_averages(X, labels, kms[0], s, n_clusters, b.update)
        top.update()
    return IAResult(
        labels=labels,
        n_iter=int(chosen),
        stop_reason=reason,
        partitions=np.stack(parts),
        steps=steps,
        kmax=kms,
        averages=averages,
        settings=s,
        seed=int(seed),
        seconds=dict(seconds),
    )
