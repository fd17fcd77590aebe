"""The one Invariant Attention: kappa^max -> attention step -> read-out -> stopping rule ->
class averages.

:func:`run_ia` runs it on images in one process. The pipeline runs the same pieces as jobs
(each iteration's kappa^max and attention step sharded by the same functions, then
:func:`read_iterations` and :func:`~ia_stages.ia.class_averages.cluster_averages` on the
stored kappa^max), so the estimator, the ``means``/``classes``/``metrics`` stages, the
benchmark's ``ia``/``ia_k`` methods, ``ia-stages cluster`` and
:func:`~ia_stages.ia.attention.invariant_attention` all run the same loop and read clusters
the same way: :func:`read_out` is the only IA read-out.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import adjusted_rand_score
from tqdm.auto import tqdm

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import group_of
from ia_stages.core.validation import check_images
from ia_stages.ia.attention import InvariantAttentionStep, attention_step
from ia_stages.ia.class_averages import ClassAverages, cluster_averages
from ia_stages.ia.distances import kmax, knn_distances
from ia_stages.ia.prepare import prepare, resolve_sigma
from ia_stages.kmax import KappaMaxResult
from ia_stages.kmax.neighbours import knn_from_dense
from ia_stages.readout.graph import KnnDistances, prefetch_sweeps, spectral_affinity
from ia_stages.readout.linkage import cluster_by_distance
from ia_stages.readout.model_selection import (
    ModelSelection,
    check_k,
    cluster_hierarchy,
    exact_k,
    select_k,
)
from ia_stages.readout.partition import graph_partition, partitions_with_k
from ia_stages.readout.stopping import stop_iteration
from ia_stages.settings.readout import ReadoutSettings
from ia_stages.settings.sizing import fixed_k, sized
from ia_stages.settings.tree import Settings, settings_of


def read_out(
    sqdist: Any,
    readout: ReadoutSettings,
    n_clusters: int | tuple[int, int] | None = None,
    seed: int = 0,
    value: Any = None,
) -> np.ndarray:
    """Clusters of one iteration's kappa^max: IA's only read-out.

    Parameters
    ----------
    sqdist : ``(n, n)`` kappa^max squared distances of unit-norm features, or a
        :class:`~ia_stages.readout.graph.KnnDistances` (the pipeline's kNN path; graph
        read-outs only)
    readout : :class:`~ia_stages.settings.ReadoutSettings` with ``k`` set
    n_clusters : K (honoured exactly, or refused with one line), a range ``(lo, hi)``
        searched (:func:`~ia_stages.readout.model_selection.select_k`), or None (the read-out
        finds the number)
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
                "(path.mode 'candidates') reads out with 'graph'"
            )
        return graph_partition(sqdist, readout, n_clusters, seed)
    sq = to_numpy(sqdist)
    if readout.kind == "graph":
        return graph_partition(sq, readout, n_clusters, seed)
    if isinstance(n_clusters, tuple | list):
        return select_k(sq, readout, tuple(n_clusters), seed).labels
    if n_clusters is not None:
        check_k(n_clusters, sq.shape[0], sq)
    if readout.kind == "spectral":
        if n_clusters is None:
            raise ValueError("readout.kind 'spectral' needs n_clusters")
        if value is None:
            raise ValueError("readout.kind 'spectral' needs the kappa^max affinity")
        labels = spectral_affinity(to_numpy(value), n_clusters, seed)
    elif n_clusters is not None:
        labels = cluster_by_distance(sq, 0.0, readout.linkage, n_clusters=n_clusters)
    else:
        return cluster_by_distance(sq, readout.threshold, readout.linkage)
    return exact_k(
        labels, n_clusters, knn_from_dense(sq, min(int(readout.k or 1), sq.shape[0] - 1) + 1), seed
    )


def choose_iteration(
    partitions: list[np.ndarray], sqdists: list[Any], s: Settings
) -> tuple[int, str]:
    """The iteration the stopping rule keeps among those read out (input first), and why."""
    sqdists = [d if isinstance(d, KnnDistances) else to_numpy(d) for d in sqdists]
    return stop_iteration(partitions, sqdists, s.stop, s.readout)


def settled(partitions: list[np.ndarray], sqdists: list[Any], s: Settings) -> bool:
    """True when more iterations cannot change the rule's choice: it chose an earlier
    iteration than the last read out, or ('partition') the last read-out agrees with the one
    before."""
    if len(partitions) < 2 or s.stop.rule == "none":
        return False
    chosen, _ = choose_iteration(partitions, sqdists, s)
    if chosen < len(partitions) - 1:
        return True
    if s.stop.rule == "partition":
        return bool(adjusted_rand_score(partitions[-2], partitions[-1]) >= s.stop.min_ari)
    return False


def read_iterations(
    sqdists: list[Any],
    s: Settings,
    seed: int = 0,
    values: list[Any] | None = None,
    progress: Any = None,
) -> tuple[list[np.ndarray], int, str]:
    """Read out every iteration's kappa^max (input first) and choose one by the stopping rule.

    Parameters
    ----------
    sqdists : list
        T + 1 squared-distance matrices ``(n, n)`` or
        :class:`~ia_stages.readout.graph.KnnDistances` (the kNN path).
    s : Settings
        The sized tree (K: its ``n_clusters`` when one number).
    seed : int, default 0
        Seed of the randomised read-outs.
    values : list or None, default None
        The affinities (``readout.kind='spectral'`` only).
    progress : callable or None, default None
        Called with 1 after each iteration's read-out.

    Returns
    -------
    partitions : T + 1 label arrays ``(n,)``
    chosen : the iteration kept
    reason : one line saying why

    Example
    -------
    >>> parts, chosen, why = read_iterations([km.sqdist], sized(Settings(), n))  # doctest: +SKIP
    """
    K = fixed_k(s)
    values = values if values is not None else [None] * len(sqdists)
    parts = None
    if s.readout.kind == "graph":  # the iterations' Leiden runs in worker processes
        prefetch_sweeps(sqdists, s.readout, K, seed)
        if K is not None:
            parts = partitions_with_k(sqdists, s.readout, K, seed)
            if parts is not None and progress is not None:
                progress(len(parts))
    if parts is None:
        parts = []
        for sq, v in zip(sqdists, values, strict=True):
            parts.append(read_out(sq, s.readout, s.n_clusters, seed, v))
            if progress is not None:
                progress(1)
    chosen, reason = choose_iteration(parts, sqdists, s)
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
    averages : :class:`~ia_stages.ia.class_averages.ClassAverages` of the input images (None
        when not read out)
    settings : the sized settings used
    seed : the read-outs' seed
    seconds : wall seconds spent in every kappa^max ('kmax'), the read-outs and the stopping
        rule ('readout'), the attention steps ('means') and the class averages ('averages')
    selection : :class:`~ia_stages.readout.model_selection.ModelSelection` of the kept iteration's
        read-out (:func:`model_selection`): the K chosen, runner-up, stability, candidates
    """

    labels: np.ndarray
    n_iter: int
    stop_reason: str
    partitions: np.ndarray
    steps: list[InvariantAttentionStep]
    kmax: list[KappaMaxResult | KnnDistances]
    averages: ClassAverages | None
    settings: Settings
    seed: int
    seconds: dict[str, float] = field(default_factory=dict)
    selection: ModelSelection | None = None

    @property
    def features(self) -> Any:
        """``(n, H, W)`` features of the kept iteration."""
        return None if self.n_iter == 0 else self.steps[self.n_iter - 1].features


Kernel = Callable[[Any, Settings], KappaMaxResult]


def iteration_kmax(
    V: Any, s: Settings, seed: int, previous: Any = None, progress: Any = None,
    kernel: Kernel | None = None,
) -> KappaMaxResult | KnnDistances:  # fmt: skip
    """One iteration's kappa^max of the features ``V``: every pair, or the kNN path where
    ``path`` says so (``previous``: the last iteration's, whose lists seed the candidates);
    ``kernel`` replaces kappa^max (dense path only)."""
    n = int(V.shape[0])
    if kernel is not None:
        return kernel(V, s)
    if s.path.uses_knn(n):
        return knn_distances(V, s, seed, progress, None if previous is None else previous.knn)
    return kmax(V, s, progress=progress)


def run_ia(
    X: Any,
    settings: Settings,
    seed: int = 0,
    verbose: int = 0,
    kernel: Kernel | None = None,
    read: bool = True,
) -> IAResult:
    """Invariant Attention clustering of images: the one algorithm behind every entry point.

    kappa^max of the features -> read-out -> (unless the stopping rule has settled) the
    attention step -> next features ..., up to ``settings.iterations``; the stopping rule keeps
    one iteration's read-out; then every cluster's class average and every image's pose.
    Each kappa^max is dense (every pair) or, where ``settings.path`` says so (by default above
    5,000 images), the kNN path (:func:`~ia_stages.ia.distances.knn_distances`: each image's
    nearest refined on candidates, no n x n array).

    Parameters
    ----------
    X : ``(n, H, W)`` images (numpy or cupy), n >= 2, prepared
        (:func:`~ia_stages.ia.prepare.prepare`)
    settings : Settings
        The run's tree; neighbour counts left at None are sized to n (and K) by
        :func:`~ia_stages.settings.sized`, ``sigma='auto'`` is chosen from the images' noise
        (:func:`~ia_stages.ia.prepare.resolve_sigma`); K is its ``n_clusters``.
    seed : int, default 0
        Seed of every read-out (and of the kNN path's sample).
    verbose : int, default 0
        >= 1 shows tqdm progress bars on stderr.
    kernel : callable or None, default None
        None (kappa^max), or a function ``(V, settings) -> KappaMaxResult`` giving the
        similarity of the features ``V`` with themselves in its place at every iteration
        (dense path only): the benchmark's ablation with group-pooled kernels
        (:func:`ia_stages.kmax.grid.group_kernel`) changes nothing else of IA.
    read : bool, default True
        False runs the iterations only (no read-out, stopping rule, final kappa^max or class
        averages): :func:`~ia_stages.ia.attention.invariant_attention`.

    Returns
    -------
    IAResult

    Example
    -------
    >>> res = run_ia(images, Settings(), seed=0)  # doctest: +SKIP
    >>> res.labels.shape == (images.shape[0],)  # doctest: +SKIP
    True
    """
    n = int(X.shape[0])
    s = resolve_sigma(sized(settings, n), X)
    T = s.iterations
    knn_path = s.path.uses_knn(n)
    pairs = n * (n - 1) // 2
    seconds: dict[str, float] = defaultdict(float)
    group = group_of(s)

    @contextmanager
    def clock(part: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        seconds[part] += time.perf_counter() - start

    if kernel is not None and knn_path:
        raise ValueError("kernel: a kernel in place of kappa^max needs path.mode 'dense'")

    def bar(total: int | None, desc: str, unit: str) -> tqdm:
        return tqdm(total=total, desc=desc, unit=unit, disable=not verbose, leave=False)

    with tqdm(total=2 * T + 2, disable=not verbose, desc="IA clustering", unit="stage") as top:
        steps: list[InvariantAttentionStep] = []
        kms: list[KappaMaxResult | KnnDistances] = []
        parts: list[np.ndarray] = []
        V = X
        for t in range(T + 1):
            if t == T and not read:
                break
            what = "final kappa^max" if t == T else f"iteration {t + 1}: kappa^max"
            with bar(None if knn_path else pairs, what, "pair") as b, clock("kmax"):
                kms.append(iteration_kmax(V, s, seed, kms[-1] if kms else None, b.update, kernel))
            if read:
                with clock("readout"):
                    parts.append(
                        read_out(distances(kms[-1]), s.readout, s.n_clusters, seed, value(kms[-1]))
                    )
            top.update()
            if t == T or (read and settled(parts, [distances(k) for k in kms], s)):
                break
            lists = kms[-1].knn if knn_path else kms[-1]
            with bar(n, f"iteration {t + 1}: invariant means", "column") as b, clock("means"):
                step = attention_step(
                    V, lists, s.attention, s.beta, s.init, s.mean, group, progress=b.update
                )
            steps.append(step)
            V = step.features
            top.update()
        if not read:
            return IAResult(np.zeros(n, np.int64), len(steps), "not read out",
                            np.zeros((0, n), np.int64), steps, kms, None, s, int(seed),
                            dict(seconds))  # fmt: skip
        with clock("readout"):
            chosen, reason = choose_iteration(parts, [distances(k) for k in kms], s)
        labels = parts[chosen]
        with clock("readout"):
            selection = model_selection(distances(kms[chosen]), s, seed, labels)
        top.total = top.n + 1
        top.refresh()
        with (
            bar(n, "class averages and poses", "image") as b,
            clock("averages"),
        ):
            labels, averages = cluster_averages(X, labels, kms[0], s, b.update)
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
        selection=selection,
    )


def model_selection(sqdist: Any, s: Settings, seed: int, labels: np.ndarray) -> ModelSelection:
    """The record of how the read-out ``labels`` of one iteration got its number of clusters:
    with one K given, K itself; without K or with a range, the model selection
    (:func:`~ia_stages.readout.model_selection.select_k`, repeated over
    ``readout.select_seeds`` Leiden seeds for its stability) of the graph read-out
    (community 'silhouette') or of a range;
    otherwise (a fixed resolution, a threshold) the count found, with no alternative.

    Example
    -------
    >>> ms = model_selection(km.sqdist, sized(Settings(), n), 0, labels)  # doctest: +SKIP
    >>> ms.summary()  # doctest: +SKIP
    '3 clusters (stable in 5 of 5 seeds; next best 4)'
    """
    K = s.n_clusters
    m = int(np.asarray(labels).max()) + 1
    selects = isinstance(K, tuple) or (
        K is None and s.readout.kind == "graph" and s.readout.community == "silhouette"
    )
    if not selects:
        crit = "given" if K is not None else f"{s.readout.kind} {s.readout.community}"
        if isinstance(sqdist, KnnDistances):
            merges = cluster_hierarchy(sqdist.sample_sqdist, labels, sqdist.sample)
        else:
            merges = cluster_hierarchy(to_numpy(sqdist), labels)
        return ModelSelection(m, crit, {}, None, 1, 1, None, {m: np.asarray(labels)}, merges)
    if isinstance(sqdist, KnnDistances):
        sq = sqdist
    else:
        sq = to_numpy(sqdist)
    return select_k(sq, s.readout, K, seed, trials=int(s.readout.select_seeds))


def invariant_attention(
    V: Any,
    config: Settings | dict | None = None,
    seed: int = 0,
    verbose: int = 0,
    **settings: Any,
) -> list[InvariantAttentionStep]:
    """Run Invariant Attention's iterations on the images ``V`` ``(n, H, W)``: the loop of
    :func:`~ia_stages.ia.loop.run_ia` (and of the estimator), with the same defaults, without its
    read-out.

    Parameters
    ----------
    V : array ``(n, H, W)``
        Images (numpy or cupy), n >= 2.
    config : Settings, dict or None, default None
        The settings tree, or a dict of its keys (``preset`` among them), as the estimator's
        ``config``.
    seed : int, default 0
        Seed of the kNN path's sample (the dense path has no randomness).
    verbose : int, default 0
        >= 1 shows progress bars on stderr.
    **settings
        Top-level settings by name laid over ``config`` (``beta``, ``sigma``, ``iterations``,
        ``group``, ``mirror``, ...).

    Returns
    -------
    list of InvariantAttentionStep
        One per iteration; ``steps[-1].features`` are the final features.

    Examples
    --------
    >>> import numpy as np
    >>> V = np.zeros((4, 12, 12)); V[:, 4:8, 5:7] = 1.0
    >>> steps = invariant_attention(V, iterations=1, attention={"k": 2})
    >>> steps[-1].features.shape
    (4, 12, 12)
    """
    s = settings_of(None, config, **settings)
    X = check_images(V, "V", min_samples=2)
    X, s = prepare(X, s, "V")
    return run_ia(X, s, seed, verbose, read=False).steps
