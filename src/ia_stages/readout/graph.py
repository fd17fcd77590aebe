"""Graph read-outs: clusters of the graph that links every sample to its kappa^max nearest.

Spectral clustering of the kNN graph when the number of clusters K is given, Leiden community
detection (modularity) when it is not, at a fixed resolution or at the resolution whose
partition has the highest silhouette on the kappa^max distances; HDBSCAN on the dense distances
is kept for comparison.
The graph comes from a :class:`ia_stages.kmax.KnnResult`, so n x n matrices are not needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ia_stages.core.backend import to_numpy
from ia_stages.core.seeds import stage_seed
from ia_stages.kmax import kappa_max
from ia_stages.kmax.neighbours import KnnResult, knn_from_dense
from ia_stages.settings.readout import LEIDEN_ITERATIONS, ReadoutSettings
from ia_stages.settings.spec import SettingError
from ia_stages.settings.tree import check_setting

GRAPH_READOUTS = ("spectral", "leiden", "hdbscan", "average")


@dataclass
class KnnDistances:
    """What the read-outs know of one iteration's kappa^max when no n x n matrix exists
    (the pipeline's kNN path): every sample's nearest and the distances among a sample.

    knn : the kNN store's lists (:class:`~ia_stages.kmax.KnnResult`, itself first), at least
        as wide as the read-out graph's k + 1
    sample : ``(s,)`` sorted sample indices, drawn at random (seeded)
    sample_sqdist : ``(s, s)`` the kappa^max squared distances among them (the path's
        ``sample_search``)

    The graph read-outs use ``knn``; what needs every pair's distance (the silhouette that
    chooses Leiden's resolution, the contraction rule, the linkage stability) uses the sample
    instead: an estimate of the same quantity from s of the n samples, equal to it when s = n.

    Example
    -------
    >>> kd = KnnDistances(knn, np.arange(n), sq)  # doctest: +SKIP
    """

    knn: KnnResult
    sample: np.ndarray
    sample_sqdist: np.ndarray

    @property
    def n(self) -> int:
        """Number of samples."""
        return self.knn.n

    @classmethod
    def dense(cls, sqdist: Any) -> KnnDistances:
        """All n samples' distances as a KnnDistances whose sample is everyone."""
        sq = np.asarray(sqdist, dtype=float)
        n = sq.shape[0]
        return cls(knn_from_dense(sq, n), np.arange(n), sq)

    def lists(self, width: int) -> KnnResult:
        """The ``width`` nearest of every sample (itself first)."""
        if width > self.knn.k:
            raise SettingError(
                f"readout.k: the read-out graph needs {width} neighbours per sample, "
                f"the kNN lists hold {self.knn.k} (raise path.k)"
            )
        return self.knn.head(width)


def readout_lists(sqdist: Any, k: int) -> KnnResult:
    """The read-out graph's lists: every sample and its ``k`` nearest others, from an
    ``(n, n)`` squared-distance matrix or from a :class:`KnnDistances`' stored lists.

    Example
    -------
    >>> readout_lists(np.kron(np.eye(2), np.ones((3, 3))) * -1 + 1, 2).indices.shape
    (6, 3)
    """
    if isinstance(sqdist, KnnDistances):
        return sqdist.lists(int(k) + 1)
    return knn_from_dense(np.asarray(sqdist, dtype=float), int(k) + 1)


def sample_indices(n: int, size: int, seed: int) -> np.ndarray:
    """The sorted indices of a seeded random sample of ``min(size, n)`` of ``n`` samples: the
    sample of :class:`KnnDistances` (the estimator's and the pipeline's, from the same seed).

    Example
    -------
    >>> sample_indices(5, 10, 0)
    array([0, 1, 2, 3, 4])
    """
    rng = np.random.default_rng(stage_seed(int(seed), "knn-sample"))
    return np.sort(rng.permutation(n)[: min(int(size), n)])


def sample_sqdist(
    V: Any,
    pick: np.ndarray,
    beta: float,
    normalization: str,
    group: Any,
    search: Any,
    sigma: float,
) -> np.ndarray:
    """``(s, s)`` kappa^max squared distances among the images ``V[pick]`` by ``search``: the
    sample of :class:`KnnDistances` (the estimator's :func:`ia_stages.ia.distances.
    sample_sqdist` and the pipeline's ``knn-features`` stage both call this).

    Parameters
    ----------
    V : ``(n, H, W)`` images (numpy or cupy)
    pick : ``(s,)`` sample indices (:func:`sample_indices`)
    beta, normalization, group, sigma : as :func:`ia_stages.kmax.kappa_max`
    search : the per-pair :class:`~ia_stages.kmax.SearchSettings`

    Example
    -------
    >>> sq = sample_sqdist(V, sample_indices(len(V), 300, 0), 20.0, "unit", SE2(),
    ...                    EXACT_SEARCH, 1.0)  # doctest: +SKIP
    """
    sq = kappa_max(
        V[pick], beta=beta, normalization=normalization, group=group, settings=search,
        sigma=sigma,
    ).sqdist  # fmt: skip
    return np.asarray(to_numpy(sq), dtype=float)


def spectral_affinity(affinity: np.ndarray, n_clusters: int, seed: int) -> np.ndarray:
    """Spectral clustering of a precomputed affinity ``(n, n)`` (e.g. kappa^max); labels."""
    from sklearn.cluster import SpectralClustering

    A = np.asarray(affinity, dtype=float)
    A = 0.5 * (A + A.T)
    sc = SpectralClustering(n_clusters=n_clusters, affinity="precomputed", random_state=seed)
    return sc.fit_predict(A).astype(np.int64)


def knn_graph(knn: KnnResult) -> Any:
    """Symmetric 0/1 adjacency (scipy CSR ``(n, n)``) linking j to its listed neighbours,
    without self-loops: A = max(C, C^T) for the connectivity C of the lists."""
    from scipy.sparse import csr_matrix

    n = knn.n
    rows, cols = np.nonzero(knn.indices >= 0)
    i = knn.indices[rows, cols]
    keep = i != rows
    C = csr_matrix((np.ones(int(keep.sum())), (rows[keep], i[keep])), shape=(n, n))
    A = C.maximum(C.T)
    A.data[:] = 1.0
    return A


def spectral_knn(knn: KnnResult, n_clusters: int, seed: int) -> np.ndarray:
    """Spectral clustering of the kNN graph into ``n_clusters``; labels ``(n,)``.

    The same graph scikit-learn's ``affinity='precomputed_nearest_neighbors'`` builds
    (0/1 connectivity, symmetrised), with its default eigen-solver and k-means labelling.
    """
    from sklearn.cluster import SpectralClustering

    A = knn_graph(knn)
    sc = SpectralClustering(n_clusters=n_clusters, affinity="precomputed", random_state=seed)
    return sc.fit_predict(A).astype(np.int64)


def igraph_of(knn: KnnResult) -> Any:
    """The kNN graph (:func:`knn_graph`) as an igraph graph, built once for several Leiden
    runs on it.

    Example
    -------
    >>> g = igraph_of(knn)  # doctest: +SKIP
    >>> labels = [leiden_knn(knn, seed, 1.0, g) for seed in range(3)]  # doctest: +SKIP
    """
    import igraph as ig

    A = knn_graph(knn).tocoo()
    upper = A.row < A.col
    edges = list(zip(A.row[upper].tolist(), A.col[upper].tolist(), strict=True))
    return ig.Graph(n=knn.n, edges=edges)


def leiden_knn(
    knn: KnnResult,
    seed: int,
    resolution: float = 1.0,
    graph: Any = None,
    engine: str = "leidenalg",
    iterations: int | None = LEIDEN_ITERATIONS,
) -> np.ndarray:
    """Leiden communities (modularity with ``resolution``) of the kNN graph; labels ``(n,)``.

    Parameters
    ----------
    knn : the read-out graph's lists (:func:`knn_graph`)
    seed : Leiden's seed
    resolution : modularity's resolution (> 0), default 1.0
    graph : the graph as :func:`igraph_of` makes it, when the caller has it already
    engine : 'leidenalg' (leidenalg's optimiser, the default) or 'igraph'
        (``Graph.community_leiden``: the same quality function, optimised until no node
        moves; many times faster on large graphs and of higher modularity, but its partitions
        are other local optima: docs/decisions/readout.md)
    iterations : the most iterations of leidenalg's optimiser (``readout.leiden_iterations``);
        a run stops earlier where an iteration improves nothing; None: no cap

    Example
    -------
    >>> knn = knn_from_dense(np.kron(np.eye(2), np.ones((3, 3))) * -1 + 1, 3)
    >>> leiden_knn(knn, 0, engine="igraph").tolist()
    [0, 0, 0, 1, 1, 1]
    """
    g = igraph_of(knn) if graph is None else graph
    if engine == "igraph":
        return _igraph_leiden(g, seed, resolution)
    check_setting("readout.with_k_engine", engine)
    return _leidenalg_leiden(g, seed, resolution, iterations)


def _leidenalg_leiden(
    g: Any, seed: int, resolution: float, iterations: int | None = LEIDEN_ITERATIONS
) -> np.ndarray:
    """leidenalg's optimiser on ``g``: modularity at ``resolution``, iterated until an
    iteration improves nothing or ``iterations`` have run (None: no cap). One iteration at a
    time on one seeded optimiser is leidenalg's own loop for ``n_iterations=-1``, so a run
    that ends before the cap is the partition ``find_partition(..., n_iterations=-1)``
    gives."""
    import leidenalg

    optimiser = leidenalg.Optimiser()
    optimiser.set_rng_seed(int(seed) % 2**31)
    part = leidenalg.RBConfigurationVertexPartition(g, resolution_parameter=resolution)
    done = 0
    while iterations is None or done < int(iterations):
        done += 1
        if optimiser.optimise_partition(part, n_iterations=1) <= 0:
            break
    return np.asarray(part.membership, dtype=np.int64)


def _igraph_leiden(g: Any, seed: int, resolution: float) -> np.ndarray:
    """igraph's own Leiden on ``g``: modularity at ``resolution``, one iteration at a time
    from the last partition until a partition recurs (the first that does is returned); igraph
    draws from Python's ``random`` interface, so a seeded generator stands in for the run.

    igraph's own "until no change" (``n_iterations=-1``) never ends on some graphs, where
    every iteration moves a node (a 10-node kNN graph in ``tests/test_metrics_readout.py``).
    Partitions are finite, so stopping at the first recurring one always ends; where an
    iteration moves no node it stops where igraph's loop does (the same partition on 299 of
    300 random kNN graphs).
    """
    import random

    import igraph as ig

    ig.set_random_number_generator(random.Random(int(seed)))
    seen: set[tuple[int, ...]] = set()
    membership = None
    try:
        while True:
            membership = g.community_leiden(
                objective_function="modularity",
                resolution=float(resolution),
                n_iterations=1,
                initial_membership=membership,
            ).membership
            first: dict[int, int] = {}
            canonical = tuple(first.setdefault(c, len(first)) for c in membership)
            if canonical in seen:
                break
            seen.add(canonical)
    finally:
        ig.set_random_number_generator(random)
    return np.asarray(membership, dtype=np.int64)


def leiden_n_clusters(
    knn: KnnResult,
    n_clusters: int,
    seed: int,
    bounds: tuple[float, float] = (1e-3, 20.0),
    max_tries: int = 40,
    restarts: int = 1,
    restart_bracket: float = 2.0,
    restart_tries: int = 8,
    with_k_engine: str = "igraph",
    iterations: int | None = LEIDEN_ITERATIONS,
) -> np.ndarray:
    """Leiden communities of the kNN graph with the resolution set so that there are
    ``n_clusters`` of them; labels ``(n,)``.

    The number of communities grows with the resolution, so the resolution is bisected (on a
    log scale) within ``bounds``; when no resolution gives exactly K (within ``max_tries``),
    the partition whose count is nearest K is returned (the lower count on a tie).

    With ``restarts`` > 1, the seeds ``seed + 1, ...`` bisect too, within a factor
    ``restart_bracket`` of the first seed's resolution and at most ``restart_tries`` steps
    (so a restart costs a few Leiden runs, not a full bisection); of the partitions with the
    count nearest K, the one of highest modularity (resolution 1) on the graph is kept.
    Leiden's K-partitions of one graph differ between seeds (under rotations a 6 is a 9: the
    6/9 community is either cut by style or another digit is split), and the better one has
    the higher modularity (docs/decisions/readout.md).
    ``with_k_engine`` is the Leiden implementation (:func:`leiden_knn`'s ``engine``): since
    the rule keeps the K-partition of highest modularity, igraph's (the default), which
    reaches a higher modularity in a fraction of leidenalg's time, serves it best;
    ``iterations`` are leidenalg's per run where it is the engine.

    Example
    -------
    >>> labels = leiden_n_clusters(knn, 10, seed=0, restarts=8)  # doctest: +SKIP
    """
    g = igraph_of(knn)
    best, best_key = None, None
    labels, found = _leiden_bisect(
        knn, n_clusters, seed, bounds, max_tries, g, with_k_engine, iterations
    )
    near = (found / restart_bracket, found * restart_bracket)
    for s in range(restarts):
        if s > 0:
            labels, _ = _leiden_bisect(
                knn, n_clusters, seed + s, near, restart_tries, g, with_k_engine, iterations
            )
        m = int(labels.max()) + 1
        key = (abs(m - n_clusters), m, -g.modularity(labels.tolist()))
        if best_key is None or key < best_key:
            best, best_key = labels, key
    return best


def _leiden_bisect(
    knn: KnnResult,
    n_clusters: int,
    seed: int,
    bounds: tuple[float, float],
    max_tries: int,
    graph: Any,
    engine: str,
    iterations: int | None = LEIDEN_ITERATIONS,
) -> tuple[np.ndarray, float]:
    """The bisection of one seed: the partition nearest K and its resolution."""
    lo, hi = bounds
    best: np.ndarray | None = None
    best_r = 1.0
    for _ in range(max_tries):
        r = float(np.sqrt(lo * hi))
        labels = leiden_knn(knn, seed, r, graph, engine, iterations)
        m = int(labels.max()) + 1
        if best is None or (abs(m - n_clusters), m) < (
            abs(int(best.max()) + 1 - n_clusters),
            int(best.max()) + 1,
        ):
            best, best_r = labels, r
        if m == n_clusters:
            break
        lo, hi = (r, hi) if m < n_clusters else (lo, r)
    return best, best_r


PARALLEL_MIN_NODES = 5000
"""Graphs with at least this many nodes have a resolution sweep's Leiden runs spread over
worker processes (:func:`leiden_sweep`); below it a worker's start costs more than a run."""


def leiden_sweep(
    knn: KnnResult,
    seed: int,
    resolutions: list[float] | tuple[float, ...],
    workers: int | None = None,
    iterations: int | None = LEIDEN_ITERATIONS,
) -> list[np.ndarray]:
    """leidenalg's Leiden partition (:func:`leiden_knn`) of the kNN graph at every resolution;
    the same labels in every case, run in ``workers`` processes when the graph is large.

    leidenalg holds Python's lock while it runs, so threads would take turns; separate
    processes (joblib's loky) run side by side. Each run is seeded with ``seed`` alone, so
    the partitions do not depend on the order or the process a run gets.

    Parameters
    ----------
    knn : the read-out graph's lists
    seed : Leiden's seed
    resolutions : the resolutions, each > 0
    workers : processes to use; default None: numba's thread count (the CPU threads this
        process was given: ``--threads`` in the pipeline, every core in a notebook). With
        1 worker, fewer than :data:`PARALLEL_MIN_NODES` nodes or one resolution, the runs
        are made here one after the other.
    iterations : leidenalg's iterations per run (:func:`leiden_knn`)

    Returns
    -------
    labels : one ``(n,)`` int64 array per resolution, in the order given

    Example
    -------
    >>> knn = knn_from_dense(np.kron(np.eye(2), np.ones((3, 3))) * -1 + 1, 3)
    >>> [p.tolist() for p in leiden_sweep(knn, 0, (0.5, 1.0))]
    [[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1]]
    """
    return leiden_sweeps([knn], seed, resolutions, workers, iterations)[0]


def leiden_sweeps(
    knns: list[KnnResult],
    seed: int,
    resolutions: list[float] | tuple[float, ...],
    workers: int | None = None,
    iterations: int | None = LEIDEN_ITERATIONS,
) -> list[list[np.ndarray]]:
    """:func:`leiden_sweep` of several graphs (an IA run's iterations), the runs of all of
    them shared by one set of worker processes, so that no worker waits at the end of one
    graph's sweep while the other finishes its last run. The partitions are those of
    :func:`leiden_sweep` of each graph alone; the sweeps are kept for later calls as
    :func:`leiden_sweep`'s are.

    Returns one list of ``(n,)`` int64 labels per graph, one array per resolution.

    Example
    -------
    >>> knn = knn_from_dense(np.kron(np.eye(2), np.ones((3, 3))) * -1 + 1, 3)
    >>> [len(s) for s in leiden_sweeps([knn, knn], 0, (0.5, 1.0))]
    [2, 2]
    """
    import numba

    keys = [_sweep_key(knn, seed, resolutions, iterations) for knn in knns]
    todo = [g for g, key in enumerate(keys) if key not in _SWEEPS]
    todo = [g for i, g in enumerate(todo) if keys[g] not in {keys[h] for h in todo[:i]}]
    graphs = {g: igraph_of(knns[g]) for g in todo}
    tasks = [(g, float(r)) for g in todo for r in resolutions]
    workers = numba.get_num_threads() if workers is None else int(workers)
    workers = min(workers, len(tasks))
    large = any(knns[g].n >= PARALLEL_MIN_NODES for g in todo)
    if workers <= 1 or not large:
        runs = [_leidenalg_leiden(graphs[g], seed, r, iterations) for g, r in tasks]
    else:
        from joblib import Parallel, delayed

        # loky's worker processes start fresh (no fork of this process's kernel threads) and
        # do not run the caller's main script again
        runs = Parallel(n_jobs=workers, backend="loky")(
            delayed(_leidenalg_leiden)(graphs[g], seed, r, iterations) for g, r in tasks
        )
    m = len(resolutions)
    fresh = {keys[g]: runs[i * m : (i + 1) * m] for i, g in enumerate(todo)}
    out = [fresh[key] if key in fresh else [p.astype(np.int64) for p in _SWEEPS[key]]
           for key in keys]  # fmt: skip
    for key, sweep in fresh.items():
        while len(_SWEEPS) >= SWEEPS_KEPT:
            _SWEEPS.pop(next(iter(_SWEEPS)))
        _SWEEPS[key] = [labels.astype(np.int32) for labels in sweep]  # half the memory
    return [list(sweep) for sweep in out]


SWEEPS_KEPT = 8
"""The last sweeps :func:`leiden_sweep` keeps, so that a read-out's stability curve
(:func:`ia_stages.ia.stability.read_out_stability`) and the read-outs of an IA run's
iterations (:func:`prefetch_sweeps`) reuse the Leiden runs made before."""
_SWEEPS: dict[tuple, list[np.ndarray]] = {}


def _sweep_key(knn: KnnResult, seed: int, resolutions: Any, iterations: int | None) -> tuple:
    """What a sweep's partitions depend on: the graph (the lists' indices), seed,
    resolutions, leidenalg's iterations."""
    import hashlib

    indices = np.ascontiguousarray(knn.indices)
    digest = hashlib.sha1(indices.view(np.uint8)).hexdigest()
    rs = tuple(float(r) for r in resolutions)
    return digest, indices.shape, int(seed), rs, None if iterations is None else int(iterations)


def leiden_silhouette(
    knn: KnnResult,
    sqdist: Any,
    resolutions: tuple[float, ...],
    seed: int,
    sample: np.ndarray | None = None,
    tolerance: float = 0.0,
    rule: str = "adjacent",
    most: int = 0,
    iterations: int | None = LEIDEN_ITERATIONS,
) -> np.ndarray:
    """Leiden communities of the kNN graph at the resolution (among ``resolutions``) whose
    partition has the highest silhouette on the distances sqrt(sqdist), or, with
    ``tolerance`` t, the fewest clusters among the partitions within t / m of that silhouette
    (m: the best partition's cluster count), by ``rule`` (:func:`fewest_near_best`); labels
    ``(n,)``.

    Modularity's null model makes the number of communities at a fixed resolution grow with
    the number of classes in the data (3 classes of 100 split into sub-styles, 10 classes of
    100 do not); the silhouette, a mean over samples of how much nearer each is to its own
    cluster than to the next, compares partitions of any count on the distances themselves.
    Partitions with one cluster, or one cluster per sample, have no silhouette and are
    skipped; when every resolution gives one of those, the partition at the largest
    resolution is returned. Ties keep the lower resolution.

    A class made of sub-styles (a digit written two ways) can score a split into the
    sub-styles about as high as the whole class; ``tolerance`` settles such near-ties for the
    coarser partition. Splitting or joining one of m clusters moves the mean silhouette by
    about 1/m of the change in its members' own, hence t / m: the same tolerance per cluster
    on 3 classes as on 10 (docs/decisions/readout.md).

    Parameters
    ----------
    knn : the read-out graph's neighbour lists
    sqdist : ``(n, n)`` squared distances (kappa^max), the silhouette's metric; with
        ``sample``, ``(s, s)`` those among the samples ``sample``
    resolutions : Leiden resolutions tried (each > 0)
    seed : Leiden's seed
    sample : None, or ``(s,)`` the samples ``sqdist`` is about: the silhouette of each
        partition is that of its labels on the sample (the kNN path, :class:`KnnDistances`)
    tolerance : float, default 0.0; >= 0
    rule : {'adjacent', 'fewest'}, default 'adjacent'; see :func:`fewest_near_best`
    most : int, default 0; see :func:`fewest_near_best`
    iterations : the most iterations of leidenalg's optimiser per run (:func:`leiden_knn`);
        default None: until an iteration improves nothing

    Returns
    -------
    labels : ``(n,)`` int64

    Example
    -------
    >>> labels = leiden_silhouette(knn_from_dense(sq, 11), sq, (0.1, 0.5, 1.0), seed=0)
    ... # doctest: +SKIP
    """
    _, partitions, scores = silhouette_sweep(knn, sqdist, resolutions, seed, sample, iterations)
    return partitions[silhouette_choice(partitions, scores, tolerance, rule, most)]


def silhouette_sweep(
    knn: KnnResult,
    sqdist: Any,
    resolutions: tuple[float, ...],
    seed: int,
    sample: np.ndarray | None = None,
    iterations: int | None = LEIDEN_ITERATIONS,
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Leiden's partition of the kNN graph at every resolution, in increasing order, and the
    silhouette of each on the distances sqrt(sqdist): what :func:`leiden_silhouette` chooses
    among. Arguments as :func:`leiden_silhouette`.

    Returns
    -------
    resolutions : ``(m,)`` sorted
    partitions : m label arrays ``(n,)``
    silhouette : ``(m,)``; NaN where the partition has one cluster or one cluster per
        sample (on the sample, with ``sample``)

    Example
    -------
    >>> r, parts, score = silhouette_sweep(knn_from_dense(sq, 11), sq, (0.5, 1.0), 0)
    ... # doctest: +SKIP
    """
    from sklearn.metrics import silhouette_score

    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    s = D.shape[0]
    ordered = np.array(sorted(float(r) for r in resolutions))
    partitions = leiden_sweep(knn, seed, tuple(ordered), iterations=iterations)
    scores = np.full(ordered.size, np.nan)
    for r, labels in enumerate(partitions):
        m = int(labels.max()) + 1
        on = labels if sample is None else labels[sample]
        seen = np.unique(on).size
        if 2 <= m < knn.n and 2 <= seen < s:
            # every partition is scored: two resolutions can give different partitions with
            # the same number of communities
            scores[r] = silhouette_score(D, on, metric="precomputed")
    return ordered, partitions, scores


def prefetch_sweeps(
    sqdists: list[Any], readout: ReadoutSettings, n_clusters: int | None, seed: int
) -> None:
    """Run ahead, in one set of worker processes (:func:`leiden_sweeps`), the Leiden sweeps
    that :func:`graph_partition` will run to read out each of ``sqdists`` without K (community
    'silhouette'), so that its read-outs find them made. Nothing is run with K, for other
    communities, for graphs below :data:`PARALLEL_MIN_NODES` nodes (run in this process
    anyway) or for more graphs than :data:`SWEEPS_KEPT` keeps. Arguments as
    :func:`graph_partition`'s, one distance per graph.

    Example
    -------
    >>> prefetch_sweeps([kd0, kd1], ReadoutSettings(k=10), None, 0)  # doctest: +SKIP
    """
    if n_clusters is not None or readout.community != "silhouette":
        return
    if not 2 <= len(sqdists) < SWEEPS_KEPT:
        return
    k = int(readout.k)
    lists = []
    for sq in sqdists:
        n = sq.n if isinstance(sq, KnnDistances) else np.shape(sq)[0]
        if n < PARALLEL_MIN_NODES or not 1 <= k < n:
            return
        lists.append(readout_lists(sq, k))
    resolutions = tuple(sorted(float(r) for r in readout.resolutions))
    leiden_sweeps(lists, seed, resolutions, iterations=readout.leiden_iterations)


def silhouette_choice(
    partitions: list[np.ndarray],
    scores: np.ndarray,
    tolerance: float,
    rule: str = "adjacent",
    most: int = 0,
) -> int:
    """Index of the partition :func:`leiden_silhouette` keeps among a
    :func:`silhouette_sweep`'s: :func:`fewest_near_best` of those with a silhouette, or the
    last (the largest resolution's) when none has one.

    Example
    -------
    >>> two, three = np.array([0, 0, 1, 1, 1, 1]), np.array([0, 0, 1, 1, 2, 2])
    >>> silhouette_choice([two, three], np.array([0.50, 0.52]), 0.1)
    0
    """
    scored = [(float(scores[r]), partitions[r]) for r in range(len(partitions))]
    scored = [c for c in scored if np.isfinite(c[0])]
    if not scored:
        return len(partitions) - 1
    chosen = fewest_near_best(scored, tolerance, rule, most)
    return next(r for r, labels in enumerate(partitions) if labels is chosen)


def fewest_near_best(
    scored: list[tuple[float, np.ndarray]],
    tolerance: float,
    rule: str = "adjacent",
    most: int = 0,
) -> np.ndarray:
    """The partition with the fewest clusters among those whose score is within
    ``tolerance / m`` of the highest (m the highest-scoring partition's cluster count) and,
    by ``rule``, reached from it without passing a count outside; among those the highest
    score, the first on a tie. Where more than ``most`` cluster counts score within that
    window (a plateau, on which the fewest is far from the best: :func:`near_best_counts`),
    the highest-scoring partition.

    Parameters
    ----------
    scored : (score, labels ``(n,)`` int) pairs, in the order ties are settled by
    tolerance : >= 0; 0 keeps the highest score
    rule : {'adjacent', 'fewest'}, default 'adjacent' (``readout.near_best``)
        'fewest': any K within the tolerance; 'adjacent': only the K reached from the
        highest-scoring K downwards, K by K among the cluster counts scored, without a K
        outside the tolerance between (a far coarser partition that scores near the best,
        as two clusters often do, is not taken over the finer ones between that do not)
    most : int, default 0 (``readout.near_best_max``)
        the most cluster counts in the window for the fewest to be taken; 0: no limit

    Returns
    -------
    labels : the chosen partition

    Example
    -------
    >>> two, three = np.array([0, 0, 1, 1, 1, 1]), np.array([0, 0, 1, 1, 2, 2])
    >>> int(fewest_near_best([(0.50, two), (0.52, three)], 0.0).max()) + 1
    3
    >>> int(fewest_near_best([(0.50, two), (0.52, three)], 0.1).max()) + 1  # 0.02 <= 0.1 / 3
    2
    >>> four = np.array([0, 1, 2, 2, 3, 3])
    >>> scored = [(0.50, two), (0.40, three), (0.52, four)]
    >>> [int(fewest_near_best(scored, 0.1, r).max()) + 1 for r in ("fewest", "adjacent")]
    [2, 4]
    >>> int(fewest_near_best([(0.50, two), (0.51, three), (0.52, four)], 0.1, most=2).max()) + 1
    4
    """
    check_setting("readout.near_best", rule)
    best_score, best = max(scored, key=lambda c: c[0])
    floor = near_best_floor(best_score, int(best.max()) + 1, tolerance)
    near = [c for c in scored if c[0] >= floor]
    top: dict[int, float] = {}  # each count's best score
    for score, labels in scored:
        k = int(labels.max()) + 1
        top[k] = max(score, top.get(k, -np.inf))
    if most > 0 and len(near_best_counts(top, tolerance)) > most:
        return best
    if rule == "adjacent":
        fewest = int(best.max()) + 1
        for k in sorted((k for k in top if k < fewest), reverse=True):
            if top[k] < floor:
                break
            fewest = k
    else:
        fewest = min(int(labels.max()) + 1 for _, labels in near)
    return max((c for c in near if int(c[1].max()) + 1 == fewest), key=lambda c: c[0])[1]


def near_best_floor(best_score: float, best_k: int, tolerance: float) -> float:
    """The least score that counts as near the best (:func:`fewest_near_best`'s window): the
    best score less ``tolerance`` / its cluster count."""
    return float(best_score) - float(tolerance) / max(1, int(best_k))


def near_best_counts(scores: dict[int, float], tolerance: float) -> tuple[int, ...]:
    """The cluster counts whose score lies in :func:`fewest_near_best`'s window: within
    ``tolerance`` / m of the highest score (m its cluster count), in increasing order.

    More than one count means the criterion barely tells them apart: on the held-out sets of
    ``bench/model_selection.py --confidence`` the K chosen is then right far less often
    (docs/decisions/readout.md).

    Parameters
    ----------
    scores : K -> score (higher is better; NaN where K has none)
    tolerance : >= 0 (``readout.silhouette_tolerance``)

    Returns
    -------
    counts : the K near the best, at least the best one (empty when no score is finite)

    Example
    -------
    >>> near_best_counts({2: 0.50, 3: 0.52, 4: 0.40}, 0.1)  # 0.52 - 0.1 / 3 = 0.487
    (2, 3)
    """
    finite = {int(k): float(v) for k, v in scores.items() if np.isfinite(v)}
    if not finite:
        return ()
    best_k = max(finite, key=lambda k: (finite[k], -k))
    floor = near_best_floor(finite[best_k], best_k, tolerance)
    return tuple(sorted(k for k, v in finite.items() if v >= floor))


def hdbscan_distances(sqdist: Any, min_cluster_size: int) -> np.ndarray:
    """HDBSCAN (scikit-learn) on the dense distances sqrt(sqdist); noise (-1) stays its own
    label -1; labels ``(n,)``."""
    from sklearn.cluster import HDBSCAN

    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    hd = HDBSCAN(min_cluster_size=min_cluster_size, metric="precomputed", copy=False)
    return hd.fit_predict(D).astype(np.int64)
