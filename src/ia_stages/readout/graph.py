"""The kappa^max nearest-neighbour graph: kNN lists, sparse attention weights and read-outs.

A kNN list is three arrays over the n columns j (samples) and their k neighbours m:

- ``indices`` ``(n, k)``: the samples i nearest to j under kappa^max, nearest first; j itself
  is its own nearest (distance 0) and comes first;
- ``sqdist`` ``(n, k)``: their kappa^max squared distances ||v_j - v_i o tau||^2 (unit norm);
- ``params`` ``(n, k, n_params)``: the kappa^max alignment tau of v_i onto v_j.

They are taken from a dense kappa^max result (:func:`knn_from_dense`) or given directly by a
kNN search, so n x n matrices are never needed downstream. The read-outs group samples on the
graph that links every sample to its k nearest: spectral clustering when the number of
clusters K is given, Leiden community detection (modularity) when it is not; HDBSCAN on the
dense distances is kept for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ATTENTION_KINDS = ("dense", "knn")
BANDWIDTHS = ("kth", "fixed")
SYMMETRIES = ("none", "mutual", "union")
GRAPH_READOUTS = ("spectral", "leiden", "hdbscan", "average")


@dataclass(frozen=True)
class AttentionSettings:
    """Which samples each column of W attends to, and with which weights.

    kind : 'dense' is the paper's W = column-normalised kappa^max (every sample, one bandwidth
        beta); 'knn' lets column j attend only to its k nearest samples under kappa^max
    k : neighbours per column, the column itself included (knn only); 1 <= k < n
    bandwidth : knn only; 'kth' weights neighbour i of j by exp(-d2_ij / d2_j(k)) with d2_j(k)
        the squared distance to j's k-th neighbour (adaptive mean shift); 'fixed' uses
        exp(-beta d2_ij), the dense kernel restricted to the k nearest
    symmetry : knn only; 'none' keeps j's own k nearest; 'mutual' keeps i only if j is also
        among i's k nearest; 'union' adds i when j is among i's k nearest (the columns then
        attend to up to 2k samples)
    """

    kind: str = "dense"
    k: int = 10
    bandwidth: str = "kth"
    symmetry: str = "none"

    def check(self, n: int | None = None) -> None:
        """Raise ValueError naming the field when a setting is out of range (k vs n if given)."""
        if self.kind not in ATTENTION_KINDS:
            raise ValueError(f"attention.kind must be one of {ATTENTION_KINDS}, got {self.kind!r}")
        if self.bandwidth not in BANDWIDTHS:
            raise ValueError(
                f"attention.bandwidth must be one of {BANDWIDTHS}, got {self.bandwidth!r}"
            )
        if self.symmetry not in SYMMETRIES:
            raise ValueError(
                f"attention.symmetry must be one of {SYMMETRIES}, got {self.symmetry!r}"
            )
        if self.kind == "knn" and (self.k < 1 or (n is not None and self.k >= n and n > 1)):
            raise ValueError(f"attention.k must satisfy 1 <= k < n (n={n}), got {self.k}")


@dataclass
class KnnList:
    """Each column's neighbours: ``indices`` ``(n, k)`` int, ``sqdist`` ``(n, k)``,
    ``params`` ``(n, k, n_params)`` or None (see the module docstring)."""

    indices: np.ndarray
    sqdist: np.ndarray
    params: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.indices.shape[0])

    @property
    def k(self) -> int:
        return int(self.indices.shape[1])


def knn_from_dense(sqdist: Any, k: int, params: Any | None = None) -> KnnList:
    """The k nearest of every column of a dense squared-distance matrix ``(n, n)``.

    Column j lists itself first (ties of distance 0 to other samples are broken in its
    favour), then the others by increasing distance (stable: equal distances by index).
    ``params`` ``(n, n, n_params)``, kappa^max's alignments (params[j, i] aligns v_i onto
    v_j), are gathered alongside when given.
    """
    D = np.array(sqdist, dtype=float)
    n = D.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n (n={n}), got {k}")
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, -np.inf)  # self first
    idx = np.argsort(D, axis=1, kind="stable")[:, :k]
    np.fill_diagonal(D, 0.0)
    rows = np.arange(n)[:, None]
    sq = np.maximum(D[rows, idx], 0.0)
    P = None if params is None else np.asarray(params)[rows, idx]
    return KnnList(idx.astype(np.int64), sq, P)


def symmetrize(knn: KnnList, symmetry: str) -> KnnList:
    """Mutual or symmetrised (union) kNN lists; 'none' returns ``knn`` unchanged.

    Missing entries are marked by index -1 and distance +inf (they get weight 0). With
    'union', a neighbour i added to j's list because j is among i's k nearest carries the
    distance and the inverted alignment of that pair (known from i's list).
    """
    if symmetry == "none":
        return knn
    if symmetry not in SYMMETRIES:
        raise ValueError(f"attention.symmetry must be one of {SYMMETRIES}, got {symmetry!r}")
    n, k = knn.indices.shape
    member = {(int(j), int(i)): m for j in range(n) for m, i in enumerate(knn.indices[j])}
    if symmetry == "mutual":
        idx = knn.indices.copy()
        sq = knn.sqdist.copy()
        for j in range(n):
            for m, i in enumerate(knn.indices[j]):
                if (int(i), j) not in member:
                    idx[j, m], sq[j, m] = -1, np.inf
        return KnnList(idx, sq, None if knn.params is None else knn.params.copy())
    from ia_stages.core.groups import SE2

    extra: list[list[tuple[int, float, Any]]] = [[] for _ in range(n)]
    for i in range(n):
        for m, j in enumerate(knn.indices[i]):
            if (int(j), i) not in member:
                p = None if knn.params is None else knn.params[i, m]
                extra[int(j)].append((i, float(knn.sqdist[i, m]), p))
    width = k + max(len(e) for e in extra)
    idx = np.full((n, width), -1, dtype=np.int64)
    sq = np.full((n, width), np.inf)
    P = None
    if knn.params is not None:
        P = np.zeros((n, width, knn.params.shape[-1]))
        P[:] = SE2().identity(1, np)[0] if knn.params.shape[-1] == 3 else 0.0
    idx[:, :k], sq[:, :k] = knn.indices, knn.sqdist
    if P is not None:
        P[:, :k] = knn.params
    inv = SE2().inverse if knn.params is not None and knn.params.shape[-1] == 3 else None
    for j, row in enumerate(extra):
        for m, (i, d, p) in enumerate(row):
            idx[j, k + m], sq[j, k + m] = i, d
            if P is not None and inv is not None:
                P[j, k + m] = inv(p[None])[0]
    return KnnList(idx, sq, P)


def knn_weights(knn: KnnList, settings: AttentionSettings, beta: float) -> np.ndarray:
    """Attention weights ``(n, width)`` of every column over its listed neighbours.

    Row j holds W[indices[j, m], j]; each row sums to 1. 'kth' divides the squared distances
    of column j by its k-th neighbour's (the last of its own k; floored at a tiny positive
    value so identical images do not divide by zero); 'fixed' multiplies them by beta.
    """
    sq = np.asarray(knn.sqdist, dtype=float)
    if settings.bandwidth == "kth":
        own = sq[:, : settings.k] if sq.shape[1] >= settings.k else sq
        finite = np.where(np.isfinite(own), own, -np.inf)
        h = np.maximum(finite.max(1, keepdims=True), 1e-12)
        logits = -sq / h
    elif settings.bandwidth == "fixed":
        logits = -beta * sq
    else:
        raise ValueError(
            f"attention.bandwidth must be one of {BANDWIDTHS}, got {settings.bandwidth!r}"
        )
    logits = np.where(knn.indices >= 0, logits, -np.inf)
    logits -= logits.max(1, keepdims=True)
    w = np.exp(logits)
    return w / w.sum(1, keepdims=True)


def dense_weights(knn: KnnList, weights: np.ndarray) -> np.ndarray:
    """The n x n W (W[i, j] = weight of sample i in column j) of sparse column weights."""
    n = knn.n
    W = np.zeros((n, n))
    rows, cols = np.nonzero(knn.indices >= 0)
    np.add.at(W, (knn.indices[rows, cols], rows), weights[rows, cols])
    return W


def knn_graph(knn: KnnList) -> Any:
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


def spectral_knn(knn: KnnList, n_clusters: int, seed: int) -> np.ndarray:
    """Spectral clustering of the kNN graph into ``n_clusters``; labels ``(n,)``.

    The same graph scikit-learn's ``affinity='precomputed_nearest_neighbors'`` builds
    (0/1 connectivity, symmetrised), with its default eigen-solver and k-means labelling.
    """
    from sklearn.cluster import SpectralClustering

    A = knn_graph(knn)
    sc = SpectralClustering(n_clusters=n_clusters, affinity="precomputed", random_state=seed)
    return sc.fit_predict(A).astype(np.int64)


def leiden_knn(knn: KnnList, seed: int, resolution: float = 1.0) -> np.ndarray:
    """Leiden communities (modularity with ``resolution``) of the kNN graph; labels ``(n,)``."""
    import igraph as ig
    import leidenalg

    A = knn_graph(knn).tocoo()
    upper = A.row < A.col
    edges = list(zip(A.row[upper].tolist(), A.col[upper].tolist(), strict=True))
    g = ig.Graph(n=knn.n, edges=edges)
    part = leidenalg.find_partition(
        g,
        leidenalg.RBConfigurationVertexPartition,
        resolution_parameter=resolution,
        seed=int(seed) % 2**31,
        n_iterations=-1,
    )
    return np.asarray(part.membership, dtype=np.int64)


def leiden_n_clusters(
    knn: KnnList,
    n_clusters: int,
    seed: int,
    bounds: tuple[float, float] = (1e-3, 20.0),
    max_tries: int = 40,
) -> np.ndarray:
    """Leiden communities of the kNN graph with the resolution set so that there are
    ``n_clusters`` of them; labels ``(n,)``.

    The number of communities grows with the resolution, so the resolution is bisected (on a
    log scale) within ``bounds``; when no resolution gives exactly K (within ``max_tries``),
    the partition whose count is nearest K is returned (the lower count on a tie).
    """
    lo, hi = bounds
    best: np.ndarray | None = None
    for _ in range(max_tries):
        r = float(np.sqrt(lo * hi))
        labels = leiden_knn(knn, seed, r)
        m = int(labels.max()) + 1
        if best is None or (abs(m - n_clusters), m) < (
            abs(int(best.max()) + 1 - n_clusters),
            int(best.max()) + 1,
        ):
            best = labels
        if m == n_clusters:
            break
        lo, hi = (r, hi) if m < n_clusters else (lo, r)
    return best


def hdbscan_distances(sqdist: Any, min_cluster_size: int) -> np.ndarray:
    """HDBSCAN (scikit-learn) on the dense distances sqrt(sqdist); noise (-1) stays its own
    label -1; labels ``(n,)``."""
    from sklearn.cluster import HDBSCAN

    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    hd = HDBSCAN(min_cluster_size=min_cluster_size, metric="precomputed")
    return hd.fit_predict(D).astype(np.int64)


COMMUNITIES = ("leiden", "hdbscan")
WITH_K = ("spectral", "leiden")
STOP_RULES = ("stability", "partition", "contraction", "none")


def graph_partition(sqdist: Any, graph: dict, n_clusters: int | None, seed: int) -> np.ndarray:
    """The kNN-graph read-out of a kappa^max squared-distance matrix ``(n, n)``; labels.

    ``graph`` holds ``k`` (neighbours of every sample, itself excluded), ``community``
    ('leiden' or 'hdbscan', used without K), ``resolution`` (Leiden), ``min_cluster_size``
    (HDBSCAN) and ``with_k`` (used with ``n_clusters`` given: 'spectral' clustering of the
    graph, or 'leiden' with the resolution that gives that many communities).
    """
    sq = np.asarray(sqdist, dtype=float)
    n = sq.shape[0]
    k = int(graph["k"])
    if not 1 <= k < n:
        raise ValueError(f"readout.graph.k must satisfy 1 <= k < n (n={n}), got {k}")
    if n_clusters is not None:
        with_k = graph.get("with_k", "spectral")
        if with_k == "spectral":
            return spectral_knn(knn_from_dense(sq, k + 1), n_clusters, seed)
        if with_k == "leiden":
            return leiden_n_clusters(knn_from_dense(sq, k + 1), n_clusters, seed)
        raise ValueError(f"readout.graph.with_k must be one of {WITH_K}, got {with_k!r}")
    community = graph["community"]
    if community == "leiden":
        return leiden_knn(knn_from_dense(sq, k + 1), seed, graph["resolution"])
    if community == "hdbscan":
        return hdbscan_distances(sq, int(graph["min_cluster_size"]))
    raise ValueError(f"readout.graph.community must be one of {COMMUNITIES}, got {community!r}")


def contraction_ratio(sqdist: Any, labels: np.ndarray) -> float:
    """Within- over between-cluster distance of a partition, measured without true labels.

    The mean kappa^max distance sqrt(sqdist) of pairs in one cluster divided by that of
    pairs in different clusters (NaN when either set of pairs is empty). Theorem 4.1's
    contraction makes it fall from one iteration to the next.
    """
    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(labels.size, dtype=bool)
    w, b = same & off, ~same
    if not w.any() or not b.any():
        return float("nan")
    return float(D[w].mean() / D[b].mean())


def community_stability(sqdist: Any, graph: dict, n_seeds: int) -> float:
    """Mean adjusted Rand index between the Leiden partitions of the kNN graph
    (``graph['k']`` neighbours, ``graph['resolution']``) found with seeds 0..n_seeds-1.

    1 when every seed finds the same communities; it falls when the graph's community
    structure is ambiguous (communities fragment or blur), which needs no labels.
    """
    from sklearn.metrics import adjusted_rand_score

    knn = knn_from_dense(np.asarray(sqdist, dtype=float), int(graph["k"]) + 1)
    parts = [leiden_knn(knn, s, graph["resolution"]) for s in range(n_seeds)]
    pairs = [
        adjusted_rand_score(parts[a], parts[b])
        for a in range(n_seeds)
        for b in range(a + 1, n_seeds)
    ]
    return float(np.mean(pairs)) if pairs else 1.0


def stop_iteration(
    partitions: list[np.ndarray], sqdists: list[Any], stop: dict, graph: dict | None = None
) -> tuple[int, str]:
    """The iteration whose read-out to report, chosen without labels, and why.

    ``partitions[t]`` and ``sqdists[t]`` are the read-out and the kappa^max squared
    distances of iteration t = 0 (input) .. T. Rules (``stop['rule']``):

    - 'partition': stop at the first t >= 1 whose partition agrees with that of t - 1
      (adjusted Rand index >= ``stop['min_ari']``): iterating no longer changes the read-out;
    - 'contraction': stop at the last t >= 1 before the contraction ratio
      (:func:`contraction_ratio` of t's own partition) stops falling;
    - 'none': the last iteration T.

    With a single iteration (T = 0) it returns 0. Returns (t, a one-line reason).
    """
    from sklearn.metrics import adjusted_rand_score

    rule = stop["rule"]
    if rule not in STOP_RULES:
        raise ValueError(f"ia.stop.rule must be one of {STOP_RULES}, got {rule!r}")
    T = len(partitions) - 1
    if T < 1:
        return 0, "no iteration"
    if rule == "none":
        return T, "last iteration (rule 'none')"
    if rule == "stability":
        if graph is None:
            raise ValueError("ia.stop.rule 'stability' needs the read-out graph settings")
        stab = [community_stability(sq, graph, int(stop["n_seeds"])) for sq in sqdists[1:]]
        for t in range(1, T):
            if stab[t] <= stab[t - 1]:
                return t, (
                    f"community stability stopped rising after iteration {t} "
                    f"({stab[t - 1]:.3f} -> {stab[t]:.3f})"
                )
        return T, f"community stability rose at every iteration (to {stab[-1]:.3f})"
    if rule == "partition":
        for t in range(1, T + 1):
            ari = adjusted_rand_score(partitions[t - 1], partitions[t])
            if ari >= stop["min_ari"]:
                return t, f"partition of iteration {t} agrees with {t - 1} (ARI {ari:.3f})"
        return T, f"partitions still changing (ARI < {stop['min_ari']}); last iteration"
    ratios = [contraction_ratio(sq, p) for sq, p in zip(sqdists, partitions, strict=True)]
    for t in range(1, T + 1):
        if not ratios[t] < ratios[t - 1]:
            chosen = max(t - 1, 1)
            return chosen, (
                f"contraction ratio stopped falling at iteration {t} "
                f"({ratios[t - 1]:.3f} -> {ratios[t]:.3f})"
            )
    return T, f"contraction ratio fell at every iteration (to {ratios[T]:.3f})"
