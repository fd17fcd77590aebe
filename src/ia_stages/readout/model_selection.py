"""The number of clusters: a K given honoured exactly, a K within a range chosen, and the record
of that choice (every candidate partition, the criterion of each, the runner-up and the
agreement of the choice across Leiden seeds).

:func:`exact_k` turns any partition of the read-out graph into one of exactly K clusters
(joining the pair of clusters whose union raises modularity most, or splitting the largest
cluster in two along its graph), so that a K given is the K returned; :func:`check_k` refuses
a K the data cannot hold with one line. :func:`select_k` is the model selection of the graph
read-out without K, or with a range ``(lo, hi)``: the estimator, :func:`ia_stages.ia.loop.
read_out` and the pipeline's stages all call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ia_stages.kmax.neighbours import KnnResult
from ia_stages.settings.spec import SettingError


def _relabel(labels: np.ndarray) -> np.ndarray:
    """Labels 0..m-1 in the order of the values given (unchanged when they are 0..m-1)."""
    _, inverse = np.unique(np.asarray(labels), return_inverse=True)
    return inverse.astype(np.int64)


def distinct_orbits(sqdist: np.ndarray, tol: float = 1e-10) -> int:
    """Number of distinct images up to the group: connected components of the pairs whose
    kappa^max squared distance is at most ``tol``.

    Example
    -------
    >>> sq = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    >>> distinct_orbits(sq)
    2
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    sq = np.asarray(sqdist, dtype=float)
    same = sq <= tol
    np.fill_diagonal(same, False)
    return int(connected_components(csr_matrix(same), directed=False)[0])


def check_k(n_clusters: Any, n: int, sqdist: Any = None) -> None:
    """Refuse a K (or a range's ends) the data cannot hold, with one line naming
    ``n_clusters``: not an integer, below 1, above the n samples, lo > hi. Given the dense
    ``sqdist``, a K above the images' distinct orbits (images equal up to the group) is
    honoured, with a one-line warning that such clusters are arbitrary.

    Example
    -------
    >>> check_k(4, 3)
    Traceback (most recent call last):
    ...
    ia_stages.settings.spec.SettingError: n_clusters must be <= the 3 samples, got 4
    """
    ks = n_clusters if isinstance(n_clusters, tuple | list) else (n_clusters,)
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            raise SettingError(f"n_clusters must be an integer K or a range (lo, hi), got {k!r}")
        if k < 1:
            raise SettingError(f"n_clusters must be >= 1, got {k}")
        if k > n:
            raise SettingError(f"n_clusters must be <= the {n} samples, got {k}")
    if len(ks) == 2 and ks[0] > ks[1]:
        raise SettingError(f"n_clusters must be a range (lo, hi) with lo <= hi, got {tuple(ks)}")
    if sqdist is not None and not isinstance(sqdist, KnnResult):
        sq = np.asarray(sqdist, dtype=float)
        if sq.ndim == 2 and sq.shape[0] == n:
            d = distinct_orbits(sq)
            if min(ks) > d:
                import warnings

                warnings.warn(
                    f"n_clusters={min(ks)} is more than the {d} distinct orbits among the {n} "
                    "images: clusters of images equal up to the group are arbitrary",
                    stacklevel=3,
                )


def _adjacency(knn: KnnResult) -> Any:
    from ia_stages.readout.graph import knn_graph

    return knn_graph(knn).tocsr()


def _split(A: Any, members: np.ndarray, seed: int) -> np.ndarray:
    """A 0/1 split of ``members`` (at least 2) along the graph ``A``: off a connected
    component when the cluster's subgraph has several, else the sign of the Fiedler vector of
    its normalised Laplacian (median split on a tie), so both halves are non-empty."""
    from scipy.sparse.csgraph import connected_components, laplacian

    sub = A[members][:, members]
    n_comp, comp = connected_components(sub, directed=False)
    if n_comp > 1:
        sizes = np.bincount(comp)
        return (comp == int(np.argmin(sizes))).astype(np.int64)
    m = members.size
    if m == 2:
        return np.array([0, 1], dtype=np.int64)
    L = laplacian(sub.astype(float), normed=True)
    if m <= 1500:
        _, vec = np.linalg.eigh(L.toarray())
        f = vec[:, 1]
    else:
        from scipy.sparse.linalg import eigsh

        v0 = np.random.default_rng(seed).standard_normal(m)
        _, vec = eigsh(L, k=2, sigma=-1e-3, which="LM", v0=v0)
        f = vec[:, 1]
    side = (f > np.median(f)).astype(np.int64)
    if side.min() == side.max():
        side = np.zeros(m, dtype=np.int64)
        side[np.argsort(f, kind="stable")[m // 2 :]] = 1
    return side


def exact_k(labels: np.ndarray, n_clusters: int, knn: KnnResult, seed: int = 0) -> np.ndarray:
    """The partition ``labels`` of the read-out graph made into exactly ``n_clusters``.

    While there are too many clusters, the pair whose union raises the graph's modularity
    most (the most edges between them for their volumes) is joined; while too few, the
    largest cluster is split in two along its subgraph (:func:`_split`). A partition with
    K clusters already is returned relabelled, unchanged otherwise.

    Parameters
    ----------
    labels : ``(n,)`` int
    n_clusters : K, 1 <= K <= n
    knn : the read-out graph's lists
    seed : seed of the sparse eigen-solver (clusters above 1,500 samples)

    Returns
    -------
    labels : ``(n,)`` int64 with exactly K distinct values 0..K-1

    Example
    -------
    >>> from ia_stages.kmax.neighbours import knn_from_dense
    >>> sq = 1.0 - np.kron(np.eye(3), np.ones((2, 2)))
    >>> labels = exact_k(np.zeros(6, int), 3, knn_from_dense(sq, 2))
    >>> np.bincount(labels).tolist(), bool((labels[::2] == labels[1::2]).all())
    ([2, 2, 2], True)
    """
    K = int(n_clusters)
    n = int(np.asarray(labels).size)
    check_k(K, n)
    lab = _relabel(np.asarray(labels))
    m = int(lab.max()) + 1
    if m == K:
        return lab
    A = _adjacency(knn)
    if m > K:
        from scipy.sparse import csr_matrix

        deg = np.asarray(A.sum(axis=1)).ravel()
        two_m = max(float(deg.sum()), 1.0)
        P = csr_matrix((np.ones(n), (np.arange(n), lab)), shape=(n, m))
        E = (P.T @ A @ P).toarray()
        vol = np.bincount(lab, weights=deg, minlength=m).astype(float)
        alive = np.ones(m, dtype=bool)
        while m > K:
            gain = E / two_m - np.outer(vol, vol) / two_m**2
            gain[~alive, :] = -np.inf
            gain[:, ~alive] = -np.inf
            np.fill_diagonal(gain, -np.inf)
            a, b = np.unravel_index(int(np.argmax(gain)), gain.shape)
            a, b = min(a, b), max(a, b)
            E[a, :] += E[b, :]
            E[:, a] += E[:, b]
            vol[a] += vol[b]
            alive[b] = False
            lab[lab == b] = a
            m -= 1
        return _relabel(lab)
    while m < K:
        sizes = np.bincount(lab, minlength=m)
        c = int(np.argmax(sizes))
        members = np.flatnonzero(lab == c)
        side = _split(A, members, seed)
        lab[members[side == 1]] = m
        m += 1
    return _relabel(lab)


@dataclass
class ModelSelection:
    """How the read-out chose its number of clusters K.

    n_clusters : the K chosen
    criterion : the criterion that chose it (``readout.select``)
    scores : K -> the criterion's value of the best partition with K clusters (higher is
        better; NaN where it has none)
    runner_up : the K of the next best score (None when only one K was a candidate)
    stable : in how many of ``trials`` Leiden seeds the choice was the same K
    trials : seeds tried (1: stability not measured)
    bounds : the range searched (lo, hi), or None (any K)
    partitions : K -> the candidate partition with K clusters, ``(n,)`` int64: the K = k
        read-out without computing kappa^max again (:meth:`partition`)
    merges : the hierarchy above the chosen partition (:func:`cluster_hierarchy`): which
        clusters would merge next, and at what mean kappa^max distance
    near_best : the K whose silhouette lies within the criterion's tolerance of the best
        (:func:`~ia_stages.readout.graph.near_best_counts`); more than one: K is uncertain
        (empty where the criterion is not the silhouette's)

    Example
    -------
    >>> ms = ModelSelection(3, "silhouette", {3: 0.6, 6: 0.5}, 6, 19, 20, None, {})
    >>> ms.summary()
    '3 clusters (stable in 19 of 20 seeds; next best 6)'
    >>> ModelSelection(3, "climb", {3: 0.6, 4: 0.59}, 4, 5, 5, None, {}, [], (3, 4)).summary()
    '3 clusters (stable in 5 of 5 seeds; next best 4; uncertain: 3 and 4 score near the best)'
    """

    n_clusters: int
    criterion: str
    scores: dict[int, float]
    runner_up: int | None
    stable: int
    trials: int
    bounds: tuple[int, int] | None
    partitions: dict[int, np.ndarray] = field(repr=False)
    merges: list[tuple[tuple[int, ...], tuple[int, ...], float]] = field(default_factory=list)
    near_best: tuple[int, ...] = ()

    @property
    def labels(self) -> np.ndarray:
        """The chosen partition."""
        return self.partitions[self.n_clusters]

    def partition(self, k: int) -> np.ndarray:
        """The candidate partition with ``k`` clusters (a one-line error naming the K that
        were candidates when ``k`` was not one)."""
        if int(k) not in self.partitions:
            have = ", ".join(str(c) for c in sorted(self.partitions))
            raise KeyError(f"no candidate partition with {k} clusters; candidates: {have}")
        return self.partitions[int(k)]

    def summary(self) -> str:
        """One line: the K chosen and :meth:`confidence`."""
        head = f"{self.n_clusters} cluster{'s' if self.n_clusters != 1 else ''}"
        how = self.confidence()
        return head + (f" ({how})" if how else "")

    def confidence(self) -> str:
        """What there is to trust the K by: its stability over seeds, the runner-up and, where
        several K score near the best, those K (an empty string when nothing was measured).

        Example
        -------
        >>> ModelSelection(2, "climb", {2: 0.5, 3: 0.49, 4: 0.48}, 3, 5, 5, None, {}, [],
        ...                (2, 3, 4)).confidence()
        'stable in 5 of 5 seeds; next best 3; uncertain: 2, 3 and 4 score near the best'
        """
        parts = []
        if self.trials > 1:
            parts.append(f"stable in {self.stable} of {self.trials} seeds")
        if self.runner_up is not None:
            parts.append(f"next best {self.runner_up}")
        if len(self.near_best) > 1:
            ks = [str(k) for k in self.near_best]
            parts.append(f"uncertain: {', '.join(ks[:-1])} and {ks[-1]} score near the best")
        return "; ".join(parts)

    def next_merge(self) -> str:
        """One line: the clusters that would merge next (:attr:`merges`) and at what distance."""
        if not self.merges:
            return "no merge above this partition"
        a, b, d = self.merges[0]
        return f"next merge: clusters {list(a)} and {list(b)} at kappa^max distance {d:.3g}"

    def as_dict(self) -> dict[str, Any]:
        """The record's scalars (for a summary table or a store's attributes)."""
        ru = self.runner_up
        return {
            "chosen_k": self.n_clusters,
            "criterion": self.criterion,
            "criterion_value": float(self.scores.get(self.n_clusters, np.nan)),
            "runner_up_k": -1 if ru is None else int(ru),
            "runner_up_value": float("nan") if ru is None else float(self.scores[ru]),
            "stable": int(self.stable),
            "trials": int(self.trials),
            "near_best": " ".join(str(k) for k in self.near_best),
        }


def silhouette_of(sqdist: Any, labels: np.ndarray, sample: np.ndarray | None = None) -> float:
    """Silhouette of ``labels`` on the distances sqrt(sqdist) (``(n, n)``, or ``(s, s)`` among
    ``sample``); NaN where the partition has one cluster or one per sample (on the sample).

    Example
    -------
    >>> sq = 1.0 - np.kron(np.eye(2), np.ones((3, 3)))
    >>> round(silhouette_of(sq, np.array([0, 0, 0, 1, 1, 1])), 3)
    1.0
    """
    from sklearn.metrics import silhouette_score

    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    on = np.asarray(labels) if sample is None else np.asarray(labels)[sample]
    seen = np.unique(on).size
    if not 2 <= seen < D.shape[0]:
        return float("nan")
    return float(silhouette_score(D, on, metric="precomputed"))


def eigengap_scores(knn: KnnResult, ks: list[int]) -> dict[int, float]:
    """The eigengap of the read-out graph's normalised Laplacian at every K of ``ks``:
    ``lambda_{K+1} - lambda_K`` (eigenvalues ascending, lambda_1 = 0), the classic spectral
    estimate of the number of well-separated groups (higher is better).

    Example
    -------
    >>> from ia_stages.kmax.neighbours import knn_from_dense
    >>> sq = 1.0 - np.kron(np.eye(3), np.ones((4, 4)))
    >>> g = eigengap_scores(knn_from_dense(sq, 4), [2, 3, 4])
    >>> max(g, key=g.get)
    3
    """
    from scipy.sparse.csgraph import laplacian

    A = _adjacency(knn).astype(float)
    n = A.shape[0]
    top = min(max(ks) + 1, n)
    L = laplacian(A, normed=True)
    if n <= 3000 or top >= n - 1:
        lam = np.linalg.eigvalsh(L.toarray())[:top]
    else:
        from scipy.sparse.linalg import eigsh

        v0 = np.random.default_rng(0).standard_normal(n)
        lam = np.sort(eigsh(L, k=top, sigma=-1e-3, which="LM", v0=v0, return_eigenvectors=False))
    out = {}
    for k in ks:
        out[k] = float(lam[k] - lam[k - 1]) if k < lam.size else float("nan")
    return out


def cluster_hierarchy(
    sqdist: Any,
    labels: np.ndarray,
    sample: np.ndarray | None = None,
    most: int = 500,
    down_to: int = 1,
) -> list[tuple[tuple[int, ...], tuple[int, ...], float]]:
    """The average-linkage hierarchy above a partition: starting from its clusters, the pair
    of groups with the smallest mean kappa^max distance sqrt(sqdist) between their members is
    joined, again and again; returns the joins in order, each (clusters of one group,
    clusters of the other, their distance). The first join is the one a K - 1 read-out by
    distance would make. With ``sample``, ``sqdist`` is ``(s, s)`` among those samples
    (the kNN path); partitions of more than ``most`` clusters (or fewer than 2 on the sample)
    get an empty list. The joins stop where ``down_to`` groups remain.

    Example
    -------
    >>> P = np.array([0.0, 0.1, 1.0, 1.1, 5.0, 5.1])
    >>> sq = (P[:, None] - P[None]) ** 2
    >>> [(a, b, round(d, 2)) for a, b, d in cluster_hierarchy(sq, np.repeat([0, 1, 2], 2))]
    [((0,), (1,), 1.0), ((0, 1), (2,), 4.5)]
    """
    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    D = 0.5 * (D + D.T)
    lab = np.asarray(labels) if sample is None else np.asarray(labels)[sample]
    ks = np.unique(lab)
    if not 2 <= ks.size <= most:
        return []
    onehot = (lab[:, None] == ks[None, :]).astype(float)
    size = onehot.sum(axis=0)
    total = onehot.T @ D @ onehot  # sums of distances between (and within) clusters
    groups: dict[int, tuple[int, ...]] = {i: (int(k),) for i, k in enumerate(ks)}
    alive = np.ones(ks.size, dtype=bool)
    upper = np.triu(np.ones((ks.size, ks.size), dtype=bool), 1)
    out = []
    while alive.sum() > max(1, int(down_to)):
        mean = total / np.outer(size, size)
        mean[~(upper & alive[:, None] & alive[None, :])] = np.inf
        i, j = np.unravel_index(int(np.argmin(mean)), mean.shape)  # the first on a tie
        d = mean[i, j]
        out.append((groups[i], groups[j], float(d)))
        total[i, :] += total[j, :]
        total[:, i] += total[:, j]
        size[i] += size[j]
        groups[i] = tuple(sorted(groups[i] + groups[j]))
        alive[j] = False
    return out


def _candidates(
    sqdist: Any,
    readout: Any,
    bounds: tuple[int, int] | None,
    seed: int,
    fill: tuple[dict[int, np.ndarray], dict[int, float]] | None = None,
) -> tuple[dict[int, np.ndarray], dict[int, float], KnnResult | None]:
    """Candidate partitions by K and the silhouette of each: the graph read-out's Leiden sweep
    over ``readout.resolutions`` (the best partition per K by silhouette), and with a range
    every K of it the sweep missed (Leiden bisected to K and :func:`exact_k`, or taken from
    ``fill``, the partitions and scores of an earlier call); the linkage read-out cut into
    every K of the range."""
    from ia_stages.readout.graph import (
        KnnDistances,
        leiden_n_clusters,
        readout_lists,
        silhouette_sweep,
    )

    kd = sqdist if isinstance(sqdist, KnnDistances) else None
    sq = kd.sample_sqdist if kd is not None else np.asarray(sqdist, dtype=float)
    sample = kd.sample if kd is not None else None
    parts: dict[int, np.ndarray] = {}
    scores: dict[int, float] = {}

    def offer(labels: np.ndarray, score: float | None = None) -> None:
        lab = _relabel(labels)
        k = int(lab.max()) + 1
        if bounds is not None and not bounds[0] <= k <= bounds[1]:
            return
        s = silhouette_of(sq, lab, sample) if score is None else float(score)
        old = scores.get(k)
        if k not in parts or (np.isfinite(s) and (old is None or not np.isfinite(old) or s > old)):
            parts[k], scores[k] = lab, s

    if readout.kind != "graph":
        from ia_stages.readout.linkage import cluster_by_distance

        if bounds is None:
            raise SettingError(f"readout.kind {readout.kind!r}: a range of K needs n_clusters")
        for k in range(bounds[0], bounds[1] + 1):
            offer(cluster_by_distance(sq, 0.0, readout.linkage, n_clusters=k))
        return parts, scores, None
    lists = readout_lists(sqdist if kd is not None else sq, int(readout.k))
    _, sweep, sil = silhouette_sweep(
        lists, sq, tuple(readout.resolutions), seed, sample, readout.leiden_iterations
    )
    for labels, s in zip(sweep, sil, strict=True):
        offer(labels, s)
    if bounds is not None:
        for k in range(bounds[0], bounds[1] + 1):
            if k in parts:
                continue
            if fill is not None and k in fill[0]:
                offer(fill[0][k], fill[1][k])
                continue
            labels = leiden_n_clusters(
                lists, k, seed, restarts=1, with_k_engine=readout.with_k_engine,
                iterations=readout.leiden_iterations,
            )  # fmt: skip
            offer(exact_k(labels, k, lists, seed))
    return parts, scores, lists


def _choose(
    parts: dict[int, np.ndarray],
    scores: dict[int, float],
    lists: KnnResult | None,
    readout: Any,
) -> tuple[int, dict[int, float]]:
    """The K the criterion ``readout.select`` picks among the candidates, and its scores."""
    from ia_stages.readout.graph import fewest_near_best

    ks = sorted(parts)
    crit = getattr(readout, "select", "silhouette")
    if crit == "eigengap" and lists is not None:
        values = eigengap_scores(lists, ks)
        finite = [k for k in ks if np.isfinite(values[k])]
        if finite:
            return max(finite, key=lambda k: (values[k], -k)), values
    finite = [(scores[k], parts[k]) for k in ks if np.isfinite(scores[k])]
    if not finite:
        return ks[-1], dict(scores)
    chosen = fewest_near_best(finite, float(readout.silhouette_tolerance), readout.near_best,
                              int(readout.near_best_max))  # fmt: skip
    return int(chosen.max()) + 1, dict(scores)


def partition_of_k(
    lists: KnnResult, readout: Any, n_clusters: int, seed: int, sqdist: Any = None
) -> np.ndarray:
    """The graph read-out with K given: the read-out graph ``lists`` partitioned into exactly
    ``n_clusters`` clusters, by spectral clustering or by Leiden bisected to K
    (``readout.with_k``, with its restarts), then :func:`exact_k`; K checked first
    (:func:`check_k`, with the dense ``sqdist`` where there is one).

    Example
    -------
    >>> labels = partition_of_k(lists, ReadoutSettings(k=10), 3, 0)  # doctest: +SKIP
    """
    from ia_stages.readout.graph import leiden_n_clusters, spectral_knn

    check_k(n_clusters, lists.indices.shape[0], sqdist)
    if readout.with_k == "spectral":
        labels = spectral_knn(lists, n_clusters, seed)
    else:
        labels = leiden_n_clusters(
            lists,
            n_clusters,
            seed,
            restarts=readout.restarts,
            restart_bracket=readout.restart_bracket,
            restart_tries=readout.restart_tries,
            with_k_engine=readout.with_k_engine,
            iterations=readout.leiden_iterations,
        )
    return exact_k(labels, n_clusters, lists, seed)


def joined_to_k(
    sqdist: Any, labels: np.ndarray, n_clusters: int, sample: np.ndarray | None = None
) -> np.ndarray | None:
    """``labels`` with the first joins of their average-linkage hierarchy
    (:func:`cluster_hierarchy`) made until ``n_clusters`` groups remain, relabelled 0..K-1;
    None where that does not give exactly ``n_clusters`` (fewer clusters to start with, or on
    the kNN path clusters with no member in ``sample``).

    Example
    -------
    >>> P = np.array([0.0, 0.1, 1.0, 1.1, 5.0, 5.1])
    >>> sq = (P[:, None] - P[None]) ** 2
    >>> joined_to_k(sq, np.repeat([0, 1, 2], 2), 2).tolist()
    [0, 0, 0, 0, 1, 1]
    """
    lab = _relabel(np.asarray(labels))
    m = int(lab.max()) + 1
    if m < n_clusters:
        return None
    root = np.arange(m)
    for a, b, _ in cluster_hierarchy(sqdist, lab, sample, down_to=n_clusters):
        root[list(a) + list(b)] = min(a + b)
    out = _relabel(root[lab])
    return out if int(out.max()) + 1 == n_clusters else None


def partition_with_k(
    sqdist: Any, lists: KnnResult, readout: Any, n_clusters: int, seed: int
) -> np.ndarray:
    """The read-out with K given: :func:`partition_of_k`, or, with ``readout.with_k_join``,
    a partition of the Leiden sweep over ``readout.resolutions`` with more clusters joined
    down to K (:func:`joined_to_k`) where its silhouette on the kappa^max distances is higher
    by more than ``readout.with_k_margin`` (the highest such).

    Bisecting Leiden's resolution to K splits a large class before it separates a small one
    and cuts a class drawn in several styles across its styles; the sweep's finer partitions
    hold those apart, and joining the closest clusters first gives back the classes. The
    margin keeps the bisection wherever the two are near ties: it is fixed, not scaled by K,
    since the silhouette's noise does not shrink as K grows.

    Parameters
    ----------
    sqdist : ``(n, n)`` kappa^max squared distances, or a
        :class:`~ia_stages.readout.graph.KnnDistances` (the silhouette on its sample)
    lists : the read-out graph (:func:`~ia_stages.readout.graph.readout_lists`)
    readout : :class:`~ia_stages.settings.ReadoutSettings`
    n_clusters : K
    seed : Leiden's seed

    Returns
    -------
    labels : ``(n,)`` int64 with exactly ``n_clusters`` clusters

    Example
    -------
    >>> labels = partition_with_k(sq, lists, ReadoutSettings(k=10), 3, 0)  # doctest: +SKIP
    """
    from ia_stages.readout.graph import KnnDistances

    kd = sqdist if isinstance(sqdist, KnnDistances) else None
    sq = kd.sample_sqdist if kd is not None else np.asarray(sqdist, dtype=float)
    sample = kd.sample if kd is not None else None
    labels = partition_of_k(lists, readout, n_clusters, seed, None if kd is not None else sq)
    if not readout.with_k_join:
        return labels
    best = silhouette_of(sq, labels, sample)
    if not np.isfinite(best):
        return labels
    joined = best_joined(sq, lists, readout, n_clusters, seed, sample)
    if joined is not None and joined[0] > best + float(readout.with_k_margin):
        return joined[1]
    return labels


def best_joined(
    sq: np.ndarray,
    lists: KnnResult,
    readout: Any,
    n_clusters: int,
    seed: int,
    sample: np.ndarray | None = None,
) -> tuple[float, np.ndarray] | None:
    """Of the Leiden sweep over ``readout.resolutions``, the partition with more than K
    clusters that, joined down to K (:func:`joined_to_k`), has the highest silhouette on
    ``sq``: that silhouette and the joined labels; None where no join gives exactly K.

    Parameters
    ----------
    sq : ``(n, n)`` kappa^max squared distances, or ``(s, s)`` among ``sample`` (the kNN path)
    lists : the read-out graph
    readout : :class:`~ia_stages.settings.ReadoutSettings` (``resolutions``)
    n_clusters : K
    seed : Leiden's seed
    sample : ``(s,)`` the samples ``sq`` is among; None: every sample

    Returns
    -------
    (silhouette, labels ``(n,)`` int64) or None

    Example
    -------
    >>> score, labels = best_joined(sq, lists, ReadoutSettings(k=8), 3, 0)  # doctest: +SKIP
    """
    from ia_stages.readout.graph import leiden_sweep

    best = None
    resolutions = tuple(sorted(readout.resolutions))
    for part in leiden_sweep(lists, seed, resolutions, iterations=readout.leiden_iterations):
        if int(part.max()) + 1 <= n_clusters:
            continue
        joined = joined_to_k(sq, part, n_clusters, sample)
        if joined is None:
            continue
        s = float(silhouette_of(sq, joined, sample))
        if np.isfinite(s) and (best is None or s > best[0]):
            best = (s, joined)
    return best


def narrowing_k(k: int, n: int) -> int:
    """The least K whose read-out graph (:func:`climb_width`) is narrower than ``k``
    neighbours: n // (k + 1) + 1.

    Example
    -------
    >>> narrowing_k(20, 20_000), climb_width(20, 20_000, 953), climb_width(20, 20_000, 952)
    (953, 19, 20)
    """
    return int(n) // (int(k) + 1) + 1


def climb_width(k: int, n: int, n_clusters: int) -> int:
    """The read-out graph's neighbour count for a read-out with K = ``n_clusters``: ``k``
    capped by the mean class size less one, n / K - 1 (at least 1), as
    :func:`~ia_stages.settings.sizing.sized_neighbours` sizes it with K given.

    Example
    -------
    >>> climb_width(17, 168, 6), climb_width(17, 168, 14)
    (17, 11)
    """
    return max(1, min(int(k), int(n) // int(n_clusters) - 1))


def _climb(
    sqdist: Any,
    readout: Any,
    bounds: tuple[int, int] | None,
    seed: int,
    parts: dict[int, np.ndarray],
    scores: dict[int, float],
    start: int,
) -> int:
    """The 'climb' criterion from the 'silhouette' choice ``start``: while the read-out with
    K + 1 clusters (Leiden bisected to K + 1 on the graph of :func:`climb_width` neighbours,
    made exact; the read-out with K given) or a candidate already held with K + 1 clusters
    has a higher silhouette than the best partition with K, K goes up by one. The K it stops
    at is returned when its graph is narrower than the read-out's ``readout.k`` (n / K - 1 <
    k), else ``start`` (as where ``start`` has no silhouette). The partitions made are offered
    to ``parts`` and ``scores`` (kept where they beat a candidate with the same K).

    A read-out graph wider than a class must link every member of the class to others: the
    sweep on a graph sized to n then joins small classes, and its silhouette choice stops
    below their number. Narrowing the graph to the class size a larger K implies lets those
    classes apart; stopping at the first K whose silhouette falls keeps the sub-styles of a
    class (which a narrower graph also finds, at a higher silhouette still) joined. A climb
    that ends where the graph is still the sweep's has only raised Leiden's resolution on the
    graph whose partitions the sweep already weighed (splitting digits written two ways), so
    the sweep's choice stands.
    """
    import warnings

    from ia_stages.readout.graph import KnnDistances, readout_lists

    kd = sqdist if isinstance(sqdist, KnnDistances) else None
    sq = kd.sample_sqdist if kd is not None else np.asarray(sqdist, dtype=float)
    sample = kd.sample if kd is not None else None
    n = kd.n if kd is not None else sq.shape[0]
    top = min(n // 2, n - 1) if bounds is None else min(bounds[1], n // 2, n - 1)
    K = int(start)
    if not np.isfinite(scores.get(K, np.nan)):
        return K  # no partition of the sweep had a silhouette: nothing to climb from
    if narrowing_k(readout.k, n) - K > int(readout.climb_steps):
        return K  # the graph narrows too far above the choice for a climb to be kept
    graphs: dict[int, KnnResult] = {}  # the read-out graph of each width the climb reads
    while K + 1 <= top:
        nxt = K + 1
        ro = replace(readout, k=climb_width(readout.k, n, nxt))
        if ro.k not in graphs:
            graphs[ro.k] = readout_lists(sqdist if kd is not None else sq, int(ro.k))
        with warnings.catch_warnings():  # K above the distinct orbits: its silhouette says
            warnings.simplefilter("ignore")
            labels = _relabel(
                partition_of_k(graphs[ro.k], ro, nxt, seed, None if kd is not None else sq)
            )
        s = silhouette_of(sq, labels, sample)
        old = scores.get(nxt)
        if np.isfinite(s) and (old is None or not np.isfinite(old) or s > old):
            parts[nxt], scores[nxt] = labels, s
        if not (np.isfinite(scores.get(nxt, np.nan)) and scores[nxt] > scores[K]):
            break
        K = nxt
    if climb_width(readout.k, n, K) >= int(readout.k):
        return int(start)  # the climb never left the sweep's graph: the sweep's choice stands
    return K


def _decide(
    sqdist: Any,
    readout: Any,
    bounds: tuple[int, int] | None,
    seed: int,
    parts: dict[int, np.ndarray],
    scores: dict[int, float],
    lists: KnnResult | None,
) -> tuple[int, dict[int, float]]:
    """The K ``readout.select`` chooses (:func:`_choose`, then :func:`_climb` for 'climb' on
    the graph read-out) and the scores of every candidate."""
    chosen, values = _choose(parts, scores, lists, readout)
    if getattr(readout, "select", "silhouette") == "climb" and lists is not None:
        chosen = _climb(sqdist, readout, bounds, seed, parts, scores, chosen)
        values = dict(scores)
    return chosen, values


def select_k(
    sqdist: Any,
    readout: Any,
    n_clusters: tuple[int, int] | None,
    seed: int,
    trials: int = 1,
) -> ModelSelection:
    """The read-out without K, or with K in a range ``(lo, hi)``: every candidate partition,
    the K the criterion chooses among them, the runner-up and the choice's agreement over
    ``trials`` Leiden seeds (``seed``, ``seed + 1``, ...).

    The candidates are the graph read-out's Leiden partitions over ``readout.resolutions``
    (with a range, those inside it and, for every K of it the resolutions missed, Leiden
    bisected to K and made exact by :func:`exact_k`). ``readout.select`` is the criterion:
    'silhouette' (the fewest clusters among the partitions within
    ``readout.silhouette_tolerance`` / m of the best silhouette on the kappa^max distances,
    :func:`~ia_stages.readout.graph.fewest_near_best`), 'climb' (the default: that choice,
    then K raised by one while the read-out with K + 1 given, on the graph narrowed to
    :func:`climb_width` neighbours, has the higher silhouette, kept where it ends on a graph
    narrower than ``readout.k``: :func:`_climb`, whose partitions join the candidates; within
    the range's upper end) or 'eigengap' (the largest gap of the read-out graph's normalised
    Laplacian, :func:`eigengap_scores`).

    Parameters
    ----------
    sqdist : ``(n, n)`` kappa^max squared distances, or a
        :class:`~ia_stages.readout.graph.KnnDistances`
    readout : :class:`~ia_stages.settings.ReadoutSettings` with ``k`` set
    n_clusters : None (any K) or a range ``(lo, hi)``
    seed : Leiden's seed
    trials : seeds over which the choice is repeated to measure its stability (1: not; the
        graph read-out only): the Leiden sweep is run again with each seed, the partitions
        bisected to the range's other K are those of ``seed``

    Returns
    -------
    ModelSelection

    Example
    -------
    >>> sq = 1.0 - np.kron(np.eye(3), np.ones((5, 5)))
    >>> from ia_stages.settings.readout import ReadoutSettings
    >>> ms = select_k(sq, ReadoutSettings(k=4), (2, 4), seed=0, trials=3)
    >>> ms.n_clusters, sorted(ms.partitions), ms.stable
    (3, [2, 3, 4], 3)
    """
    from ia_stages.readout.graph import KnnDistances, near_best_counts

    n = sqdist.n if isinstance(sqdist, KnnDistances) else np.shape(sqdist)[0]
    bounds = None
    if n_clusters is not None:
        lo, hi = (int(v) for v in n_clusters)
        check_k((lo, hi), n, None if isinstance(sqdist, KnnDistances) else sqdist)
        bounds = (lo, hi)
    parts, scores, lists = _candidates(sqdist, readout, bounds, seed)
    if not parts:
        raise SettingError(f"n_clusters: no partition with K in {bounds} was found")
    chosen, values = _decide(sqdist, readout, bounds, seed, parts, scores, lists)
    ranked = sorted((k for k in values if k != chosen and np.isfinite(values[k])),
                    key=lambda k: (-values[k], k))  # fmt: skip
    runner = ranked[0] if ranked else None
    stable = 1
    trials = max(1, int(trials)) if readout.kind == "graph" else 1  # the others: no seed
    for t in range(1, trials):
        p, s, g = _candidates(sqdist, readout, bounds, seed + t, (parts, scores))
        if p and _decide(sqdist, readout, bounds, seed + t, p, s, g)[0] == chosen:
            stable += 1
    crit = getattr(readout, "select", "silhouette")
    kd = sqdist if isinstance(sqdist, KnnDistances) else None
    merges = (
        cluster_hierarchy(kd.sample_sqdist, parts[chosen], kd.sample)
        if kd is not None
        else cluster_hierarchy(sqdist, parts[chosen])
    )
    near = (
        near_best_counts(values, float(readout.silhouette_tolerance))
        if crit in ("silhouette", "climb")
        else ()
    )
    return ModelSelection(chosen, crit, values, runner, stable, trials, bounds, parts, merges,
                          near)  # fmt: skip
