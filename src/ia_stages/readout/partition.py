"""The graph read-out as one call: a kappa^max graph (dense or kNN distances) read out into
clusters without K, into exactly K, or with K searched in a range; and the same for the
iterations of an IA run in worker processes. Above :mod:`ia_stages.readout.graph` (the
graphs and their communities) and :mod:`ia_stages.readout.model_selection` (the choice of K),
which it joins."""

from __future__ import annotations

from typing import Any

import numpy as np

from ia_stages.readout import graph
from ia_stages.readout.graph import (
    KnnDistances,
    hdbscan_distances,
    leiden_knn,
    readout_lists,
)
from ia_stages.readout.model_selection import partition_with_k, select_k
from ia_stages.settings.readout import ReadoutSettings
from ia_stages.settings.spec import SettingError


def partitions_with_k(
    sqdists: list[Any], readout: ReadoutSettings, n_clusters: int, seed: int
) -> list[np.ndarray] | None:
    """:func:`graph_partition` with K of each of ``sqdists`` (an IA run's iterations), one
    graph per worker process (as many as numba's threads: the ``metrics`` job's ``--threads``
    in the pipeline, every core in a notebook); the partitions are those this process would
    make (each run seeded alone). None where workers would not gain (fewer than 2 graphs or
    workers, or a graph below :data:`~ia_stages.readout.graph.PARALLEL_MIN_NODES` nodes):
    the caller reads them out itself.

    Example
    -------
    >>> partitions_with_k([kd0, kd1], ReadoutSettings(k=10), 10, 0)  # doctest: +SKIP
    """
    import numba

    workers = min(numba.get_num_threads(), len(sqdists))
    sizes = [sq.n if isinstance(sq, KnnDistances) else np.shape(sq)[0] for sq in sqdists]
    if workers < 2 or min(sizes) < graph.PARALLEL_MIN_NODES:
        return None
    from joblib import Parallel, delayed

    return Parallel(n_jobs=workers, backend="loky")(
        delayed(graph_partition)(sq, readout, n_clusters, seed) for sq in sqdists
    )


def graph_partition(
    sqdist: Any | KnnDistances,
    readout: ReadoutSettings,
    n_clusters: int | tuple[int, int] | None,
    seed: int,
) -> np.ndarray:
    """The kNN-graph read-out of a kappa^max squared-distance matrix ``(n, n)``, or of a
    :class:`KnnDistances` (the kNN path: the lists, and the sample for the silhouette);
    labels.

    Of ``readout`` (:class:`~ia_stages.settings.ReadoutSettings`, ``k`` set) it reads ``k``
    (neighbours of every sample, itself excluded); without K ``community`` ('silhouette' with
    ``resolutions`` and ``silhouette_tolerance``, 'leiden' at ``resolution``, or 'hdbscan'
    with ``min_cluster_size``, which needs the dense matrix); with ``n_clusters`` given
    ``with_k`` ('spectral' clustering of the graph, or 'leiden' with the resolution that gives
    that many communities, the best of ``restarts`` seeds by modularity, as
    :func:`leiden_n_clusters`), made exactly K by
    :func:`~ia_stages.readout.model_selection.exact_k` (a K the data cannot hold is refused:
    :func:`~ia_stages.readout.model_selection.check_k`); with a range ``(lo, hi)`` or
    community 'silhouette', the model selection
    :func:`~ia_stages.readout.model_selection.select_k`.

    Example
    -------
    >>> readout = ReadoutSettings(k=5, community="leiden")
    >>> labels = graph_partition(sq, readout, None, 0)  # doctest: +SKIP
    """
    kd = sqdist if isinstance(sqdist, KnnDistances) else None
    sq = None if kd is not None else np.asarray(sqdist, dtype=float)
    n = kd.n if kd is not None else sq.shape[0]
    k = int(readout.k)
    if not 1 <= k < n:
        raise SettingError(f"readout.k must satisfy 1 <= k < n (n={n}), got {k}")

    lists = readout_lists(sqdist if kd is not None else sq, k)
    if isinstance(n_clusters, tuple | list):
        return select_k(sqdist if kd is not None else sq, readout, tuple(n_clusters), seed).labels
    if n_clusters is not None:
        return partition_with_k(sqdist if kd is not None else sq, lists, readout, n_clusters, seed)
    if readout.community == "silhouette":
        return select_k(sqdist if kd is not None else sq, readout, None, seed).labels
    if readout.community == "leiden":
        return leiden_knn(lists, seed, readout.resolution, iterations=readout.leiden_iterations)
    if kd is not None:
        raise SettingError(
            "readout.community 'hdbscan' needs the dense kappa^max (path.mode 'dense'); the "
            "kNN path has 'silhouette' and 'leiden'"
        )
    return hdbscan_distances(sq, int(readout.min_cluster_size))
