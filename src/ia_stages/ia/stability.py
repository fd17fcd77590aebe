"""How the read-out's clusters change with the read-out's own setting: a stability curve for
data without labels (the ``classes`` stage's ``stability.png``).

The curve varies the setting that :func:`ia_stages.ia.loop.read_out` itself uses, so that
the clusters it draws at the chosen value are those of ``clusters.csv``: the Leiden resolution
for the graph read-out (the very resolutions the silhouette chose among, with each
partition's silhouette), the distance threshold for the linkage read-out, the smallest
cluster for HDBSCAN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ia_stages.core.backend import to_numpy
from ia_stages.readout.graph import (
    KnnDistances,
    hdbscan_distances,
    leiden_sweep,
    readout_lists,
    silhouette_choice,
    silhouette_sweep,
)
from ia_stages.readout.linkage import cluster_by_distance
from ia_stages.settings.readout import ReadoutSettings

FACTORS = np.union1d(np.geomspace(0.25, 2.0, 15), [1.0])
"""Multiples of a fixed setting (threshold, resolution, smallest cluster) the curve tries."""


@dataclass(frozen=True)
class Stability:
    """A read-out's clusters as its setting varies (m values of it).

    parameter : the setting varied: 'resolution', 'threshold' or 'min_cluster_size'
    values : ``(m,)`` increasing
    n_clusters : ``(m,)`` clusters found at each value
    ari : ``(m,)`` adjusted Rand index of each partition against the clusters used
    silhouette : ``(m,)`` each partition's silhouette where the read-out chose by it (the
        graph read-out's 'silhouette' community), else NaN
    chosen : the value whose partition the read-out took
    """

    parameter: str
    values: np.ndarray
    n_clusters: np.ndarray
    ari: np.ndarray
    silhouette: np.ndarray
    chosen: float


def read_out_stability(
    sqdist: Any,
    readout: ReadoutSettings,
    labels: np.ndarray,
    seed: int = 0,
    factors: Any = None,
) -> Stability:
    """The stability curve of :func:`ia_stages.ia.loop.read_out` without K.

    Parameters
    ----------
    sqdist : ``(n, n)`` kappa^max squared distances, or a
        :class:`~ia_stages.readout.graph.KnnDistances` (the kNN path: the graph from its
        lists, the silhouette and the linkage on its sample)
    readout : :class:`~ia_stages.settings.ReadoutSettings` with ``k`` set, as read out
    labels : ``(n,)`` the read-out's clusters at its setting (before any ``merge``), the
        ARI's reference
    seed : the read-out's seed (Leiden)
    factors : multiples of a fixed setting to try; default :data:`FACTORS` (0.25 to 2 in 15
        geometric steps, and 1). The 'silhouette' community tries its own ``resolutions``.

    Returns
    -------
    :class:`Stability`

    Example
    -------
    >>> st = read_out_stability(km.sqdist, ReadoutSettings(k=5), labels)  # doctest: +SKIP
    >>> st.parameter, st.chosen  # doctest: +SKIP
    ('resolution', 0.4)
    """
    # lazy: scikit-learn, for the stability's ARI only
    from sklearn.metrics import adjusted_rand_score

    factors = FACTORS if factors is None else np.asarray(factors, dtype=float)
    kd = sqdist if isinstance(sqdist, KnnDistances) else None
    sq = kd.sample_sqdist if kd is not None else to_numpy(sqdist)
    labels = np.asarray(labels)
    n = kd.n if kd is not None else sq.shape[0]
    if labels.size != n:
        raise ValueError(f"labels: {labels.size} samples, the read-out's distances have {n}")
    parameter, values, partitions, score, chosen = _sweep(sq, kd, readout, seed, factors)
    # the linkage read-out cuts the sample's tree on the kNN path
    on = labels[kd.sample] if kd is not None and parameter == "threshold" else labels
    return Stability(
        parameter=parameter,
        values=np.asarray(values, dtype=float),
        n_clusters=np.array([np.unique(p[p >= 0]).size for p in partitions]),
        ari=np.array([adjusted_rand_score(on, p) for p in partitions]),
        silhouette=np.full(len(partitions), np.nan) if score is None else np.asarray(score),
        chosen=chosen,
    )


def _sweep(
    sq: np.ndarray,
    kd: KnnDistances | None,
    readout: ReadoutSettings,
    seed: int,
    factors: np.ndarray,
) -> tuple[str, np.ndarray, list[np.ndarray], np.ndarray | None, float]:
    """The read-out's partitions as its own setting varies: the setting's name, its values,
    one partition per value, the silhouettes (or None) and the value in use."""
    if readout.kind == "linkage":
        chosen = float(readout.threshold)
        values = chosen * factors
        return (
            "threshold",
            values,
            [cluster_by_distance(sq, t, readout.linkage) for t in values],
            None,
            chosen,
        )
    if readout.kind != "graph":
        raise ValueError(
            f"readout.kind {readout.kind!r} reads out with K only: no stability curve without K"
        )
    lists = readout_lists(kd if kd is not None else sq, readout.k)
    if readout.community == "silhouette":
        sample = None if kd is None else kd.sample
        values, partitions, score = silhouette_sweep(
            lists, sq, readout.resolutions, seed, sample, readout.leiden_iterations
        )
        at = silhouette_choice(partitions, score, readout.silhouette_tolerance, readout.near_best,
                               int(readout.near_best_max))  # fmt: skip
        return "resolution", values, partitions, score, float(values[at])
    if readout.community == "leiden":
        chosen = float(readout.resolution)
        values = chosen * factors
        parts = leiden_sweep(lists, seed, tuple(values), iterations=readout.leiden_iterations)
        return "resolution", values, parts, None, chosen
    if readout.community == "hdbscan" and kd is None:
        chosen = float(readout.min_cluster_size)
        values = np.unique(np.maximum(np.round(chosen * factors), 2))
        partitions = [hdbscan_distances(sq, int(m)) for m in values]
        return "min_cluster_size", values, partitions, None, chosen
    raise ValueError(
        f"readout.community {readout.community!r}: no stability curve "
        "(hdbscan needs the dense kappa^max)"
    )
