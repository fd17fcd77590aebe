"""Stopping rules: which IA iteration's read-out to report, chosen without labels."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import adjusted_rand_score

from ia_stages.readout.graph import KnnDistances, igraph_of, leiden_knn, readout_lists
from ia_stages.settings.readout import ReadoutSettings, StopSettings


def contraction_ratio(sqdist: Any, labels: np.ndarray) -> float:
    """Within- over between-cluster distance of a partition, measured without true labels.

    The mean kappa^max distance sqrt(sqdist) of pairs in one cluster divided by that of
    pairs in different clusters (NaN when either set of pairs is empty). Theorem 4.1's
    contraction makes it fall from one iteration to the next. For a :class:`KnnDistances`
    (the kNN path), the ratio among its sample.
    """
    if isinstance(sqdist, KnnDistances):
        sqdist, labels = sqdist.sample_sqdist, np.asarray(labels)[sqdist.sample]
    D = np.sqrt(np.maximum(np.asarray(sqdist, dtype=float), 0.0))
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(labels.size, dtype=bool)
    w, b = same & off, ~same
    if not w.any() or not b.any():
        return float("nan")
    return float(D[w].mean() / D[b].mean())


def community_stability(sqdist: Any, readout: ReadoutSettings, n_seeds: int) -> float:
    """Mean adjusted Rand index between the Leiden partitions of the read-out's kNN graph
    (``readout.k`` neighbours, ``readout.resolution``) found with seeds 0..n_seeds-1.

    1 when every seed finds the same communities; it falls when the graph's community
    structure is ambiguous (communities fragment or blur), which needs no labels.
    ``sqdist``: ``(n, n)``, or a :class:`KnnDistances` whose lists give the graph.
    """
    knn = readout_lists(sqdist, readout.k)
    g = igraph_of(knn)
    parts = [leiden_knn(knn, s, readout.resolution, g, iterations=readout.leiden_iterations)
             for s in range(n_seeds)]  # fmt: skip
    pairs = [
        adjusted_rand_score(parts[a], parts[b])
        for a in range(n_seeds)
        for b in range(a + 1, n_seeds)
    ]
    return float(np.mean(pairs)) if pairs else 1.0


def stop_iteration(
    partitions: list[np.ndarray],
    sqdists: list[Any],
    stop: StopSettings,
    readout: ReadoutSettings | None = None,
) -> tuple[int, str]:
    """The iteration whose read-out to report, chosen without labels, and why.

    ``partitions[t]`` and ``sqdists[t]`` are the read-out and the kappa^max squared
    distances of iteration t = 0 (input) .. T. Rules (``stop.rule``):

    - 'partition': stop at the first t >= 1 whose partition agrees with that of t - 1
      (adjusted Rand index >= ``stop.min_ari``): iterating no longer changes the read-out;
    - 'stability': the last t before the community stability of the read-out graph
      (:func:`community_stability`, ``stop.n_seeds`` seeds) stops rising;
    - 'contraction': stop at the last t >= 1 before the contraction ratio
      (:func:`contraction_ratio` of t's own partition) stops falling;
    - 'none': the last iteration T.

    With no iteration (T = 0) it returns 0; with one (T = 1) every rule returns 1
    ('stability' computes its statistic only for the iterations it compares, so none here).
    Returns (t, a one-line reason).
    """
    rule = stop.rule
    T = len(partitions) - 1
    if T < 1:
        return 0, "no iteration"
    if rule == "none":
        return T, "last iteration (rule 'none')"
    if rule == "stability":
        if readout is None:
            raise ValueError("stop.rule 'stability' needs the read-out settings")
        stab: dict[int, float] = {}  # by iteration, computed when compared (Leiden runs)

        def stability(t: int) -> float:
            if t not in stab:
                stab[t] = community_stability(sqdists[t], readout, stop.n_seeds)
            return stab[t]

        for t in range(1, T):
            if stability(t + 1) <= stability(t):
                return t, (
                    f"community stability stopped rising after iteration {t} "
                    f"({stab[t]:.3f} -> {stab[t + 1]:.3f})"
                )
        if T not in stab:
            return T, "one iteration run: community stability had nothing to compare"
        return T, f"community stability rose at every iteration (to {stab[T]:.3f})"
    if rule == "partition":
        for t in range(1, T + 1):
            ari = adjusted_rand_score(partitions[t - 1], partitions[t])
            if ari >= stop.min_ari:
                return t, f"partition of iteration {t} agrees with {t - 1} (ARI {ari:.3f})"
        return T, f"partitions still changing (ARI < {stop.min_ari}); last iteration"
    ratios = [contraction_ratio(sq, p) for sq, p in zip(sqdists, partitions, strict=True)]
    for t in range(1, T + 1):
        if not ratios[t] < ratios[t - 1]:
            chosen = max(t - 1, 1)
            return chosen, (
                f"contraction ratio stopped falling at iteration {t} "
                f"({ratios[t - 1]:.3f} -> {ratios[t]:.3f})"
            )
    return T, f"contraction ratio fell at every iteration (to {ratios[T]:.3f})"
